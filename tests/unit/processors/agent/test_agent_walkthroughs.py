"""The spec's four walkthrough examples, step by step: path, decisions, prompts and model-call counts."""

from __future__ import annotations

from agent_harness import (
    DIRECT_PATH,
    DOFETILIDE_SAFETY,
    LOOP,
    SINGLE_PATH,
    assess,
    decisions,
    fail,
    intent,
    llm_call,
    ok,
    request,
    retry,
    say,
    select,
    system_message,
    trail,
    user_message,
)
from agent_harness import args as arguments

from processors.agent import Respond, ToolCall


def test_example_1_direct_response_what_is_hypertension():
    summary = "User is asking for a general medical definition of hypertension"
    text = "Hypertension is a condition characterized by persistently elevated arterial blood pressure."
    states, steps = trail(request("What is hypertension?"), [intent("DIRECT", summary=summary), say(text)])
    final = states[-1]
    entities = final.extracted_entities
    assert (entities.patient_ids, entities.drug_mentions, entities.action_verbs) == ((), (), ())
    assert entities.has_image is False
    assert (final.intent, final.task_summary, final.suggested_tool) == ("DIRECT", summary, None)
    synthesis = llm_call(steps[1])
    assert (synthesis.node, synthesis.schema_name, synthesis.response_model) == ("SYNTHESIZE", None, None)
    assert (synthesis.temperature, synthesis.max_tokens) == (0.5, 256)
    assert f"Clinical context: {summary}" in user_message(synthesis)
    assert "Retrieved information" not in user_message(synthesis)
    assert steps[-1] == Respond(answer=text)
    assert final.path == DIRECT_PATH
    assert final.llm_calls == 2
    assert final.final_response == text and final.done


def test_example_2_single_tool_check_fda_warnings_for_dofetilide():
    summary = "Clinician requesting FDA boxed warnings and safety information for dofetilide"
    events = [
        intent("TOOL_NEEDED", "check_drug_safety", summary),
        select("check_drug_safety"),
        arguments(drug_name="dofetilide"),
        ok(DOFETILIDE_SAFETY),
        assess("success_rich", "Complete FDA boxed warning data returned including Torsade de Pointes risk"),
        say("Dofetilide carries an FDA boxed warning for Torsade de Pointes."),
    ]
    states, steps = trail(request("Check FDA warnings for dofetilide"), events)
    final = states[-1]
    assert final.extracted_entities.drug_mentions == ("dofetilide",)
    assert (final.intent, final.suggested_tool) == ("TOOL_NEEDED", "check_drug_safety")
    # Stage 1: full_desc tools and the 1-shot example matched to the suggested tool.
    stage1 = llm_call(steps[1])
    assert (stage1.node, stage1.schema_name, stage1.temperature, stage1.max_tokens) == (
        "TOOL_SELECT", "ToolSelection", 0.0, 64,
    )  # fmt: skip
    assert 'User: "Check FDA warnings for dofetilide"\nTool: check_drug_safety' in system_message(stage1)
    # Stage 2: DrugSafetyArgs with the entity hint.
    stage2 = llm_call(steps[2])
    assert (stage2.node, stage2.schema_name, stage2.temperature, stage2.max_tokens) == (
        "TOOL_SELECT", "DrugSafetyArgs", 0.0, 128,
    )  # fmt: skip
    assert "Detected drug name: dofetilide" in system_message(stage2)
    assert steps[3] == ToolCall(tool="check_drug_safety", args={"drug_name": "dofetilide"}, deadline_s=10.0)
    # Result formatted with its clinical label.
    classify = llm_call(steps[4])
    assert (classify.schema_name, classify.temperature, classify.max_tokens) == ("ResultAssessment", 0.0, 128)
    assert "Tool used: Drug Safety Report\nResult:\n[Drug Safety Report]\n" in system_message(classify)
    assert "check_drug_safety" not in system_message(classify)
    assert decisions(final, "DETERMINISTIC_ROUTER") == [
        "route → SYNTHESIZE: task pattern satisfied (drug_safety)"
    ]
    assert final.step_count == 1
    # Brief variant for a single-tool lookup.
    synthesis = llm_call(steps[5])
    assert user_message(synthesis).startswith("Include only the most critical findings.")
    assert "[Drug Safety Report]" in user_message(synthesis) and "Torsade de Pointes" in user_message(
        synthesis
    )
    assert final.path == SINGLE_PATH
    assert final.llm_calls == 5
    assert isinstance(steps[-1], Respond) and steps[-1].answer.startswith("Dofetilide carries")


