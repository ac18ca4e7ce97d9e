"""Each schema evolves backward-compatibly: the current one reads data of every released version.

Releases are snapshots in ``schemas/avro/_released/<area>/<Name>.v<N>.avsc`` made by
``python -m schemas.release``; a schema with unreleased changes fails here until it is released.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_strategies import model_strategy

from schemas.base import AvroModel, EventTime
from schemas.registry import (
    SchemaEntry,
    SchemaRegistry,
    SchemaVersion,
    compatibility_errors,
    load_registry,
    make_version,
)
from schemas.release import plan
from schemas.serde import SINGLE_OBJECT_MAGIC, SingleObjectSerde

REGISTRY = load_registry()
EVENTS = list(REGISTRY.events())
SERDE = SingleObjectSerde()
RELEASED = [(entry, old) for entry in EVENTS for old in entry.released]


@pytest.mark.parametrize("entry", EVENTS, ids=lambda e: e.full_name)
def test_every_event_schema_is_released(entry: SchemaEntry):
    assert entry.released, f"{entry.full_name} was never released: run `python -m schemas.release` and commit"
    assert entry.released[-1].fingerprint == entry.current.fingerprint, (
        f"{entry.full_name} differs from its latest release v{entry.released[-1].version}: "
        "run `python -m schemas.release` (it refuses incompatible changes) and commit the snapshot"
    )


@pytest.mark.parametrize(
    ("entry", "old"), RELEASED, ids=lambda x: getattr(x, "full_name", None) or f"v{getattr(x, 'version', '')}"
)
def test_the_current_schema_reads_every_released_version(entry: SchemaEntry, old: SchemaVersion):
    assert compatibility_errors(entry.current.schema, old.schema) == []


def _avro_datum(model: AvroModel) -> object:
    current = REGISTRY.for_model(type(model)).current
    return fastavro.schemaless_reader(io.BytesIO(SERDE.encode(model)[10:]), current.parsed, None)


def _as_seen_by(version: SchemaVersion, datum: object) -> object:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, version.parsed, datum)
    buffer.seek(0)
    return fastavro.schemaless_reader(buffer, version.parsed, None)


@pytest.mark.parametrize(
    ("entry", "old"), RELEASED, ids=lambda x: getattr(x, "full_name", None) or f"v{getattr(x, 'version', '')}"
)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_records_written_with_a_released_version_decode_without_losing_its_fields(
    entry: SchemaEntry, old: SchemaVersion, data
):
    instance = data.draw(model_strategy(entry.model))
    written = io.BytesIO()
    fastavro.schemaless_writer(written, old.parsed, _avro_datum(instance))
    decoded = SERDE.decode(SINGLE_OBJECT_MAGIC + old.fingerprint + written.getvalue(), entry.model)
    assert _as_seen_by(old, _avro_datum(decoded)) == _as_seen_by(old, _avro_datum(instance))


# --------------------------------------------------------------- the mechanism, on a synthetic evolution


class Probe(AvroModel):
    avro_name: ClassVar[str] = "clingate.test.Probe"

    ts: EventTime
    name: str
    weight: float = 1.0


V1 = {"type": "record", "name": "Probe", "namespace": "clingate.test",
      "fields": [{"name": "ts", "type": "string"}, {"name": "name", "type": "string"}]}  # fmt: skip
V2 = {**V1, "fields": [*V1["fields"], {"name": "weight", "type": "double", "default": 1.0}]}
V2_BREAKING = {**V1, "fields": [*V1["fields"], {"name": "weight", "type": "double"}]}


def _registry(current: dict, *released: dict) -> SchemaRegistry:
    versions = tuple(make_version(Probe.avro_name, s, n) for n, s in enumerate(released, 1))
    current_version = make_version(Probe.avro_name, current, None)
    entry = SchemaEntry(current_version, Probe, Path("test/Probe.avsc"), True, versions)
    return SchemaRegistry({Probe.avro_name: entry}, {})


def test_a_record_of_an_older_version_reads_into_the_current_model_with_defaults():
    v1_bytes = SingleObjectSerde(_registry(V1)).encode(
        Probe.model_construct(ts=datetime(2026, 5, 4, tzinfo=UTC), name="old", weight=1.0)
    )
    serde = SingleObjectSerde(_registry(V2, V1))
    assert serde.decode(v1_bytes, Probe) == Probe(ts=datetime(2026, 5, 4, tzinfo=UTC), name="old")


def test_a_new_field_without_a_default_is_an_incompatible_change_and_release_refuses_it():
    assert compatibility_errors(V2_BREAKING, V1)
    [item] = plan(_registry(V2_BREAKING, V1))
    assert item.version == 2
    assert item.refusals and "weight" in " ".join(item.refusals)


def test_a_compatible_change_is_released_as_the_next_version():
    [item] = plan(_registry(V2, V1))
    assert (item.version, item.refusals) == (2, ())


@pytest.mark.parametrize("entry", EVENTS, ids=lambda e: e.full_name)
def test_a_real_registry_accepts_every_release_in_order_and_judges_the_current_schema_compatible(
    entry: SchemaEntry, schema_registry: str
):
    """Apicurio Registry's Confluent API, under BACKWARD_TRANSITIVE, takes each released version after the
    one before it and finds the current schema able to read them all (and a field without default
    not): what a deployment's registry with compatibility checks on decides when a new clingate
    release registers its schemas."""
    client = SchemaRegistryClient.new_client({"url": schema_registry})
    subject = f"compatibility.{entry.full_name}-value"
    client.set_compatibility(subject_name=subject, level="BACKWARD_TRANSITIVE")
    for version in entry.released:
        client.register_schema(subject, Schema(json.dumps(version.schema), "AVRO"))
    assert client.test_compatibility(subject, Schema(json.dumps(entry.current.schema), "AVRO"))
    breaking = {
        **entry.current.schema,
        "fields": [*entry.current.schema["fields"], {"name": "x", "type": "int"}],
    }
    assert not client.test_compatibility(subject, Schema(json.dumps(breaking), "AVRO"))  # the check is real
