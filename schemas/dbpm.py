"""DBPM events: narratives, candidates, verdicts and gate decisions.

The field names and values mirror the replay-stream contract (``specs/replay-stream.md``) so that a
replay line and a topic record say the same thing; ``kind`` is dropped because each event type has its
own topic.

Payload design (the task set is open). ``payload`` is an Avro union of the three typed records the gate
reads (:class:`NerPayload`, :class:`RePayload`, :class:`QaPayload`) plus :class:`JsonPayload`, a JSON
document for every other task (summary, medications, temporal_events, and tasks not yet named). A new
task therefore needs no schema change; a task that becomes gated gets a typed record appended to the
union, which is a backward-compatible change. The models check that the branch matches ``task``: a
``ner`` event with a relation payload is rejected at decode time and dead-lettered instead of being
learned from.

``task`` and ``source`` stay strings (open sets: unknown sources weigh 1.0 by contract); ``verdict`` and
``decision`` are closed enums, as the contract makes any other value bad input.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Self

from pydantic import Field, model_validator

from schemas.base import AvroModel, EventTime, JsonText, avro_enum


class NerPayload(AvroModel):
    """A named entity (task ``ner``)."""

    avro_name: ClassVar[str] = "clingate.dbpm.NerPayload"

    entity: str
    category: str


class RePayload(AvroModel):
    """A relation between two typed entities (task ``re``)."""

    avro_name: ClassVar[str] = "clingate.dbpm.RePayload"

    head: str
    head_type: str
    relation: str
    tail: str
    tail_type: str


class QaErrorClass(StrEnum):
    """Why a failing QA answer failed."""

    UNSUPPORTED = "unsupported"
    CONTRADICTED = "contradicted"
    OVER_SPECIFIED = "over_specified"


class QaPayload(AvroModel):
    """A question-answer pair (task ``qa``); the optional fields are used as given when present."""

    avro_name: ClassVar[str] = "clingate.dbpm.QaPayload"

    question: str
    answer: str
    category: str
    error_class: QaErrorClass | None = None
    ner_categories: tuple[str, ...] | None = None
    difficulty: float | None = None
    parse_failed: bool | None = None


class JsonPayload(AvroModel):
    """The payload of a task without a typed record, as a JSON document."""

    avro_name: ClassVar[str] = "clingate.dbpm.JsonPayload"

    document: JsonText = Field(examples=['{"summary": "stable, discharged home"}'])


Payload = NerPayload | RePayload | QaPayload | JsonPayload
"""The union every candidate and verdict carries."""

PAYLOAD_BY_TASK: dict[str, type[AvroModel]] = {"ner": NerPayload, "re": RePayload, "qa": QaPayload}
"""The typed payload of each gated task; every other task carries a :class:`JsonPayload`."""

GATED_TASKS: frozenset[str] = frozenset(PAYLOAD_BY_TASK)
"""Tasks the DBPM gate reads (``ner``, ``re``, ``qa``)."""


def _check_payload_matches_task(task: str, payload: Payload) -> None:
    expected = PAYLOAD_BY_TASK.get(task, JsonPayload)
    if not isinstance(payload, expected):
        raise ValueError(f"task {task!r} carries a {expected.__name__}, got a {type(payload).__name__}")


class Candidate(AvroModel):
    """A candidate extraction asking the gate for a decision (the replay stream's gate event)."""

    avro_name: ClassVar[str] = "clingate.dbpm.Candidate"

    ts: EventTime
    task: str = Field(examples=["ner", "re", "qa", "summary"])
    patient_id: str
    candidate_id: str
    payload: Payload
    document_ts: EventTime | None = None

    @model_validator(mode="after")
    def _payload_matches_task(self) -> Self:
        _check_payload_matches_task(self.task, self.payload)
        return self


class VerdictLabel(StrEnum):
    """The categorical verdict of a judged candidate."""

    HARD_FAIL = "hard_fail"
    SOFT_DOWNGRADE = "soft_downgrade"
    SUCCESS = "success"


class PinAction(StrEnum):
    """What an operator's pin does to a signature's candidates."""

    ALLOW = "ALLOW"
    BLOCK = "BLOCK"
    UNPIN = "UNPIN"
    """Remove the signature's pin: the gate decides as the memory has learnt again."""


class Pin(AvroModel):
    """An operator's pin of a verdict's signature (``processors.dbpm.pins``): not a judgement."""

    avro_name: ClassVar[str] = "clingate.dbpm.Pin"

    action: PinAction
    operator: str = Field(examples=["olga"])
    reason: str = Field(min_length=1, examples=["known false positive of the verifier on this entity"])
    pin_id: str = Field(description="The id of the console's audit record of the pin.")


class Verdict(AvroModel):
    """A verifier or rule-based judgement of a candidate (the replay stream's verdict event), or, with
    source ``operator_pin`` and a ``pin``, an operator's pin of its signature (its payload names the
    signature, its verdict label is the pin's direction: ``processors.dbpm.events``)."""

    avro_name: ClassVar[str] = "clingate.dbpm.Verdict"

    ts: EventTime
    task: str = Field(examples=["ner", "re", "qa", "summary"])
    verdict: VerdictLabel
    source: str = Field(examples=["verifier_mmed", "rule_based", "cross_task_re", "operator_pin"])
    patient_id: str
    payload: Payload
    candidate_id: str | None = None
    stage: str | None = Field(default=None, examples=["gatekeeper", "verifier"])
    reason: str | None = Field(default=None, examples=["Ontology_Mismatch_Diagnosis", "QA_Verifier_Reject"])
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    pin: Pin | None = None

    @model_validator(mode="after")
    def _payload_matches_task(self) -> Self:
        _check_payload_matches_task(self.task, self.payload)
        return self


class Propagation(AvroModel):
    """Cross-task evidence for one target signature, sent keyed by that signature (paper §4.4).

    The wire form of :class:`processors.dbpm.Propagation` plus its identity (origin partition,
    offset, index): the target's memory partition applies each identity once.
    """

    avro_name: ClassVar[str] = "clingate.dbpm.Propagation"

    ts: EventTime
    task: str = Field(examples=["ner"])
    signature: str
    weight: float
    source: str = Field(examples=["cross_task_re", "cross_task_qa"])
    origin_task: str = Field(examples=["re", "qa"])
    origin_signature: str
    patient_id: str
    origin_partition: int = Field(ge=0, le=2**31 - 1)
    origin_offset: int = Field(ge=0, le=2**63 - 1)
    origin_index: int = Field(ge=0, le=2**31 - 1)


class Dispatch(AvroModel):
    """A candidate the gate decided, sent keyed like each verdict of it that the memory could learn.

    The memory's writer records it and learns a live verdict only if its candidate was dispatched
    (:mod:`processors.dbpm.ledger`).
    """

    avro_name: ClassVar[str] = "clingate.dbpm.Dispatch"

    ts: EventTime
    task: str = Field(examples=["ner", "re", "qa"])
    patient_id: str
    candidate_id: str


@avro_enum("Decision")
class GateAction(StrEnum):
    """What the DBPM gate does with a candidate (the Avro enum ``clingate.dbpm.Decision``)."""

    ALLOW = "ALLOW"
    DOWNGRADE = "DOWNGRADE"
    BLOCK = "BLOCK"


class Coverage(StrEnum):
    """How a QA candidate's NER coverage was settled before the gate decided it (the coverage join)."""

    SETTLED = "settled"
    """Every NER candidate of its narrative was verified, BLOCKed or dead-lettered."""
    TIMEOUT = "timeout"
    """The bounded wait ran out first; the categories accepted by then were stamped."""
    NO_NER = "no_ner"
    """Its narrative produced no NER candidate: nothing to wait for, no category accepted."""
    OFF = "off"
    """The join is off: decided at once, on the coverage the memory holds."""


class GateDecision(AvroModel):
    """The gate's decision on one candidate with the evidence it rested on.

    ``ts``, ``task``, ``patient_id`` and ``candidate_id`` repeat the candidate's so that consumers can
    key and filter decisions without opening ``candidate``; they MUST agree with it.
    """

    avro_name: ClassVar[str] = "clingate.dbpm.GateDecision"

    ts: EventTime
    task: str
    patient_id: str
    candidate_id: str
    decision: GateAction
    rule: str
    signature: str
    severity: float | None = None
    confidence_multiplier: float
    provenance: tuple[str, ...] = ()
    candidate: Candidate
    config: str | None = None
    coverage: Coverage | None = None
    coverage_wait_s: float | None = Field(default=None, ge=0.0)

    @model_validator(mode="after")
    def _agrees_with_candidate(self) -> Self:
        mine = (self.ts, self.task, self.patient_id, self.candidate_id)
        theirs = (
            self.candidate.ts,
            self.candidate.task,
            self.candidate.patient_id,
            self.candidate.candidate_id,
        )
        if mine != theirs:
            raise ValueError(
                f"ts, task, patient_id and candidate_id must repeat the candidate's: {mine} != {theirs}"
            )
        return self


class Narrative(AvroModel):
    """A clinical narrative of one patient."""

    avro_name: ClassVar[str] = "clingate.dbpm.Narrative"

    ts: EventTime
    patient_id: str
    text: str
    metadata: dict[str, str] | None = None
