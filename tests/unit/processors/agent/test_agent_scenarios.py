"""§15 integration scenarios (end to end, scripted) and the anti-pattern regression rows."""

from __future__ import annotations

import json

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
    request,
    retry,
    run,
    say,
    select,
    system_message,
    tool_step,
    trail,
    user_message,
)
from agent_harness import args as arguments
from pydantic import BaseModel

from processors.agent import LlmCall, Respond, ToolCall
from processors.agent.schemas import RESPONSE_MODELS, ToolSelection
from processors.agent.tools import TOOLS

# ── Integration (§15) ──


def test_hello_how_are_you_is_a_direct_friendly_response_without_tools():
    state, response = run(
        "Hello, how are you?", [intent("DIRECT", summary="Greeting"), say("Hello! How can I help?")]
    )
    assert state.path == DIRECT_PATH and state.executed == () and state.llm_calls == 2
    assert response == Respond(answer="Hello! How can I help?")


def test_what_is_hypertension_is_direct():
    text = "Hypertension is persistently elevated arterial blood pressure (≥130/80 mmHg)."
    state, response = run("What is hypertension?", [intent("DIRECT"), say(text)])
    assert state.path == DIRECT_PATH and state.llm_calls == 2 and response.answer == text


def test_check_fda_warnings_for_dofetilide_is_single_tool_with_the_boxed_warning():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY),
        say("Boxed warning: Torsade de Pointes; start only with continuous ECG monitoring for 3 days."),
    ]
    states, steps = trail(request("Check FDA warnings for dofetilide"), events)
    assert states[-1].path == SINGLE_PATH and states[-1].llm_calls == 5
    assert "Boxed warning: Torsade de Pointes" in user_message(steps[-2])


def test_find_patient_maria_garcia_and_check_her_chart_calls_both_tools():
    events = [
        intent("TOOL_NEEDED", "search_patient"),
        *tool_step("search_patient", {"name": "Maria Garcia"}, {"matches": [{"patient_id": "mgr-204"}]}),
        *tool_step("get_patient_chart", {"patient_id": "mgr-204"}, {"diagnoses": ["type 2 diabetes"]}),
        say("Maria Garcia (mgr-204) has type 2 diabetes."),
    ]
    state, _ = run("Find patient Maria Garcia and check her chart", events)
    assert state.path == ("INPUT_ASSEMBLY", "INTENT_CLASSIFY", *LOOP, *LOOP, "SYNTHESIZE")
    assert [e.tool for e in state.executed] == ["search_patient", "get_patient_chart"]
    assert state.llm_calls == 8


def test_interactions_between_three_drugs_is_single_tool_with_three_drugs_in_args():
    drugs = ["warfarin", "aspirin", "ibuprofen"]
    events = [
        intent("TOOL_NEEDED", "check_drug_interactions"),
        *tool_step(
            "check_drug_interactions", {"drug_names": drugs}, {"severity": "major", "mechanism": "additive"}
        ),
        say("Major interaction: additive bleeding risk."),
    ]
    state, _ = run("Check interactions between warfarin, aspirin, and ibuprofen", events)
    assert state.extracted_entities.drug_mentions == tuple(drugs)
    assert state.path == SINGLE_PATH and len(state.path) == 7
    assert state.executed[0].args == {"drug_names": drugs}


def test_amiodarone_timeout_retries_then_synthesizes():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail("timeout"),
        assess("error_retryable"),
        retry("retry_same"),
        *tool_step("check_drug_safety", {}, {"boxed_warning": "Pulmonary toxicity"})[2:],
        say("Amiodarone: boxed warning for pulmonary toxicity."),
    ]
    state, _ = run("Check FDA warnings for amiodarone", events)
    assert "ERROR_HANDLER" in state.path and state.path[-1] == "SYNTHESIZE"
    assert [e.outcome for e in state.executed] == ["timeout", "success"]
    assert len(set(state.path)) == 8


