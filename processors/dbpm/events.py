"""DBPM input events in the replay-stream contract, validated into typed, immutable values.

The contract (``replay-stream.md``) fixes the field names: ``kind`` (``verdict`` | ``gate``), ``ts``
(ISO 8601 UTC), ``task``, ``verdict`` and ``source`` (verdicts), ``candidate_id`` (gates; optional
on verdicts, where it is the judged candidate's and makes the verdict idempotent: :mod:`.ledger`),
``patient_id`` and a task-specific ``payload``. An event with an unknown kind, task or verdict, a
missing field or a field of the wrong type raises :class:`BadEvent` with a reason an operator can act
on; callers route it to their dead-letter output and carry on.

Pins. A verdict whose ``source`` is ``operator_pin`` is an operator's pin of its payload's signature
(:mod:`.pins`), parsed into a :class:`PinEvent`: it also carries ``pin``, an object with ``action``
(``ALLOW`` | ``BLOCK`` | ``UNPIN``), ``operator``, ``reason`` (not blank) and ``pin_id``, and its
``verdict`` MUST be the action's label (:data:`~processors.dbpm.config.PIN_LABELS`). A ``pin`` on
another source, or that source without one, is bad input. (This is clingate's extension of the replay
stream; docs/dbpm.md describes it.)

Choices: a timestamp must carry a zone (``Z`` or an offset); naive times are rejected rather than
guessed. Payload values must be strings; QA gates may add ``ner_categories`` (list of strings),
``difficulty`` (a number in [0, 1]) and ``parse_failed`` (a boolean: the verifier's parse-failure flag
of the pair, read by the second QA signal source, :mod:`.gates`); QA verdicts may add ``error_class``
(a string). Extra payload fields are kept and ignored.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from processors.dbpm.config import NER, OPERATOR_PIN, PIN_ACTIONS, PIN_LABELS, QA, RE, VERDICTS
from processors.dbpm.signatures import signature

#: Payload fields each contract task requires (open tasks require ``entity``, like NER).
PAYLOAD_FIELDS: Mapping[str, tuple[str, ...]] = {
    NER: ("entity", "category"),
    RE: ("head", "head_type", "relation", "tail", "tail_type"),
    QA: ("question", "answer", "category"),
}
_OPEN_TASK_FIELDS = ("entity",)
# Top-level string fields of each kind, in the order their absence is reported.
_KIND_FIELDS: Mapping[str, tuple[str, ...]] = {
    "verdict": ("task", "ts", "patient_id", "verdict", "source"),
    "gate": ("task", "ts", "patient_id", "candidate_id"),
}


class BadEvent(ValueError):
    """An input record that does not follow the replay-stream contract (the message says why)."""


@dataclass(frozen=True, slots=True)
class VerdictEvent:
    """A verifier (or rule-based) verdict on a candidate: feeds the memory (Algorithm 1)."""

    ts: str
    time: float
    task: str
    verdict: str
    source: str
    patient_id: str
    payload: Mapping[str, object]
    candidate_id: str | None = None


@dataclass(frozen=True, slots=True)
class GateEvent:
    """A candidate asking for a gate decision (Eq. 4, §4.7, §4.8)."""

    ts: str
    time: float
    task: str
    patient_id: str
    candidate_id: str
    payload: Mapping[str, object]


@dataclass(frozen=True, slots=True)
class PinEvent:
    """An operator's pin of one signature, or its removal (:mod:`.pins`): never learnt from.

    Attributes:
        signature: the pinned signature (of the event's payload, :mod:`.signatures`).
        action: ``ALLOW`` | ``BLOCK`` (pin the signature's candidates to it) or ``UNPIN``.
        operator: who pinned it.
        reason: why (never blank).
        pin_id: the pin's id (the console's audit record of it).
    """

    ts: str
    time: float
    task: str
    signature: str
    action: str
    operator: str
    reason: str
    pin_id: str


Event = VerdictEvent | GateEvent | PinEvent


def parse_time(ts: str) -> float:
    """Seconds since the Unix epoch of an ISO 8601 timestamp with a zone.

    Raises:
        BadEvent: not ISO 8601, or without a zone.
    """
    try:
        moment = datetime.fromisoformat(ts)
    except (TypeError, ValueError) as exc:
        raise BadEvent(f"ts {ts!r} is not an ISO 8601 timestamp") from exc
    if moment.tzinfo is None:
        raise BadEvent(f"ts {ts!r} has no zone; write UTC as ...Z")
    return moment.timestamp()


def format_time(seconds: float) -> str:
    """ISO 8601 UTC with ``Z`` (microseconds only when non-zero), the contract's ``ts`` format."""
    moment = datetime.fromtimestamp(seconds, UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}"
    return text + "Z"


def _string(obj: Mapping[str, object], name: str, where: str) -> str:
    value = obj.get(name)
    if value is None:
        raise BadEvent(f"missing field {where}{name!r}")
    if not isinstance(value, str):
        raise BadEvent(f"field {where}{name!r} must be a string, got {type(value).__name__}")
    return value


def _require_strings(obj: Mapping[str, object], names: tuple[str, ...], where: str) -> None:
    for name in names:
        if type(obj.get(name)) is not str:
            _string(obj, name, where)  # raises with the precise reason


def _check_payload(task: str, kind: str, payload: Mapping[str, object]) -> None:
    _require_strings(payload, PAYLOAD_FIELDS.get(task, _OPEN_TASK_FIELDS), "payload.")
    if task != QA:
        return
    if kind == "verdict" and payload.get("error_class") is not None:
        _string(payload, "error_class", "payload.")
    if kind == "gate":
        cats = payload.get("ner_categories")
        if cats is not None and (not isinstance(cats, list) or not all(isinstance(c, str) for c in cats)):
            raise BadEvent("field payload.'ner_categories' must be a list of strings")
        difficulty = payload.get("difficulty")
        if difficulty is not None and (
            isinstance(difficulty, bool)
            or not isinstance(difficulty, int | float)
            or not 0 <= difficulty <= 1
        ):
            raise BadEvent("field payload.'difficulty' must be a number in [0, 1]")
        parse_failed = payload.get("parse_failed")
        if parse_failed is not None and not isinstance(parse_failed, bool):
            raise BadEvent("field payload.'parse_failed' must be a boolean")


def check_task(task: str, tasks: Collection[str] = (NER, RE, QA)) -> None:
    """Raise :class:`BadEvent` unless ``task`` is one of ``tasks`` (the contract's three by default)."""
    if task not in tasks:
        raise BadEvent(f"unknown task {task!r} (expected one of {', '.join(sorted(tasks))})")


def parse_event(obj: object, tasks: Collection[str] = (NER, RE, QA)) -> Event:
    """Validate one decoded JSON value as a contract event.

    Args:
        obj: the decoded JSON line.
        tasks: the task names accepted (the contract's three by default).

    Raises:
        BadEvent: the value does not follow the contract.
    """
    if not isinstance(obj, dict):
        raise BadEvent(f"an event must be a JSON object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in _KIND_FIELDS:
        _string(obj, "kind", "")
        raise BadEvent(f"unknown kind {kind!r} (expected 'verdict' or 'gate')")
    _require_strings(obj, _KIND_FIELDS[kind], "")
    task = obj["task"]
    check_task(task, tasks)
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        raise BadEvent("missing field 'payload' (an object)")
    _check_payload(task, kind, payload)
    ts = obj["ts"]
    if kind == "verdict":
        verdict = obj["verdict"]
        if verdict not in VERDICTS:
            raise BadEvent(f"unknown verdict {verdict!r} (expected one of {', '.join(VERDICTS)})")
        if obj["source"] == OPERATOR_PIN or obj.get("pin") is not None:
            return _pin(obj, ts, task, payload)
        candidate_id = None if obj.get("candidate_id") is None else _string(obj, "candidate_id", "")
        return VerdictEvent(
            ts, parse_time(ts), task, verdict, obj["source"], obj["patient_id"], payload, candidate_id
        )
    return GateEvent(ts, parse_time(ts), task, obj["patient_id"], obj["candidate_id"], payload)


def _pin(obj: Mapping[str, object], ts: str, task: str, payload: Mapping[str, object]) -> PinEvent:
    """The pin of a verdict-shaped object whose source is ``operator_pin`` or that carries ``pin``."""
    if obj["source"] != OPERATOR_PIN:
        raise BadEvent(f"a verdict with a 'pin' must have source {OPERATOR_PIN!r}, got {obj['source']!r}")
    pin = obj.get("pin")
    if not isinstance(pin, dict):
        raise BadEvent(f"a verdict of source {OPERATOR_PIN!r} needs field 'pin' (an object)")
    _require_strings(pin, ("action", "operator", "reason", "pin_id"), "pin.")
    action = pin["action"]
    if action not in PIN_ACTIONS:
        raise BadEvent(f"unknown pin.'action' {action!r} (expected one of {', '.join(PIN_ACTIONS)})")
    if obj["verdict"] != PIN_LABELS[action]:
        raise BadEvent(f"a pin {action} carries verdict {PIN_LABELS[action]!r}, got {obj['verdict']!r}")
    if not pin["reason"].strip():
        raise BadEvent("field pin.'reason' must not be blank: a pin says why")
    return PinEvent(
        ts, parse_time(ts), task, signature(task, payload), action, pin["operator"], pin["reason"],
        pin["pin_id"],
    )  # fmt: skip
