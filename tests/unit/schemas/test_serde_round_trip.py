"""Every registered model survives encode -> decode unchanged, in both wire formats."""

from __future__ import annotations

import io

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_strategies import model_strategy

from schemas.base import AvroModel
from schemas.registry import load_registry
from schemas.registry_serde import ConfluentRegistrySerde
from schemas.serde import SINGLE_OBJECT_MAGIC, SingleObjectSerde, datum_adapter, model_datum

MODELS = sorted((entry.model for entry in load_registry().entries.values()), key=lambda m: m.avro_name)
EVENTS = [entry.model for entry in load_registry().events()]
SINGLE_OBJECT = SingleObjectSerde()
REGISTRY_FORMAT = ConfluentRegistrySerde(SchemaRegistryClient.new_client({"url": "mock://round-trip"}))


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.avro_name)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_model_round_trips_through_its_json_dump_and_single_object_encoding(
    model: type[AvroModel], data
):
    instance = data.draw(model_strategy(model))
    assert model.model_validate(instance.model_dump(mode="json")) == instance
    assert SINGLE_OBJECT.decode(SINGLE_OBJECT.encode(instance), model) == instance


def _resolved_by_fastavro(datum: object) -> object:
    """``datum`` without the serde's union branch choices (``(full name, record)`` pairs)."""
    if isinstance(datum, tuple):
        return _resolved_by_fastavro(datum[1])
    if isinstance(datum, dict):
        return {k: _resolved_by_fastavro(v) for k, v in datum.items()}
    if isinstance(datum, list):
        return [_resolved_by_fastavro(v) for v in datum]
    return datum


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.avro_name)
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_naming_the_union_branch_writes_the_bytes_fastavro_writes_when_it_resolves_the_union(
    model: type[AvroModel], data
):
    """The serde names the branch of a union of records a value takes (cheaper than fastavro trying
    each branch): the bytes are the ones fastavro writes when it resolves the union itself."""
    instance = data.draw(model_strategy(model))
    entry = load_registry().for_model(model)
    datum = model_datum(instance, datum_adapter(entry.current.parsed))
    resolved = io.BytesIO()
    fastavro.schemaless_writer(resolved, entry.current.parsed, _resolved_by_fastavro(datum))
    header = SINGLE_OBJECT_MAGIC + entry.current.fingerprint
    assert SINGLE_OBJECT.encode(instance) == header + resolved.getvalue()


@pytest.mark.parametrize("model", EVENTS, ids=lambda m: m.avro_name)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_event_round_trips_through_the_registry_wire_format(model: type[AvroModel], data):
    instance = data.draw(model_strategy(model))
    topic = f"round-trip.{model.avro_name}"
    data_bytes = REGISTRY_FORMAT.encode(instance, topic=topic)
    assert REGISTRY_FORMAT.decode(data_bytes, model, topic=topic) == instance


@pytest.mark.parametrize("model", EVENTS, ids=lambda m: m.avro_name)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_event_round_trips_through_a_real_registry(model: type[AvroModel], schema_registry: str, data):
    """The same wire format against a server nobody here wrote (Apicurio Registry's Confluent API): each
    event's schema is registered once under ``<topic>-value`` and its records decode to what was encoded."""
    client = SchemaRegistryClient.new_client({"url": schema_registry})
    serde = ConfluentRegistrySerde(client)
    instance = data.draw(model_strategy(model))
    topic = f"real-registry.{model.avro_name}"
    assert serde.decode(serde.encode(instance, topic=topic), model, topic=topic) == instance
    assert client.get_versions(f"{topic}-value") == [1]