def test_search_for_patient_james_wilson_with_three_matches_returns_a_clarification():
    matches = [{"patient_id": f"jwi-00{i}", "name": "James Wilson"} for i in (1, 2, 3)]
    events = [
        intent("TOOL_NEEDED", "search_patient"),
        *tool_step("search_patient", {"name": "James Wilson"}, {"matches": matches}, "success_partial"),
        say("Which James Wilson do you mean: jwi-001, jwi-002 or jwi-003?"),
    ]
    state, response = run("Search for patient James Wilson", events)
    assert state.path == SINGLE_PATH
    assert response.answer == "Which James Wilson do you mean: jwi-001, jwi-002 or jwi-003?"
    assert response.clarification is not None and response.clarification.startswith(
        "I found 3 patients matching 'James Wilson'. Which one did you mean?"
    )
    assert state.llm_calls == 5


def test_chest_x_ray_what_do_you_see_is_image_plus_direct():
    findings = {"modality": "X-ray", "findings": ["Right lower lobe consolidation"], "confidence": 0.82}
    text = "The chest X-ray shows right lower lobe consolidation, consistent with pneumonia."
    events = [
        say(json.dumps(findings)),
        intent("DIRECT", summary="Interpret chest X-ray"),
        say(text),
    ]
    states, steps = trail(request("What do you see?", image_ref="blob://xr-1"), events)
    vision = llm_call(steps[0])
    assert (vision.node, vision.schema_name, vision.temperature, vision.max_tokens) == (
        "INPUT_ASSEMBLY", "ImageFindings", 0.3, 512,
    )  # fmt: skip
    assert vision.messages[-1]["image_ref"] == "blob://xr-1"
    final = states[-1]
    assert final.extracted_entities.has_image and final.image_findings is not None
    assert final.path == DIRECT_PATH and final.llm_calls == 3
    assert "Image findings (X-ray, confidence 0.82):\n- Right lower lobe consolidation" in user_message(
        steps[-2]
    )
    assert steps[-1] == Respond(answer=text)


def test_an_image_analysis_that_does_not_validate_is_reported_as_unavailable():
    state, _ = run(
        "What do you see?", [say("a lung"), intent("DIRECT"), say("Unavailable.")], image_ref="b://1"
    )
    assert state.image_findings is None
    assert state.error_messages == ("The attached image could not be analyzed.",)


def test_prescribe_metformin_500mg_for_abc_123_is_a_single_write_with_a_confirmation():
    values = {
        "patient_id": "abc-123",
        "medication_name": "metformin",
        "dosage": "500mg",
        "frequency": "daily",
    }
    events = [
        intent("TOOL_NEEDED", "prescribe_medication"),
        *tool_step("prescribe_medication", values, {"order_id": "ord-77", "status": "active"}),
        say("Metformin 500 mg daily has been ordered for abc-123."),
    ]
    states, steps = trail(request("Prescribe metformin 500mg for abc-123"), events)
    assert steps[3] == ToolCall(tool="prescribe_medication", args=values, deadline_s=10.0)
    assert "Detected patient ID: abc-123\nDetected drug name: metformin" in system_message(steps[2])
    assert TOOLS["prescribe_medication"].writes
    assert states[-1].path == SINGLE_PATH
    assert decisions(states[-1], "DETERMINISTIC_ROUTER") == [
        "route → SYNTHESIZE: task pattern satisfied (prescribe)"
    ]
    assert "[Prescription]" in user_message(steps[-2])


# ── Regression (§15, anti-patterns of §13) ──


def test_a_multi_tool_query_is_never_planned_upfront():
    query = "Find patient John Smith, check his chart, and verify metformin safety"
    _, steps = trail(request(query), [intent("TOOL_NEEDED", "search_patient")])
    stage1 = llm_call(steps[-1])
    assert stage1.response_model is ToolSelection
    assert list(ToolSelection.model_json_schema()["properties"]) == ["tool_name"]
    assert all("plan" not in name.lower() and "step" not in name.lower() for name in RESPONSE_MODELS)


