"""LLM phases as data: the requests the pure arbiter emits and the typed results it takes back.

The arbiter never calls a model. For each attempt it emits the :class:`LlmRequest`s the seed's budget
allows (V2 semantic check, V3 contextual check, V4 quality judgement) and resumes when the
:class:`LlmResult`s arrive, so a runner can overlap calls across documents and the decision stays a
pure function of (request, judgements). Each request carries its prompt and the JSON schema of the
answer (:class:`LlmJudgement`) for schema-constrained decoding.

Choices:

* LLM findings are never auto-fixable: the AutoFixEngine's repairs are the seed's mathematical ones,
  which the rule phases already detect; a model's claim that something is "fixable" could not be
  honoured, and would only burn a retry until cycle detection caught it.
* A phase that fails (timeout, unparsable answer) becomes a MAJOR, non-fixable issue of its agent,
  so the document escalates (V5 rule 4) rather than passing a check that never ran.
* A phase reports at most 3 findings of bounded length (see :class:`LlmFinding`): the seed's
  operational calls are greedy and small, and three findings per phase already escalate any document.
* V3's contextual check reads the first 4,000 characters of the document text, the pages joined in
  order with a blank line between them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from processors.docs.issues import make_issue
from schemas.docs import Agent, ClassificationOutput, DocumentBundle, Issue, IssueSource, Severity

V3_CONTEXT_CHARS = 4000


class LlmPhase(StrEnum):
    """The three LLM phases of verification, in the order they are requested."""

    V2_SEMANTIC = "V2_SEMANTIC"
    V3_CONTEXT = "V3_CONTEXT"
    V4_QUALITY = "V4_QUALITY"


PHASE_AGENT: dict[LlmPhase, Agent] = {
    LlmPhase.V2_SEMANTIC: Agent.V2,
    LlmPhase.V3_CONTEXT: Agent.V3,
    LlmPhase.V4_QUALITY: Agent.V4,
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LlmFinding(_Frozen):
    """One issue as a model reports it.

    Field order is generation order and critical-first (the LLM client's schema linter): the severity
    decision before any prose, required fields before optional ones. Every string and the findings list
    are bounded so that a greedy answer fits the operational call budget (256 tokens): an answer that
    overruns it is a failed call, which escalates, never a partial judgement.
    """

    severity: Severity
    message: str = Field(max_length=200, description="What is wrong, in one sentence")
    location: str = Field(default="", max_length=80, description="Segment, type or page concerned")
    page: int | None = Field(default=None, ge=1, le=10_000)
    evidence_text: str | None = Field(default=None, max_length=120, description="Text to locate on the page")
    suggested_fix: str | None = Field(default=None, max_length=160)


class LlmJudgement(_Frozen):
    """The answer every phase must produce (its JSON schema constrains decoding)."""

    findings: list[LlmFinding] = Field(default_factory=list, max_length=3)


JUDGEMENT_SCHEMA: dict[str, Any] = LlmJudgement.model_json_schema()
"""JSON schema of :class:`LlmJudgement`, computed once (pydantic's generation costs milliseconds)."""


class LlmRequest(_Frozen):
    """One LLM call the arbiter needs; ``request_id`` ``<doc_id>/<attempt>/<phase>`` is unique."""

    request_id: str
    doc_id: str
    attempt: int
    phase: LlmPhase
    system: str
    user: str
    response_schema: dict[str, Any]


class LlmResult(_Frozen):
    """The answer to one :class:`LlmRequest`: a judgement, or the error that prevented one."""

    request_id: str
    judgement: LlmJudgement | None = None
    error: str | None = None


_SYSTEM = {
    LlmPhase.V2_SEMANTIC: (
        "You verify a clinical document classification for internal consistency. For each segment, "
        "decide whether the page text actually matches the labels (dominant type, presence levels, "
        "shares). Report only real inconsistencies as findings with severity BLOCKER, MAJOR or MINOR."
    ),
    LlmPhase.V3_CONTEXT: (
        "You look for classification traps in clinical documents: text that looks like one document "
        "type but is another (routine lab panels mistaken for genomic reports, administrative forms "
        "mistaken for clinical reports, headers mistaken for content). Report each trap as a finding."
    ),
    LlmPhase.V4_QUALITY: (
        "You judge the quality of evidence snippets cited for a clinical document classification. "
        "Whether each snippet exists on its page has already been checked (results given). Judge "
        "whether snippets are specific, relevant and appropriately sized, and whether the stated "
        "confidences are supported. Report each weakness as a finding."
    ),
}


def _classification_json(classification: ClassificationOutput) -> str:
    return json.dumps(classification.model_dump(mode="json"), indent=1, ensure_ascii=False)


def document_text(bundle: DocumentBundle) -> str:
    """The whole document's text: pages in order, separated by a blank line."""
    return "\n\n".join(page.text for page in bundle.pages)


def _segment_pages(classification: ClassificationOutput, bundle: DocumentBundle) -> str:
    parts = []
    for index, segment in enumerate(classification.segments):
        pages = [p for p in bundle.pages if segment.start_page <= p.page_num <= segment.end_page]
        body = "\n".join(f"[page {p.page_num}]\n{p.text}" for p in pages)
        parts.append(f"## Segment {index + 1} (pages {segment.start_page}-{segment.end_page})\n{body}")
    return "\n\n".join(parts)


def build_requests(
    phases: Sequence[LlmPhase],
    doc_id: str,
    attempt: int,
    classification: ClassificationOutput,
    bundle: DocumentBundle,
    v4_rule_issues: Sequence[Issue],
) -> tuple[LlmRequest, ...]:
    """The requests of ``phases`` for one attempt (V4's prompt includes the deterministic V4 results)."""
    claimed = f"# Classification\n{_classification_json(classification)}\n\n"
    users = {
        LlmPhase.V2_SEMANTIC: lambda: f"{claimed}# Page text\n{_segment_pages(classification, bundle)}",
        LlmPhase.V3_CONTEXT: lambda: (
            f"{claimed}# First {V3_CONTEXT_CHARS} characters of the document\n"
            f"{document_text(bundle)[:V3_CONTEXT_CHARS]}"
        ),
        LlmPhase.V4_QUALITY: lambda: (
            f"{claimed}# Deterministic snippet and anchor verification\n"
            + ("\n".join(f"- [{i.severity.value}] {i.message}" for i in v4_rule_issues) or "- all verified")
            + "\n\n# Page text\n"
            + "\n\n".join(f"[page {p.page_num}]\n{p.text}" for p in bundle.pages)
        ),
    }
    return tuple(
        LlmRequest(
            request_id=f"{doc_id}/{attempt}/{phase.value}",
            doc_id=doc_id,
            attempt=attempt,
            phase=phase,
            system=_SYSTEM[phase],
            user=users[phase](),
            response_schema=JUDGEMENT_SCHEMA,
        )
        for phase in phases
    )


def result_issues(phase: LlmPhase, result: LlmResult) -> list[Issue]:
    """The issues of one phase's result (awaiting ids); a failed phase is one MAJOR issue."""
    agent = PHASE_AGENT[phase]
    if result.judgement is None:
        return [
            make_issue(
                agent,
                Severity.MAJOR,
                f"LLM phase {phase.value} returned no judgement ({result.error or 'no answer'}); "
                "the check was not performed",
                phase.value,
                source=IssueSource.LLM,
            )
        ]
    return [
        make_issue(
            agent,
            finding.severity,
            finding.message,
            finding.location or phase.value,
            suggested_fix=finding.suggested_fix,
            source=IssueSource.LLM,
            page=finding.page,
            evidence_text=finding.evidence_text,
        )
        for finding in result.judgement.findings
    ]
