"""§15 unit tests, one node at a time, with scripted model answers; plus each node's other rules."""

from __future__ import annotations

from dataclasses import replace

import pytest
from agent_harness import (
    CONFIG,
    DOFETILIDE_SAFETY,
    SINGLE_PATH,
    answer,
    assess,
    decisions,
    fail,
    history,
    intent,
    llm_call,
    ok,
    request,
    retry,
    run,
    say,
    select,
    system_message,
    tool_step,
    tools_executed,
    trail,
    user_message,
)
from agent_harness import args as arguments

from processors.agent import LlmAnswer, LlmCall, Respond, ToolCall, advance, run_scripted
from processors.agent.prompts import CLARIFICATION_SECTION, INTENT_SYSTEM

# ── ① INPUT_ASSEMBLY ──


def test_input_assembly_extracts_entities_and_keeps_the_last_four_turns():
    turns = history(*[("user", f"q{i}") if i % 2 == 0 else ("assistant", f"a{i}") for i in range(6)])
    states, steps = trail(
        request(
            "Prescribe Metformin for PT-TEST-009 and check warfarin", history=turns, patient_id="p-000123"
        ),
        [],
    )
    state = states[0]
    assert state.extracted_entities.patient_ids == ("PT-TEST-009",)
    assert state.extracted_entities.drug_mentions == ("metformin", "warfarin")
    assert state.extracted_entities.action_verbs == ("prescribe", "check")
    assert [t.content for t in state.conversation_history] == ["q2", "a3", "q4", "a5"]
    assert state.path == ("INPUT_ASSEMBLY", "INTENT_CLASSIFY") and state.llm_calls == 1
    call = llm_call(steps[0])
    assert (call.node, call.schema_name, call.temperature, call.max_tokens) == (
        "INTENT_CLASSIFY", "IntentClassification", 0.0, 256,
    )  # fmt: skip
    assert "Conversation so far:\nUser: q2\nAssistant: a3\nUser: q4\nAssistant: a5" in user_message(call)


def test_the_patient_in_context_is_a_hint_and_a_valid_patient_id():
    events = [
        intent("TOOL_NEEDED", "get_patient_chart"),
        select("get_patient_chart"),
        arguments(patient_id="1234"),
    ]
    states, steps = trail(request("Review this patient's chart", patient_id="1234"), events)
    assert states[0].extracted_entities.patient_ids == ()
    assert "Patient in context: 1234" in system_message(steps[2])
    assert steps[-1] == ToolCall(tool="get_patient_chart", args={"patient_id": "1234"}, deadline_s=10.0)


# ── ② INTENT_CLASSIFY (§15 rows) ──


@pytest.mark.parametrize(
    ("query", "kind", "tool", "next_node", "next_schema"),
    [
        ("Hello", "DIRECT", None, "SYNTHESIZE", None),
        (
            "Check FDA warnings for dofetilide",
            "TOOL_NEEDED",
            "check_drug_safety",
            "TOOL_SELECT",
            "ToolSelection",
        ),
        ("What is hypertension?", "DIRECT", "none", "SYNTHESIZE", None),
        (
            "Find patient John Smith and check his meds",
            "TOOL_NEEDED",
            "search_patient",
            "TOOL_SELECT",
            "ToolSelection",
        ),
    ],
)
def test_intent_classify(query: str, kind: str, tool: str | None, next_node: str, next_schema: str | None):
    states, steps = trail(request(query), [intent(kind, tool)])
    assert system_message(steps[0]) == INTENT_SYSTEM
    assert user_message(steps[0]) == f"Query: {query}"
    state = states[-1]
    suggested = None if tool in (None, "none") else tool
    assert state.intent == kind
    assert state.suggested_tool == suggested
    assert decisions(state, "INTENT_CLASSIFY") == [kind + (f", suggested {suggested}" if suggested else "")]
    assert (llm_call(steps[-1]).node, llm_call(steps[-1]).schema_name) == (next_node, next_schema)


