"""The DBPM records on the wire: decoding consumed records into the engine's events, writing datums.

Hot paths build no model per record: a verdict, candidate, dispatch or propagation is turned into the
engine's type straight from its Avro datum wherever that gives what the model's path gives
(:func:`decode_datum`), and dispatches, candidates and propagations are written from datums
(:meth:`schemas.serde.Serde.write_datum`). Models stay where people and files give records (the CLI,
the console, JSON inputs) and for the records whose datums need a model's checks. Every ``decode_*``
returns the value or the :class:`~streams.runtime.dlq.Rejected` its record goes to the dead-letter
topic with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from processors.dbpm import GateEvent, PinEvent, Propagation, VerdictEvent, parse_event
from processors.dbpm.config import OPERATOR_PIN, PIN_LABELS
from processors.dbpm.events import check_task
from processors.dbpm.signatures import signature_payload
from schemas.base import AvroModel, iso_utc
from schemas.common import Stage
from schemas.dbpm import PAYLOAD_BY_TASK, Candidate, Dispatch, Pin, PinAction, Verdict, VerdictLabel
from schemas.dbpm import Propagation as PropagationRecord
from schemas.serde import SchemaDecodeError, Serde
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord, decode_record
from streams.worker.keys import dispatch_keys, propagation_key
from topics.catalog import DBPM_DISPATCHES

T = TypeVar("T")


def event_fields(event: GateEvent) -> dict[str, Any]:
    """The four fields every record about a candidate opens with, in its datum: ``ts`` (in wire form,
    as every candidate decoded from a record has it), ``task``, ``patient_id`` and ``candidate_id``.

    A ``clingate.dbpm.dispatches`` datum is exactly these (the :class:`~schemas.dbpm.Dispatch`
    model's); the candidate's datum (:func:`candidate_datum`) and its decision's
    (:func:`streams.worker.gate.decision_datum`) go on from them.
    """
    return {
        "ts": event.ts,
        "task": event.task,
        "patient_id": event.patient_id,
        "candidate_id": event.candidate_id,
    }


def dispatch_outputs(serde: Serde, event: GateEvent) -> tuple[Output, ...]:
    """The ``clingate.dbpm.dispatches`` records of a decided candidate, one per
    :func:`~streams.worker.keys.dispatch_keys`."""
    value = serde.write_datum(event_fields(event), Dispatch, topic=DBPM_DISPATCHES)
    return tuple(Output(DBPM_DISPATCHES, key, value) for key in dispatch_keys(event))


Dispatched = tuple[str, float]
"""A decoded ``clingate.dbpm.dispatches`` record: its candidate id and event time."""


def dispatched(datum: dict[str, Any]) -> Dispatched | None:
    """A dispatch datum (:meth:`schemas.serde.Serde.read_datum`) as :func:`decode_dispatch` gives it,
    without the model, or None where the model's check of the event time is needed
    (:func:`wire_time`)."""
    at = wire_time(datum["ts"])
    return None if at is None else (datum["candidate_id"], at)


def decode_dispatch(serde: Serde, record: SourceRecord) -> Dispatched | Rejected:
    """A ``clingate.dbpm.dispatches`` record's candidate id and event time, or why it goes to the
    dead-letter topic (:func:`decode_datum`: from its datum where :func:`dispatched` takes it)."""

    def model() -> Dispatched | Rejected:
        decoded = decode_record(serde, record, Dispatch)
        if isinstance(decoded, Rejected):
            return decoded
        dispatch: Dispatch = decoded.value  # type: ignore[assignment]
        return dispatch.candidate_id, dispatch.ts.timestamp()

    return decode_datum(serde, record, Dispatch, dispatched, model)


def propagation_datum(
    propagation: Propagation, origin_partition: int, origin_offset: int, index: int
) -> dict[str, Any]:
    """The wire form of a propagation produced by the verdict at ``origin_offset`` of ``origin_partition``:
    the ``clingate.dbpm.propagations`` datum the memory writes, its event time in the form the model
    writes (:func:`schemas.base.iso_utc`, which reads back to the same instant in every year).

    Args:
        propagation: the engine's event.
        origin_partition: the memory (verdict) partition that applied the origin verdict.
        origin_offset: the origin verdict's offset in that partition.
        index: the event's position among the verdict's propagations.
    """
    return {
        "ts": iso_utc(datetime.fromtimestamp(propagation.time, UTC)),
        "task": propagation.task,
        "signature": propagation.signature,
        "weight": propagation.weight,
        "source": propagation.source,
        "origin_task": propagation.origin_task,
        "origin_signature": propagation.origin_signature,
        "patient_id": propagation.patient_id,
        "origin_partition": origin_partition,
        "origin_offset": origin_offset,
        "origin_index": index,
    }


def propagation_event(record: PropagationRecord) -> Propagation:
    """The engine's event of a decoded propagation record (inverse of :func:`propagation_datum`)."""
    return Propagation(
        record.task,
        record.signature,
        record.weight,
        record.source,
        record.ts.timestamp(),
        record.origin_task,
        record.origin_signature,
        record.patient_id,
    )


@dataclass(frozen=True, slots=True)
class Evidence:
    """A decoded ``clingate.dbpm.propagations`` record: the engine's event and the record's identity
    (:meth:`streams.worker.memory.MemoryHandler.propagate` applies each identity once)."""

    event: Propagation
    origin_partition: int
    origin_offset: int
    origin_index: int


def evidence(datum: dict[str, Any]) -> Evidence | None:
    """A propagation datum (:meth:`schemas.serde.Serde.read_datum`) as :func:`decode_propagation` gives
    it, without the model, or None where the model's checks are needed: an event time not in wire form
    (:func:`wire_time`) or a negative origin (Avro's ``int`` and ``long`` hold the models' upper bounds
    already)."""
    at = wire_time(datum["ts"])
    if at is None or min(datum["origin_partition"], datum["origin_offset"], datum["origin_index"]) < 0:
        return None
    return Evidence(
        Propagation(
            datum["task"], datum["signature"], datum["weight"], datum["source"], at, datum["origin_task"],
            datum["origin_signature"], datum["patient_id"],
        ),
        datum["origin_partition"], datum["origin_offset"], datum["origin_index"],
    )  # fmt: skip


def decode_propagation(serde: Serde, record: SourceRecord) -> Evidence | Rejected:
    """A ``clingate.dbpm.propagations`` record's evidence, or why it goes to the dead-letter topic: one
    whose key is not its target's (:func:`~streams.worker.keys.propagation_key`) included
    (:func:`decode_datum`: from its datum where :func:`evidence` takes it)."""

    def fast(datum: dict[str, Any]) -> Evidence | None:
        found = evidence(datum)
        return found if found is not None and record.key == propagation_key(found.event) else None

    def model() -> Evidence | Rejected:
        decoded = decode_event(serde, record, PropagationRecord, propagation_key)
        if isinstance(decoded, Rejected):
            return decoded
        found, event = decoded
        return Evidence(event, found.origin_partition, found.origin_offset, found.origin_index)

    return decode_datum(serde, record, PropagationRecord, fast, model)


def pin_record(
    task: str, sig: str, action: PinAction, operator: str, reason: str, pin_id: str, ts: datetime
) -> Verdict:
    """The ``clingate.dbpm.verdicts`` record of an operator's pin of ``sig`` (or its removal) at ``ts``:
    source ``operator_pin``, a payload whose signature is ``sig``, the action's verdict label and no
    patient (``-``) (:mod:`processors.dbpm.pins`). Key it with :func:`~streams.worker.keys.verdict_key`
    like any verdict.

    Raises:
        ValueError: ``sig`` names no signature of ``task``, or ``reason`` is blank.
    """
    return Verdict(
        ts=ts, task=task, verdict=VerdictLabel(PIN_LABELS[action.value]), source=OPERATOR_PIN,  # type: ignore[arg-type]
        patient_id="-", payload=PAYLOAD_BY_TASK[task].model_validate(signature_payload(task, sig)),  # type: ignore[arg-type]
        pin=Pin(action=action, operator=operator, reason=reason, pin_id=pin_id),
    )  # fmt: skip


def contract_event(model: Candidate | Verdict) -> GateEvent | VerdictEvent | PinEvent:
    """The engine's event for a decoded topic record (the replay contract's JSON object).

    A verdict is converted field by field: its model already holds what :func:`processors.dbpm.parse_event`
    checks but the task (strings, a known verdict, the payload of its task), and it is the memory
    writer's per-record path, where a JSON round trip is the largest cost of the conversion. The event
    is the one ``parse_event`` makes of the model's JSON. An operator's pin (source ``operator_pin``,
    rare) goes through ``parse_event``, which checks it.

    Raises:
        processors.dbpm.BadEvent: the record is valid Avro but not a valid DBPM event.
    """
    if isinstance(model, Verdict) and model.pin is None and model.source != OPERATOR_PIN:
        check_task(model.task)
        return VerdictEvent(
            iso_utc(model.ts), model.ts.timestamp(), model.task, model.verdict.value, model.source,
            model.patient_id, model.payload.model_dump(mode="json", exclude_none=True), model.candidate_id,
        )  # fmt: skip
    obj = model.model_dump(mode="json", exclude_none=True)
    obj["kind"] = "verdict" if isinstance(model, Verdict) else "gate"
    return parse_event(obj)


_CANONICAL_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(?!000000)\d{6})?Z")
"""An event time as :func:`schemas.base.iso_utc` writes it (microseconds only when non-zero)."""

