"""The hot paths' records without models agree with the models' paths, record for record.

Decoding: the memory writer's verdicts (:func:`streams.worker.wire.decode_verdict`), dispatches
(:func:`~streams.worker.wire.decode_dispatch`) and propagations
(:func:`~streams.worker.wire.decode_propagation`), and the gate's candidates
(:func:`~streams.worker.wire.decode_candidate`) give the value the model's path gives for a record
both accept, and the same dead letter (stage, error type, reason) for one they reject. Records are
generated as Avro datums, not as models, so that what the models reject (a payload of another task,
values out of range, event times in another form or on days that do not exist, a pin, negative
origins) is written too; each with the current writer schema and every released one, in both wire
formats, intact or damaged (truncated, an unknown writer, a record of another schema, trailing
bytes, a tombstone), under its content's key or another.

Encoding: the gate's decisions and dispatches and the memory's propagations, written from their
datums (:meth:`schemas.serde.Serde.write_datum`), are the bytes their models give in both formats; the
replay reads a decision back (:func:`streams.replay.kafka.read_decision`) as its model holds it.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from processors.dbpm import BadEvent, GateEvent, Propagation, VerdictEvent, format_time
from processors.dbpm.gates import GateRuling
from schemas.base import AvroModel, iso_utc
from schemas.dbpm import (
    Candidate,
    Coverage,
    Dispatch,
    GateAction,
    GateDecision,
    Narrative,
    PinAction,
    QaErrorClass,
    Verdict,
    VerdictLabel,
)
from schemas.dbpm import Propagation as PropagationRecord
from schemas.registry import SchemaVersion, load_registry
from schemas.registry_serde import ConfluentRegistrySerde
from schemas.serde import SINGLE_OBJECT_MAGIC, Serde, SingleObjectSerde
from streams.replay.kafka import read_decision
from streams.runtime.dlq import Rejected, SourceRecord, decode_record
from streams.testing.worker import comparison_engine
from streams.worker.gate import decision_datum, decision_record, with_ner_categories
from streams.worker.keys import propagation_key, verdict_key
from streams.worker.wire import (
    CandidateRecord,
    Evidence,
    candidate_datum,
    candidate_record,
    contract_event,
    decode_candidate,
    decode_dispatch,
    decode_event,
    decode_propagation,
    decode_verdict,
    dispatched,
    event_fields,
    evidence,
    propagation_datum,
    verdict_event,
)
from tests.unit.schemas.model_strategies import model_strategy
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_DISPATCHES, DBPM_PROPAGATIONS, DBPM_VERDICTS

SERDE = SingleObjectSerde()
CLIENT = SchemaRegistryClient.new_client({"url": "mock://fast-paths"})
REGISTRY_FORMAT = ConfluentRegistrySerde(CLIENT)
FORMATS: tuple[Serde, Serde] = (SERDE, REGISTRY_FORMAT)
ENGINE = comparison_engine()
REGISTRY = load_registry()
OTHER = Narrative(ts=datetime(2026, 5, 4, tzinfo=UTC), patient_id="p-1", text="a record of another schema")
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------------------------ datums

# Naive bounds, as hypothesis takes them; the zone is drawn separately.
moments = st.datetimes(
    min_value=datetime(1, 1, 2),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]),
)
# Half of them in the wire form, the others in what the model normalises or rejects.
times = moments.map(iso_utc) | st.one_of(
    moments.map(lambda m: m.isoformat()),  # an offset, or +00:00
    moments.map(lambda m: m.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000000Z")),
    st.sampled_from(["2026-02-30T10:00:00Z", "2026-05-04T24:00:00Z", "2026-05-04T10:00:00", "", "now"]),
    st.text(max_size=30),
)
texts = st.sampled_from(["", "aspirin", "Diagnosis", "x|y"]) | st.text(max_size=12)
optional = st.none() | texts
tasks = st.sampled_from(["ner", "re", "qa", "summary"]) | texts
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
            "difficulty": st.none() | st.floats(0.0, 1.0) | st.floats(),
            "parse_failed": st.none() | st.booleans(),
        }
    ).map(lambda p: ("QaPayload", p)),
    st.fixed_dictionaries({"document": st.sampled_from(["{}", '{"a": 1}', "not json"])}).map(
        lambda p: ("JsonPayload", p)
    ),
).map(lambda branch: (f"clingate.dbpm.{branch[0]}", branch[1]))
actions = st.sampled_from([a.value for a in PinAction])
pins = st.none() | st.fixed_dictionaries(
    {"action": actions, "operator": texts, "reason": texts, "pin_id": texts}
)
_TASK_OF_BRANCH = {
    "clingate.dbpm.NerPayload": "ner",
    "clingate.dbpm.RePayload": "re",
    "clingate.dbpm.QaPayload": "qa",
}


def _task_of_payload(datum: dict[str, Any]) -> dict[str, Any]:
    """Half of the datums: the task the payload's branch is for (the others: any task)."""
    matched = datum.pop("matched")
    return {**datum, "task": _TASK_OF_BRANCH.get(datum["payload"][0], "summary")} if matched else datum