@pytest.mark.parametrize(
    ("query", "fallback"),
    [
        ("Check FDA warnings for dofetilide", "TOOL_NEEDED"),
        ("Show the chart for abc-123", "TOOL_NEEDED"),
        ("Explain metformin MOA", "DIRECT"),
        ("Hello", "DIRECT"),
    ],
)
def test_an_intent_answer_that_does_not_validate_falls_back_on_the_extracted_entities(
    query: str, fallback: str
):
    states, _ = trail(request(query), [say("I think the user wants a tool")])
    assert states[-1].intent == fallback
    assert decisions(states[-1], "INTENT_CLASSIFY")[0].startswith(f"answer invalid → {fallback}")


# ── ③ TOOL_SELECT (§15 rows) ──


@pytest.mark.parametrize(
    ("query", "tool", "schema", "values", "hint"),
    [
        ("Check FDA warnings for dofetilide", "check_drug_safety", "DrugSafetyArgs",
         {"drug_name": "dofetilide"}, "Detected drug name: dofetilide"),
        ("Check interactions between warfarin and aspirin", "check_drug_interactions", "DrugInteractionArgs",
         {"drug_names": ["warfarin", "aspirin"]}, "Detected drug name: aspirin"),
        ("Check amoxicillin info for my patient", "check_drug_safety", "DrugSafetyArgs",
         {"drug_name": "amoxicillin"}, "Detected drug name: amoxicillin"),
        ("Write a note for patient abc-123", "save_clinical_note", "ClinicalNoteArgs",
         {"patient_id": "abc-123", "note_type": "progress note", "note_text": "Patient seen today."},
         "Detected patient ID: abc-123"),
    ],
)  # fmt: skip
def test_tool_select(query: str, tool: str, schema: str, values: dict, hint: str):
    _, steps = trail(request(query), [intent("TOOL_NEEDED", tool), select(tool), arguments(**values)])
    stage2 = llm_call(steps[2])
    assert (stage2.node, stage2.schema_name) == ("TOOL_SELECT", schema)
    assert f"Extract the arguments for the {tool} tool" in system_message(stage2)
    assert hint in system_message(stage2)
    assert steps[3] == ToolCall(tool=tool, args=values, deadline_s=10.0)


def test_stage_one_sees_every_full_desc_and_one_example_only():
    _, steps = trail(
        request("Check interactions between warfarin and aspirin"), [intent("TOOL_NEEDED", "none")]
    )
    system = system_message(steps[-1])
    assert system.count("Example:") == 1
    assert 'User: "Check FDA warnings for dofetilide"\nTool: check_drug_safety' in system  # no suggestion
    assert system.count("\n- ") == 10
    assert user_message(steps[-1]).endswith("Analyzing the task requirements, select the tool.")


def test_an_invalid_stage_one_answer_falls_back_on_the_suggested_tool():
    states, steps = trail(
        request("Check FDA warnings for dofetilide"), [intent("TOOL_NEEDED", "check_drug_safety"), say("{")]
    )
    assert llm_call(steps[-1]).schema_name == "DrugSafetyArgs"
    assert decisions(states[-1], "TOOL_SELECT") == [
        "stage 1 answer invalid → suggested_tool check_drug_safety"
    ]


def test_an_invalid_stage_one_answer_without_a_suggestion_synthesizes_the_failure():
    state, response = run(
        "Check FDA warnings for dofetilide",
        [intent("TOOL_NEEDED"), say("not json"), say("The information could not be retrieved.")],
    )
    assert state.path == ("INPUT_ASSEMBLY", "INTENT_CLASSIFY", "TOOL_SELECT", "SYNTHESIZE")
    assert state.error_messages == ("The requested information could not be retrieved.",)
    assert state.executed == () and response.answer


# ── ④ TOOL_EXECUTE ──


def test_invalid_arguments_are_not_executed_and_ask_for_the_missing_fields():
    events = [
        intent("TOOL_NEEDED", "prescribe_medication"),
        select("prescribe_medication"),
        arguments(patient_id="abc-123", medication_name="metformin", dosage="500mg", frequency="  "),
    ]
    question = "How often should metformin 500 mg be given?"
    state, response = run("Prescribe metformin 500mg for abc-123", [*events, say(question)])
    assert response == Respond(answer=question, clarification="I need more information: frequency")
    assert state.executed == ()
    assert state.tool_results[-1].error_type == "invalid_args"
    assert state.tool_results[-1].formatted_result == (
        "The request to Prescription could not be completed — additional information is needed."
    )
    assert state.path == (
        "INPUT_ASSEMBLY", "INTENT_CLASSIFY", "TOOL_SELECT", "TOOL_EXECUTE", "ERROR_HANDLER", "SYNTHESIZE",
    )  # fmt: skip
    assert state.llm_calls == 4


