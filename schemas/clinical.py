"""Clinical-gate events: the assessment (output contract), adversarial review, deliverable, safety audit,
a run's records through the output gates, and the pharmacist's touchpoints before reasoning (a run's
proposed evidence queries, the Query Gate's decision on them, the Evidence Review of its retrieved evidence).

``ClinicalAssessment`` is the contract of ``clingate.clinical.assessments`` and of
``clingate clinical assess`` (shared spec ``clinical-assessment.md``): its field names and value sets
are fixed; fields beyond the contract are additions only. Two contract field names are Python keywords
(``class``, ``with``); the models use aliases and serialise by alias, so ``model_dump(mode="json")``
produces the contract's names and the Avro datum.

Size: the module only declares models, and it must hold them all: the schema registry takes the
models of the ``clinical`` area from the module ``schemas.clinical`` and only from the classes defined
in it (:mod:`schemas.registry`), so the area's records and their nested parts cannot be split across
modules.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.base import AvroModel, Count32, EventTime

StalenessClass = Literal["CURRENT", "RECENT", "STALE", "PROFOUNDLY_STALE", "MISSING"]
Severity = Literal["NORMAL", "ELEVATED", "CRITICAL"]
Light = Literal["GREEN", "YELLOW", "RED"]

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]
"""An Avro ``int``: the model rejects what the schema cannot carry (signed: a birth date or an observation
in the future gives a negative age)."""

_PART = ConfigDict(
    frozen=True, extra="forbid", serialize_by_alias=True, validate_by_name=True, validate_by_alias=True
)


class _Part(BaseModel):
    model_config = _PART


class StalenessObservation(_Part):
    """Staleness of the latest observation of one code, or a MISSING monitoring dependency."""

    code: str
    display: str
    effective: str | None
    age_days: Int32 | None
    class_: StalenessClass = Field(alias="class")
    parameter: str | None = None


class Staleness(_Part):
    """Phase 0 temporal gate output (ESC-001)."""

    overall: StalenessClass
    banner: str
    observations: list[StalenessObservation]


class Supratherapeutic(_Part):
    """A level at or beyond a drug map's toxicity threshold."""

    drug: str
    parameter: str
    value: float
    unit: str
    threshold: float


class Interaction(_Part):
    """A concurrent medication in one of a drug map's interaction categories."""

    drug: str
    category: str
    with_: str = Field(alias="with")
    effect: str | None = None
    detail: str | None = None


class SymptomMatch(_Part):
    """A toxicity symptom stem found in clinical text."""

    drug: str
    category: str
    stem: str


class DrugSeverity(_Part):
    """Severity of one NTI map, evaluated on its own (overall = maximum)."""

    drug: str
    kind: Literal["drug", "class"]
    severity: Severity


class LevelFlag(_Part):
    """A non-severity flag on a level (digoxin above the HFrEF target) or a lab alert (K+ < 3.5)."""

    drug: str
    flag: str
    parameter: str
    value: float
    unit: str
    threshold: float


class MonitoringPriority(_Part):
    """Escalated monitoring priority of a parameter (digoxin + electrolyte depleter -> CRITICAL)."""

    drug: str
    parameter: str
    priority: str
    reason: str


class DoseLimitCheck(_Part):
    """A combination dose cap (atorvastatin <= 40 mg with amiodarone)."""

    drug: str
    medication: str
    with_: str = Field(alias="with")
    max_mg: float
    current_mg: float | None
    exceeded: bool


class Nti(_Part):
    """NTI drug evaluation gate output (ESC-023)."""

    severity: Severity
    drugs: list[str]
    classes: list[str] = []
    per_drug: list[DrugSeverity] = []
    supratherapeutic: list[Supratherapeutic]
    interactions: list[Interaction]
    symptoms: list[SymptomMatch]
    warnings: list[str]
    must_retrieve: list[str]
    flags: list[LevelFlag] = []
    lab_alerts: list[LevelFlag] = []
    monitoring_priority: list[MonitoringPriority] = []
    dose_limits: list[DoseLimitCheck] = []