_PAYLOAD_BRANCHES: dict[str, tuple[str, tuple[str, ...]]] = {
    task: (model.avro_name, tuple(model.model_fields)) for task, model in PAYLOAD_BY_TASK.items()
}
"""The full name and record fields of each gated task's payload branch."""

_PAYLOAD_FIELDS: dict[str, frozenset[str]] = {
    task: frozenset(fields) for task, (_, fields) in _PAYLOAD_BRANCHES.items()
}
"""The record fields of each gated task's payload (the union's branches have distinct field sets, so
they tell which branch a datum took)."""


def wire_time(ts: str) -> float | None:
    """The event time of ``ts`` when it is in the form :func:`schemas.base.iso_utc` writes and names an
    instant that exists, else None.

    The models parse such a time and write it back unchanged, so a datum holding it gives the model's
    event; a time in any other form is for the model to normalise or reject.
    """
    if not _CANONICAL_TS.fullmatch(ts):
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:  # a day or an hour that does not exist: the model says so
        return None


def decode_datum(
    serde: Serde,
    record: SourceRecord,
    expected: type[AvroModel],
    fast: Callable[[Any], T | None],
    model: Callable[[], T | Rejected],
) -> T | Rejected:
    """A consumed record in a hot path's own type, without a model per record where that is exact.

    ``fast`` turns the record's Avro datum (:meth:`schemas.serde.Serde.read_datum`) into the value, or
    says None where it cannot decide (a check only the model makes, a key to compare with the model's);
    ``model`` is the model's path, which accepts or dead-letters the record. Bytes that do not read, and
    every datum ``fast`` declines, take the model's path, so a record is accepted or dead-lettered, with
    the same stage, error and reason, as the model's path alone would; ``fast`` MUST give the value
    that path gives wherever it gives one (the fast paths' property test checks each on generated
    records of every writer schema).
    """
    if record.value is not None:
        try:
            datum = serde.read_datum(record.value, expected, topic=record.topic)
        except SchemaDecodeError:  # the model's path says why
            datum = None
        if datum is not None and (value := fast(datum)) is not None:
            return value
    return model()