def test_a_stage_two_answer_that_does_not_validate_is_an_argument_failure():
    events = [
        intent("TOOL_NEEDED", "prescribe_medication"),
        select("prescribe_medication"),
        answer({"patient_id": "abc-123"}),
        say("Which medication, dose and frequency should be prescribed?"),
    ]
    _, response = run("Prescribe metformin for abc-123", events)
    assert response.clarification == "I need more information: medication name, dosage, frequency"


@pytest.mark.parametrize("patient_id", ["John Smith", "", "chart"])
def test_a_patient_id_that_is_not_one_asks_for_the_id(patient_id: str):
    events = [
        intent("TOOL_NEEDED", "get_patient_chart"),
        select("get_patient_chart"),
        arguments(patient_id=patient_id),
        say("Which patient ID is John Smith's?"),
    ]
    state, response = run("Show John Smith's chart", events)
    assert response == Respond(
        answer="Which patient ID is John Smith's?",
        clarification="I need a patient ID to proceed. Could you provide one?",
    )
    assert decisions(state, "ERROR_HANDLER") == ["ask_user: missing or invalid arguments (patient_id)"]


def test_results_are_formatted_with_clinical_labels_and_errors_with_templates():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY),
    ]
    states, _ = trail(request("Check FDA warnings for dofetilide"), events)
    result = states[-1].tool_results[-1]
    assert result.tool_label == "Drug Safety Report"
    assert result.formatted_result == (
        "[Drug Safety Report]\n"
        "Drug name: dofetilide\n"
        "Boxed warning: Torsade de Pointes; initiate with continuous ECG monitoring for a minimum of 3 days\n"
        "Contraindications:\n"
        "  - QTc > 440 ms\n"
        "  - CrCl < 20 mL/min"
    )


# ── ⑤ RESULT_CLASSIFY (§15 rows) ──


def test_result_classify_rich_drug_safety_data_is_success_rich():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY),
    ]
    states, _ = trail(request("Check FDA warnings for dofetilide"), events)
    assert states[-1].last_result_classification == "success_rich"
    assert decisions(states[-1], "RESULT_CLASSIFY") == ["success_rich"]


def test_result_classify_no_articles_found_is_no_results_and_synthesizes():
    events = [
        intent("TOOL_NEEDED", "search_medical_literature"),
        *tool_step(
            "search_medical_literature", {"query": "dofetilide in dialysis"}, {"articles": []}, "no_results"
        ),
        say("No published studies were found on dofetilide in dialysis."),
    ]
    state, response = run("Find studies on dofetilide in dialysis", events)
    assert state.last_result_classification == "no_results"
    assert "[Medical Literature]\nArticles:\n  none" in state.tool_results[0].formatted_result
    assert decisions(state, "DETERMINISTIC_ROUTER") == [
        "route → SYNTHESIZE: task pattern satisfied (literature_search)"
    ]
    assert state.path == SINGLE_PATH and response.answer


def test_result_classify_sees_the_pre_formatted_timeout_and_classifies_error_retryable():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail("timeout", "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='api.fda.gov')"),
        assess("error_retryable"),
    ]
    states, steps = trail(request("Check FDA warnings for amiodarone"), events)
    prompt = system_message(steps[4])
    assert "Result:\nThe Drug Safety Report was temporarily unavailable. Please try again shortly." in prompt
    assert "HTTPSConnectionPool" not in prompt and "api.fda.gov" not in prompt
    assert states[-1].last_result_classification == "error_retryable"
    assert llm_call(steps[-1]).schema_name == "RetryStrategy"


@pytest.mark.parametrize(
    ("outcome", "quality"),
    [
        (ok({"articles": []}), "no_results"),
        (ok({"articles": [{"title": "A trial"}]}), "success_partial"),
        (fail("timeout"), "error_retryable"),
        (fail("not_found"), "error_fatal"),
    ],
)
def test_a_classification_that_does_not_validate_falls_back_on_the_outcome(outcome, quality: str):
    events = [
        intent("TOOL_NEEDED", "search_medical_literature"),
        select("search_medical_literature"),
        arguments(query="dofetilide"),
        outcome,
        answer({"quality": "excellent", "brief_summary": "x"}),
    ]
    states, _ = trail(request("Find studies on dofetilide"), events)
    assert states[-1].last_result_classification == quality
    assert states[-1].last_result_summary is None