verdicts = st.fixed_dictionaries({
    "ts": times, "task": tasks, "verdict": st.sampled_from([v.value for v in VerdictLabel]),
    "source": st.sampled_from(["verifier_mmed", "rule_based", "operator_pin"]) | texts, "patient_id": texts,
    "payload": payloads, "candidate_id": optional, "stage": optional, "reason": optional,
    "confidence": st.none() | st.floats(0.0, 1.0) | st.floats(), "pin": pins, "matched": st.booleans(),
}).map(_task_of_payload)  # fmt: skip
candidates = st.fixed_dictionaries({
    "ts": times, "task": tasks, "patient_id": texts, "candidate_id": texts, "document_ts": st.none() | times,
    "payload": payloads, "matched": st.booleans(),
}).map(_task_of_payload)  # fmt: skip
dispatches = st.fixed_dictionaries({"ts": times, "task": tasks, "patient_id": texts, "candidate_id": texts})
INT32, INT64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
propagations = st.fixed_dictionaries({
    "ts": times, "task": tasks, "signature": texts, "weight": st.floats(), "source": texts,
    "origin_task": tasks, "origin_signature": texts, "patient_id": texts,
    "origin_partition": st.integers(0, 5) | INT32, "origin_offset": st.integers(0, 10**6) | INT64,
    "origin_index": st.integers(0, 3) | INT32,
})  # fmt: skip

# ----------------------------------------------------------------------------- records and damage

MUTATIONS = st.just(("intact", 0)) | st.one_of(
    st.tuples(st.just("truncated"), st.integers(0, 10_000)),
    st.tuples(st.sampled_from(["unknown writer", "another schema", "tombstone"]), st.just(0)),
    st.tuples(st.just("trailing"), st.integers(0, 255)),
)
_IDS: dict[bytes, int] = {}


def _schema_id(version: SchemaVersion) -> int:
    """The mock registry's id of a writer schema (a subject of its own: no compatibility check)."""
    if version.fingerprint not in _IDS:
        subject = f"fast-paths-{version.fingerprint.hex()}"
        _IDS[version.fingerprint] = CLIENT.register_schema(
            subject, Schema(json.dumps(version.schema), "AVRO")
        )
    return _IDS[version.fingerprint]


def _value(
    model: type[AvroModel],
    datum: dict[str, Any],
    writer_index: int,
    registry: bool,
    mutation: tuple[str, int],
) -> bytes | None:
    """``datum`` written with one of ``model``'s writer schemas (the fields it lacks left out), framed
    in one of the two wire formats, then damaged as ``mutation`` says."""
    entry = REGISTRY.for_model(model)
    writers = (*entry.released, entry.current)
    writer = writers[writer_index % len(writers)]
    names = {f["name"] for f in writer.parsed["fields"]}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, writer.parsed, {k: v for k, v in datum.items() if k in names})
    if registry:
        header = b"\x00" + _schema_id(writer).to_bytes(4, "big")
    else:
        header = SINGLE_OBJECT_MAGIC + writer.fingerprint
    value = header + buffer.getvalue()
    kind, n = mutation
    if kind == "truncated":
        return value[: n % len(value)]
    if kind == "unknown writer":
        return (b"\x00\x7f\xff\xff\xf0" if registry else SINGLE_OBJECT_MAGIC + b"\xff" * 8) + value[
            len(header) :
        ]
    if kind == "another schema":
        return (REGISTRY_FORMAT if registry else SERDE).encode(OTHER, topic="fast-paths-other")
    if kind == "trailing":
        return value + bytes([n])
    return None if kind == "tombstone" else value