def verdict_event(datum: dict[str, Any]) -> VerdictEvent | None:
    """The engine's event of a current-schema verdict datum (:meth:`schemas.serde.Serde.read_datum`),
    built without the :class:`~schemas.dbpm.Verdict` model, or None where the model's checks are
    needed: a pin, a task outside the contract's, a payload branch other than the task's, a confidence
    outside [0, 1], a non-finite difficulty or an event time not in wire form (:func:`wire_time`).

    Where it returns an event, it is :func:`contract_event` of the model the datum validates into;
    where it returns None, the caller takes the model's path, which accepts or dead-letters the record
    with its own reason.
    """
    task, payload, confidence = datum["task"], datum["payload"], datum["confidence"]
    if (
        datum["pin"] is not None
        or datum["source"] == OPERATOR_PIN
        or _PAYLOAD_FIELDS.get(task) != payload.keys()
        or (confidence is not None and not 0.0 <= confidence <= 1.0)
    ):
        return None
    difficulty = payload.get("difficulty")
    if difficulty is not None and not math.isfinite(difficulty):
        return None
    at = wire_time(datum["ts"])
    if at is None:
        return None
    return VerdictEvent(
        datum["ts"], at, task, datum["verdict"], datum["source"], datum["patient_id"],
        {k: v for k, v in payload.items() if v is not None}, datum["candidate_id"],
    )  # fmt: skip


def decode_verdict(
    serde: Serde, record: SourceRecord, key: Callable[[Any], bytes]
) -> VerdictEvent | PinEvent | Rejected:
    """The memory writer's per-record decode: :func:`decode_event`'s result for a verdict record, taken
    straight from its Avro datum (:func:`verdict_event`) where it can be (:func:`decode_datum`).

    A record the fast path does not take (a pin, bytes that fail, a key that is not ``key(event)``)
    goes through :func:`decode_event`, so it is accepted or dead-lettered exactly as there.
    """

    def fast(datum: dict[str, Any]) -> VerdictEvent | None:
        event = verdict_event(datum)
        return event if event is not None and record.key == key(event) else None

    def model() -> VerdictEvent | PinEvent | Rejected:
        decoded = decode_event(serde, record, Verdict, key)
        return decoded if isinstance(decoded, Rejected) else decoded[1]

    return decode_datum(serde, record, Verdict, fast, model)