# ── ⑥ DETERMINISTIC_ROUTER (§15 rows) ──


JAMES_WILSONS = {
    "matches": [
        {"patient_id": "jwi-001", "name": "James Wilson", "birth_date": "1948-03-01"},
        {"patient_id": "jwi-002", "name": "James Wilson", "birth_date": "1971-11-23"},
        {"patient_id": "jwi-003", "name": "James A. Wilson", "birth_date": "1990-06-30"},
    ]
}


def test_router_asks_the_user_when_three_patients_match():
    events = [
        intent("TOOL_NEEDED", "search_patient"),
        *tool_step("search_patient", {"name": "James Wilson"}, JAMES_WILSONS),
    ]
    question = "Three patients are named James Wilson (jwi-001, jwi-002, jwi-003): which one do you mean?"
    state, response = run("Search for patient James Wilson", [*events, say(question)])
    assert response == Respond(
        answer=question,
        clarification="I found 3 patients matching 'James Wilson'. Which one did you mean? "
        "jwi-001, James Wilson, 1948-03-01; jwi-002, James Wilson, 1971-11-23; "
        "jwi-003, James A. Wilson, 1990-06-30",
    )
    assert decisions(state, "DETERMINISTIC_ROUTER") == ["route → SYNTHESIZE: ask_user: 3 patient matches"]
    assert decisions(state, "SYNTHESIZE") == ["clarification question (14 words)"]
    assert state.clarification_request == response.clarification and state.final_response == question


def test_router_synthesizes_at_step_count_four():
    query = (
        "Find patient Ann Lee, review her chart, check warfarin safety, interactions and literature evidence"
    )
    events = [
        intent("TOOL_NEEDED", "search_patient"),
        *tool_step("search_patient", {"name": "Ann Lee"}, {"matches": [{"patient_id": "ann-001"}]}),
        *tool_step("get_patient_chart", {"patient_id": "ann-001"}, {"medications": ["warfarin", "aspirin"]}),
        *tool_step("check_drug_safety", {"drug_name": "warfarin"}, {"boxed_warning": "Bleeding risk"}),
        *tool_step("check_drug_interactions", {"drug_names": ["warfarin", "aspirin"]}, {"severity": "major"}),
        say("Ann Lee takes warfarin with aspirin: major bleeding interaction."),
    ]
    state, _ = run(query, events)
    assert state.step_count == 4
    assert (
        decisions(state, "DETERMINISTIC_ROUTER")[-1] == "route → SYNTHESIZE: step_count=4 reached MAX_STEPS=4"
    )
    assert "search_medical_literature" not in {e.tool for e in state.executed}


def test_router_stops_a_duplicate_call_without_executing_it():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        *tool_step("check_drug_safety", {"drug_name": "warfarin"}, {"boxed_warning": "Bleeding risk"}),
        select("check_drug_safety"),
        arguments(drug_name=" warfarin "),
        say("Warfarin carries a boxed warning for bleeding."),
    ]
    state, _ = run("Check interactions of warfarin", events)
    assert tools_executed(state) == [("check_drug_safety", {"drug_name": "warfarin"}, "success")]
    assert (
        decisions(state, "DETERMINISTIC_ROUTER")[-1]
        == "route → SYNTHESIZE: duplicate tool call, not executed"
    )
    assert state.path[-4:] == ("TOOL_SELECT", "TOOL_EXECUTE", "DETERMINISTIC_ROUTER", "SYNTHESIZE")


# ── ⑤a ERROR_HANDLER (§15 rows) ──


def test_error_handler_lets_the_model_retry_a_timeout_at_retry_count_zero():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail("timeout"),
        assess("error_retryable"),
        retry("retry_same"),
    ]
    states, steps = trail(request("Check FDA warnings for amiodarone"), events)
    assert states[-2].retry_count == 0
    assert states[-1].retry_count == 1
    assert steps[-1] == ToolCall(tool="check_drug_safety", args={"drug_name": "amiodarone"}, deadline_s=10.0)


