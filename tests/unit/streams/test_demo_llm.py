"""The demo's LLM responder plays the synthetic ground truth for the generator and verifier prompts."""

from __future__ import annotations

from typing import Any

from processors.dbpm.extraction import QA_TEMPLATES, Hints, candidates, extraction_messages, qa_payload
from processors.dbpm.ontology import filter_verdict, load_ontology
from processors.dbpm.verification import ENSEMBLE_VARIANTS, verdict_messages
from streams.demo.llm import loop_plan, script_responder
from streams.demo.plan import demo_stream
from streams.llm.schemas import NerExtraction, NerVerdict, QaExtraction, QaVerdict, ReExtraction, ReVerdict
from streams.llm.serve.http import ChatRequest
from streams.worker.wire import contract_event

_VERDICT_MODELS = {"ner": NerVerdict, "re": ReVerdict, "qa": QaVerdict}


def _ask(responder: Any, messages: list[dict[str, str]], model: Any) -> Any:
    return responder(ChatRequest("m", messages, model.model_json_schema(), 0.0, None, False))


def test_extraction_answers_reproduce_exactly_the_planned_candidates():
    plan = loop_plan(demo_stream(2))
    respond = script_responder(plan.answers)
    hints = Hints(drugs=("vancomycin",))  # hints sit between narrative and question; they must not matter
    for narrative in plan.narratives:
        text = narrative.text
        ner = _ask(respond, extraction_messages("ner", text, hints), NerExtraction)["entities"]
        rel = _ask(respond, extraction_messages("re", text, hints), ReExtraction)["relations"]
        at = narrative.ts
        found = candidates(narrative, "ner", ner, at) + candidates(narrative, "re", rel, at)
        for category, (question, _) in QA_TEMPLATES.items():
            answer = _ask(respond, extraction_messages("qa", text, hints, question), QaExtraction)
            if answer["status"] == "ANSWERED":
                found += candidates(narrative, "qa", [qa_payload(category, answer["answer"])], at)
        assert [c.candidate_id for c in found] == [
            c.candidate_id for c in plan.candidates[narrative.patient_id]
        ]


def test_verdicts_are_the_planned_outcomes_for_every_prompt_variant():
    plan = loop_plan(demo_stream(2))
    respond = script_responder(plan.answers)
    expected = {
        "success": {"PASS", "PASS_STRONG"},
        "soft_downgrade": {"PASS", "PASS_WEAK"},
        "hard_fail": {"FAIL"},
    }
    labels = set()
    for narrative in plan.narratives:
        for candidate in plan.candidates[narrative.patient_id]:
            label = plan.truth[candidate.candidate_id]
            labels.add(label)
            violation = candidate.candidate_id in plan.violations
            variants = ("primary", *(ENSEMBLE_VARIANTS if candidate.task == "qa" else ()))
            for variant in variants:
                messages = verdict_messages(candidate, narrative.text, variant)
                answer = _ask(respond, messages, _VERDICT_MODELS[candidate.task])
                assert answer["verdict"] in ({"PASS_STRONG"} if violation else expected[label])
    assert {"success", "hard_fail"} <= labels


def test_the_verifier_passes_ontology_violations_which_the_filter_fails():
    plan = loop_plan(demo_stream(6))
    ontology = load_ontology()
    found = [c for cs in plan.candidates.values() for c in cs if c.candidate_id in plan.violations]
    assert found, "the synthetic stream has ontology violations"
    assert all(plan.truth[c.candidate_id] == "hard_fail" for c in found)
    assert all(filter_verdict(ontology, contract_event(c)) is not None for c in found)  # type: ignore[arg-type]


def test_unknown_prompts_get_a_schema_valid_minimal_answer():
    respond = script_responder({})
    answer = _ask(respond, [{"role": "user", "content": "hello"}], QaExtraction)
    assert QaExtraction.model_validate(answer)
