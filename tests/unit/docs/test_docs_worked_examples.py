"""The seed's worked examples reproduce exactly (agentic evaluation system slides 4–10)."""

from __future__ import annotations

from datetime import timedelta

from docs_examples import MAJOR_SEMANTIC, example, judge_with

from processors.docs.arbiter import run
from processors.docs.llm import LlmPhase
from processors.docs.packet import format_issue, ground_truth
from processors.docs.v5 import decide
from schemas.docs import (
    ArbiterDecision,
    DocumentType,
    FixKind,
    GroundTruthSource,
    Review,
    ReviewDecision,
    Severity,
)


def test_share_sum_example_auto_retries_then_auto_accepts_with_the_seeds_normalised_shares(rules_only):
    finished = run(example("share_sum"), rules_only)
    first, second = finished.disposition.attempts
    [issue] = first.issues
    assert (issue.id, issue.agent, issue.severity, issue.auto_fixable) == (
        "V2-0001",
        "V2",
        Severity.MAJOR,
        True,
    )
    assert issue.message == "Segment 1 shares sum to 1.060 instead of 1.0"
    assert (first.decision, first.rule_fired) == (ArbiterDecision.AUTO_RETRY, 5)
    assert second.fixes_applied == [FixKind.NORMALISE_SEGMENT_SHARES]
    assert (second.decision, second.rule_fired, second.issues) == (ArbiterDecision.AUTO_ACCEPT, 7, [])
    shares = [c.segment_share for c in finished.disposition.final_classification.segments[0].classifications]
    assert shares == [0.472, 0.283, 0.094, 0.075, 0.075]
    assert finished.disposition.decision is ArbiterDecision.AUTO_ACCEPT
    assert finished.packet is None


def test_quest_diagnostics_with_genomic_primary_is_a_v3_blocker_that_escalates(rules_only):
    finished = run(example("quest"), rules_only)
    [issue] = finished.disposition.issues
    assert (issue.id, issue.severity) == ("V3-0001", Severity.BLOCKER)
    assert (
        issue.message == "Routine lab vendor detected (Quest Diagnostics) but Genomic Report marked PRIMARY"
    )
    assert issue.suggested_fix == "Reclassify as 'Other' or downgrade to MENTION_ONLY"
    assert (finished.disposition.decision, finished.disposition.rule_fired) == (
        ArbiterDecision.ESCALATE_TO_SME,
        1,
    )
    assert finished.packet is not None
    assert format_issue(finished.packet.issues[0]) == (
        "[BLOCKER] V3-0001 (Agent: V3)\n"
        "  Message:   Routine lab vendor detected (Quest Diagnostics) but Genomic Report marked PRIMARY\n"
        "  Location:  document_mixture → Genomic Report\n"
        "  Fix:       Reclassify as 'Other' or downgrade to MENTION_ONLY"
    )


def test_segment_count_three_with_two_segments_is_an_auto_fixable_v1_blocker(rules_only):
    finished = run(example("segment_count"), rules_only)
    [issue] = finished.disposition.issues
    assert (issue.id, issue.severity, issue.auto_fixable, issue.ig_code) == (
        "V1-0001",
        "BLOCKER",
        True,
        "IG-1",
    )
    assert issue.message == "number_of_segments is 3 but segments array has 2 items"
    # V5 rule 1 escalates every BLOCKER; the repaired version is offered to the SME.
    assert finished.disposition.decision is ArbiterDecision.ESCALATE_TO_SME
    assert finished.packet is not None and finished.packet.auto_fix_preview is not None
    assert finished.packet.auto_fix_preview.number_of_segments == 2