class TrafficLight(_Part):
    """Urgency classification with provenance (production, shadow, divergence)."""

    light: Light
    sources: list[str]
    shadow: Light
    shadow_sources: list[str] = []
    shadow_mode: list[str] = []
    divergence: Literal["MATCH", "PRODUCTION_HIGHER", "SHADOW_HIGHER"] = "MATCH"
    divergence_levels: Count32 = 0
    notes: list[str] = []


class ClinicalAssessment(AvroModel):
    """One patient's deterministic clinical assessment (contract: clinical-assessment.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid", serialize_by_alias=True)
    avro_name = "clingate.clinical.ClinicalAssessment"

    patient_id: str
    as_of: str
    age: Int32 | None
    staleness: Staleness
    medications: list[str]
    medication_count: Count32 = 0
    medication_count_flag: bool
    med_dependencies: dict[str, list[str]]
    med_dependencies_conditional: dict[str, list[str]] = Field(default_factory=dict)
    nti: Nti
    traffic_light: TrafficLight
    rules: list[str] = Field(default_factory=list)
    issues: list[str] = Field(default_factory=list)


class AdversarialReview(AvroModel):
    """The adversarial reviewer's outputs for a patient (co-partitioned with FHIR updates by patient id)."""

    avro_name = "clingate.clinical.AdversarialReview"

    patient_id: str
    review_id: str
    event_time: EventTime
    disposition: str | None = None
    subcategory: str | None = None
    automation_bias_risk: str | None = None
    revision_count: Count32 | None = None
    audit_verdict: str | None = None


class Deliverable(AvroModel):
    """A pharmacist deliverable (care plan / adjudication brief) text to be audited by SCDA."""

    avro_name = "clingate.clinical.Deliverable"

    patient_id: str
    deliverable_id: str
    event_time: EventTime
    text: str


class PatternResult(_Part):
    """One SCDA safety pattern's result."""

    pattern_id: str
    esc_id: str
    name: str
    fired: bool
    passed: bool
    detail: str


# --------------------------------------------------------------------- the output gates (PharmMesh)


class EvidencePacket(_Part):
    """One evidence packet: its source name and text."""

    source: str
    text: str


class EvidenceBundle(AvroModel):
    """The evidence packets of a run, which its drafts cite (a later bundle of the run replaces them)."""

    avro_name = "clingate.clinical.EvidenceBundle"

    patient_id: str
    run_id: str
    event_time: EventTime
    packets: list[EvidencePacket]


class ClinicalDraft(AvroModel):
    """An LLM's clinical draft of a run, to gate before a pharmacist sees it."""

    avro_name = "clingate.clinical.ClinicalDraft"

    patient_id: str
    run_id: str
    revision: Count32
    event_time: EventTime
    text: str


class AuditReport(AvroModel):
    """A regulatory audit of a run's gated draft; ``report`` is the output-gates contract's audit JSON."""

    avro_name = "clingate.clinical.AuditReport"

    patient_id: str
    run_id: str
    revision: Count32
    event_time: EventTime
    report: str


class EvidenceRequest(AvroModel):
    """A request to the retrieval step upstream (ESC-002): the run's evidence lacks must-retrieve sources.

    The seed's pipeline injects the sources an NTI drug map names by exact filename when retrieval missed
    them; clingate checks the run's evidence and asks for what is missing, and the retrieval step answers
    with the run's next evidence bundle (which replaces the run's packets and is checked again).
    """

    avro_name = "clingate.clinical.EvidenceRequest"

    patient_id: str
    run_id: str
    event_time: EventTime
    revision: Count32 | None = None
    """The draft revision checked; None for an evidence bundle checked before any draft."""
    nti_severity: Severity
    drugs: list[str]
    must_retrieve: list[str]
    missing: list[str]