def test_error_handler_skips_a_drug_not_in_the_database_without_a_model_call():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="zorblaxin"),
        fail("drug_not_in_database", "404 {'error': 'NOT_FOUND'}"),
        assess("error_fatal"),
        say("Zorblaxin was not found; no safety information is available."),
    ]
    state, _ = run("Check FDA warnings for zorblaxin", events)
    assert decisions(state, "ERROR_HANDLER") == ["skip: drug not in database"]
    assert state.error_messages == ("zorblaxin was not found in the drug database.",)
    assert "RetryStrategy" not in {d.schema_name for d in state.trace}
    assert state.path[-3:] == ("DETERMINISTIC_ROUTER", "ERROR_HANDLER", "SYNTHESIZE")


def _timeouts(n: int, strategy: str = "retry_same") -> list:
    first = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
    ]
    loop = []
    for i in range(n):
        loop += [fail("timeout"), assess("error_retryable")]
        if i < n - 1:
            loop.append(retry(strategy))
    return first + loop


def test_error_handler_skips_after_max_retries():
    state, _ = run(
        "Check FDA warnings for amiodarone", [*_timeouts(3), say("The safety report is unavailable.")]
    )
    assert [e.outcome for e in state.executed] == ["timeout"] * 3
    assert decisions(state, "ERROR_HANDLER") == [
        "retry_same, retry_count → 1",
        "retry_same, retry_count → 2",
        "skip: retry_count=2 reached MAX_RETRIES",
    ]
    assert state.error_messages == (
        "The Drug Safety Report was temporarily unavailable. Please try again shortly.",
    )
    assert state.step_count == 1
    synthesis = [d for d in state.trace if d.node == "SYNTHESIZE"]
    assert len(synthesis) == 1


def test_error_handler_skips_a_service_still_unavailable_after_one_retry():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail("service_unavailable", "503"),
        assess("error_retryable"),
        retry("retry_same"),
        fail("service_unavailable", "503"),
        assess("error_retryable"),
        say("Drug safety information is currently unavailable."),
    ]
    state, _ = run("Check FDA warnings for amiodarone", events)
    assert decisions(state, "ERROR_HANDLER")[-1] == "skip: service unavailable after a retry"
    assert state.error_messages == ("Drug Safety Report is currently unavailable.",)


def test_retry_different_args_reruns_stage_two_with_the_failed_attempt():
    events = [
        intent("TOOL_NEEDED", "search_medical_literature"),
        select("search_medical_literature"),
        arguments(query="dofetilide hemodialysis pharmacokinetics 2024"),
        fail("not_found", "0 hits"),
        assess("error_fatal"),
        retry("retry_different_args"),
    ]
    states, steps = trail(request("Find studies on dofetilide in dialysis"), events)
    stage2 = llm_call(steps[-1])
    assert (stage2.node, stage2.schema_name) == ("TOOL_SELECT", "LiteratureSearchArgs")
    assert (
        'A previous attempt with the arguments {"query": "dofetilide hemodialysis pharmacokinetics 2024"} '
        "did not succeed: No results were found for dofetilide hemodialysis pharmacokinetics 2024 in the "
        "Medical Literature."
    ) in user_message(stage2)
    assert states[-1].path[-2:] == ("ERROR_HANDLER", "TOOL_SELECT")
    _, step = advance(states[-1], arguments(query="dofetilide dialysis"), CONFIG)
    assert step == ToolCall(
        tool="search_medical_literature", args={"query": "dofetilide dialysis"}, deadline_s=10.0
    )


def test_retry_different_args_that_repeats_the_failed_call_is_a_duplicate_stop():
    events = [
        intent("TOOL_NEEDED", "search_medical_literature"),
        select("search_medical_literature"),
        arguments(query="dofetilide dialysis"),
        fail("not_found", "0 hits"),
        assess("error_fatal"),
        retry("retry_different_args"),
        arguments(query="dofetilide dialysis"),
        say("No studies were found on dofetilide in dialysis."),
    ]
    state, _ = run("Find studies on dofetilide in dialysis", events)
    assert len(state.executed) == 1
    assert state.error_messages == (
        "No results were found for dofetilide dialysis in the Medical Literature.",
    )
    assert (
        decisions(state, "DETERMINISTIC_ROUTER")[-1]
        == "route → SYNTHESIZE: duplicate tool call, not executed"
    )


