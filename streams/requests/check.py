"""What the request runtime writes for one console request, or why it refuses it: a pure function of the
request and what the runtime read for it, without Kafka.

:func:`check` takes a :class:`~schemas.console.ConsoleRequest` and :class:`Evidence` (the dead letter at
the coordinates the request names, the record at the dead letter's source coordinates, whether the target
was carried out already) and returns :class:`Carried` (the record to produce) or :class:`Refused` (why
nothing is produced). What holds for a request carried out:

* **The role.** The request's role may ask for its action (:data:`ROLES`: re-drives and pins are the
  operator's). The console puts the signed-in session's role there; a principal that forges a request
  can claim any role, so this check stops a console bug, not a forger: the forger's reach is the next
  checks.
* **A re-drive** (``redrive``) names a dead letter by its coordinates ``<dlq>[<partition>]@<offset>``
  and the dead letter's source topic. It is carried out only when: the topic is a dead-letter topic of
  the catalog and the request's topic its source (but ``clingate.console.requests``: a request that
  could not be read is asked for again, never re-driven into the runtime's own input); a dead letter is
  at those coordinates (read ``read_committed``), is whole (no field cut to fit), has a value and names
  that source topic; the source topic still holds, at the dead letter's coordinates, the record the
  dead letter copied (same key and value: a dead letter written by anything but the stage that read that
  record is refused, so a principal that may write a dead-letter topic cannot use a re-drive to write
  its source); the value decodes as the source topic's schema (a re-drive of a record still undecodable
  would only be dead-lettered again); and no earlier request re-drove it. The record produced is the dead
  letter's key and value to its source partition, with its headers but those of an earlier re-drive,
  plus :func:`redrive_headers`. What a re-drive writes therefore always was on the source topic once,
  written by a principal allowed to write it. The cost: a dead letter is re-driven only while its
  source topic keeps the original (7 days for most inputs, 30 for verdicts).
* **A pin** (``pin``) carries its verdict: it is carried out only when the topic is
  ``clingate.dbpm.verdicts``, the value decodes as a ``Verdict`` that is a valid pin (source
  ``operator_pin``, :func:`streams.worker.dbpm.contract_event`) by the request's user with the request's
  id as its pin id, its key is ``task|signature`` of the pinned signature (the memory partition that
  owns it), and the target names the same. So a principal that may only write requests can write a pin,
  never a verdict of a verifier or a rule.
* **Once.** A request id already carried out is refused, so is a dead letter already re-driven.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from processors.dbpm.events import BadEvent, PinEvent
from schemas.common import DeadLetter
from schemas.console import ConsoleRequest
from schemas.dbpm import Verdict
from schemas.registry import load_registry
from schemas.serde import SchemaDecodeError, Serde
from streams.console.users import Role
from streams.worker.dbpm import contract_event, memory_key
from topics.catalog import CATALOG, CONSOLE_REQUESTS, DBPM_VERDICTS

REDRIVE_PREFIX = "__clingate.redrive."
"""Prefix of the headers a re-drive adds (beside the dead-letter route's ``__clingate.errors.``)."""


class RequestAction(StrEnum):
    """What a console request asks for (``ConsoleRequest.action``)."""

    REDRIVE = "redrive"
    PIN = "pin"


ROLES: dict[RequestAction, frozenset[str]] = {
    RequestAction.REDRIVE: frozenset({Role.OPERATOR}),
    RequestAction.PIN: frozenset({Role.OPERATOR}),
}
"""The roles that may ask for each action."""

DEAD_LETTER_QUEUES: dict[str, str] = {spec.dlq.name: spec.name for spec in CATALOG if spec.dlq is not None}
"""Every dead-letter topic of the catalog and the source topic it is the dead-letter topic of."""

_COORDINATES = re.compile(r"^(?P<topic>[^\[\]]+)\[(?P<partition>[0-9]{1,10})\]@(?P<offset>[0-9]{1,19})$")


@dataclass(frozen=True)
class Coordinates:
    """Where a record is: topic, partition, offset."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


def coordinates(text: str) -> Coordinates | None:
    """``<topic>[<partition>]@<offset>`` parsed (None: it is not written so)."""
    match = _COORDINATES.match(text)
    if match is None:
        return None
    return Coordinates(match["topic"], int(match["partition"]), int(match["offset"]))


@dataclass(frozen=True)
class Original:
    """The record a source topic holds at a dead letter's coordinates."""

    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Evidence:
    """What the runtime read for one request.

    Attributes:
        letter: the dead letter at the re-drive's coordinates (None: there is no record there).
        unreadable: why the record there is not a ``DeadLetter`` (``letter`` None).
        original: the record at the dead letter's source coordinates (None: the source no longer holds
            it, or it was not looked up).
        done: the target was carried out already, or the request's id was.
    """

    letter: DeadLetter | None = None
    unreadable: str = ""
    original: Original | None = None
    done: bool = False


@dataclass(frozen=True)
class Carried:
    """The record a request writes."""

    topic: str
    partition: int | None
    """The partition (a re-drive: the source's); None: the key's, by the producer's murmur2."""
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class Refused:
    """Why a request writes nothing."""

    reason: str


def redrive_headers(
    letter: DeadLetter, target: str, user: str, at: datetime, action_id: str
) -> tuple[tuple[str, bytes | None], ...]:
    """The headers of ``letter`` re-driven from ``target`` by ``user`` at ``at`` under the audit record
    ``action_id``: the original ones but an earlier re-drive's, then ``dead-letter``, ``by``, ``at`` and
    ``action-id`` under :data:`REDRIVE_PREFIX`."""
    kept = [(h.key, h.value) for h in letter.headers if not h.key.startswith(REDRIVE_PREFIX)]
    added = {"dead-letter": target, "by": user, "at": at.isoformat(), "action-id": action_id}
    return (*kept, *((REDRIVE_PREFIX + name, value.encode()) for name, value in added.items()))


def schema_problem(serde: Serde, topic: str, value: bytes) -> str | None:
    """Why ``value`` is not a record of ``topic``'s value schema (None: it is one)."""
    model = load_registry().entries[CATALOG.get(topic).value_schema].model
    try:
        serde.decode(value, model, topic=topic)
    except SchemaDecodeError as exc:
        return f"its value is not a {model.avro_name} ({exc})"
    return None


def check(request: ConsoleRequest, evidence: Evidence, serde: Serde) -> Carried | Refused:
    """What ``request`` writes, or why it writes nothing (module docstring)."""
    try:
        action = RequestAction(request.action)
    except ValueError:
        return Refused(f"unknown action {request.action!r}")
    if request.role not in ROLES[action]:
        return Refused(f"the role {request.role!r} may not {action.value}")
    if evidence.done:
        return Refused(f"{request.target} was carried out already")
    if action is RequestAction.REDRIVE:
        return _redrive(request, evidence, serde)
    return _pin(request, serde)


def _redrive(request: ConsoleRequest, evidence: Evidence, serde: Serde) -> Carried | Refused:
    where = coordinates(request.target)
    if where is None or where.topic not in DEAD_LETTER_QUEUES:
        return Refused(f"{request.target!r} names no record of a dead-letter topic")
    source = DEAD_LETTER_QUEUES[where.topic]
    if source == CONSOLE_REQUESTS:
        return Refused("a request is not re-driven: ask for it again from the console")
    if request.topic != source:
        return Refused(f"{where.topic} is the dead-letter topic of {source}, not of {request.topic}")
    letter = evidence.letter
    if letter is None:
        why = f" ({evidence.unreadable})" if evidence.unreadable else ""
        return Refused(f"no dead letter at {where}{why}")
    if letter.topic != source:
        return Refused(f"the dead letter names {letter.topic}, not {source}")
    if letter.truncations:
        cut = ", ".join(t.field for t in letter.truncations)
        return Refused(f"the dead letter is not whole ({cut} cut to fit its topic)")
    if letter.value is None:
        return Refused("the dead letter has no value (the original was a tombstone)")
    origin = Coordinates(letter.topic, letter.partition, letter.offset)
    if evidence.original is None:
        return Refused(f"{origin} no longer holds the original record, so the dead letter cannot be checked")
    if (evidence.original.key, evidence.original.value) != (letter.key, letter.value):
        return Refused(f"the dead letter is not a copy of the record at {origin}")
    problem = schema_problem(serde, source, letter.value)
    if problem is not None:
        return Refused(problem)
    headers = redrive_headers(letter, request.target, request.user, request.event_time, request.request_id)
    return Carried(source, letter.partition, letter.key, letter.value, headers)


def _pin(request: ConsoleRequest, serde: Serde) -> Carried | Refused:
    if request.topic != DBPM_VERDICTS or request.value is None:
        return Refused(f"a pin is a verdict on {DBPM_VERDICTS}")
    problem = schema_problem(serde, DBPM_VERDICTS, request.value)
    if problem is not None:
        return Refused(problem)
    verdict = serde.decode(request.value, Verdict, topic=DBPM_VERDICTS)
    try:
        event = contract_event(verdict)
    except BadEvent as exc:
        return Refused(f"not a valid pin: {exc}")
    if not isinstance(event, PinEvent) or verdict.pin is None:
        return Refused("the verdict is not an operator's pin")
    if (verdict.pin.operator, verdict.pin.pin_id) != (request.user, request.request_id):
        return Refused("the pin is not the requesting operator's, under the request's id")
    key = memory_key(event.task, event.signature)
    if request.key != key or request.target.encode() != key:
        return Refused(f"a pin of {key.decode()!r} is keyed and targeted {key.decode()!r}")
    return Carried(DBPM_VERDICTS, None, key, request.value)


def marks(action: str, request_id: str, target: str) -> tuple[str, ...]:
    """What a request carried out marks as done: its id, and a re-drive's dead letter too (a pin's
    signature may be pinned again). A request any of whose marks is done is refused (:func:`check`)."""
    return (request_id, target) if action == RequestAction.REDRIVE else (request_id,)


OK = "ok"
"""``ConsoleRequestOutcome.outcome`` of a request carried out."""
REFUSED = "refused"
"""``ConsoleRequestOutcome.outcome`` of a request refused."""