def test_sufficiency_is_never_asked_of_the_model():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY),
    ]
    states, steps = trail(request("Check FDA warnings for dofetilide"), events)
    # The call after the classification is synthesis: no model call decides whether the data is enough.
    assert [llm_call(s).node for s in steps[-2:]] == ["RESULT_CLASSIFY", "SYNTHESIZE"]
    assert states[-1].llm_calls == 5  # synthesis counted as it is emitted
    for model in RESPONSE_MODELS.values():
        assert not any(
            w in f for f in model.model_fields for w in ("sufficien", "enough", "complete", "done")
        )


def test_multiple_patient_matches_ask_the_user_and_never_retry():
    matches = [{"patient_id": "jwi-001"}, {"patient_id": "jwi-002"}]
    for quality in ("success_partial", "error_fatal", "error_retryable"):
        events = [
            intent("TOOL_NEEDED", "search_patient"),
            *tool_step("search_patient", {"name": "James Wilson"}, {"matches": matches}, quality),
            say("Which James Wilson do you mean?"),
        ]
        state, response = run("Search for patient James Wilson", events)
        assert response.clarification is not None, quality
        assert "RetryStrategy" not in {d.schema_name for d in state.trace}
        assert len(state.executed) == 1


def test_a_tool_error_reaches_synthesis_pre_formatted_never_raw():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        select("check_drug_safety"),
        arguments(drug_name="amiodarone"),
        fail("server_error", "Traceback (most recent call last): KeyError: 'openfda'"),
        assess("error_retryable"),
        retry("retry_same"),
        fail("server_error", "Traceback (most recent call last): KeyError: 'openfda'"),
        assess("error_retryable"),
        retry("retry_same"),
        fail("server_error", "Traceback (most recent call last): KeyError: 'openfda'"),
        assess("error_retryable"),
    ]
    _, steps = trail(request("Check FDA warnings for amiodarone"), events)
    synthesis = llm_call(steps[-1])
    assert synthesis.node == "SYNTHESIZE"
    assert "state this clearly without speculating" in system_message(synthesis)
    assert (
        "Information that could not be retrieved:\n- The Drug Safety Report experienced a temporary error. "
        "The system will retry automatically."
    ) in user_message(synthesis)
    for step in steps:
        if isinstance(step, LlmCall):
            assert all(
                "Traceback" not in m["content"] and "openfda" not in m["content"] for m in step.messages
            )


def test_synthesis_output_never_names_a_tool():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY),
        say("Per [check_drug_safety] and check_drug_interactions, dofetilide carries a boxed warning."),
    ]
    _, steps = trail(request("Check FDA warnings for dofetilide"), events)
    assert steps[-1] == Respond(
        answer="Per [Drug Safety Report] and Drug Interaction Check, dofetilide carries a boxed warning."
    )
    for step in steps:
        if isinstance(step, LlmCall) and step.node in ("SYNTHESIZE", "RESULT_CLASSIFY"):
            content = " ".join(m["content"] for m in step.messages)
            assert not any(name in content for name in TOOLS)


def test_synthesis_output_is_never_empty():
    for text in ("", "   \n"):
        state, response = run("What is hypertension?", [intent("DIRECT"), say(text)])
        assert response.answer and response.answer.strip()
        assert decisions(state, "SYNTHESIZE") == ["empty answer → fallback text"]


def test_every_model_call_is_constrained_except_synthesis():
    events = [
        intent("TOOL_NEEDED", "check_drug_safety"),
        *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY),
    ]
    _, steps = trail(request("Check FDA warnings for dofetilide"), events)
    calls = [s for s in steps if isinstance(s, LlmCall)]
    for call in calls:
        constrained = call.node != "SYNTHESIZE"
        assert (call.response_model is not None) == constrained
        assert call.temperature == (0.0 if constrained else 0.5)
        if call.response_model is not None:
            assert issubclass(call.response_model, BaseModel)
