"""SME review packets and ground truth (slides 9 and 10), pure.

A packet holds the document info, the classification, the issues sorted BLOCKER → MAJOR → MINOR
(then by agent and id, so the order is total), the production comparison, ``pending`` status and,
per issue, the actual page text around the issue's evidence: the matched paragraph, 2 paragraphs
before it and 3 after it (slide 10), on the page where the text really is.

Choices where the seed is silent:

* The text to locate is the issue's own ``evidence_text`` (snippet, keyword, vendor name), else the
  first evidence snippet of the issue's segment and type. Issues about numbers (share sums, counts)
  have no text and get segment facts only.
* Text found nowhere (a fabricated snippet) shows the opening paragraphs of the page it claimed,
  none marked as a match, so the SME sees what that page really says (the seed's V4 example).
* ``auto_fix_preview`` is the classification after every repair the issues name, when any does: an
  auto-fixable BLOCKER (say, a wrong segment count) still escalates under V5 rule 1, and the SME can
  adopt the repaired version with one correction.
"""

from __future__ import annotations

from processors.docs.autofix import apply_fixes
from processors.docs.text import best_paragraph, locate
from schemas.docs import (
    Agent,
    ClassificationOutput,
    ClassificationRequest,
    ContextParagraph,
    Disposition,
    DocumentBundle,
    GroundTruth,
    GroundTruthSource,
    Issue,
    IssueContext,
    Review,
    ReviewDecision,
    ReviewPacket,
    ReviewStatus,
    Severity,
)

PARAGRAPHS_BEFORE = 2
PARAGRAPHS_AFTER = 3
_FALLBACK_PARAGRAPHS = PARAGRAPHS_BEFORE + 1 + PARAGRAPHS_AFTER

_SEVERITY_ORDER = {severity: rank for rank, severity in enumerate(Severity)}
_AGENT_ORDER = {agent: rank for rank, agent in enumerate(Agent)}


def sort_issues(issues: list[Issue]) -> list[Issue]:
    """BLOCKER → MAJOR → MINOR, then V1 → V4, then id."""
    return sorted(issues, key=lambda i: (_SEVERITY_ORDER[i.severity], _AGENT_ORDER[i.agent], i.id))


def format_issue(issue: Issue) -> str:
    """An issue as the seed prints it in a packet (slide 9)."""
    lines = [
        f"[{issue.severity.value}] {issue.id} (Agent: {issue.agent.value})",
        f"  Message:   {issue.message}",
        f"  Location:  {issue.location}",
    ]
    if issue.suggested_fix:
        lines.append(f"  Fix:       {issue.suggested_fix}")
    if issue.fix is not None:
        lines.append(f"  Auto-fix:  {issue.fix.value}")
    return "\n".join(lines)


def issue_context(issue: Issue, classification: ClassificationOutput, bundle: DocumentBundle) -> IssueContext:
    """What the SME sees for ``issue``: segment facts, claimed evidence, and the real page text around it."""
    segment = None
    if issue.segment_index is not None and 0 <= issue.segment_index < len(classification.segments):
        segment = classification.segments[issue.segment_index]
    evidence = []
    if segment is not None and issue.document_type is not None:
        evidence = [
            item
            for classified in segment.classifications
            if classified.document_type is issue.document_type
            for item in classified.top_evidence
        ]
    text = issue.evidence_text or (evidence[0].snippet if evidence else None)
    claimed = issue.page if issue.page is not None else (evidence[0].page if evidence else None)
    context = IssueContext(
        issue_id=issue.id,
        segment_start_page=segment.start_page if segment else None,
        segment_end_page=segment.end_page if segment else None,
        segment_dominant_type=segment.dominant_type if segment else None,
        reasoning=segment.reasoning if segment else None,
        evidence=evidence,
        located_text=text,
    )
    if text is None:
        return context
    match = locate(text, [(p.page_num, p.text) for p in bundle.pages], claimed)
    page = bundle.page(match.page if match.page is not None else claimed if claimed is not None else 0)
    if page is None:
        return context
    index = best_paragraph(text, page.paragraphs) if match.found else None
    if index is None:
        window = range(min(len(page.paragraphs), _FALLBACK_PARAGRAPHS))
    else:
        window = range(
            max(0, index - PARAGRAPHS_BEFORE), min(len(page.paragraphs), index + PARAGRAPHS_AFTER + 1)
        )
    paragraphs = [ContextParagraph(index=i, text=page.paragraphs[i], is_match=i == index) for i in window]
    return context.model_copy(update={"page": page.page_num, "paragraphs": paragraphs})


def build_review_packet(request: ClassificationRequest, disposition: Disposition) -> ReviewPacket:
    """The SME packet of an escalated disposition (status ``pending``)."""
    classification = disposition.final_classification
    issues = sort_issues(disposition.issues)
    repaired, applied = apply_fixes(classification, issues)
    production = request.production_label
    return ReviewPacket(
        doc_id=request.doc_id,
        ts=disposition.ts,
        pdf_filename=request.bundle.file_path.rsplit("/", 1)[-1],
        file_path=request.bundle.file_path,
        total_pages=request.bundle.total_pages,
        v5_decision=disposition.decision,
        rule_fired=disposition.rule_fired,
        reason=disposition.reason,
        classification=classification,
        auto_fix_preview=repaired if applied else None,
        total_issues=len(issues),
        issues=issues,
        contexts=[issue_context(issue, classification, request.bundle) for issue in issues],
        production_label=production,
        production_differs=None
        if production is None
        else production is not classification.dominant_type_overall,
        review_status=ReviewStatus.PENDING,
    )


def ground_truth(packet: ReviewPacket, review: Review) -> tuple[ReviewPacket, GroundTruth]:
    """Apply an SME review: the packet marked reviewed, and the ground-truth record it yields.

    Agreeing keeps the primary classification as-is (``SME_VALIDATED``); correcting replaces the
    dominant type and, when given, the segments and mixture (``SME_CORRECTED``).

    Raises:
        ValueError: when the review is for another document.
    """
    if review.doc_id != packet.doc_id:
        raise ValueError(f"review of {review.doc_id} cannot close the packet of {packet.doc_id}")
    original = packet.classification
    if review.decision is ReviewDecision.AGREES:
        source, classification = GroundTruthSource.SME_VALIDATED, original
    else:
        segments = review.corrected_segments if review.corrected_segments is not None else original.segments
        classification = original.model_copy(
            update={
                "dominant_type_overall": review.corrected_dominant_type,
                "segments": segments,
                "number_of_segments": len(segments),
                "document_mixture": review.corrected_mixture
                if review.corrected_mixture is not None
                else original.document_mixture,
            }
        )
        source = GroundTruthSource.SME_CORRECTED
    truth = GroundTruth(
        doc_id=packet.doc_id,
        ts=review.ts,
        ground_truth_source=source,
        ground_truth_classification=classification,
        primary_dominant_type=original.dominant_type_overall,
        reviewer=review.reviewer,
        correction_notes=review.notes,
    )
    return packet.model_copy(update={"review_status": ReviewStatus.REVIEWED}), truth