# ------------------------------------------------------------- the pharmacist's touchpoints (PharmMesh)


class QueryProposal(AvroModel):
    """A run's proposed evidence queries, held for the pharmacist's Query Gate before retrieval.

    The seed's pharmacist touchpoints (Supp. Note 2 §2e, §5c) extend the Input Manager with clinical
    judgement: the reasoning step asks the wrong questions (a drug-centric anchor, an evidence budget spent
    before a relevant domain is queried: ESC-004, ESC-005) in ways no automated validator flags, so a
    pharmacist sees the questions before they are put to the evidence base.
    """

    avro_name = "clingate.clinical.QueryProposal"

    patient_id: str
    run_id: str
    event_time: EventTime
    queries: list[str]


class QueryVerdict(StrEnum):
    """What the pharmacist did with a run's proposed queries."""

    APPROVED = "APPROVED"
    EDITED = "EDITED"


class QueryDecision(AvroModel):
    """The pharmacist's Query Gate decision: the queries retrieval runs for the run.

    What holds for every decision (a record that breaks it does not decode): at least one query and none
    blank, and ``APPROVED`` exactly when the queries are the proposed ones, so the retrieval step need not
    compare them to know whether the pharmacist changed anything.
    """

    avro_name = "clingate.clinical.QueryDecision"

    patient_id: str
    run_id: str
    event_time: EventTime
    proposed_at: EventTime
    pharmacist: str
    decision_id: str
    decision: QueryVerdict
    proposed: list[str]
    queries: list[str]
    note: str = ""

    @model_validator(mode="after")
    def _queries_as_decided(self) -> Self:
        if not self.queries or any(not query.strip() for query in self.queries):
            raise ValueError("a decision gives at least one query and no blank one")
        if (self.decision is QueryVerdict.APPROVED) != (self.queries == self.proposed):
            raise ValueError("APPROVED exactly when the queries are the proposed ones, else EDITED")
        return self


class EvidenceVerdict(StrEnum):
    """What the pharmacist did with a run's retrieved evidence."""

    ACCEPTED = "ACCEPTED"
    REJECTED = "REJECTED"


class ReviewedPacket(_Part):
    """The pharmacist's judgement of one packet of the reviewed bundle."""

    source: str
    accepted: bool


class EvidenceReview(AvroModel):
    """The pharmacist's Evidence Review of a run's evidence bundle, before the reasoning step drafts.

    What holds for every review (a record that breaks it does not decode): an ``ACCEPTED`` review accepts
    at least one packet (reasoning starts on those), and a ``REJECTED`` one says in its note what the
    evidence lacks (retrieval runs again for it).
    """

    avro_name = "clingate.clinical.EvidenceReview"

    patient_id: str
    run_id: str
    event_time: EventTime
    bundle_time: EventTime
    pharmacist: str
    review_id: str
    decision: EvidenceVerdict
    packets: list[ReviewedPacket]
    note: str = ""

    @model_validator(mode="after")
    def _decided_with_its_reason(self) -> Self:
        if self.decision is EvidenceVerdict.ACCEPTED and not any(p.accepted for p in self.packets):
            raise ValueError("an ACCEPTED review accepts at least one packet")
        if self.decision is EvidenceVerdict.REJECTED and not self.note.strip():
            raise ValueError("a REJECTED review says in its note what the evidence lacks")
        return self


class LintTransform(_Part):
    rule: str
    before: str
    after: str


class ImperativeWarning(_Part):
    verb: str
    position: Literal["sentence_start", "post_colon", "post_bullet"]
    excerpt: str


class DraftLint(_Part):
    transforms: list[LintTransform]
    imperative_warnings: list[ImperativeWarning]


class CitationObservation(_Part):
    kind: Literal["wrong_attribution", "fabricated_quote"]
    cited_source: str
    found_in: str | None = None
    quote: str


