"""The LLM-call budget of slide 11, the retry loop of slide 8, and rules-only operation."""

from __future__ import annotations

import pytest
from docs_examples import EXAMPLES, MAJOR_SEMANTIC, example, judge_with
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.docs.arbiter import (
    MAX_RETRIES,
    RULES_ONLY_NOTE,
    AwaitingLlm,
    resume,
    retry_outcome,
    run,
    start,
)
from processors.docs.autofix import fingerprint
from processors.docs.llm import LlmFinding, LlmJudgement, LlmPhase, LlmRequest, LlmResult
from schemas.docs import ArbiterDecision, EscalationReason, LlmMode, Severity


def test_best_case_is_two_calls_when_a_rule_blocker_skips_the_v2_semantic_check(with_llm):
    disposition = run(example("segment_count"), with_llm, judge_with()).disposition
    [attempt] = disposition.attempts
    assert disposition.llm_calls == 2
    assert attempt.llm_phases_run == ["V3_CONTEXT", "V4_QUALITY"]
    assert attempt.llm_phases_skipped == ["V2_SEMANTIC: BLOCKER in V1/V2 rule phase"]


def test_a_clean_auto_accept_runs_all_three_llm_phases_once(with_llm):
    disposition = run(example("clean"), with_llm, judge_with()).disposition
    assert (disposition.decision, disposition.llm_calls) == (ArbiterDecision.AUTO_ACCEPT, 3)


def test_a_v3_rule_blocker_does_not_skip_the_v2_semantic_check(with_llm):
    disposition = run(example("quest"), with_llm, judge_with()).disposition
    assert disposition.attempts[0].llm_phases_run == ["V2_SEMANTIC", "V3_CONTEXT", "V4_QUALITY"]


def test_a_retried_document_pays_three_calls_per_attempt(with_llm):
    disposition = run(example("share_sum"), with_llm, judge_with()).disposition
    assert [a.llm_calls for a in disposition.attempts] == [3, 3]
    assert disposition.llm_calls == 6


def test_worst_case_bound_is_three_calls_times_three_attempts():
    assert len(LlmPhase) * (MAX_RETRIES + 1) == 9


_finding = st.builds(
    LlmFinding,
    severity=st.sampled_from(Severity),
    message=st.text(min_size=1, max_size=20),
    location=st.just("x"),
)


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from(sorted(EXAMPLES)),
    findings=st.dictionaries(st.sampled_from(LlmPhase), st.lists(_finding, max_size=3)),
)
def test_no_document_exceeds_the_budget_and_each_attempt_costs_two_or_three_calls(with_llm, key, findings):
    disposition = run(example(key), with_llm, judge_with(findings)).disposition
    assert len(disposition.attempts) <= MAX_RETRIES + 1
    assert all(a.llm_calls in (2, 3) for a in disposition.attempts)
    assert disposition.llm_calls == sum(a.llm_calls for a in disposition.attempts) <= 9
    # The seed's repairs converge in one pass, so the reachable worst case is 2 attempts, 6 calls.
    assert len(disposition.attempts) <= 2 and disposition.llm_calls <= 6
    for attempt in disposition.attempts:
        rule_blocker = any(
            i.severity is Severity.BLOCKER and i.agent in ("V1", "V2") and i.source == "RULE"
            for i in attempt.issues
        )
        assert ("V2_SEMANTIC" in attempt.llm_phases_run) is not rule_blocker


@pytest.mark.parametrize("key", sorted(EXAMPLES))
def test_rules_only_makes_no_llm_calls_and_says_so_in_the_disposition(rules_only, key):
    disposition = run(example(key), rules_only).disposition
    assert (disposition.llm_mode, disposition.llm_calls, disposition.llm_note) == (
        LlmMode.RULES_ONLY,
        0,
        RULES_ONLY_NOTE,
    )
    assert all(len(a.llm_phases_skipped) == 3 for a in disposition.attempts)


