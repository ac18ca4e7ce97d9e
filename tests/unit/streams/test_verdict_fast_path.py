"""The memory agent's fast verdict decode (:func:`streams.worker.dbpm.decode_verdict`) agrees with the
model's path (:func:`streams.worker.dbpm.decode_event`) on every record: the same engine event for a
record both accept, the same dead letter (stage, error type, reason) for one they reject.

Records are generated as Avro datums, not as models, so that the ones the model rejects (a payload
of another task, a confidence out of range, an event time in another form or on a day that does not
exist, a pin) are written too, with the current writer schema and with every released one, in both
wire formats.
"""

from __future__ import annotations

import io
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.dbpm import VerdictEvent
from schemas.base import iso_utc
from schemas.dbpm import PinAction, QaErrorClass, Verdict, VerdictLabel
from schemas.registry import load_registry
from schemas.registry_serde import ConfluentRegistrySerde
from schemas.serde import SINGLE_OBJECT_MAGIC, SingleObjectSerde
from streams.runtime.dlq import DecodeFailed, SourceRecord
from streams.testing.worker import comparison_engine
from streams.worker.dbpm import decode_event, decode_verdict, verdict_event, verdict_key
from tests.unit.schemas.model_strategies import model_strategy
from topics.catalog import DBPM_VERDICTS

SERDE = SingleObjectSerde()
REGISTRY_FORMAT = ConfluentRegistrySerde(SchemaRegistryClient.new_client({"url": "mock://verdict-fast-path"}))
ENGINE = comparison_engine()
ENTRY = load_registry().for_model(Verdict)
WRITERS = (*ENTRY.released, ENTRY.current)

# Naive bounds, as hypothesis takes them; the zone is drawn separately.
moments = st.datetimes(
    min_value=datetime(1, 1, 2),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]),
)
times = st.one_of(
    moments.map(iso_utc),  # the canonical form
    moments.map(lambda m: m.isoformat()),  # an offset, or +00:00
    moments.map(lambda m: m.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")),
    st.sampled_from(["2026-02-30T10:00:00Z", "2026-05-04T24:00:00Z", "2026-05-04T10:00:00", "", "now"]),
    st.text(max_size=30),
)
texts = st.sampled_from(["", "aspirin", "Diagnosis", "x|y"]) | st.text(max_size=12)
optional = st.none() | texts
payloads = st.one_of(
    st.fixed_dictionaries({"entity": texts, "category": texts}).map(lambda p: ("NerPayload", p)),
    st.fixed_dictionaries(
        {"head": texts, "head_type": texts, "relation": texts, "tail": texts, "tail_type": texts}
    ).map(lambda p: ("RePayload", p)),
    st.fixed_dictionaries(
        {
            "question": texts,
            "answer": texts,
            "category": texts,
            "error_class": st.none() | st.sampled_from([c.value for c in QaErrorClass]),
            "ner_categories": st.none() | st.lists(texts, max_size=3),
            "difficulty": st.none() | st.floats(),
        }
    ).map(lambda p: ("QaPayload", p)),
    st.fixed_dictionaries({"document": st.sampled_from(["{}", '{"a": 1}', "not json"])}).map(
        lambda p: ("JsonPayload", p)
    ),
)
actions = st.sampled_from([a.value for a in PinAction])
pins = st.none() | st.fixed_dictionaries(
    {"action": actions, "operator": texts, "reason": texts, "pin_id": texts}
)
datums = st.fixed_dictionaries({
    "ts": times,
    "task": st.sampled_from(["ner", "re", "qa", "summary"]) | texts,
    "verdict": st.sampled_from([v.value for v in VerdictLabel]),
    "source": st.sampled_from(["verifier_mmed", "rule_based", "operator_pin"]) | texts,
    "patient_id": texts,
    "payload": payloads,
    "candidate_id": optional,
    "stage": optional,
    "reason": optional,
    "confidence": st.none() | st.floats() | st.floats(0.0, 1.0),
    "pin": pins,
})  # fmt: skip


def _written(datum: dict[str, Any], writer_index: int) -> bytes:
    """``datum`` written with one of the Verdict's writer schemas (fields it lacks left out)."""
    writer = WRITERS[writer_index % len(WRITERS)]
    names = {f["name"] for f in writer.parsed["fields"]}
    name, payload = datum["payload"]
    body = {k: v for k, v in datum.items() if k in names} | {"payload": (f"clingate.dbpm.{name}", payload)}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, writer.parsed, body)
    return SINGLE_OBJECT_MAGIC + writer.fingerprint + buffer.getvalue()