class CitationCheck(_Part):
    checked: Count32
    verified: Count32
    ellipsis_trimmed: Count32
    paraphrase_converted: Count32
    observations: list[CitationObservation]


class RunAssertion(_Part):
    variable: str
    value: float
    expected: str
    status: Literal["PASS", "WARN", "FAIL"]


class GatedDraft(AvroModel):
    """A run's draft after the draft gate: the output-gates contract's record, with its run and the run's
    SCDA assertions."""

    avro_name = "clingate.clinical.GatedDraft"

    patient_id: str
    run_id: str
    event_time: EventTime
    revision: Count32
    draft: str
    restored: bool
    lint: DraftLint
    citations: CitationCheck
    assertions: list[RunAssertion]
    must_retrieve: list[str] = Field(default_factory=list)
    """The patient's must-retrieve sources (ESC-002) when the draft was gated."""
    must_retrieve_missing: list[str] = Field(default_factory=list)
    """Those the run's evidence lacked then (a draft written without them cannot turn the light GREEN)."""


class RoutedViolation(_Part):
    text: str
    bucket: Literal["REVISION_REQUIRED", "LOG_ONLY", "HQ_DECISION", "PASS_FINDING", "PARSER_WARNING"]
    rule: str | None = None
    classified_by: Literal["rule_number", "keyword", "pass_filter", "parser_warning"]


class RevisionRoute(AvroModel):
    """The audit router's decision on a run's audited draft: the output-gates contract's record, with its
    run."""

    avro_name = "clingate.clinical.RevisionRoute"

    patient_id: str
    run_id: str
    event_time: EventTime
    revision: Count32
    route: Literal["CLL_REVISION", "PROCEED"]
    blocking_count: Count32
    log_only_count: Count32
    hq_decision_count: Count32
    violations: list[RoutedViolation]
    overrides: list[str]


class RevisionTelemetry(_Part):
    """What the output gates did to one revision of a run, with its route once audited."""

    revision: Count32
    draft_length: Count32
    restored: bool
    transforms: Count32
    imperative_warnings: Count32
    checked: Count32
    verified: Count32
    ellipsis_trimmed: Count32
    paraphrase_converted: Count32
    wrong_attribution: Count32
    fabricated_quote: Count32
    route: Literal["CLL_REVISION", "PROCEED"] | None = None
    overrides: list[str]
    blocking_count: Count32
    log_only_count: Count32
    hq_decision_count: Count32
    cds_compliant: bool | None = None
    audit_length: Count32 | None = None


class RunAudit(_Part):
    """The patient's current run through the output gates, as a safety audit records it."""

    run_id: str
    revision_count: Count32
    audit_verdict: str | None = None
    assertions: list[RunAssertion]
    revisions: list[RevisionTelemetry]
    must_retrieve: list[str] = Field(default_factory=list)
    """The patient's must-retrieve sources (ESC-002) at the run's last evidence check."""
    must_retrieve_missing: list[str] = Field(default_factory=list)
    """Those the run's evidence lacked at that check."""


class TrackedItem(_Part):
    """One of the escape register's tracked items as an audit measures it."""

    item: str
    status: Literal["PASS", "WARN", "ESCALATE", "NOT_MEASURED", "CLOSED"]
    value: float | None = None
    detail: str


class SafetyAudit(AvroModel):
    """Immutable SCDA audit record, one per deliverable; ``audit_id`` is a digest of its inputs."""

    avro_name = "clingate.clinical.SafetyAudit"

    audit_id: str
    patient_id: str
    deliverable_id: str
    as_of: str
    passed: bool
    hard_fail_count: Count32
    patterns: list[PatternResult]
    patterns_fired: list[str]
    patterns_skipped: list[str]
    nti_severity: Severity
    traffic_light: Light
    assessment_digest: str
    run: RunAudit | None = None
    tracked: list[TrackedItem] = Field(default_factory=list)