def test_same_input_same_disposition(with_llm):
    judge = judge_with({LlmPhase.V4_QUALITY: [MAJOR_SEMANTIC]})
    assert run(example("share_sum"), with_llm, judge) == run(example("share_sum"), with_llm, judge)


def test_retry_budget_is_checked_before_the_cycle():
    assert retry_outcome(MAX_RETRIES, "new", ["a", "b"]) is EscalationReason.MAX_RETRIES_EXHAUSTED
    assert retry_outcome(0, "a", ["a"]) is EscalationReason.FIX_CYCLE
    assert retry_outcome(MAX_RETRIES - 1, "c", ["a", "b"]) is None


def test_a_fix_that_changes_nothing_escalates_as_a_cycle_without_another_attempt(rules_only):
    request = example("clean")
    zero = [e.model_copy(update={"overall_share": 0.0}) for e in request.classification.document_mixture]
    request = request.model_copy(
        update={"classification": request.classification.model_copy(update={"document_mixture": zero})}
    )
    disposition = run(request, rules_only).disposition
    assert [a.decision for a in disposition.attempts] == [ArbiterDecision.AUTO_RETRY]
    assert (disposition.decision, disposition.reason) == (
        ArbiterDecision.ESCALATE_TO_SME,
        EscalationReason.FIX_CYCLE,
    )
    assert disposition.rule_fired == 5


def test_fingerprint_is_recorded_per_attempt_and_changes_with_the_fix(rules_only):
    request = example("share_sum")
    first, second = run(request, rules_only).disposition.attempts
    assert first.fingerprint == fingerprint(request.classification) != second.fingerprint


def test_a_failed_llm_phase_is_a_major_issue_that_escalates(with_llm):
    def failing(request: LlmRequest) -> LlmResult:
        if request.phase is LlmPhase.V3_CONTEXT:
            return LlmResult(request_id=request.request_id, error="timeout after 30s")
        return LlmResult(request_id=request.request_id, judgement=LlmJudgement())

    disposition = run(example("clean"), with_llm, failing).disposition
    [issue] = disposition.issues
    assert (issue.agent, issue.severity, issue.source) == ("V3", Severity.MAJOR, "LLM")
    assert "timeout after 30s" in issue.message
    assert (disposition.decision, disposition.rule_fired) == (ArbiterDecision.ESCALATE_TO_SME, 4)


def test_a_missing_result_counts_as_a_failed_phase_and_an_unknown_one_is_refused(with_llm):
    step = start(example("clean"), with_llm)
    assert isinstance(step, AwaitingLlm)
    with pytest.raises(ValueError, match="answer no pending request"):
        resume(step.state, [LlmResult(request_id="other/0/V2_SEMANTIC", judgement=LlmJudgement())])
    finished = resume(step.state, [])
    assert len(finished.disposition.issues) == 3


def test_requests_carry_the_answer_schema_and_v3_sees_the_first_4000_characters(with_llm):
    request = example("clean")
    last = request.bundle.pages[-1]
    long_page = last.model_copy(update={"text": last.text + " filler" * 600})
    bundle = request.bundle.model_copy(update={"pages": [*request.bundle.pages[:-1], long_page]})
    request = request.model_copy(update={"bundle": bundle})
    step = start(request, with_llm)
    assert isinstance(step, AwaitingLlm)
    by_phase = {r.phase: r for r in step.requests}
    assert [r.request_id for r in step.requests] == [
        "doc2_6/0/V2_SEMANTIC",
        "doc2_6/0/V3_CONTEXT",
        "doc2_6/0/V4_QUALITY",
    ]
    assert by_phase[LlmPhase.V4_QUALITY].response_schema == LlmJudgement.model_json_schema()
    text = "\n\n".join(p.text for p in bundle.pages)
    assert len(text) > 4000
    assert by_phase[LlmPhase.V3_CONTEXT].user.endswith(text[:4000])


def test_enabling_the_llm_without_a_judge_is_refused(with_llm):
    with pytest.raises(ValueError, match="needs a judge"):
        run(example("clean"), with_llm)
