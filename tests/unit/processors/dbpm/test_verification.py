"""Verifier verdict semantics (paper Appendix A.2) and the generator's pure helpers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.clinical.vocabulary import DrugVocabulary
from processors.dbpm.extraction import (
    QA_TEMPLATES,
    Hints,
    candidates,
    drug_hints,
    extraction_messages,
    patient_id_hints,
    qa_payload,
)
from processors.dbpm.verification import (
    AMBIGUOUS,
    ENSEMBLE_VARIANTS,
    Answer,
    Final,
    NeedsEnsemble,
    conservative,
    ensemble,
    is_verified,
    memory_label,
    verdict_event,
    verdict_messages,
)
from schemas.dbpm import Candidate, Narrative, NerPayload, QaPayload, VerdictLabel

TS = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
QA_VOTES = st.sampled_from([Answer("PASS"), Answer(AMBIGUOUS), Answer("FAIL", "unsupported"),
                            Answer("FAIL", "contradicted"), Answer("FAIL")])  # fmt: skip


def _qa_candidate() -> Candidate:
    payload = QaPayload(question="What treatment?", answer="meropenem", category="treatment")
    return Candidate(ts=TS, task="qa", patient_id="p1", candidate_id="c1", payload=payload)


def test_only_an_explicit_fail_fails_an_ner_candidate() -> None:
    assert conservative("ner", Answer("FAIL")) == Final("FAIL")
    assert conservative("ner", Answer("PASS")) == Final("PASS")
    assert conservative("ner", Answer(AMBIGUOUS)) == Final("PASS", defaulted=True, confidence=0.0)


def test_an_ambiguous_relation_verdict_is_pass_weak() -> None:
    assert conservative("re", Answer(AMBIGUOUS)) == Final("PASS_WEAK", defaulted=True, confidence=0.0)
    assert conservative("re", Answer("PASS_STRONG")) == Final("PASS_STRONG")


def test_an_ambiguous_qa_verdict_asks_for_the_ensemble() -> None:
    assert conservative("qa", Answer(AMBIGUOUS)) == NeedsEnsemble()
    assert conservative("qa", Answer("FAIL", "contradicted")) == Final("FAIL", "contradicted")


def test_a_verdict_outside_the_task_space_is_refused() -> None:
    with pytest.raises(ValueError, match="verdict space"):
        conservative("ner", Answer("PASS_WEAK"))
    with pytest.raises(ValueError, match="no verifier verdict space"):
        conservative("summary", Answer("PASS"))


def test_ensemble_ties_break_to_pass() -> None:
    assert ensemble([Answer("FAIL"), Answer("PASS"), Answer(AMBIGUOUS)]).verdict == "PASS"
    assert ensemble([Answer("FAIL"), Answer(AMBIGUOUS), Answer(AMBIGUOUS)]).verdict == "PASS"
    assert ensemble([Answer(AMBIGUOUS)] * 3).verdict == "PASS"


def test_ensemble_fails_on_two_explicit_fails_with_the_most_common_class() -> None:
    votes = [Answer("FAIL", "unsupported"), Answer("FAIL", "contradicted"), Answer("FAIL", "contradicted")]
    assert ensemble(votes) == Final("FAIL", "contradicted", defaulted=True, confidence=1.0)
    tie = [Answer("FAIL", "over_specified"), Answer("PASS"), Answer("FAIL", "unsupported")]
    assert ensemble(tie) == Final("FAIL", "over_specified", defaulted=True, confidence=pytest.approx(2 / 3))


def test_ensemble_takes_exactly_three_votes() -> None:
    with pytest.raises(ValueError, match="3 votes"):
        ensemble([Answer("FAIL"), Answer("FAIL")])


@given(st.lists(QA_VOTES, min_size=3, max_size=3))
def test_ensemble_fails_exactly_when_a_majority_votes_fail(votes: list[Answer]) -> None:
    fails = sum(vote.verdict == "FAIL" for vote in votes)
    decided = ensemble(votes)
    assert decided.verdict == ("FAIL" if fails >= 2 else "PASS")
    assert decided.error_class is None or decided.verdict == "FAIL"


@given(st.lists(QA_VOTES, min_size=3, max_size=3), st.permutations(range(3)))
def test_ensemble_verdict_does_not_depend_on_vote_order(votes: list[Answer], order: list[int]) -> None:
    assert ensemble(votes).verdict == ensemble([votes[i] for i in order]).verdict


def test_verdicts_map_to_memory_events() -> None:
    assert memory_label("FAIL") is VerdictLabel.HARD_FAIL
    assert memory_label("PASS_WEAK") is VerdictLabel.SOFT_DOWNGRADE
    assert memory_label("PASS") is VerdictLabel.SUCCESS
    assert memory_label("PASS_STRONG") is VerdictLabel.SUCCESS
    assert not is_verified(VerdictLabel.HARD_FAIL)
    assert is_verified(VerdictLabel.SOFT_DOWNGRADE) and is_verified(VerdictLabel.SUCCESS)


def test_a_failing_qa_verdict_carries_its_error_class_and_a_passing_one_none() -> None:
    failed = verdict_event(_qa_candidate(), Final("FAIL", "contradicted"), TS)
    assert failed.source == "verifier_mmed" and failed.verdict is VerdictLabel.HARD_FAIL
    assert isinstance(failed.payload, QaPayload) and failed.payload.error_class == "contradicted"
    passed = verdict_event(_qa_candidate(), Final("PASS"), TS)
    assert isinstance(passed.payload, QaPayload) and passed.payload.error_class is None
    assert passed.candidate_id == "c1" and passed.patient_id == "p1"


def test_verdicts_carry_the_rejection_log_stage_reason_and_confidence() -> None:
    failed = verdict_event(_qa_candidate(), Final("FAIL", "contradicted"), TS)
    assert (failed.stage, failed.reason, failed.confidence) == ("verifier", "QA_Verifier_Reject", 1.0)
    weak = conservative("re", Answer(AMBIGUOUS))
    assert isinstance(weak, Final) and (weak.verdict, weak.confidence) == ("PASS_WEAK", 0.0)
    majority = ensemble([Answer("FAIL"), Answer("FAIL"), Answer("PASS")])
    assert majority.confidence == pytest.approx(2 / 3)
    tie = ensemble([Answer("FAIL"), Answer(AMBIGUOUS), Answer("PASS")])
    assert (tie.verdict, tie.confidence) == ("PASS", pytest.approx(1 / 3))
    assert verdict_event(_qa_candidate(), tie, TS).reason == "QA_Verifier_Pass"


def test_ensemble_prompts_differ_from_each_other_and_from_the_first_call() -> None:
    prompts = {
        json_of(verdict_messages(_qa_candidate(), "Treated with meropenem.", variant))
        for variant in ("primary", *ENSEMBLE_VARIANTS)
    }
    assert len(prompts) == 1 + len(ENSEMBLE_VARIANTS)


def test_the_verifier_sees_the_claim_not_the_gates_inputs() -> None:
    candidate = _qa_candidate()
    stamped = candidate.model_copy(update={"payload": candidate.payload.model_copy(
        update={"ner_categories": ("treatment",), "difficulty": 0.2})})  # fmt: skip
    assert json_of(verdict_messages(stamped, "note")) == json_of(verdict_messages(candidate, "note"))


def json_of(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def test_patient_ids_are_found_by_the_docgemma_patterns() -> None:
    text = "Seen abc-123 and f47ac10b-58cc-4372-a567-0e02b2c3d479; abc-123 again; not ab-12."
    assert patient_id_hints(text) == ("abc-123", "f47ac10b-58cc-4372-a567-0e02b2c3d479")


def test_drug_hints_resolve_brands_to_generics() -> None:
    vocabulary = DrugVocabulary(synonyms={"lanoxin": ("digoxin",), "digoxin": ("digoxin",)})
    assert drug_hints("Lanoxin 125 mcg daily", vocabulary) == ("digoxin",)


def test_hints_are_injected_into_extraction_prompts_and_omitted_when_empty() -> None:
    with_hints = extraction_messages("ner", "note", Hints(("abc-123",), ("digoxin",)))
    assert "abc-123" in with_hints[1]["content"] and "digoxin" in with_hints[1]["content"]
    assert "Hints" not in extraction_messages("ner", "note", Hints())[1]["content"]
    assert "Question: q?" in extraction_messages("qa", "note", Hints(), "q?")[1]["content"]


def test_candidates_are_deduplicated_with_content_derived_ids() -> None:
    narrative = Narrative(ts=TS, patient_id="p1", text="note")
    entity = {"entity": "sepsis", "category": "Diagnosis"}
    extracted, later = datetime(2026, 11, 26, 9, tzinfo=UTC), datetime(2026, 11, 27, tzinfo=UTC)
    fever = {"entity": "fever", "category": "Symptoms"}
    first = candidates(narrative, "ner", [entity, entity, fever], extracted)
    again = candidates(narrative, "ner", [entity], later)
    assert len(first) == 2 and first[0].candidate_id == again[0].candidate_id  # extracted again: same id
    assert (first[0].ts, first[0].document_ts) == (extracted, TS) and isinstance(first[0].payload, NerPayload)
    assert first[0].candidate_id != first[1].candidate_id


def test_qa_payloads_use_the_template_question_of_their_category() -> None:
    assert len(QA_TEMPLATES) == 11
    payload = qa_payload("treatment", "meropenem")
    question = QA_TEMPLATES["treatment"][0]
    assert payload == {"question": question, "answer": "meropenem", "category": "treatment"}