def test_total_retries_are_capped_per_turn():
    config = replace(CONFIG, max_total_retries=1)
    state, _ = run_scripted(
        request("Check FDA warnings for amiodarone"), [*_timeouts(2), say("Unavailable.")], config
    )
    assert decisions(state, "ERROR_HANDLER")[-1] == "skip: total retries=1 reached MAX_TOTAL_RETRIES"


@pytest.mark.parametrize(
    ("outcome", "question"),
    [
        (fail("multiple_patient_matches", "2 hits"),
         "I found multiple patients matching that name. Could you clarify which one?"),
        (fail("missing_patient_id", "patient required"),
         "I need a patient ID to proceed. Could you provide one?"),
        (fail("ambiguous_drug_name", "ambiguous", suggestions=["hydroxyzine", "hydralazine"]),
         "Did you mean hydroxyzine or hydralazine?"),
        (fail("invalid_args", "400 bad request"), "I need more information: name"),
    ],
)  # fmt: skip
def test_error_handler_ask_user_triggers(outcome, question: str):
    events = [
        intent("TOOL_NEEDED", "search_patient"),
        select("search_patient"),
        arguments(name="hydro"),
        outcome,
        assess("error_fatal"),
        say("Could you clarify?"),
    ]
    state, response = run("Search for patient hydro", events)
    assert response == Respond(answer="Could you clarify?", clarification=question)
    assert "RetryStrategy" not in {d.schema_name for d in state.trace}
    assert state.path[-2:] == ("ERROR_HANDLER", "SYNTHESIZE") and state.llm_calls == 5


@pytest.mark.parametrize(("error_type", "expected"), [("timeout", "retry_same"), ("not_found", None)])
def test_a_retry_answer_that_does_not_validate_falls_back_on_the_error_type(
    error_type: str, expected: str | None
):
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail(error_type),
        assess("error_fatal"),
        say("maybe retry?"),
    ]
    states, steps = trail(request("Check FDA warnings for amiodarone"), events)
    if expected is None:
        assert isinstance(steps[-1], LlmCall) and steps[-1].node == "SYNTHESIZE"
        assert decisions(states[-1], "ERROR_HANDLER") == ["answer invalid, error not transient → skip"]
    else:
        assert isinstance(steps[-1], ToolCall)
        assert decisions(states[-1], "ERROR_HANDLER") == [
            "retry_same (answer invalid, transient error), retry_count → 1"
        ]


def test_a_tool_error_the_model_calls_a_success_still_goes_to_the_error_handler():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail("timeout"),
        assess("success_rich"),
    ]
    states, steps = trail(request("Check FDA warnings for amiodarone"), events)
    assert decisions(states[-1], "DETERMINISTIC_ROUTER") == ["route → ERROR_HANDLER: tool error (timeout)"]
    assert llm_call(steps[-1]).schema_name == "RetryStrategy"


# ── ⑦ SYNTHESIZE ──


def test_synthesis_prompt_is_the_section_8_prompt_with_only_the_sections_that_have_content():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety", "Dofetilide safety"),
        *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, {"boxed_warning": "TdP"}),
    ]
    _, steps = trail(request("Check FDA warnings for dofetilide"), events)
    call = llm_call(steps[-1])
    assert system_message(call).startswith(
        "You are a clinical decision-support assistant. Provide a clear, concise"
    )
    assert user_message(call) == (
        "Include only the most critical findings.\n\n"
        "Clinician's question: Check FDA warnings for dofetilide\n\n"
        "Clinical context: Dofetilide safety\n\n"
        "Retrieved information:\n[Drug Safety Report]\nBoxed warning: TdP"
    )


def test_the_brief_variant_is_not_used_for_a_write():
    events = [
        intent("TOOL_NEEDED", "add_allergy"),
        *tool_step(
            "add_allergy",
            {"patient_id": "abc-123", "substance": "penicillin", "reaction": "hives"},
            {"status": "saved"},
        ),
    ]
    _, steps = trail(request("Document a penicillin allergy with hives for abc-123"), events)
    assert not user_message(steps[-1]).startswith("Include only")


