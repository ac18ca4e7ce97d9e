"""Replay and resumption: determinism, the state's JSON round trip mid-turn, the script contract, the
path and model-call budget of each path, and termination under arbitrary answers (hypothesis)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agent_harness import (
    CONFIG,
    DIRECT_PATH,
    DOFETILIDE_SAFETY,
    LOOP,
    SINGLE_PATH,
    assess,
    fail,
    intent,
    ok,
    request,
    retry,
    say,
    select,
    tool_step,
)
from agent_harness import args as arguments
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.agent import (
    AgentProtocolError,
    AgentRequest,
    AgentState,
    LlmAnswer,
    LlmCall,
    Respond,
    ScriptError,
    ToolCall,
    ToolOutcome,
    advance,
    run_scripted,
    start,
)
from processors.agent.state import NodeName
from processors.agent.tools import TOOLS, ErrorType

ROOT = Path(__file__).resolve().parents[4]

DOFETILIDE = [
    intent("TOOL_NEEDED", "check_drug_safety", "Dofetilide safety"),
    *tool_step("check_drug_safety", {"drug_name": "dofetilide"}, DOFETILIDE_SAFETY),
    say("Dofetilide: boxed warning for Torsade de Pointes."),
]
WALKTHROUGH_3 = [
    intent("TOOL_NEEDED", "search_patient"),
    *tool_step("search_patient", {"name": "John Smith"}, {"matches": [{"patient_id": "abc-123"}]}),
    *tool_step("get_patient_chart", {"patient_id": "abc-123"}, {"medications": ["metformin"]}),
    *tool_step("check_drug_safety", {"drug_name": "metformin"}, {"boxed_warning": "Lactic acidosis"}),
    say("John Smith takes metformin; boxed warning for lactic acidosis."),
]
RETRY_SAME = [
    intent("TOOL_NEEDED", "check_drug_safety"),
    select("check_drug_safety"),
    arguments(drug_name="amiodarone"),
    fail("timeout"),
    assess("error_retryable"),
    retry("retry_same"),
    ok({"boxed_warning": "Pulmonary toxicity"}),
    assess("success_rich"),
    say("Amiodarone: pulmonary toxicity."),
]
RETRY_DIFFERENT = [
    intent("TOOL_NEEDED", "search_medical_literature"),
    select("search_medical_literature"),
    arguments(query="dofetilide hemodialysis 2024"),
    fail("not_found"),
    assess("error_fatal"),
    retry("retry_different_args"),
    arguments(query="dofetilide dialysis"),
    ok({"articles": [{"title": "Dofetilide in ESRD"}]}),
    assess("success_rich"),
    say("One study describes dofetilide in end-stage renal disease."),
]
THREE_MATCHES = [
    intent("TOOL_NEEDED", "search_patient"),
    *tool_step(
        "search_patient", {"name": "James Wilson"}, {"matches": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}
    ),
    say("Three patients are named James Wilson: which one do you mean?"),
]
IMAGE = [
    say(json.dumps({"modality": "CT", "findings": ["Ground-glass opacities"], "confidence": 0.7})),
    intent("DIRECT"),
    say("CT shows ground-glass opacities."),
]

SCRIPTS = {
    "direct": (request("What is hypertension?"), [intent("DIRECT"), say("Elevated blood pressure.")]),
    "single": (request("Check FDA warnings for dofetilide"), DOFETILIDE),
    "multi": (
        request("Find patient John Smith, check his chart, and verify metformin safety"),
        WALKTHROUGH_3,
    ),
    "retry_same": (request("Check FDA warnings for amiodarone"), RETRY_SAME),
    "retry_different": (request("Find studies on dofetilide in dialysis"), RETRY_DIFFERENT),
    "ask_user": (request("Search for patient James Wilson"), THREE_MATCHES),
    "image": (request("What do you see?", image_ref="blob://ct-1"), IMAGE),
}

RETRY_PATH = ("INPUT_ASSEMBLY", "INTENT_CLASSIFY", *LOOP, "ERROR_HANDLER", *LOOP, "SYNTHESIZE")


@pytest.mark.parametrize(
    ("name", "calls", "path"),
    [
        ("direct", 2, DIRECT_PATH),
        ("single", 5, SINGLE_PATH),
        ("multi", 11, ("INPUT_ASSEMBLY", "INTENT_CLASSIFY", *LOOP, *LOOP, *LOOP, "SYNTHESIZE")),
        ("retry_same", 7, RETRY_PATH),
        ("retry_different", 8, RETRY_PATH),
        ("ask_user", 5, SINGLE_PATH),
        ("image", 3, DIRECT_PATH),
    ],
)
def test_paths_and_model_call_budgets(name: str, calls: int, path: tuple[NodeName, ...]):
    """Budgets: direct 2, single tool 5, +3 per further tool (two-stage TOOL_SELECT counts 2)."""
    state, _ = run_scripted(*SCRIPTS[name], CONFIG)
    assert state.path == path
    assert state.llm_calls == calls
    assert state.llm_calls == sum(d.llm_answer is not None for d in state.trace)


def test_two_tools_cost_eight_model_calls():
    events = [
        intent("TOOL_NEEDED", "search_patient"),
        *tool_step("search_patient", {"name": "Maria Garcia"}, {"matches": [{"patient_id": "mgr-204"}]}),
        *tool_step("get_patient_chart", {"patient_id": "mgr-204"}, {"diagnoses": ["T2DM"]}),
        say("Maria Garcia has T2DM."),
    ]
    state, _ = run_scripted(request("Find patient Maria Garcia and check her chart"), events, CONFIG)
    assert state.llm_calls == 8


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_same_script_gives_the_same_state_byte_for_byte(name: str):
    first, answer1 = run_scripted(*SCRIPTS[name], CONFIG)
    second, answer2 = run_scripted(*SCRIPTS[name], CONFIG)
    assert first.model_dump_json() == second.model_dump_json()
    assert answer1 == answer2


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_state_resumed_from_its_json_after_every_step_ends_the_same(name: str):
    req, events = SCRIPTS[name]
    state, step = start(req, CONFIG)
    for event in events:
        stored = state.model_dump_json()
        restored = AgentState.model_validate_json(stored)
        assert restored == state and restored.model_dump_json() == stored
        if isinstance(restored.pending, LlmCall):
            assert restored.pending.response_model is state.pending.response_model  # type: ignore[union-attr]
        state, step = advance(restored, event, CONFIG)
    direct, response = run_scripted(req, events, CONFIG)
    assert state.model_dump_json() == direct.model_dump_json()
    assert step == response


_SUBPROCESS = """
import json, sys
from processors.agent import AgentRequest, LlmAnswer, ToolOutcome, default_config, run_scripted
payload = json.loads(sys.stdin.read())
events = [LlmAnswer(**e["llm"]) if "llm" in e else ToolOutcome(**e["tool"]) for e in payload["events"]]
config = default_config(payload["drugs"])
state, _ = run_scripted(AgentRequest.model_validate(payload["request"]), events, config)
sys.stdout.write(state.model_dump_json())
"""


def test_the_state_is_the_same_across_processes_and_hash_seeds():
    req, events = SCRIPTS["multi"]
    payload = json.dumps(
        {
            "request": req.model_dump(),
            "drugs": sorted(CONFIG.drug_names),
            "events": [{"llm" if isinstance(e, LlmAnswer) else "tool": e.model_dump()} for e in events],
        }
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", _SUBPROCESS],
            input=payload,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("0", "1", "4242")
    }
    assert outputs == {run_scripted(req, events, CONFIG)[0].model_dump_json()}


# ── The script contract and the protocol ──


def test_a_script_that_runs_out_raises():
    with pytest.raises(
        ScriptError, match=r"ran out after 1 events; the graph waits for SYNTHESIZE \(free text\)"
    ):
        run_scripted(request("Hello"), [intent("DIRECT")], CONFIG)
    with pytest.raises(ScriptError, match="waits for tool check_drug_safety"):
        run_scripted(request("Check FDA warnings for dofetilide"), DOFETILIDE[:3], CONFIG)


def test_a_script_with_leftovers_raises():
    with pytest.raises(ScriptError, match="ended after 2 events; 1 left over"):
        run_scripted(request("Hello"), [intent("DIRECT"), say("Hi"), say("again")], CONFIG)


def test_an_event_that_does_not_answer_the_pending_step_is_refused():
    state, _ = start(request("Hello"), CONFIG)
    with pytest.raises(AgentProtocolError, match="waits for a model answer"):
        advance(state, ToolOutcome(result={}), CONFIG)
    state, _ = run_scripted(request("Check FDA warnings for dofetilide"), DOFETILIDE, CONFIG)
    with pytest.raises(AgentProtocolError, match="the turn is over"):
        advance(state, say("more"), CONFIG)
    states = start(request("Check FDA warnings for dofetilide"), CONFIG)[0]
    for event in DOFETILIDE[:3]:
        states, pending = advance(states, event, CONFIG)
    assert isinstance(pending, ToolCall)
    with pytest.raises(AgentProtocolError, match="waits for a tool outcome"):
        advance(states, say("{}"), CONFIG)


def test_a_respond_always_carries_an_answer():
    with pytest.raises(ValueError, match="answer"):
        Respond(clarification="b")  # type: ignore[call-arg]
    assert Respond(answer="a").clarification is None


# ── Termination under arbitrary answers ──

_VALID_ARGS = {
    "check_drug_safety": [{"drug_name": "warfarin"}, {"drug_name": "zorblaxin"}],
    "check_drug_interactions": [{"drug_names": ["warfarin", "aspirin"]}, {"drug_names": ["warfarin"]}],
    "search_medical_literature": [{"query": "dofetilide"}],
    "find_clinical_trials": [{"condition": "glioma", "status": "recruiting"}],
    "search_patient": [{"name": "Ann Lee"}],
    "get_patient_chart": [{"patient_id": "abc-123"}, {"patient_id": "Ann Lee"}],
    "prescribe_medication": [
        {"patient_id": "abc-123", "medication_name": "x", "dosage": "1 mg", "frequency": "qd"}
    ],
    "add_allergy": [{"patient_id": "abc-123", "substance": "penicillin", "reaction": "hives"}],
    "save_clinical_note": [{"patient_id": "abc-123", "note_type": "progress", "note_text": "Seen."}],
    "analyze_medical_image": [{"query": "opacity"}],
}
_ERRORS: list[ErrorType] = [
    "timeout", "rate_limit", "server_error", "service_unavailable", "invalid_response", "not_found",
    "invalid_args", "missing_required_args", "missing_patient_id", "multiple_patient_matches",
    "ambiguous_drug_name", "drug_not_in_database",
]  # fmt: skip


def _answer(data: st.DataObject, call: LlmCall) -> LlmAnswer:
    if call.schema_name is None:
        return LlmAnswer(text=data.draw(st.sampled_from(["", "Answer.", "Use [check_drug_safety]."])))
    if data.draw(st.integers(0, 9)) == 0:
        return LlmAnswer(text=data.draw(st.sampled_from(["", "{", "null", '{"x": 1}'])))
    name = call.schema_name
    if name == "IntentClassification":
        kind = data.draw(st.sampled_from(["DIRECT", "TOOL_NEEDED"]))
        tool = data.draw(st.sampled_from([*_VALID_ARGS, "none"]))
        summary = data.draw(st.sampled_from(["s", " "]))
        return LlmAnswer(text=json.dumps({"intent": kind, "task_summary": summary, "suggested_tool": tool}))
    if name == "ToolSelection":
        return LlmAnswer(text=json.dumps({"tool_name": data.draw(st.sampled_from(sorted(_VALID_ARGS)))}))
    if name == "ResultAssessment":
        quality = data.draw(
            st.sampled_from(
                ["success_rich", "success_partial", "no_results", "error_retryable", "error_fatal"]
            )
        )
        return LlmAnswer(text=json.dumps({"quality": quality, "brief_summary": "b"}))
    if name == "RetryStrategy":
        strategy = data.draw(st.sampled_from(["retry_same", "retry_different_args"]))
        return LlmAnswer(text=json.dumps({"strategy": strategy}))
    if name == "ImageFindings":
        return LlmAnswer(text=json.dumps({"modality": "CT", "findings": ["f"], "confidence": 0.5}))
    tool = next(t for t, spec in TOOLS.items() if spec.args_model.__name__ == name)
    other = data.draw(st.sampled_from(sorted(_VALID_ARGS)))
    options = _VALID_ARGS[tool] if data.draw(st.booleans()) else _VALID_ARGS[other]
    return LlmAnswer(text=json.dumps(data.draw(st.sampled_from(options))))


def _outcome(data: st.DataObject, call: ToolCall) -> ToolOutcome:
    choice = data.draw(st.integers(0, 3))
    if choice == 0:
        return ToolOutcome(error="raw failure", error_type=data.draw(st.sampled_from(_ERRORS)))
    if choice == 1 and call.tool == "search_patient":
        n = data.draw(st.integers(0, 3))
        return ToolOutcome(result={"matches": [{"patient_id": f"abc-10{i}"} for i in range(n)]})
    return ToolOutcome(result=data.draw(st.sampled_from([{}, {"data": ["x"]}, {"warning": "w"}])))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from(sorted(SCRIPTS)))
def test_any_answers_end_the_turn_within_the_safety_valves(data: st.DataObject, name: str):
    req: AgentRequest = SCRIPTS[name][0]
    state, step = start(req, CONFIG)
    for _ in range(60):
        if isinstance(step, Respond):
            break
        event = _answer(data, step) if isinstance(step, LlmCall) else _outcome(data, step)
        state, step = advance(AgentState.model_validate_json(state.model_dump_json()), event, CONFIG)
    assert isinstance(step, Respond) and state.done and state.pending is None
    assert step.answer.strip()
    assert state.path[0] == "INPUT_ASSEMBLY" and state.path[-1] == "SYNTHESIZE"
    assert state.step_count <= CONFIG.max_steps
    assert state.total_retries <= CONFIG.max_total_retries
    assert len(state.executed) <= CONFIG.max_steps + CONFIG.max_total_retries
    assert state.llm_calls <= 2 + 1 + 3 * CONFIG.max_steps + 3 * CONFIG.max_total_retries
    assert "check_drug_safety" not in step.answer
