"""Response models of the DBPM generator and verifier calls, critical-first (DocGemma §6).

Field names mirror the candidate payloads of the replay-stream contract (``ner``: entity, category;
``re``: head, head_type, relation, tail, tail_type; ``qa``: question, answer, category), so a consumer
maps an answer to a candidate without renaming.

Vocabularies and choices (sources: DBPM paper §3.1, §4.8, Table 8; the DBPM ontology data):

* NER categories are the nine NER buckets that match a QAR category (paper §4.8: nine of the eleven
  QAR categories have one), spelled as the replay contract's NER payloads spell them.
* Entity types for relations are the types of the DBPM ontology's 29 admissible pairs plus the types
  its example streams also carry (Anatomy, Lab_Value, Observation, the outcome subtypes). Head and tail
  types are closed so that the ontology-violation filter (paper §4.7) sees canonical type names.
* The relation label is NOT closed: a short free label. Closing it to the ontology's vocabulary would
  make ontology violations impossible to propose and so change the verdict distribution the paper
  measures; the signature normalisation (upper-casing) happens downstream in the DBPM processors.
* QA extraction answers one templated question (paper: QAR, 160 tokens; the question and its category
  come from deterministic code). ``status`` comes first so the model commits to "answered or not
  stated" before it writes prose.
* Verdicts carry only the decision (60-token budget). ``QaVerdict.error_class`` is the paper's optional
  QA failure class (unsupported / contradicted / over-specified), nullable and therefore last.

Bounds: list and string maxima keep a greedy answer inside its token budget (50 entities of <= 100
characters fit the 1500-token extraction budget in practice; a budget overrun is a failed call).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from streams.llm.lint import response_model

NerCategory = Literal[
    "Diagnosis",
    "Treatment",
    "Symptoms",
    "Tests",
    "History",
    "Observation",
    "Risk_Factor",
    "Outcome_ClinicalStatus",
    "Outcome_Disposition",
]
EntityType = Literal[
    "Anatomy",
    "Condition",
    "Diagnosis",
    "History",
    "Lab_Value",
    "Medication",
    "Observation",
    "Outcome",
    "Outcome_ClinicalStatus",
    "Outcome_Disposition",
    "Outcome_Mortality",
    "Procedure",
    "Risk_Factor",
    "Symptom",
    "Symptoms",
    "Test",
    "Tests",
    "Treatment",
]
QarCategory = Literal[
    "diagnosis",
    "treatment",
    "symptoms",
    "tests",
    "history",
    "observation",
    "risk_factor",
    "outcome_clinicalstatus",
    "outcome_disposition",
    "outcome_mortality",
    "adverse_event",
]
BinaryVerdict = Literal["PASS", "FAIL"]
GradedVerdict = Literal["PASS_STRONG", "PASS_WEAK", "FAIL"]
QaErrorClass = Literal["unsupported", "contradicted", "over_specified"]

EntitySpan = Annotated[str, Field(min_length=1, max_length=100, description="Text as written in the note")]
RelationLabel = Annotated[
    str, Field(min_length=1, max_length=40, description="Relation label in UPPER_SNAKE_CASE, e.g. TREATS")
]


class _Answer(BaseModel):
    # extra="forbid" puts additionalProperties: false in the schema, so the decoder cannot add keys.
    model_config = ConfigDict(frozen=True, extra="forbid")


class NerEntity(_Answer):
    """One named entity: the span first (it is the NER signature), then its category."""

    entity: EntitySpan
    category: NerCategory


@response_model
class NerExtraction(_Answer):
    """Generator answer for the NER task."""

    entities: list[NerEntity] = Field(max_length=50)


class Relation(_Answer):
    """One relation, in the order of the replay contract's RE payload."""

    head: EntitySpan
    head_type: EntityType
    relation: RelationLabel
    tail: EntitySpan
    tail_type: EntityType


@response_model
class ReExtraction(_Answer):
    """Generator answer for the RE task."""

    relations: list[Relation] = Field(max_length=40)


@response_model
class QaExtraction(_Answer):
    """Generator answer to one templated clinical question (the paper's QAR stage)."""

    status: Literal["ANSWERED", "NOT_IN_NARRATIVE"]
    answer: str = Field(max_length=400, description="The answer, grounded in the note; empty if not stated")


@response_model
class NerVerdict(_Answer):
    """Verifier verdict on one NER candidate."""

    verdict: BinaryVerdict


@response_model
class ReVerdict(_Answer):
    """Verifier verdict on one RE candidate (graded: the paper's PASS_STRONG / PASS_WEAK / FAIL)."""

    verdict: GradedVerdict


@response_model
class QaVerdict(_Answer):
    """Verifier verdict on one QA candidate, with the failure class when it fails."""

    verdict: BinaryVerdict
    error_class: QaErrorClass | None = None