@dataclass(frozen=True, slots=True)
class CandidateRecord:
    """A decoded ``clingate.dbpm.candidates`` record as the gate decides it and writes it into its
    decision (:func:`candidate_datum`), without the :class:`~schemas.dbpm.Candidate` model.

    Attributes:
        event: the engine's event; its ``ts`` is in wire form and its payload is the record's, fields
            that are null left out.
        document_ts: the event time of the narrative the candidate was extracted from, in wire form
            (None: from no narrative).
        document_time: ``document_ts`` in seconds since the epoch.
    """

    event: GateEvent
    document_ts: str | None = None
    document_time: float | None = None


def _narrated(event: GateEvent, document: datetime | None) -> CandidateRecord:
    if document is None:
        return CandidateRecord(event)
    return CandidateRecord(event, iso_utc(document), document.timestamp())


def candidate_of(model: Candidate) -> CandidateRecord:
    """The gate's record of a candidate model (where people and files give candidates).

    Raises:
        processors.dbpm.BadEvent: the model is not a valid DBPM candidate (:func:`contract_event`).
    """
    return _narrated(contract_event(model), model.document_ts)  # type: ignore[arg-type]


def candidate_record(datum: dict[str, Any]) -> CandidateRecord | None:
    """A current-schema candidate datum (:meth:`schemas.serde.Serde.read_datum`) as
    :func:`decode_candidate` gives it, without the model, or None where the model's checks are needed: a
    task outside the contract's, a payload branch other than the task's, a difficulty outside [0, 1]
    (which :func:`processors.dbpm.parse_event` refuses) or an event time not in wire form
    (:func:`wire_time`)."""
    task, payload = datum["task"], datum["payload"]
    if _PAYLOAD_FIELDS.get(task) != payload.keys():
        return None
    difficulty = payload.get("difficulty")
    if difficulty is not None and not 0.0 <= difficulty <= 1.0:  # NaN included
        return None
    at, document_ts = wire_time(datum["ts"]), datum["document_ts"]
    document_time = None if document_ts is None else wire_time(document_ts)
    if at is None or (document_ts is not None and document_time is None):
        return None
    event = GateEvent(
        datum["ts"], at, task, datum["patient_id"], datum["candidate_id"],
        {k: v for k, v in payload.items() if v is not None},
    )  # fmt: skip
    return CandidateRecord(event, document_ts, document_time)


def decode_candidate(serde: Serde, record: SourceRecord) -> CandidateRecord | Rejected:
    """A ``clingate.dbpm.candidates`` record as the gate decides it, or why it goes to the dead-letter
    topic (:func:`decode_datum`: from its datum where :func:`candidate_record` takes it, else as
    :func:`decode_event` decodes it)."""

    def model() -> CandidateRecord | Rejected:
        decoded = decode_event(serde, record, Candidate)
        if isinstance(decoded, Rejected):
            return decoded
        candidate, event = decoded
        return _narrated(event, candidate.document_ts)

    return decode_datum(serde, record, Candidate, candidate_record, model)


def candidate_datum(candidate: CandidateRecord) -> dict[str, Any]:
    """The ``clingate.dbpm.Candidate`` datum of ``candidate``, in the form
    :meth:`schemas.serde.Serde.write_datum` takes: the :class:`~schemas.dbpm.Candidate` model's datum,
    field for field (the null payload fields the event leaves out written back as null)."""
    event = candidate.event
    name, fields = _PAYLOAD_BRANCHES[event.task]
    payload = event.payload
    return {
        **event_fields(event),
        "document_ts": candidate.document_ts,
        "payload": (name, {field: payload.get(field) for field in fields}),
    }


def decode_event(
    serde: Serde,
    record: SourceRecord,
    expected: type[Candidate] | type[Verdict] | type[PropagationRecord],
    key: Callable[[Any], bytes] | None = None,
) -> tuple[Any, Any] | Rejected:
    """``(model, engine event)`` of a consumed DBPM record, or why it goes to the dead-letter topic.

    Valid Avro that is not a valid DBPM event (:class:`processors.dbpm.BadEvent`) fails at the
    ``validate`` stage, and so does a record whose key is not ``key(engine event)`` when ``key`` is
    given (the key decides the partition, hence the writer, of the state the record changes).
    """
    result = decode_record(serde, record, expected)
    if isinstance(result, Rejected):
        return result
    try:
        model = result.value
        event = propagation_event(model) if isinstance(model, PropagationRecord) else contract_event(model)
    except Exception as exc:  # BadEvent (or anything else the conversion raises): not a DBPM event
        return Rejected(record, Stage.VALIDATE, type(exc).__name__, str(exc), None, expected.avro_name)
    if key is not None and record.key != (wanted := key(event)):
        reason = f"record key {record.key!r} is not {wanted!r}, the key of its content"
        return Rejected(record, Stage.VALIDATE, "KeyMismatch", reason, None, expected.avro_name)
    return model, event
