"""INPUT_ASSEMBLY's extraction (§4.1) and the deterministic rules' parts (§9, §11) in isolation."""

from __future__ import annotations

import pytest
from agent_harness import DRUGS
from hypothesis import given
from hypothesis import strategies as st

from processors.agent.entities import action_verbs, drug_mentions, is_patient_id, patient_ids
from processors.agent.rules import TASK_PATTERNS, drug_question, fields_question, matched_patterns

# ── §4.1 entity extraction ──


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("Chart for abc-123 please", ("abc-123",)),
        ("uuid F47AC10B-58CC-4372-A567-0E02B2C3D479 and f47ac10b",
         ("F47AC10B-58CC-4372-A567-0E02B2C3D479", "f47ac10b")),
        ("PT-TEST-009 and p-000123 then abc-123 again abc-123", ("PT-TEST-009", "p-000123", "abc-123")),
        ("p-value p-0.05, 20240101, deadbeef, ICD-10, abcd-1234", ()),
    ],
)  # fmt: skip
def test_patient_ids_in_order_without_duplicates_or_nested_matches(text: str, ids: tuple[str, ...]):
    assert patient_ids(text) == ids


def test_is_patient_id_needs_the_whole_value():
    assert is_patient_id(" abc-123 ") and not is_patient_id("abc-123 x")


@given(st.text())
def test_every_patient_id_found_is_in_the_text_and_is_an_id(text: str):
    for found in patient_ids(text):
        assert found in text and is_patient_id(found)


def test_drug_mentions_are_whole_words_case_insensitive_longest_first_in_dictionary_spelling():
    text = "Start Insulin  Glargine with WARFARIN; coumadin is warfarin; aspirinate is not aspirin"
    assert drug_mentions(text, DRUGS) == ("insulin glargine", "warfarin", "Coumadin", "aspirin")
    assert drug_mentions("metformin", frozenset()) == ()


def test_drug_mentions_do_not_depend_on_set_order():
    names = sorted(DRUGS)
    assert drug_mentions("insulin glargine, aspirin", frozenset(reversed(names))) == (
        "insulin glargine",
        "aspirin",
    )


def test_action_verbs_of_walkthrough_3():
    text = "Find patient John Smith, check his chart, and verify metformin safety; checking is not check"
    assert action_verbs(text) == ("find", "check", "verify")
    assert action_verbs("What is hypertension?") == ()


# ── §11 task patterns ──


@pytest.mark.parametrize(
    ("query", "patterns"),
    [
        ("Check FDA warnings for dofetilide", ["drug_safety"]),
        ("Check interactions between warfarin and aspirin", ["drug_interaction"]),
        ("Find patient Maria Garcia and check her chart", ["patient_lookup_and_review"]),
        ("Pull the record", []),
        ("Patient summaries for ward 3", []),
        ("Find recruiting trials for glioma", ["clinical_trial"]),
        ("Any studies on SGLT2?", ["literature_search"]),
        ("Prescribe metformin 500mg for abc-123", ["prescribe"]),
        ("Is it safe?", []),
        ("Find patient John Smith, check his chart, and verify metformin safety",
         ["drug_safety", "patient_lookup_and_review"]),
    ],
)  # fmt: skip
def test_task_patterns_match_whole_words(query: str, patterns: list[str]):
    assert [p.name for p in matched_patterns(query)] == patterns


def test_task_pattern_keywords_are_section_11s():
    assert {p.name: (p.groups, sorted(p.requires)) for p in TASK_PATTERNS} == {
        "drug_safety": ((("safety", "warning", "boxed warning", "FDA"),), ["check_drug_safety"]),
        "drug_interaction": ((("interaction", "combining", "together with"),), ["check_drug_interactions"]),
        "patient_lookup_and_review": (
            (("patient",), ("chart", "record", "summary")), ["get_patient_chart", "search_patient"],
        ),
        "prescribe": ((("prescribe", "start", "order"),), ["prescribe_medication"]),
        "literature_search": (
            (("studies", "research", "evidence", "literature", "PubMed"),), ["search_medical_literature"],
        ),
        "clinical_trial": ((("trial", "recruiting", "experimental"),), ["find_clinical_trials"]),
    }  # fmt: skip


# ── §9 messages ──


def test_clarification_messages():
    assert fields_question(["patient_id", "medication_name", "drug_names"]) == (
        "I need more information: patient ID, medication name, two or more drug names"
    )
    assert drug_question(["a", "b", "c"]) == "Did you mean a, b or c?"
    assert drug_question(["a"]) == "Did you mean a?"
    assert drug_question([]) == "Could you clarify which drug you meant?"


def test_a_direct_intent_is_overruled_when_a_task_pattern_requires_tools() -> None:
    from processors.agent.graph import advance, start
    from processors.agent.state import AgentRequest, LlmAnswer, default_config

    config = default_config({"dofetilide"})
    state, _ = start(AgentRequest(conversation_id="c", query="Check FDA warnings for dofetilide"), config)
    answer = '{"intent": "DIRECT", "task_summary": "x"}'
    state, _ = advance(state, LlmAnswer(text=answer), config)
    assert state.intent == "TOOL_NEEDED" and state.path[-1] == "TOOL_SELECT"
    assert "requires tools" in state.trace[-1].decision