def _record(topic: str, value: bytes | None, key: bytes | None = b"elsewhere|key") -> SourceRecord:
    return SourceRecord(topic, 0, 7, 1_700_000_000_000, key, value)


def _serde(registry: bool) -> Serde:
    return REGISTRY_FORMAT if registry else SERDE


def _nan_free(value: Any) -> Any:
    """``value`` with NaN replaced by a marker, so that a NaN both paths carry compares equal."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, tuple):
        return (
            type(value)(*map(_nan_free, value)) if hasattr(value, "_fields") else tuple(map(_nan_free, value))
        )
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    if isinstance(value, VerdictEvent | Evidence):
        return replace(value, **{k: _nan_free(getattr(value, k)) for k in value.__slots__})  # type: ignore[arg-type]
    return value


def _verdict_key(event: Any) -> bytes:
    return verdict_key(ENGINE, event)


# ------------------------------------------------------------------------------------- decoding


@EXAMPLES
@given(
    datum=verdicts, writer_index=st.integers(0, 10), registry=st.booleans(), mutation=MUTATIONS,
    own_key=st.booleans(),
)  # fmt: skip
def test_verdicts_decode_as_the_model_decodes_them(
    datum: dict[str, Any], writer_index: int, registry: bool, mutation: tuple[str, int], own_key: bool
) -> None:
    serde = _serde(registry)
    record = _record(DBPM_VERDICTS, _value(Verdict, datum, writer_index, registry, mutation))
    content = decode_event(serde, record, Verdict)
    if own_key and not isinstance(content, Rejected):
        record = replace(record, key=_verdict_key(content[1]))
    model = decode_event(serde, record, Verdict, _verdict_key)
    expected = model if isinstance(model, Rejected) else model[1]
    assert _nan_free(decode_verdict(serde, record, _verdict_key)) == _nan_free(expected)


@EXAMPLES
@given(datum=candidates, writer_index=st.integers(0, 10), registry=st.booleans(), mutation=MUTATIONS)
def test_candidates_decode_as_the_model_decodes_them(
    datum: dict[str, Any], writer_index: int, registry: bool, mutation: tuple[str, int]
) -> None:
    serde = _serde(registry)
    record = _record(DBPM_CANDIDATES, _value(Candidate, datum, writer_index, registry, mutation), b"p-1")
    model = decode_event(serde, record, Candidate)
    fast = decode_candidate(serde, record)
    if isinstance(model, Rejected):
        assert fast == model
        return
    candidate, event = model
    document = candidate.document_ts
    assert fast == CandidateRecord(
        event,
        None if document is None else iso_utc(document),
        None if document is None else document.timestamp(),
    )
    assert serde.write_datum(candidate_datum(fast), Candidate, topic=DBPM_CANDIDATES) == serde.encode(
        candidate, topic=DBPM_CANDIDATES
    )


@EXAMPLES
@given(datum=dispatches, writer_index=st.integers(0, 10), registry=st.booleans(), mutation=MUTATIONS)
def test_dispatches_decode_as_the_model_decodes_them(
    datum: dict[str, Any], writer_index: int, registry: bool, mutation: tuple[str, int]
) -> None:
    serde = _serde(registry)
    record = _record(DBPM_DISPATCHES, _value(Dispatch, datum, writer_index, registry, mutation))
    model = decode_record(serde, record, Dispatch)
    expected = (
        model if isinstance(model, Rejected) else (model.value.candidate_id, model.value.ts.timestamp())
    )
    assert decode_dispatch(serde, record) == expected


@EXAMPLES
@given(
    datum=propagations, writer_index=st.integers(0, 10), registry=st.booleans(), mutation=MUTATIONS,
    own_key=st.booleans(),
)  # fmt: skip
def test_propagations_decode_as_the_model_decodes_them(
    datum: dict[str, Any], writer_index: int, registry: bool, mutation: tuple[str, int], own_key: bool
) -> None:
    serde = _serde(registry)
    record = _record(DBPM_PROPAGATIONS, _value(PropagationRecord, datum, writer_index, registry, mutation))
    content = decode_event(serde, record, PropagationRecord)
    if own_key and not isinstance(content, Rejected):
        record = replace(record, key=propagation_key(content[1]))
    model = decode_event(serde, record, PropagationRecord, propagation_key)
    if isinstance(model, Rejected):
        expected: Evidence | Rejected = model
    else:
        found, event = model
        expected = Evidence(event, found.origin_partition, found.origin_offset, found.origin_index)
    assert _nan_free(decode_propagation(serde, record)) == _nan_free(expected)


# ------------------------------------------------------------------------------------- encoding

rulings = st.builds(
    GateRuling,
    candidate_id=texts,
    decision=st.sampled_from([a.value for a in GateAction]),
    rule=texts,
    task=texts,
    signature=texts,
    severity=st.none() | st.floats(),
    support=st.integers(0, 100),
    multiplier=st.floats() | st.sampled_from([0, 1]),
    sources=st.lists(texts, max_size=3).map(tuple),
    policy=st.lists(texts, max_size=2).map(tuple),
)
coverages = st.none() | st.tuples(st.sampled_from(list(Coverage)), st.floats(0.0, 1e6))


@EXAMPLES
@given(
    candidate=model_strategy(Candidate), ruling=rulings, waited_out=st.booleans(), config=texts,
    coverage=coverages, categories=st.none() | st.lists(texts, max_size=3).map(tuple), registry=st.booleans(),
)  # fmt: skip
def test_decisions_and_dispatches_are_written_as_their_models_write_them(
    candidate: Candidate,
    ruling: GateRuling,
    waited_out: bool,
    config: str,
    coverage: tuple[Coverage, float] | None,
    categories: tuple[str, ...] | None,
    registry: bool,
) -> None:
    """A candidate as the gate decodes it, its NER categories stamped as the coverage join has them, is
    written into its decision and its dispatch as the models of the same candidate are."""
    serde = _serde(registry)
    decoded = decode_candidate(
        serde, _record(DBPM_CANDIDATES, serde.encode(candidate, topic=DBPM_CANDIDATES))
    )
    assume(isinstance(decoded, CandidateRecord))  # a task outside the contract's is a dead letter
    assert isinstance(decoded, CandidateRecord)
    if categories is not None and candidate.task == "qa":
        payload = candidate.payload.model_copy(update={"ner_categories": categories})
        candidate = candidate.model_copy(update={"payload": payload})
        decoded = with_ner_categories(decoded, categories)
        assert decoded.event == contract_event(candidate)
    datum = decision_datum(decoded, ruling, waited_out, config, coverage)
    model = decision_record(candidate, ruling, waited_out, config, coverage)
    assert serde.write_datum(datum, GateDecision, topic=DBPM_DECISIONS) == serde.encode(
        model, topic=DBPM_DECISIONS
    )
    dispatch = Dispatch(
        ts=candidate.ts,
        task=candidate.task,
        patient_id=candidate.patient_id,
        candidate_id=candidate.candidate_id,
    )
    written = serde.write_datum(event_fields(decoded.event), Dispatch, topic=DBPM_DISPATCHES)
    assert written == serde.encode(dispatch, topic=DBPM_DISPATCHES)


@EXAMPLES
@given(decision=model_strategy(GateDecision), registry=st.booleans())
def test_decisions_are_read_back_as_their_models_hold_them(decision: GateDecision, registry: bool) -> None:
    """The replay's reader takes a decision's contract object from its datum: the fields the record's
    model holds (compared as JSON, so that a NaN severity or multiplier equals itself)."""
    serde = _serde(registry)
    value = serde.encode(decision, topic=DBPM_DECISIONS)
    model = serde.decode(value, GateDecision, topic=DBPM_DECISIONS)
    expected = {
        "candidate_id": model.candidate_id, "decision": model.decision.value, "rule": model.rule,
        "signature": model.signature, "severity": model.severity, "multiplier": model.confidence_multiplier,
        "sources": list(model.provenance),
    }  # fmt: skip
    assert json.dumps(read_decision(serde, value)) == json.dumps(expected)


# Event times a propagation can carry: a verdict's, microseconds included, from the year 1000 on (the
# contract's format_time writes earlier years without four digits, which no model reads back).
verdict_times = st.datetimes(
    min_value=datetime(1000, 1, 1),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.just(UTC),
)


@EXAMPLES
@given(
    at=verdict_times, task=texts, signature=texts, weight=st.floats(), source=texts, origin_task=texts,
    origin_signature=texts, patient_id=texts, origin_partition=st.integers(0, 2**31 - 1),
    origin_offset=st.integers(0, 2**63 - 1), index=st.integers(0, 2**31 - 1), registry=st.booleans(),
)  # fmt: skip
def test_propagations_are_written_as_their_model_writes_them(
    at: datetime,
    task: str,
    signature: str,
    weight: float,
    source: str,
    origin_task: str,
    origin_signature: str,
    patient_id: str,
    origin_partition: int,
    origin_offset: int,
    index: int,
    registry: bool,
) -> None:
    serde = _serde(registry)
    propagation = Propagation(
        task, signature, weight, source, at.timestamp(), origin_task, origin_signature, patient_id
    )
    model = PropagationRecord(
        ts=format_time(propagation.time),  # type: ignore[arg-type]
        task=task, signature=signature, weight=weight, source=source, origin_task=origin_task,
        origin_signature=origin_signature, patient_id=patient_id, origin_partition=origin_partition,
        origin_offset=origin_offset, origin_index=index,
    )  # fmt: skip
    datum = propagation_datum(propagation, origin_partition, origin_offset, index)
    value = serde.write_datum(datum, PropagationRecord, topic=DBPM_PROPAGATIONS)
    assert value == serde.encode(model, topic=DBPM_PROPAGATIONS)


# ------------------------------------------------------------------- the fast paths are the paths


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    verdict=model_strategy(Verdict), candidate=model_strategy(Candidate), dispatch=model_strategy(Dispatch),
    propagation=model_strategy(PropagationRecord),
)  # fmt: skip
def test_what_clingate_writes_is_read_without_a_model(
    verdict: Verdict, candidate: Candidate, dispatch: Dispatch, propagation: PropagationRecord
) -> None:
    """Records written from models in wire form are taken by the fast paths wherever the models' paths
    accept them (a fast path that gave way on them would cost the model's path and its own)."""
    try:
        verdict_ok = isinstance(contract_event(verdict), VerdictEvent)
        difficulty = getattr(verdict.payload, "difficulty", None)
        verdict_ok = verdict_ok and (difficulty is None or math.isfinite(difficulty))
    except BadEvent:
        verdict_ok = False
    if verdict_ok:
        assert verdict_event(SERDE.read_datum(SERDE.encode(verdict), Verdict)) is not None
    try:
        candidate_ok = isinstance(contract_event(candidate), GateEvent)
    except BadEvent:
        candidate_ok = False
    if candidate_ok:
        assert candidate_record(SERDE.read_datum(SERDE.encode(candidate), Candidate)) is not None
    assert dispatched(SERDE.read_datum(SERDE.encode(dispatch), Dispatch)) is not None
    assert evidence(SERDE.read_datum(SERDE.encode(propagation), PropagationRecord)) is not None


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
def test_what_the_model_must_check_of_a_verdict_goes_to_the_model(change: dict[str, Any]) -> None:
    datum = {
        "ts": "2026-05-04T10:00:00Z", "task": "ner", "verdict": "success", "source": "verifier_mmed",
        "patient_id": "p-1", "payload": {"entity": "aspirin", "category": "Treatment"}, "candidate_id": None,
        "stage": None, "reason": None, "confidence": None, "pin": None,
    }  # fmt: skip
    assert verdict_event({**datum, **change}) is None


QA_PAYLOAD = {
    "question": "q", "answer": "a", "category": "c", "error_class": None, "ner_categories": ["x"],
    "difficulty": None, "parse_failed": None,
}  # fmt: skip


@pytest.mark.parametrize(
    "change",
    [
        {"ts": "2026-05-04T10:00:00+02:00"},
        {"document_ts": "2026-02-30T00:00:00Z"},
        {"task": "summary"},
        {"payload": {**QA_PAYLOAD, "difficulty": 1.5}},
        {"payload": {**QA_PAYLOAD, "difficulty": math.nan}},
        {"payload": {"entity": "aspirin", "category": "Treatment"}},
    ],
)
def test_what_the_model_must_check_of_a_candidate_goes_to_the_model(change: dict[str, Any]) -> None:
    datum = {
        "ts": "2026-05-04T10:00:00Z", "task": "qa", "patient_id": "p-1", "candidate_id": "c-1",
        "document_ts": "2026-05-01T00:00:00Z", "payload": QA_PAYLOAD,
    }  # fmt: skip
    found = candidate_record(datum)
    assert found is not None and found.document_time == datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    assert found.event.payload == {"question": "q", "answer": "a", "category": "c", "ner_categories": ["x"]}
    assert candidate_record({**datum, **change}) is None