def test_example_3_multi_tool_find_patient_check_chart_verify_metformin():
    query = "Find patient John Smith, check his chart, and verify metformin safety"
    chart = {"patient_id": "abc-123", "medications": ["metformin 500 mg BID"], "egfr": "28 mL/min/1.73m2"}
    events = [
        intent("TOOL_NEEDED", "search_patient", "Look up John Smith, review record, check metformin safety"),
        select("search_patient"),
        arguments(name="John Smith"),
        ok({"matches": [{"patient_id": "abc-123", "name": "John Smith", "birth_date": "1958-04-02"}]}),
        assess("success_rich"),
        select("get_patient_chart"),
        arguments(patient_id="abc-123"),
        ok(chart),
        assess("success_rich"),
        select("check_drug_safety"),
        arguments(drug_name="metformin"),
        ok({"boxed_warning": "Lactic acidosis; contraindicated with eGFR below 30"}),
        assess("success_rich"),
        say("John Smith (abc-123) takes metformin; with an eGFR of 28 it is contraindicated."),
    ]
    states, steps = trail(request(query), events)
    final = states[-1]
    entities = final.extracted_entities
    assert entities.drug_mentions == ("metformin",)
    assert entities.action_verbs == ("find", "check", "verify")
    assert final.suggested_tool == "search_patient"
    assert decisions(final, "DETERMINISTIC_ROUTER") == [
        "route → TOOL_SELECT: task pattern (drug_safety, patient_lookup_and_review) needs check_drug_safety, "
        "get_patient_chart",
        "route → TOOL_SELECT: task pattern (drug_safety, patient_lookup_and_review) needs check_drug_safety",
        "route → SYNTHESIZE: task pattern satisfied (drug_safety, patient_lookup_and_review)",
    ]
    # Re-entry: the second selection sees the first result; stage 2 is hinted with the found id.
    second_stage1 = user_message(steps[5])
    assert "Results so far:\n[Patient Search]" in second_stage1 and "select the next tool." in second_stage1
    assert "Patient ID from the patient search: abc-123" in system_message(steps[6])
    assert [(e.tool, e.args) for e in final.executed] == [
        ("search_patient", {"name": "John Smith"}),
        ("get_patient_chart", {"patient_id": "abc-123"}),
        ("check_drug_safety", {"drug_name": "metformin"}),
    ]
    assert final.step_count == 3
    synthesis = user_message(steps[-2])
    assert "[Patient Record]" in synthesis and "[Drug Safety Report]" in synthesis
    assert not synthesis.startswith("Include only")
    assert final.path == ("INPUT_ASSEMBLY", "INTENT_CLASSIFY", *LOOP, *LOOP, *LOOP, "SYNTHESIZE")
    assert final.llm_calls == 11


def test_example_4_error_recovery_amiodarone_timeout_then_retry_same():
    data = {"drug_name": "amiodarone", "boxed_warning": "Pulmonary toxicity, hepatic injury, arrhythmia"}
    events = [
        intent("TOOL_NEEDED", "check_drug_safety", "FDA warnings for amiodarone"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail("timeout", "ReadTimeout: upstream did not answer in 10s"),
        assess("error_retryable", "The drug safety service timed out."),
        retry("retry_same"),
        ok(data),
        assess("success_rich"),
        say("Amiodarone carries boxed warnings for pulmonary toxicity, hepatic injury and arrhythmia."),
    ]
    states, steps = trail(request("Check FDA warnings for amiodarone"), events)
    final = states[-1]
    # TOOL_EXECUTE pre-formats the timeout; the model never sees the raw error.
    classify = system_message(steps[4])
    assert "The Drug Safety Report was temporarily unavailable. Please try again shortly." in classify
    assert "ReadTimeout" not in classify
    assert decisions(final, "DETERMINISTIC_ROUTER")[0] == "route → ERROR_HANDLER: tool error (timeout)"
    strategy = llm_call(steps[5])
    assert (strategy.node, strategy.schema_name, strategy.temperature, strategy.max_tokens) == (
        "ERROR_HANDLER", "RetryStrategy", 0.0, 64,
    )  # fmt: skip
    assert "ReadTimeout" not in user_message(strategy)
    assert decisions(final, "ERROR_HANDLER") == ["retry_same, retry_count → 1"]
    assert decisions(final, "TOOL_SELECT")[-1] == "retry_same: same tool and arguments, no model call"
    assert (
        steps[6]
        == steps[3]
        == ToolCall(tool="check_drug_safety", args={"drug_name": "amiodarone"}, deadline_s=10)
    )
    assert [e.outcome for e in final.executed] == ["timeout", "success"]
    assert (final.retry_count, final.step_count) == (1, 1)
    synthesis = user_message(steps[-2])
    assert "Pulmonary toxicity" in synthesis and "temporarily unavailable" not in synthesis
    assert final.error_messages == ()
    assert final.path == (
        "INPUT_ASSEMBLY", "INTENT_CLASSIFY", "TOOL_SELECT", "TOOL_EXECUTE", "RESULT_CLASSIFY",
        "DETERMINISTIC_ROUTER", "ERROR_HANDLER", "TOOL_SELECT", "TOOL_EXECUTE", "RESULT_CLASSIFY",
        "DETERMINISTIC_ROUTER", "SYNTHESIZE",
    )  # fmt: skip
    assert final.llm_calls == 7
