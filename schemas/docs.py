"""Events of the classification arbiter: requests in; dispositions, packets, ground truth out.

The shapes follow the agentic evaluation system's ``ClassificationOutput`` and ``DocumentBundle``
(source: the agentic-evaluation-system slides, slides 2, 3, 9 and 10). Choices where the source is silent:

* Enum values are the Avro enum symbols (``GENOMIC_REPORT``); the human names the seed prints
  ("Genomic Report") come from :data:`DOCUMENT_TYPE_NAMES`, so every message reads like the seed.
* Event time is ``ts``, an ISO 8601 UTC string (:data:`schemas.base.EventTime`), the project convention.
* ``self_evaluation`` has no published structure; it is a confidence, a summary and a list of concerns.
* The document mixture carries presence level and confidence besides the overall share, because the
  seed's trap examples read "document_mixture: Genomic Report → PRIMARY (confidence 0.78)".
* A segment holds its type classifications as a list (one entry per type) so V1 can see a missing or
  duplicated type; a mapping would make both unrepresentable and hide the classifier's error.
* ``DocumentBundle`` validates its own page numbering (pages 1..total_pages, each once): a bundle that
  breaks it is schema-invalid input for the dead-letter queue, not one of the seed's issue kinds.
  ``total_pages`` is at most :data:`MAX_BUNDLE_PAGES` (10,000; the source gives no limit, and clinical
  documents have tens of pages) and the check never builds a list of ``total_pages`` numbers, so a
  hostile count costs nothing.
* An :class:`Issue` carries, besides the seed's fields, the structured place it concerns (segment,
  document type, page, text to locate) so the review packet can show the page context without parsing
  the human ``location`` string, and the :class:`FixKind` that repairs it (``auto_fixable`` is exactly
  "has a fix").
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.base import AvroModel, EventTime, avro_enum


class _Part(BaseModel):
    """A frozen nested record (not an event on its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class DocumentType(StrEnum):
    """The five document types every segment is classified against (slide 1)."""

    CLINICAL_NOTE = "CLINICAL_NOTE"
    PATHOLOGY_REPORT = "PATHOLOGY_REPORT"
    GENOMIC_REPORT = "GENOMIC_REPORT"
    RADIOLOGY_REPORT = "RADIOLOGY_REPORT"
    OTHER = "OTHER"


DOCUMENT_TYPE_NAMES: dict[DocumentType, str] = {
    DocumentType.CLINICAL_NOTE: "Clinical Note",
    DocumentType.PATHOLOGY_REPORT: "Pathology Report",
    DocumentType.GENOMIC_REPORT: "Genomic Report",
    DocumentType.RADIOLOGY_REPORT: "Radiology Report",
    DocumentType.OTHER: "Other",
}
"""The seed's display name of each type; also the canonical type order (the order of the enum)."""


class PresenceLevel(StrEnum):
    """How strongly a type is present in a segment (slide 2)."""

    PRIMARY = "PRIMARY"
    EMBEDDED_RAW = "EMBEDDED_RAW"
    MENTION_ONLY = "MENTION_ONLY"
    NO_EVIDENCE = "NO_EVIDENCE"


class Evidence(_Part):
    """One ``top_evidence`` entry: a snippet claimed to be on ``page`` and the anchors found with it."""

    snippet: str
    page: int
    anchors_found: list[str] = Field(default_factory=list)


class TypeClassification(_Part):
    """One document type's classification inside one segment."""

    document_type: DocumentType
    presence_level: PresenceLevel
    confidence: float
    segment_share: float
    top_evidence: list[Evidence] = Field(default_factory=list)


class Segment(_Part):
    """A page range of the document with all five type classifications."""

    segment_id: int
    start_page: int
    end_page: int
    segment_page_count: int
    dominant_type: DocumentType
    classifications: list[TypeClassification]
    reasoning: str = ""


class MixtureEntry(_Part):
    """One type's overall share of the whole document."""

    document_type: DocumentType
    presence_level: PresenceLevel
    confidence: float
    overall_share: float


class SelfEvaluation(_Part):
    """The classifier's own assessment of its output."""

    confidence: float
    summary: str = ""
    concerns: list[str] = Field(default_factory=list)


class ClassificationOutput(_Part):
    """The primary classifier's structured output (slide 2)."""

    dominant_type_overall: DocumentType
    segments: list[Segment]
    document_mixture: list[MixtureEntry]
    vendor_signals: list[str] = Field(default_factory=list)
    number_of_segments: int
    self_evaluation: SelfEvaluation


class LayoutMetadata(_Part):
    """Layout Parser metadata of one page."""

    block_types: list[str] = Field(default_factory=list)
    has_tables: bool = False


class Page(_Part):
    """One page of extracted text, also split into paragraphs (the SME context window's unit)."""

    page_num: int
    text: str
    paragraphs: list[str]
    layout_metadata: LayoutMetadata = Field(default_factory=LayoutMetadata)


MAX_BUNDLE_PAGES = 10_000
"""The largest ``total_pages`` a bundle may claim (see the module docstring)."""


class DocumentBundle(_Part):
    """The Document AI extraction: the single source of truth for what the PDF says (slide 3)."""

    doc_id: str
    file_path: str
    total_pages: int = Field(ge=1, le=MAX_BUNDLE_PAGES)
    processing_timestamp: str
    pages: list[Page]

    @model_validator(mode="after")
    def _pages_are_numbered_one_to_total(self) -> Self:
        numbers = [page.page_num for page in self.pages]
        # Compare lengths first: the range is then no longer than the pages actually sent.
        if len(numbers) != self.total_pages or sorted(numbers) != list(range(1, len(numbers) + 1)):
            raise ValueError(
                f"bundle {self.doc_id}: pages must be numbered 1..{self.total_pages} once each, got {numbers}"
            )
        return self

    def page(self, page_num: int) -> Page | None:
        """The page numbered ``page_num``, or None when the bundle has no such page."""
        return next((page for page in self.pages if page.page_num == page_num), None)


class ClassificationRequest(AvroModel):
    """A classification to verify, with the bundle it was made from (``clingate.docs.classifications``)."""

    avro_name = "clingate.docs.ClassificationRequest"

    doc_id: str
    ts: EventTime
    classification: ClassificationOutput
    bundle: DocumentBundle
    production_label: DocumentType | None = None


class Agent(StrEnum):
    """The verification agent that raised an issue."""

    V1 = "V1"
    V2 = "V2"
    V3 = "V3"
    V4 = "V4"


class Severity(StrEnum):
    """Issue severity; the member order is the review packet's sort order."""

    BLOCKER = "BLOCKER"
    MAJOR = "MAJOR"
    MINOR = "MINOR"


class IssueSource(StrEnum):
    """Whether a deterministic rule or an LLM judgement raised the issue."""

    RULE = "RULE"
    LLM = "LLM"


class FixKind(StrEnum):
    """The AutoFixEngine's repairs; an issue is auto-fixable exactly when it names one."""

    NORMALISE_SEGMENT_SHARES = "NORMALISE_SEGMENT_SHARES"
    NORMALISE_MIXTURE_SHARES = "NORMALISE_MIXTURE_SHARES"
    SET_SEGMENT_COUNT = "SET_SEGMENT_COUNT"
    SET_PAGE_COUNT = "SET_PAGE_COUNT"
    ADD_MISSING_TYPES = "ADD_MISSING_TYPES"


class Issue(_Part):
    """One finding of V1–V4.

    ``segment_index`` is 0-based into ``segments``; ``evidence_text`` is the text whose page context the
    SME is shown (a snippet, a keyword, a vendor name); ``page`` is where to look for it first.
    """

    id: str
    agent: Agent
    severity: Severity
    auto_fixable: bool
    message: str
    location: str
    source: IssueSource = IssueSource.RULE
    ig_code: str | None = None
    fix: FixKind | None = None
    suggested_fix: str | None = None
    segment_index: int | None = None
    document_type: DocumentType | None = None
    page: int | None = None
    evidence_text: str | None = None

    @model_validator(mode="after")
    def _fixable_iff_fix(self) -> Self:
        if self.auto_fixable != (self.fix is not None):
            raise ValueError(f"issue {self.id}: auto_fixable must be true exactly when a fix is named")
        return self


@avro_enum("Decision")
class ArbiterDecision(StrEnum):
    """V5's dispositions (slide 7; the Avro enum ``clingate.docs.Decision``)."""

    AUTO_ACCEPT = "AUTO_ACCEPT"
    AUTO_RETRY = "AUTO_RETRY"
    ESCALATE_TO_SME = "ESCALATE_TO_SME"


class EscalationReason(StrEnum):
    """Why a disposition ended where it did: V5's rule, or the retry orchestrator's two safeguards."""

    V5_RULE = "V5_RULE"
    MAX_RETRIES_EXHAUSTED = "MAX_RETRIES_EXHAUSTED"
    FIX_CYCLE = "FIX_CYCLE"


class LlmMode(StrEnum):
    """Whether LLM phases ran (``LLM``) or the system ran rules-only because no LLM is configured."""

    LLM = "LLM"
    RULES_ONLY = "RULES_ONLY"


class AttemptRecord(_Part):
    """One verification attempt: its input fingerprint, V5's verdict, and what it cost."""

    attempt: int
    fingerprint: str
    decision: ArbiterDecision
    rule_fired: int
    issues: list[Issue]
    quality_score: float
    llm_calls: int
    llm_phases_run: list[str]
    llm_phases_skipped: list[str]
    fixes_applied: list[FixKind] = Field(default_factory=list)


class Disposition(AvroModel):
    """The arbiter's final word on one document (``clingate.docs.dispositions``)."""

    avro_name = "clingate.docs.Disposition"

    doc_id: str
    ts: EventTime
    decision: ArbiterDecision
    rule_fired: int
    rule: str
    reason: EscalationReason
    attempts: list[AttemptRecord]
    issues: list[Issue]
    quality_score: float
    final_classification: ClassificationOutput
    llm_mode: LlmMode
    llm_note: str
    llm_calls: int


class ContextParagraph(_Part):
    """One paragraph of the actual page text around an issue's evidence."""

    index: int
    text: str
    is_match: bool


class IssueContext(_Part):
    """What the SME sees for one issue: segment facts, the claimed evidence and the real page text."""

    issue_id: str
    segment_start_page: int | None = None
    segment_end_page: int | None = None
    segment_dominant_type: DocumentType | None = None
    reasoning: str | None = None
    evidence: list[Evidence] = Field(default_factory=list)
    page: int | None = None
    located_text: str | None = None
    paragraphs: list[ContextParagraph] = Field(default_factory=list)


class ReviewStatus(StrEnum):
    """Review state of a packet; a packet is emitted ``pending``."""

    PENDING = "pending"
    REVIEWED = "reviewed"


class ReviewPacket(AvroModel):
    """Everything an SME needs to decide an escalated document (``clingate.docs.review-packets``)."""

    avro_name = "clingate.docs.ReviewPacket"

    doc_id: str
    ts: EventTime
    pdf_filename: str
    file_path: str
    total_pages: int
    v5_decision: ArbiterDecision
    rule_fired: int
    reason: EscalationReason
    classification: ClassificationOutput
    auto_fix_preview: ClassificationOutput | None = None
    total_issues: int
    issues: list[Issue]
    contexts: list[IssueContext]
    production_label: DocumentType | None = None
    production_differs: bool | None = None
    review_status: ReviewStatus = ReviewStatus.PENDING


class ReviewDecision(StrEnum):
    """The SME's two outcomes (slide 10)."""

    AGREES = "AGREES"
    CORRECTS = "CORRECTS"


class Review(AvroModel):
    """An SME's decision on one packet."""

    avro_name = "clingate.docs.Review"

    doc_id: str
    ts: EventTime
    reviewer: str
    decision: ReviewDecision
    corrected_dominant_type: DocumentType | None = None
    corrected_segments: list[Segment] | None = None
    corrected_mixture: list[MixtureEntry] | None = None
    notes: str = ""

    @model_validator(mode="after")
    def _correction_names_a_type(self) -> Self:
        if self.decision is ReviewDecision.CORRECTS and self.corrected_dominant_type is None:
            raise ValueError(f"review of {self.doc_id}: a correction must give corrected_dominant_type")
        return self


class GroundTruthSource(StrEnum):
    """Where a ground-truth classification came from (slide 10)."""

    SME_VALIDATED = "SME_VALIDATED"
    SME_CORRECTED = "SME_CORRECTED"


class GroundTruth(AvroModel):
    """A classification an SME has vouched for (``clingate.docs.ground-truth``)."""

    avro_name = "clingate.docs.GroundTruth"

    doc_id: str
    ts: EventTime
    ground_truth_source: GroundTruthSource
    ground_truth_classification: ClassificationOutput
    primary_dominant_type: DocumentType
    reviewer: str
    correction_notes: str = ""