CONTEXT_TURNS = {
    "direct": ("What is hypertension?", [intent("DIRECT", summary="Definition of hypertension")]),
    "single tool": (
        "Check FDA warnings for dofetilide",
        [intent("TOOL_NEEDED", "check_drug_safety", "Dofetilide safety"),
         *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY)],
    ),
    "ask_user": (
        "Search for patient James Wilson",
        [intent("TOOL_NEEDED", "search_patient", "Find James Wilson"),
         *tool_step("search_patient", {"name": "James Wilson"}, JAMES_WILSONS)],
    ),
    "skip": (
        "Check FDA warnings for zorblaxin",
        [intent("TOOL_NEEDED", "check_drug_safety", "Zorblaxin safety"), select("check_drug_safety"),
         arguments(drug_name="zorblaxin"), fail("drug_not_in_database", "unknown"), assess("error_fatal")],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CONTEXT_TURNS))
def test_synthesis_carries_the_task_summary_as_clinical_context_on_every_path(name: str):
    query, events = CONTEXT_TURNS[name]
    states, steps = trail(request(query), events)
    call = llm_call(steps[-1])
    assert call.node == "SYNTHESIZE"
    summary = states[-1].task_summary
    assert summary and f"Clinical context: {summary}" in user_message(call).split("\n\n")


@pytest.mark.parametrize(
    ("query", "event", "summary", "next_node"),
    [
        ("Hello", say("not json"), "The clinician's question as asked.", "SYNTHESIZE"),
        ("Explain metformin MOA", intent("DIRECT", summary="  "), "The clinician's question as asked; drugs: "
         "metformin.", "SYNTHESIZE"),
        ("Prescribe warfarin for PT-TEST-009", say("{"), "The clinician's question as asked; patient: "
         "PT-TEST-009; drugs: warfarin; actions: prescribe.", "TOOL_SELECT"),
    ],
)  # fmt: skip
def test_a_missing_or_blank_task_summary_becomes_the_question_with_its_entities(
    query: str, event: LlmAnswer, summary: str, next_node: str
):
    states, steps = trail(request(query), [event])
    assert states[-1].task_summary == summary
    assert llm_call(steps[-1]).node == next_node
    if next_node == "SYNTHESIZE":
        assert f"Clinical context: {summary}" in user_message(steps[-1]).split("\n\n")


def test_result_classification_carries_the_fallback_summary_too():
    prescription = {"patient_id": "PT-TEST-009", "medication_name": "warfarin", "dosage": "5 mg",
                    "frequency": "daily"}  # fmt: skip
    events = [say("{"), select("prescribe_medication"), arguments(**prescription), ok({"proposal_id": "p-1"})]
    states, steps = trail(request("Prescribe warfarin 5 mg daily for PT-TEST-009"), events)
    assert llm_call(steps[-1]).node == "RESULT_CLASSIFY"
    assert f"Clinical context: {states[-1].task_summary}\n" in system_message(steps[-1])
    assert states[-1].task_summary.startswith("The clinician's question as asked; patient: PT-TEST-009")


def test_an_ask_user_is_synthesized_from_the_section_9_message():
    events = [intent("TOOL_NEEDED", "search_patient"),
              *tool_step("search_patient", {"name": "James Wilson"}, JAMES_WILSONS)]  # fmt: skip
    states, steps = trail(request("Search for patient James Wilson"), events)
    message = states[-1].clarification_request
    assert message is not None and message.startswith("I found 3 patients matching 'James Wilson'.")
    call = llm_call(steps[-1])
    assert (call.node, call.schema_name, call.temperature, call.max_tokens) == ("SYNTHESIZE", None, 0.5, 256)
    assert user_message(call).endswith("\n\n" + CLARIFICATION_SECTION.format(message=message))
    assert "Retrieved information:\n[Patient Search]" in user_message(call)


def test_an_empty_clarification_falls_back_on_the_section_9_message():
    events = [intent("TOOL_NEEDED", "search_patient"),
              *tool_step("search_patient", {"name": "James Wilson"}, JAMES_WILSONS), say("  ")]  # fmt: skip
    state, response = run("Search for patient James Wilson", events)
    assert response.answer == response.clarification == state.clarification_request
    assert decisions(state, "SYNTHESIZE") == ["empty answer → the ask_user message"]


def test_a_synthesis_without_an_ask_user_has_no_clarification_section():
    _, steps = trail(request("What is hypertension?"), [intent("DIRECT")])
    assert "Clarification needed" not in user_message(steps[-1])
