"""Review packets: sort order, the seed's issue format, page context 2 before / 3 after, production."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from docs_examples import example

from processors.docs.arbiter import run
from processors.docs.issues import make_issue
from processors.docs.packet import format_issue, ground_truth, issue_context, sort_issues
from schemas.docs import Agent, DocumentType, FixKind, Review, ReviewDecision, ReviewStatus, Severity

REVIEW_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def test_issues_sort_blocker_major_minor_then_agent_then_id():
    issues = [
        make_issue(Agent.V1, Severity.MINOR, "m", "l").model_copy(update={"id": "V1-0001"}),
        make_issue(Agent.V4, Severity.MAJOR, "m", "l").model_copy(update={"id": "V4-0001"}),
        make_issue(Agent.V3, Severity.BLOCKER, "m", "l").model_copy(update={"id": "V3-0001"}),
        make_issue(Agent.V2, Severity.MAJOR, "m", "l").model_copy(update={"id": "V2-0001"}),
    ]
    assert [i.id for i in sort_issues(issues)] == ["V3-0001", "V2-0001", "V4-0001", "V1-0001"]


def test_context_shows_two_paragraphs_before_and_three_after_the_matched_evidence():
    request = example("clean")
    evidence = request.classification.segments[0].classifications[0].top_evidence[0]  # page 2, paragraph 3
    issue = make_issue(
        Agent.V4,
        Severity.MINOR,
        "m",
        "l",
        segment_index=0,
        document_type=DocumentType.GENOMIC_REPORT,
        page=2,
        evidence_text=evidence.snippet,
    )
    context = issue_context(issue, request.classification, request.bundle)
    assert context.page == 2
    assert [(p.index, p.is_match) for p in context.paragraphs] == [
        (0, False),
        (1, False),
        (2, True),
        (3, False),
        (4, False),
        (5, False),
    ]
    assert (context.segment_start_page, context.segment_end_page) == (1, 5)
    assert context.reasoning == request.classification.segments[0].reasoning


def test_context_window_is_clipped_at_the_page_start():
    request = example("clean")
    issue = make_issue(Agent.V3, Severity.MINOR, "m", "l", page=1, evidence_text="GENOMIC SEQUENCING REPORT")
    context = issue_context(issue, request.classification, request.bundle)
    assert [(p.index, p.is_match) for p in context.paragraphs] == [
        (0, True),
        (1, False),
        (2, False),
        (3, False),
    ]


def test_fabricated_evidence_shows_what_the_claimed_page_really_says(rules_only):
    packet = run(example("fabricated"), rules_only).packet
    assert packet is not None
    blocker = packet.contexts[0]
    assert blocker.page == 3
    assert not any(p.is_match for p in blocker.paragraphs)
    assert blocker.paragraphs[1].text == "Patient history reviewed. No prior genetic testing."


def test_misattributed_evidence_context_is_on_the_page_where_the_text_really_is(rules_only):
    packet = run(example("fabricated"), rules_only).packet
    assert packet is not None
    anchor = next(c for c in packet.contexts if c.located_text == "Variant Classification")
    assert anchor.page == 2 and [p.text for p in anchor.paragraphs if p.is_match] == [
        "Variant Classification"
    ]


def test_packet_is_pending_with_issue_count_and_production_comparison(rules_only):
    packet = run(example("quest", production_label=DocumentType.OTHER), rules_only).packet
    assert packet is not None
    assert (packet.review_status, packet.total_issues, packet.production_differs) == (
        ReviewStatus.PENDING,
        1,
        True,
    )
    assert (packet.pdf_filename, packet.total_pages) == ("quest_cbc_1.pdf", 2)
    assert run(example("quest"), rules_only).packet.production_differs is None  # type: ignore[union-attr]


def test_the_seed_format_adds_the_repair_of_an_auto_fixable_issue():
    issue = make_issue(
        Agent.V1, Severity.BLOCKER, "msg", "number_of_segments", fix=FixKind.SET_SEGMENT_COUNT
    ).model_copy(update={"id": "V1-0001"})
    assert format_issue(issue) == (
        "[BLOCKER] V1-0001 (Agent: V1)\n  Message:   msg\n  Location:  number_of_segments\n"
        "  Auto-fix:  SET_SEGMENT_COUNT"
    )


def test_a_review_for_another_document_is_refused(rules_only):
    packet = run(example("quest"), rules_only).packet
    assert packet is not None
    review = Review(doc_id="other", ts=REVIEW_TIME, reviewer="r", decision=ReviewDecision.AGREES)
    with pytest.raises(ValueError, match="cannot close"):
        ground_truth(packet, review)


def test_a_correction_without_a_type_is_invalid():
    with pytest.raises(ValueError, match="corrected_dominant_type"):
        Review(doc_id="d", ts=REVIEW_TIME, reviewer="r", decision=ReviewDecision.CORRECTS)


def test_corrected_segments_and_mixture_replace_the_primary_ones(rules_only):
    packet = run(example("quest"), rules_only).packet
    assert packet is not None
    segments = packet.classification.segments
    mixture = list(reversed(packet.classification.document_mixture))
    review = Review(
        doc_id=packet.doc_id,
        ts=REVIEW_TIME,
        reviewer="r",
        decision=ReviewDecision.CORRECTS,
        corrected_dominant_type=DocumentType.OTHER,
        corrected_segments=segments,
        corrected_mixture=mixture,
    )
    _, truth = ground_truth(packet, review)
    assert truth.ground_truth_classification.document_mixture == mixture
    assert truth.ground_truth_classification.number_of_segments == len(segments)
