"""Scripted model answers and tool outcomes for the agent graph's tests (``run_scripted`` inputs)."""

from __future__ import annotations

import json
from typing import Any

from processors.agent import (
    AgentRequest,
    AgentState,
    LlmAnswer,
    LlmCall,
    Respond,
    Step,
    ToolOutcome,
    Turn,
    advance,
    default_config,
    run_scripted,
    start,
)
from processors.agent.state import Event

DRUGS = frozenset(
    {"dofetilide", "metformin", "warfarin", "aspirin", "ibuprofen", "amiodarone", "amoxicillin", "insulin",
     "insulin glargine", "Coumadin", "lisinopril"}
)  # fmt: skip
CONFIG = default_config(DRUGS)

DIRECT_PATH = ("INPUT_ASSEMBLY", "INTENT_CLASSIFY", "SYNTHESIZE")
SINGLE_PATH = (
    "INPUT_ASSEMBLY", "INTENT_CLASSIFY", "TOOL_SELECT", "TOOL_EXECUTE", "RESULT_CLASSIFY",
    "DETERMINISTIC_ROUTER", "SYNTHESIZE",
)  # fmt: skip
LOOP = ("TOOL_SELECT", "TOOL_EXECUTE", "RESULT_CLASSIFY", "DETERMINISTIC_ROUTER")

DOFETILIDE_SAFETY = {
    "drug_name": "dofetilide",
    "boxed_warning": "Torsade de Pointes; initiate with continuous ECG monitoring for a minimum of 3 days",
    "contraindications": ["QTc > 440 ms", "CrCl < 20 mL/min"],
}


def request(query: str, **kwargs: Any) -> AgentRequest:
    return AgentRequest(conversation_id="conv-1", query=query, **kwargs)


def history(*pairs: tuple[str, str]) -> tuple[Turn, ...]:
    return tuple(Turn(role=role, content=content) for role, content in pairs)  # type: ignore[arg-type]


def answer(payload: dict[str, Any]) -> LlmAnswer:
    return LlmAnswer(text=json.dumps(payload))


def intent(kind: str, tool: str | None = None, summary: str = "Clinician request") -> LlmAnswer:
    """An IntentClassification answer in §6's order; the optional hint only when given."""
    hint = {} if tool is None else {"suggested_tool": tool}
    return answer({"intent": kind, "task_summary": summary, **hint})


def select(tool: str) -> LlmAnswer:
    return answer({"tool_name": tool})


def args(**values: Any) -> LlmAnswer:
    return answer(values)


def assess(quality: str, summary: str = "Summary of the result.") -> LlmAnswer:
    return answer({"quality": quality, "brief_summary": summary})


def retry(strategy: str) -> LlmAnswer:
    return answer({"strategy": strategy, "reasoning": "Transient failure"})


def say(text: str) -> LlmAnswer:
    return LlmAnswer(text=text)


def ok(result: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(result=result)


def fail(
    error_type: str | None, error: str = "HTTP 504 upstream gateway timeout", **result: Any
) -> ToolOutcome:
    return ToolOutcome(result=result or None, error=error, error_type=error_type)  # type: ignore[arg-type]


def tool_step(
    tool: str, arguments: dict[str, Any], result: dict[str, Any], quality: str = "success_rich"
) -> list[Event]:
    """One tool-loop iteration: stage 1, stage 2, the outcome, the classification."""
    return [select(tool), args(**arguments), ok(result), assess(quality)]


def run(query: str, events: list[Event], **kwargs: Any) -> tuple[AgentState, Respond]:
    return run_scripted(request(query, **kwargs), events, CONFIG)


def decisions(state: AgentState, node: str) -> list[str]:
    return [d.decision for d in state.trace if d.node == node]


def tools_executed(state: AgentState) -> list[tuple[str, dict[str, Any], str]]:
    return [(e.tool, e.args, e.outcome) for e in state.executed]


def trail(req: AgentRequest, events: list[Event]) -> tuple[list[AgentState], list[Step]]:
    """Every state and step of a scripted turn: after ``start`` and after each event."""
    state, step = start(req, CONFIG)
    states, steps = [state], [step]
    for event in events:
        state, step = advance(state, event, CONFIG)
        states.append(state)
        steps.append(step)
    return states, steps


def llm_call(step: Step) -> LlmCall:
    assert isinstance(step, LlmCall), step
    return step


def user_message(step: Step) -> str:
    return llm_call(step).messages[-1]["content"]


def system_message(step: Step) -> str:
    return llm_call(step).messages[0]["content"]