def test_v5_auto_retry_example_two_fixable_majors_and_a_minor_is_rule_5(rules_only):
    request = example("share_sum")
    mixture = [
        e.model_copy(update={"overall_share": e.overall_share - 0.006})
        for e in request.classification.document_mixture
    ]
    genomic = request.classification.segments[0].classifications[0].model_copy(update={"top_evidence": []})
    segment = request.classification.segments[0]
    segment = segment.model_copy(update={"classifications": [genomic, *segment.classifications[1:]]})
    classification = request.classification.model_copy(
        update={"document_mixture": mixture, "segments": [segment, *request.classification.segments[1:]]}
    )
    first = run(
        request.model_copy(update={"classification": classification}), rules_only
    ).disposition.attempts[0]
    messages = sorted((i.severity, i.auto_fixable, i.message) for i in first.issues)
    assert messages == [
        (Severity.MAJOR, True, "Mixture overall_share sums to 0.970 instead of 1.0"),
        (Severity.MAJOR, True, "Segment 1 shares sum to 1.060 instead of 1.0"),
        (Severity.MINOR, False, "Genomic Report is PRIMARY but has no evidence snippets"),
    ]
    assert (first.decision, first.rule_fired) == (ArbiterDecision.AUTO_RETRY, 5)
    assert decide(first.issues).number == 5


def test_fabricated_snippet_on_page_3_is_a_v4_blocker_possible_hallucination(rules_only):
    finished = run(example("fabricated"), rules_only)
    blockers = [i for i in finished.disposition.issues if i.severity is Severity.BLOCKER]
    assert [i.message for i in blockers] == [
        "Evidence snippet 'BRCA1 pathogenic variant...' not found in actual PDF text on page 3. "
        "Possible hallucination."
    ]
    assert finished.disposition.decision is ArbiterDecision.ESCALATE_TO_SME


def test_lab_requisition_with_pathology_embedded_raw_is_a_v3_blocker(rules_only):
    finished = run(example("requisition"), rules_only)
    [issue] = finished.disposition.issues
    assert issue.severity is Severity.BLOCKER
    assert issue.message == (
        "Administrative keywords found ('requisition', 'test request') but "
        "Pathology Report marked EMBEDDED_RAW"
    )


def test_v2_llm_semantic_inconsistency_escalates_as_a_non_fixable_major(with_llm):
    judge = judge_with({LlmPhase.V2_SEMANTIC: [MAJOR_SEMANTIC]})
    finished = run(example("clean"), with_llm, judge)
    [issue] = finished.disposition.issues
    assert (issue.id, issue.severity, issue.auto_fixable, issue.source) == ("V2-0001", "MAJOR", False, "LLM")
    assert (finished.disposition.decision, finished.disposition.rule_fired) == (
        ArbiterDecision.ESCALATE_TO_SME,
        4,
    )


def test_sme_corrects_quest_panel_to_other_giving_sme_corrected_ground_truth(rules_only):
    packet = run(example("quest"), rules_only).packet
    assert packet is not None
    review = Review(
        doc_id=packet.doc_id,
        ts=packet.ts + timedelta(minutes=1),
        reviewer="sme-1",
        decision=ReviewDecision.CORRECTS,
        corrected_dominant_type=DocumentType.OTHER,
        notes="This is a routine CBC from Quest, not a genomic report. Gene-like column headers "
        "(WBC, RBC) confused the classifier.",
    )
    reviewed, truth = ground_truth(packet, review)
    assert truth.ground_truth_source is GroundTruthSource.SME_CORRECTED
    assert truth.ground_truth_classification.dominant_type_overall is DocumentType.OTHER
    assert truth.primary_dominant_type is DocumentType.GENOMIC_REPORT
    assert reviewed.review_status.value == "reviewed"


def test_sme_validates_keeps_the_primary_classification_unchanged(rules_only):
    packet = run(example("requisition"), rules_only).packet
    assert packet is not None
    review = Review(doc_id=packet.doc_id, ts=packet.ts, reviewer="sme-2", decision=ReviewDecision.AGREES)
    _, truth = ground_truth(packet, review)
    assert truth.ground_truth_source is GroundTruthSource.SME_VALIDATED
    assert truth.ground_truth_classification == packet.classification
