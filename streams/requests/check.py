"""What the request runtime writes for one console request, or why it refuses it: a pure function of the
request and what the runtime read for it, without Kafka.

:func:`check` takes a :class:`~schemas.console.ConsoleRequest` and :class:`Evidence` (the dead letter at
the coordinates the request names, the record at the dead letter's source coordinates, whether the target
was carried out already) and returns :class:`Carried` (the record to produce) or :class:`Refused` (why
nothing is produced). What holds for a request carried out:

* **The role.** The request's role may ask for its action (:data:`ROLES`: re-drives and pins are the
  operator's, reviews the SME's, questions the clinician's, query decisions and evidence reviews the
  pharmacist's). The console puts the signed-in session's role there; a principal that forges a request
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
* **A person's own record** (:data:`PUBLICATIONS`): an operator's pin (``pin``), an SME's review
  (``review``), a clinician's question to the agent (``ask``), a pharmacist's query decision
  (``query-decision``) or evidence review (``evidence-review``) carries the record it publishes. It is
  carried out only when the topic is the action's, the value decodes as that topic's schema (whose model
  checks what every such record holds: a review's correction names a type, a query decision gives its
  queries, an evidence review accepts a packet or says why not), the record is one the action publishes
  (a pin verdict is a valid pin, :func:`streams.worker.wire.contract_event`, never a verdict of a
  verifier or a rule), the person it names (the pin's operator, the reviewer, the pharmacist) is the
  requesting user and the id it carries (the pin's, the decision's, the review's) the request's, and the
  request is keyed as the record's topic keys it (a pin ``task|signature`` of its signature, so it lands
  on the memory partition that owns it; a review by document; a question by conversation; a decision and
  an evidence review by patient) and targeted at what the record is about (:class:`Identity`). So a
  principal that may only write requests writes no record but these, each its requester's.
* **Once.** A request id already carried out is refused, and so is a second re-drive of a dead letter, a
  second decision on a run's query proposal or a second review of one of its evidence bundles
  (:func:`marks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from processors.dbpm.events import PinEvent
from schemas.agent import AgentRequest
from schemas.base import AvroModel, iso_utc
from schemas.clinical import EvidenceReview, QueryDecision
from schemas.common import DeadLetter
from schemas.console import ConsoleRequest, Role
from schemas.dbpm import Verdict
from schemas.docs import Review
from schemas.registry import load_registry
from schemas.serde import SchemaDecodeError, Serde
from streams.worker.keys import memory_key
from streams.worker.wire import contract_event
from topics.catalog import (
    AGENT_REQUESTS,
    CATALOG,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_QUERY_DECISIONS,
    CONSOLE_REQUESTS,
    DBPM_VERDICTS,
    DOCS_REVIEWS,
)

REDRIVE_PREFIX = "__clingate.redrive."
"""Prefix of the headers a re-drive adds (beside the dead-letter route's ``__clingate.errors.``)."""


class RequestAction(StrEnum):
    """What a console request asks for (``ConsoleRequest.action``)."""

    REDRIVE = "redrive"
    PIN = "pin"
    REVIEW = "review"
    ASK = "ask"
    QUERY_DECISION = "query-decision"
    EVIDENCE_REVIEW = "evidence-review"


ROLES: dict[RequestAction, frozenset[str]] = {
    RequestAction.REDRIVE: frozenset({Role.OPERATOR}),
    RequestAction.PIN: frozenset({Role.OPERATOR}),
    RequestAction.REVIEW: frozenset({Role.SME}),
    RequestAction.ASK: frozenset({Role.CLINICIAN}),
    RequestAction.QUERY_DECISION: frozenset({Role.PHARMACIST}),
    RequestAction.EVIDENCE_REVIEW: frozenset({Role.PHARMACIST}),
}
"""The roles that may ask for each action."""

ONCE_PER_TARGET = frozenset(
    {RequestAction.REDRIVE, RequestAction.QUERY_DECISION, RequestAction.EVIDENCE_REVIEW}
)
"""The actions whose target is carried out once: a dead letter is re-driven once, a run's query proposal
decided once, one of its evidence bundles reviewed once (the first is what the pipeline acted on)."""

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


def decoded_value(serde: Serde, topic: str, value: bytes) -> AvroModel | Refused:
    """``value`` decoded as ``topic``'s value schema, or why it is not a record of it."""
    model = load_registry().entries[CATALOG.get(topic).value_schema].model
    try:
        return serde.decode(value, model, topic=topic)
    except SchemaDecodeError as exc:
        return Refused(f"its value is not a {model.avro_name} ({exc})")


@dataclass(frozen=True)
class Identity:
    """What a person's record says about itself, which its request must agree with."""

    key: bytes
    """Its key on its topic (the catalog's)."""
    target: str
    """What it is about: its request's key, and its outcome's."""
    author: str | None
    """The person it names as its author (None: it names nobody, and the request's user is its author)."""
    ident: str | None
    """The id it carries that is its request's, the audit record's (None: it carries none)."""


@dataclass(frozen=True)
class Publication:
    """The record a request of one action carries, and how its identity is read."""

    topic: str
    identify: Callable[[Any], Identity]
    """The record's :class:`Identity`; raises :class:`ValueError` with the reason when the record, though
    of the topic's schema, is not one the action publishes."""


def touchpoint_target(patient_id: str, run_id: str, at: datetime) -> str:
    """The target of a pharmacist's decision on what a run put before them: ``patient|run|<time>``, the
    time the query proposal or evidence bundle decided on was published, so that each is decided once."""
    return f"{patient_id}|{run_id}|{iso_utc(at)}"


def _pin(verdict: Verdict) -> Identity:
    event = contract_event(verdict)  # BadEvent, a ValueError, names what is wrong
    if not isinstance(event, PinEvent) or verdict.pin is None:
        raise ValueError("the verdict is not an operator's pin")
    key = memory_key(event.task, event.signature)
    return Identity(key, key.decode(), verdict.pin.operator, verdict.pin.pin_id)


def _review(review: Review) -> Identity:
    return Identity(review.doc_id.encode(), review.doc_id, review.reviewer, None)


def _ask(question: AgentRequest) -> Identity:
    return Identity(question.conversation_id.encode(), question.request_id, None, None)


def _query_decision(decision: QueryDecision) -> Identity:
    target = touchpoint_target(decision.patient_id, decision.run_id, decision.proposed_at)
    return Identity(decision.patient_id.encode(), target, decision.pharmacist, decision.decision_id)


def _evidence_review(review: EvidenceReview) -> Identity:
    target = touchpoint_target(review.patient_id, review.run_id, review.bundle_time)
    return Identity(review.patient_id.encode(), target, review.pharmacist, review.review_id)


PUBLICATIONS: dict[RequestAction, Publication] = {
    RequestAction.PIN: Publication(DBPM_VERDICTS, _pin),
    RequestAction.REVIEW: Publication(DOCS_REVIEWS, _review),
    RequestAction.ASK: Publication(AGENT_REQUESTS, _ask),
    RequestAction.QUERY_DECISION: Publication(CLINICAL_QUERY_DECISIONS, _query_decision),
    RequestAction.EVIDENCE_REVIEW: Publication(CLINICAL_EVIDENCE_REVIEWS, _evidence_review),
}
"""Every action that publishes a person's own record, and where (module docstring)."""


def publication_request(
    action: RequestAction,
    record: AvroModel,
    serde: Serde,
    *,
    request_id: str,
    user: str,
    role: str,
    at: datetime,
    note: str = "",
) -> ConsoleRequest:
    """The request of ``user`` in ``role`` at ``at``, with id ``request_id``, that asks for ``record``, their
    own record of ``action``, to be published: keyed and targeted as :func:`check` requires of it."""
    publication = PUBLICATIONS[action]
    identity = publication.identify(record)
    return ConsoleRequest(
        request_id=request_id, event_time=at, user=user, role=role, action=action.value,
        target=identity.target, topic=publication.topic, key=identity.key,
        value=serde.encode(record, topic=publication.topic), note=note,
    )  # fmt: skip


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
    return _publish(request, action, serde)


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
    value = decoded_value(serde, source, letter.value)
    if isinstance(value, Refused):
        return value
    headers = redrive_headers(letter, request.target, request.user, request.event_time, request.request_id)
    return Carried(source, letter.partition, letter.key, letter.value, headers)


def _publish(request: ConsoleRequest, action: RequestAction, serde: Serde) -> Carried | Refused:
    topic = PUBLICATIONS[action].topic
    if request.topic != topic or request.value is None:
        return Refused(f"a {action.value} is a record of {topic}")
    record = decoded_value(serde, topic, request.value)
    if isinstance(record, Refused):
        return record
    try:
        identity = PUBLICATIONS[action].identify(record)
    except ValueError as exc:
        return Refused(f"not a valid {action.value}: {exc}")
    if identity.author not in (None, request.user) or identity.ident not in (None, request.request_id):
        return Refused(f"the {action.value} is not the requesting user's, under the request's id")
    if request.key != identity.key or request.target != identity.target:
        return Refused(
            f"a {action.value} of {identity.target!r} is keyed {identity.key.decode()!r} and targeted "
            f"{identity.target!r}"
        )
    return Carried(topic, None, identity.key, request.value)


def marks(action: str, request_id: str, target: str) -> tuple[str, ...]:
    """What a request carried out marks as done: its id, and the target of an action carried out once per
    target (:data:`ONCE_PER_TARGET`; a pin's signature may be pinned again, a document reviewed again). A
    request any of whose marks is done is refused (:func:`check`)."""
    return (request_id, target) if action in ONCE_PER_TARGET else (request_id,)


OK = "ok"
"""``ConsoleRequestOutcome.outcome`` of a request carried out."""
REFUSED = "refused"
"""``ConsoleRequestOutcome.outcome`` of a request refused."""