def _key(event: Any) -> bytes:
    return verdict_key(ENGINE, event)


def _model_path(value: bytes, own_key: bool, serde: Any) -> tuple[SourceRecord, Any]:
    """The record (keyed by its content's key when ``own_key`` and the model accepts it) and what the
    model's path makes of it."""
    record = SourceRecord(DBPM_VERDICTS, 0, 7, None, b"ner|elsewhere", value)
    first = decode_event(serde, record, Verdict)
    if own_key and not isinstance(first, DecodeFailed):
        record = SourceRecord(DBPM_VERDICTS, 0, 7, None, _key(first[1]), value)
    decoded = decode_event(serde, record, Verdict, _key)
    return record, decoded if isinstance(decoded, DecodeFailed) else decoded[1]


def _same(fast: Any, slow: Any) -> None:
    if isinstance(slow, VerdictEvent) and isinstance(fast, VerdictEvent):
        # NaN is the one value unequal to itself (a difficulty the model admits).
        difficulty = slow.payload.get("difficulty")
        if isinstance(difficulty, float) and math.isnan(difficulty):
            assert math.isnan(fast.payload["difficulty"])
            fast, slow = fast._replace(payload={}), slow._replace(payload={})
    assert fast == slow


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datum=datums, writer_index=st.integers(0, 10), own_key=st.booleans())
def test_the_fast_path_decides_every_datum_as_the_model_does(
    datum: dict[str, Any], writer_index: int, own_key: bool
) -> None:
    record, slow = _model_path(_written(datum, writer_index), own_key, SERDE)
    _same(decode_verdict(SERDE, record, _key), slow)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(verdict=model_strategy(Verdict))
def test_the_fast_path_takes_valid_verdicts_in_both_wire_formats(verdict: Verdict) -> None:
    for serde in (SERDE, REGISTRY_FORMAT):
        record, slow = _model_path(serde.encode(verdict, topic=DBPM_VERDICTS), True, serde)
        _same(decode_verdict(serde, record, _key), slow)


def test_a_canonical_verdict_is_taken_without_the_model() -> None:
    """The common case does not fall back (else the fast path would be the slow one twice)."""
    datum = {
        "ts": "2026-05-04T10:00:00.250000Z", "task": "ner", "verdict": "hard_fail", "source": "verifier_mmed",
        "patient_id": "p-1", "payload": {"entity": "aspirin", "category": "Treatment"}, "candidate_id": "c-1",
        "stage": None, "reason": None, "confidence": 0.5, "pin": None,
    }  # fmt: skip
    event = verdict_event(datum)
    assert event is not None and event.time == datetime(2026, 5, 4, 10, 0, 0, 250000, UTC).timestamp()


@pytest.mark.parametrize(
    "change",
    [
        {"ts": "2026-05-04T10:00:00+00:00"},
        {"ts": "2026-05-04T10:00:00.000000Z"},
        {"confidence": 1.5},
        {"task": "summary"},
        {"source": "operator_pin"},
    ],
)
def test_what_the_model_must_check_goes_to_the_model(change: dict[str, Any]) -> None:
    datum = {
        "ts": "2026-05-04T10:00:00Z", "task": "ner", "verdict": "success", "source": "verifier_mmed",
        "patient_id": "p-1", "payload": {"entity": "aspirin", "category": "Treatment"}, "candidate_id": None,
        "stage": None, "reason": None, "confidence": None, "pin": None,
    }  # fmt: skip
    assert verdict_event({**datum, **change}) is None
