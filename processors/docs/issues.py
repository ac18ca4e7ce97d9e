"""Building, numbering and scoring issues: the one place issue ids and severity weights are defined.

Checks return issues with an empty id; :func:`number` gives the ids once an attempt's issues are all
known, as ``<agent>-<4 digits>`` counted per agent in the order the checks ran (rule phase, then that
agent's LLM phase). Same classification, same judgements, same ids: the ids are stable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from schemas.docs import (
    DOCUMENT_TYPE_NAMES,
    Agent,
    DocumentType,
    FixKind,
    Issue,
    IssueSource,
    Severity,
)

SEVERITY_PENALTY: dict[Severity, float] = {Severity.BLOCKER: 0.30, Severity.MAJOR: 0.15, Severity.MINOR: 0.05}
"""V4's quality-score weights (slide 6): 1.0 minus these per issue, floored at 0."""


def make_issue(
    agent: Agent,
    severity: Severity,
    message: str,
    location: str,
    *,
    fix: FixKind | None = None,
    ig_code: str | None = None,
    suggested_fix: str | None = None,
    source: IssueSource = IssueSource.RULE,
    segment_index: int | None = None,
    document_type: DocumentType | None = None,
    page: int | None = None,
    evidence_text: str | None = None,
) -> Issue:
    """An issue awaiting its id (see :func:`number`); auto-fixable exactly when ``fix`` is given."""
    return Issue(
        id="",
        agent=agent,
        severity=severity,
        auto_fixable=fix is not None,
        message=message,
        location=location,
        source=source,
        ig_code=ig_code,
        fix=fix,
        suggested_fix=suggested_fix,
        segment_index=segment_index,
        document_type=document_type,
        page=page,
        evidence_text=evidence_text,
    )


def number(issues: Iterable[Issue]) -> list[Issue]:
    """Give each issue its id, ``V1-0001``..., counting per agent in the given order."""
    seen: Counter[Agent] = Counter()
    numbered = []
    for issue in issues:
        seen[issue.agent] += 1
        numbered.append(issue.model_copy(update={"id": f"{issue.agent.value}-{seen[issue.agent]:04d}"}))
    return numbered


def quality_score(issues: Sequence[Issue]) -> float:
    """``1.0 - 0.30/BLOCKER - 0.15/MAJOR - 0.05/MINOR``, floored at 0.0 (rounded to cents of a point)."""
    return max(0.0, round(1.0 - sum(SEVERITY_PENALTY[issue.severity] for issue in issues), 2))


def type_name(document_type: DocumentType) -> str:
    """The seed's display name of a type ("Genomic Report")."""
    return DOCUMENT_TYPE_NAMES[document_type]


def segment_location(segment_index: int, document_type: DocumentType | None = None) -> str:
    """Human location of a segment, 1-based as the seed counts ("segment 2"), optionally of one type in it."""
    where = f"segment {segment_index + 1}"
    return f"{where} → {type_name(document_type)}" if document_type else where


def mixture_location(document_type: DocumentType | None = None) -> str:
    """Human location in the document mixture ("document_mixture → Genomic Report")."""
    return f"document_mixture → {type_name(document_type)}" if document_type else "document_mixture"
