"""V4 — evidence verification against the DocumentBundle, deterministic part (slide 6).

The seed has an LLM do all four V4 tasks; snippet verification, anchor verification and fabrication
detection are decidable by string matching, so they are decided here first, and the LLM is
left the judgement of evidence *quality* (see llm.py). Each snippet and each anchor goes through the
match ladder of :mod:`processors.docs.text` on its claimed page, then on every other page:

========================================  ========  ===============================================
outcome                                   severity  why
========================================  ========  ===============================================
exact or normalised on the claimed page   —         verified
>= 70% word overlap on the claimed page   MINOR     a paraphrase, not a quote (the gate's ESC-029
                                                    converts these; here the SME is told)
found only on another page of the same    MINOR     misattributed, but it still supports the
segment                                             segment it was given for
found only on a page outside the segment  MAJOR     misattributed across segments: the evidence
                                                    supports a different part of the document
not found on any page (< 70% overlap)     BLOCKER   fabricated, "possible hallucination"
========================================  ========  ===============================================

The citation-fidelity gate logs misattributions as non-blocking observations; the MINOR/MAJOR split
above keeps that spirit inside a segment, and escalates (V5 rule 4) only when the evidence would
justify a different segment's label. Anchors follow the same ladder and severities.
"""

from __future__ import annotations

from processors.docs.issues import make_issue, segment_location, type_name
from processors.docs.text import Match, MatchLevel, locate, shorten
from schemas.docs import Agent, ClassificationOutput, DocumentBundle, DocumentType, Issue, Severity


def verify_evidence(classification: ClassificationOutput, bundle: DocumentBundle) -> list[Issue]:
    """Check every snippet and anchor of every segment against the bundle's page text."""
    pages = [(page.page_num, page.text) for page in bundle.pages]
    issues = []
    for index, segment in enumerate(classification.segments):
        for classified in segment.classifications:
            for evidence in classified.top_evidence:
                texts = [("Evidence snippet", evidence.snippet)]
                texts += [("Anchor", anchor) for anchor in evidence.anchors_found]
                for kind, text in texts:
                    match = locate(text, pages, evidence.page)
                    issue = _judge(
                        kind,
                        text,
                        evidence.page,
                        match,
                        index,
                        segment.start_page,
                        segment.end_page,
                        classified.document_type,
                    )
                    if issue is not None:
                        issues.append(issue)
    return issues


def _judge(
    kind: str,
    text: str,
    claimed_page: int,
    match: Match,
    segment_index: int,
    start_page: int,
    end_page: int,
    document_type: DocumentType,
) -> Issue | None:
    quoted = f"{kind} '{shorten(text)}'"
    where = segment_location(segment_index, document_type)
    common = {"segment_index": segment_index, "document_type": document_type, "evidence_text": text}
    if not match.found:
        return make_issue(
            Agent.V4,
            Severity.BLOCKER,
            f"{quoted} not found in actual PDF text on page {claimed_page}. Possible hallucination.",
            where,
            suggested_fix=f"Remove the fabricated {kind.lower()} or cite text that is on the page",
            page=claimed_page,
            **common,
        )
    if match.page == claimed_page:
        if match.level is MatchLevel.OVERLAP:
            return make_issue(
                Agent.V4,
                Severity.MINOR,
                f"{quoted} is not verbatim on page {claimed_page} "
                f"(paraphrase, {match.overlap:.0%} word overlap)",
                where,
                suggested_fix="Quote the page text verbatim",
                page=claimed_page,
                **common,
            )
        return None
    inside = start_page <= (match.page or 0) <= end_page
    return make_issue(
        Agent.V4,
        Severity.MINOR if inside else Severity.MAJOR,
        f"{quoted} is not on claimed page {claimed_page} but found on page {match.page}"
        + ("" if inside else f", outside segment pages {start_page}-{end_page} ({type_name(document_type)})"),
        where,
        suggested_fix=f"Cite page {match.page}",
        page=match.page,
        **common,
    )
