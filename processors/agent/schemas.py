"""Response models of the agent's constrained calls (DocGemma spec §6), critical-first and bounded.

Every model here is what a constrained decoder generates, so the field order is the generation order
(§6: decision-critical fields first, optional and nullable fields last; reversing the order dropped
argument accuracy from 88% to 21%). The project's schema linter (``streams.llm.lint``) holds for all of
them, which this package cannot import (processors are pure); the tests lint every model of
:data:`RESPONSE_MODELS` and the runtime registers them with the LLM client. What the linter demands:

* every string has ``max_length`` (short labels at most 120 characters) and every list ``max_length``,
  so a greedy answer ends inside its §7 token budget;
* no free text (a string longer than 120 characters) before a decision (an enum);
* no ``pattern`` next to length bounds: closed choices are ``Literal`` enums instead.

Every model lists §6's fields in §6's order, required before optional; ``IntentClassification`` is
``intent``, ``task_summary``, then the optional ``suggested_tool``. Departures from the §6 listings, each
forced by those rules (docs/agent.md gives each beside the spec's words):

* ``IntentClassification.suggested_tool`` is §6's ``Optional[str]``, a short bounded string, not an enum
  of tool names: an enum after the ~50-word ``task_summary`` (400 characters) would break the
  decision-after-free-text rule. The graph takes it as a hint only when it names a tool.
* ``ClinicalTrialsArgs.status`` and ``AddAllergyArgs.severity`` are enums of the values §16 names
  (active, recruiting, completed) and of the usual allergy severities, not free strings.
* ``RetryStrategy`` is the §6 version (``strategy``, ``reasoning``), not the §4.5a sketch with an
  ``adjusted_args: dict``: new arguments come from a fresh stage-2 extraction (see the package docstring).
* ``ImageFindings`` gives the §4.1 vision output (modality, findings, confidence) a schema: §7 calls it
  "free-form structured", and only synthesis is free text in this package.

Required strings carry ``min_length=1`` so the decoder cannot emit an empty argument.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field

ToolName = Literal[
    "check_drug_safety",
    "check_drug_interactions",
    "search_medical_literature",
    "find_clinical_trials",
    "search_patient",
    "get_patient_chart",
    "prescribe_medication",
    "add_allergy",
    "save_clinical_note",
    "analyze_medical_image",
]
"""The ten tools of §6 ``ToolSelection`` and §16, in §6 order."""

TOOL_NAMES: Final[tuple[ToolName, ...]] = get_args(ToolName)


def tool_named(text: str | None) -> ToolName | None:
    """The tool ``text`` names exactly (surrounding whitespace aside), or None: how the free-string
    ``suggested_tool`` hint becomes a tool."""
    name = (text or "").strip()
    return cast(ToolName, name) if name in TOOL_NAMES else None


Intent = Literal["DIRECT", "TOOL_NEEDED"]
Quality = Literal["success_rich", "success_partial", "no_results", "error_retryable", "error_fatal"]
Strategy = Literal["retry_same", "retry_different_args"]

PATIENT_ID_MAX_CHARS: Final = 64
"""Longest patient identifier an argument may carry (a UUID is 36 characters)."""
LABEL_MAX_CHARS: Final = 120
"""Short text: an entity or a label (the linter's line between a label and prose)."""

BRIEF_SUMMARY_MAX_CHARS: Final = 110
"""Longest RESULT_CLASSIFY summary (see :class:`ResultAssessment`)."""
SUGGESTED_TOOL_MAX_CHARS: Final = 40
"""Longest ``suggested_tool`` hint: room for any tool name (the longest is 25 characters)."""

_Text = Annotated[str, Field(min_length=1, max_length=LABEL_MAX_CHARS)]
_PatientId = Annotated[str, Field(min_length=1, max_length=PATIENT_ID_MAX_CHARS)]


class _Response(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IntentClassification(_Response):
    """Node ② INTENT_CLASSIFY (T=0.0, 256 tokens): DIRECT or TOOL_NEEDED, the summary, the optional hint."""

    intent: Intent
    task_summary: str = Field(
        min_length=1,
        max_length=400,
        description="Brief clinical summary of the user's request (~50 words max)",
    )
    suggested_tool: str | None = Field(
        default=None,
        max_length=SUGGESTED_TOOL_MAX_CHARS,
        description="If TOOL_NEEDED, which tool is most likely relevant",
    )


class ToolSelection(_Response):
    """Node ③ stage 1 (T=0.0, 64 tokens): the tool alone, no nullable distractors."""

    tool_name: ToolName


class DrugSafetyArgs(_Response):
    """Stage-2 arguments of ``check_drug_safety``."""

    drug_name: _Text


class DrugInteractionArgs(_Response):
    """Stage-2 arguments of ``check_drug_interactions``: two or more drugs."""

    drug_names: list[_Text] = Field(min_length=2, max_length=10, description="Two or more drug names")


class LiteratureSearchArgs(_Response):
    """Stage-2 arguments of ``search_medical_literature``."""

    query: _Text = Field(description="Search query for medical literature")


class ClinicalTrialsArgs(_Response):
    """Stage-2 arguments of ``find_clinical_trials``; the optional status last."""

    condition: _Text
    status: Literal["active", "recruiting", "completed"] | None = None


class PatientSearchArgs(_Response):
    """Stage-2 arguments of ``search_patient``."""

    name: _Text


class PatientChartArgs(_Response):
    """Stage-2 arguments of ``get_patient_chart``."""

    patient_id: _PatientId


class PrescribeMedicationArgs(_Response):
    """Stage-2 arguments of ``prescribe_medication``: patient first, optional notes last."""

    patient_id: _PatientId
    medication_name: _Text
    dosage: Annotated[str, Field(min_length=1, max_length=60)]
    frequency: Annotated[str, Field(min_length=1, max_length=60)]
    notes: str | None = Field(default=None, max_length=LABEL_MAX_CHARS)


class AddAllergyArgs(_Response):
    """Stage-2 arguments of ``add_allergy``: patient first, optional severity last."""

    patient_id: _PatientId
    substance: _Text
    reaction: _Text
    severity: Literal["mild", "moderate", "severe"] | None = None


class ClinicalNoteArgs(_Response):
    """Stage-2 arguments of ``save_clinical_note``: the note text (prose, within the 128-token budget)
    last."""

    patient_id: _PatientId
    note_type: Annotated[str, Field(min_length=1, max_length=60)]
    note_text: str = Field(min_length=1, max_length=400)


class ImageAnalysisArgs(_Response):
    """Stage-2 arguments of ``analyze_medical_image``."""

    query: _Text = Field(description="What to look for in the image")


class ResultAssessment(_Response):
    """Node ⑤ RESULT_CLASSIFY (T=0.0, 128 tokens): the quality first, then the summary.

    The summary's bound keeps the whole answer inside the 128 tokens even at one token per character
    (a summary that copies an identifier or a number from the result): the JSON around it takes about
    15 tokens. The summary is kept in the state and the trace; no prompt reads it."""

    quality: Quality
    brief_summary: str = Field(
        max_length=BRIEF_SUMMARY_MAX_CHARS, description="1-2 sentence summary of what the tool returned"
    )


class RetryStrategy(_Response):
    """Node ⑤a ERROR_HANDLER, LLM-assisted part (T=0.0, 64 tokens): the strategy first."""

    strategy: Strategy
    reasoning: str | None = Field(
        default=None, max_length=100, description="Brief explanation of retry rationale"
    )


class ImageFindings(_Response):
    """Node ① vision analysis (T=0.3, 512 tokens): §4.1's structured image findings."""

    modality: str = Field(max_length=40, description="CT, X-ray, histopathology, MRI, etc.")
    findings: list[_Text] = Field(max_length=8, description="Structured finding descriptions")
    confidence: float = Field(ge=0.0, le=1.0, description="Overall confidence 0-1")


TOOL_ARG_SCHEMAS: Final[dict[ToolName, type[_Response]]] = {
    "check_drug_safety": DrugSafetyArgs,
    "check_drug_interactions": DrugInteractionArgs,
    "search_medical_literature": LiteratureSearchArgs,
    "find_clinical_trials": ClinicalTrialsArgs,
    "search_patient": PatientSearchArgs,
    "get_patient_chart": PatientChartArgs,
    "prescribe_medication": PrescribeMedicationArgs,
    "add_allergy": AddAllergyArgs,
    "save_clinical_note": ClinicalNoteArgs,
    "analyze_medical_image": ImageAnalysisArgs,
}
"""§6 mapping tool_name → stage-2 argument schema."""

RESPONSE_MODELS: Final[dict[str, type[BaseModel]]] = {
    model.__name__: model
    for model in (
        IntentClassification,
        ToolSelection,
        *TOOL_ARG_SCHEMAS.values(),
        ResultAssessment,
        RetryStrategy,
        ImageFindings,
    )
}
"""Every response model by class name: a pending call stores the name, this resolves it."""
