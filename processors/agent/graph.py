"""The agent graph as a pure state machine: :func:`start` takes a request, :func:`advance` takes the answer
or outcome of the pending step; each returns the new state and the next step.

A node visit appends its name to ``path`` when the node is entered, and each decision a node makes
appends a :class:`~processors.agent.state.NodeDecision` to ``trace`` (TOOL_SELECT's two stages are one
visit with two decisions). ``llm_calls`` counts model requests as they are emitted. The flow (spec §3,
with the package docstring's choices):

* INPUT_ASSEMBLY → (vision call when an image is attached) → INTENT_CLASSIFY;
* DIRECT → SYNTHESIZE; TOOL_NEEDED → TOOL_SELECT (stage 1, stage 2) → TOOL_EXECUTE;
* TOOL_EXECUTE: invalid arguments → ERROR_HANDLER; a duplicate call → DETERMINISTIC_ROUTER → SYNTHESIZE;
  else the runtime executes the call → RESULT_CLASSIFY → DETERMINISTIC_ROUTER;
* DETERMINISTIC_ROUTER → ERROR_HANDLER, TOOL_SELECT or SYNTHESIZE (:func:`processors.agent.rules.route`);
* ERROR_HANDLER → SYNTHESIZE (ask_user, skip) or the model's retry decision → TOOL_SELECT: retry_same
  re-executes the same call with no model call, retry_different_args runs stage 2 again;
* SYNTHESIZE → :class:`~processors.agent.state.Respond`: the model's answer. After an ask_user (router or
  ERROR_HANDLER) the model writes the clarification question from the §9 message, which is the answer,
  and ``clarification`` keeps the §9 message as code wrote it. Every turn ends in SYNTHESIZE.

:data:`EDGES` declares every move between nodes, each with its source: §3's diagram edges, and the three
this package adds. Entering a node along any other move is a programming error.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from processors.agent import prompts, rules
from processors.agent.entities import action_verbs, drug_mentions, patient_ids
from processors.agent.schemas import (
    ImageFindings,
    IntentClassification,
    ResultAssessment,
    RetryStrategy,
    ToolName,
    ToolSelection,
    tool_named,
)
from processors.agent.state import (
    MAX_HISTORY_TURNS,
    AgentConfig,
    AgentRequest,
    AgentState,
    ExtractedEntities,
    LlmAnswer,
    LlmCall,
    NodeDecision,
    NodeName,
    Respond,
    Step,
    ToolCall,
    ToolExecution,
    ToolOutcome,
    ToolResult,
)
from processors.agent.tools import TOOLS, format_error, format_result, redact_tool_names, validate_args

EDGES: Final[dict[tuple[NodeName, NodeName], str]] = {
    ("INPUT_ASSEMBLY", "INTENT_CLASSIFY"): "§3: the assembled input is classified",
    ("INTENT_CLASSIFY", "SYNTHESIZE"): "§3: DIRECT",
    ("INTENT_CLASSIFY", "TOOL_SELECT"): "§3: TOOL_NEEDED",
    ("TOOL_SELECT", "TOOL_EXECUTE"): "§3: stage 2's arguments are validated and executed",
    ("TOOL_EXECUTE", "RESULT_CLASSIFY"): "§3: the formatted result is classified",
    ("RESULT_CLASSIFY", "DETERMINISTIC_ROUTER"): "§3: the classification is routed",
    ("DETERMINISTIC_ROUTER", "SYNTHESIZE"): "§3, §4.6: done, MAX_STEPS, or ask_user",
    ("DETERMINISTIC_ROUTER", "ERROR_HANDLER"): "§3: error",
    ("DETERMINISTIC_ROUTER", "TOOL_SELECT"): "§3: more tools needed",
    ("ERROR_HANDLER", "TOOL_SELECT"): "§3: retry_same or retry_different_args",
    ("ERROR_HANDLER", "SYNTHESIZE"): "§3: ask_user or skip",
    ("TOOL_EXECUTE", "ERROR_HANDLER"): "added: arguments that fail validation are not executed (§4.4)",
    ("TOOL_EXECUTE", "DETERMINISTIC_ROUTER"): "added: a duplicate call stops before execution (§9)",
    ("TOOL_SELECT", "SYNTHESIZE"): "added: an invalid stage-1 answer with no suggested tool to fall back on",
}
"""Every move between nodes the graph makes, with its source (module docstring)."""

IMAGE_FAILED_MESSAGE: Final = "The attached image could not be analyzed."
NO_TOOL_MESSAGE: Final = "The requested information could not be retrieved."
EMPTY_ANSWER_MESSAGE: Final = "A response could not be generated for this request. Please try again."


class AgentProtocolError(ValueError):
    """An event that does not answer the pending step (or arrives after the turn ended)."""


def _update(state: AgentState, **changes: Any) -> AgentState:
    return state.model_copy(update=changes)


def _visit(state: AgentState, node: NodeName) -> AgentState:
    assert (state.path[-1], node) in EDGES, f"no edge {state.path[-1]} → {node}"
    return _update(state, path=(*state.path, node))


def _decide(
    state: AgentState,
    node: NodeName,
    decision: str,
    schema_name: str | None = None,
    answer: str | None = None,
) -> AgentState:
    entry = NodeDecision(node=node, decision=decision, schema_name=schema_name, llm_answer=answer)
    return _update(state, trace=(*state.trace, entry))


def _ask(
    state: AgentState,
    node: NodeName,
    schema_name: str | None,
    messages: prompts.Messages,
    generation: prompts.Generation,
) -> tuple[AgentState, Step]:
    call = LlmCall(
        node=node,
        schema_name=schema_name,
        messages=messages,
        temperature=generation.temperature,
        max_tokens=generation.max_tokens,
    )
    return _update(state, pending=call, llm_calls=state.llm_calls + 1), call


def _parse(call: LlmCall, text: str) -> BaseModel | None:
    """The answer as the call's response model, or None when it does not validate."""
    assert call.response_model is not None, "only constrained calls are parsed"
    try:
        return call.response_model.model_validate_json(text)
    except ValidationError:
        return None


def _args_text(tool: ToolName, args: dict[str, Any]) -> str:
    return f"{tool}({json.dumps(args, ensure_ascii=False)})"


def start(request: AgentRequest, config: AgentConfig) -> tuple[AgentState, Step]:
    """INPUT_ASSEMBLY for ``request``, then the first model call (vision when an image is attached,
    else INTENT_CLASSIFY)."""
    query = request.query
    entities = ExtractedEntities(
        patient_ids=patient_ids(query),
        drug_mentions=drug_mentions(query, config.drug_names),
        action_verbs=action_verbs(query),
        has_image=request.image_ref is not None,
    )
    state = AgentState(
        request=request,
        user_query=query,
        conversation_history=request.history[-MAX_HISTORY_TURNS:],
        extracted_entities=entities,
        path=("INPUT_ASSEMBLY",),
    )
    decision = (
        f"patient_ids={list(entities.patient_ids)}, drug_mentions={list(entities.drug_mentions)}, "
        f"action_verbs={list(entities.action_verbs)}, has_image={entities.has_image}"
    )
    state = _decide(state, "INPUT_ASSEMBLY", decision)
    if request.image_ref is not None:
        messages = prompts.image_analysis(state, request.image_ref)
        return _ask(state, "INPUT_ASSEMBLY", ImageFindings.__name__, messages, prompts.IMAGE_ANALYSIS)
    return _enter_intent(state)


def advance(
    state: AgentState, event: LlmAnswer | ToolOutcome, config: AgentConfig
) -> tuple[AgentState, Step]:
    """Take the answer or outcome of ``state.pending`` and run the graph to its next step."""
    pending = state.pending
    if state.done or pending is None:
        raise AgentProtocolError(f"conversation {state.request.conversation_id}: the turn is over")
    waiting = _update(state, pending=None)
    if isinstance(pending, LlmCall):
        if not isinstance(event, LlmAnswer):
            raise AgentProtocolError(f"{pending.node} waits for a model answer, got {type(event).__name__}")
        return _on_answer(waiting, pending, event.text, config)
    if not isinstance(event, ToolOutcome):
        raise AgentProtocolError(f"{pending.tool} waits for a tool outcome, got {type(event).__name__}")
    return _on_outcome(waiting, pending, event)


def _on_answer(state: AgentState, call: LlmCall, text: str, config: AgentConfig) -> tuple[AgentState, Step]:
    if call.node == "SYNTHESIZE":
        return _on_synthesis(state, text)
    parsed = _parse(call, text)
    if call.node == "INPUT_ASSEMBLY":
        return _on_image(state, parsed, text)
    if call.node == "INTENT_CLASSIFY":
        return _on_intent(state, parsed, text)
    if call.node == "TOOL_SELECT" and call.schema_name == ToolSelection.__name__:
        return _on_selection(state, parsed, text)
    if call.node == "TOOL_SELECT":
        return _on_args(state, call, parsed, text, config)
    if call.node == "RESULT_CLASSIFY":
        return _on_assessment(state, parsed, text, config)
    return _on_retry(state, parsed, text, config)


# ── ① INPUT_ASSEMBLY (vision) and ② INTENT_CLASSIFY ──


def _on_image(state: AgentState, parsed: BaseModel | None, text: str) -> tuple[AgentState, Step]:
    name = ImageFindings.__name__
    if isinstance(parsed, ImageFindings):
        decision = f"image findings: {parsed.modality}, {len(parsed.findings)} findings"
        state = _decide(_update(state, image_findings=parsed), "INPUT_ASSEMBLY", decision, name, text)
    else:
        state = _update(state, error_messages=(*state.error_messages, IMAGE_FAILED_MESSAGE))
        state = _decide(state, "INPUT_ASSEMBLY", "image analysis answer invalid: no findings", name, text)
    return _enter_intent(state)


def _enter_intent(state: AgentState) -> tuple[AgentState, Step]:
    state = _visit(state, "INTENT_CLASSIFY")
    return _ask(
        state, "INTENT_CLASSIFY", IntentClassification.__name__, prompts.intent(state), prompts.INTENT
    )


def _on_intent(state: AgentState, parsed: BaseModel | None, text: str) -> tuple[AgentState, Step]:
    if isinstance(parsed, IntentClassification):
        suggested = tool_named(parsed.suggested_tool)
        summary = parsed.task_summary.strip() or rules.summary_fallback(state)
        state = _update(state, intent=parsed.intent, task_summary=summary, suggested_tool=suggested)
        decision = parsed.intent + (f", suggested {suggested}" if suggested else "")
        if parsed.intent == "DIRECT" and rules.required_tools(state):
            patterns = ", ".join(p.name for p in rules.matched_patterns(state.user_query))
            state = _update(state, intent="TOOL_NEEDED")
            decision += f" → TOOL_NEEDED: the task pattern ({patterns}) requires tools"
    else:
        intent = rules.intent_fallback(state)
        state = _update(state, intent=intent, task_summary=rules.summary_fallback(state))
        decision = f"answer invalid → {intent} (fallback on the extracted patient ids and action verbs)"
    state = _decide(state, "INTENT_CLASSIFY", decision, IntentClassification.__name__, text)
    if state.intent == "DIRECT":
        return _enter_synthesize(state)
    return _enter_tool_select(state)


# ── ③ TOOL_SELECT ──


def _enter_tool_select(state: AgentState) -> tuple[AgentState, Step]:
    state = _visit(state, "TOOL_SELECT")
    messages = prompts.tool_select_stage1(state)
    return _ask(state, "TOOL_SELECT", ToolSelection.__name__, messages, prompts.TOOL_SELECT_STAGE1)


def _on_selection(state: AgentState, parsed: BaseModel | None, text: str) -> tuple[AgentState, Step]:
    name = ToolSelection.__name__
    tool: ToolName
    if isinstance(parsed, ToolSelection):
        tool = parsed.tool_name
        decision = f"stage 1: {tool}"
    elif not state.tool_results and state.suggested_tool is not None:
        tool = state.suggested_tool
        decision = f"stage 1 answer invalid → suggested_tool {tool}"
    else:
        if not prompts.successful_results(state):
            state = _update(state, error_messages=(*state.error_messages, NO_TOOL_MESSAGE))
        state = _decide(
            state, "TOOL_SELECT", "stage 1 answer invalid, no tool to fall back on → SYNTHESIZE", name, text
        )
        return _enter_synthesize(state)
    state = _update(state, current_tool=tool, current_args=None, retry_count=0)
    return _ask_args(_decide(state, "TOOL_SELECT", decision, name, text), tool, None)


def _ask_args(state: AgentState, tool: ToolName, failed: ToolResult | None) -> tuple[AgentState, Step]:
    messages = prompts.tool_select_stage2(state, tool, failed)
    schema = TOOLS[tool].args_model.__name__
    return _ask(state, "TOOL_SELECT", schema, messages, prompts.TOOL_SELECT_STAGE2)


def _raw_object(text: str) -> dict[str, Any]:
    """The JSON object in an answer that failed its schema (TOOL_EXECUTE names the failing fields)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _on_args(
    state: AgentState, call: LlmCall, parsed: BaseModel | None, text: str, config: AgentConfig
) -> tuple[AgentState, Step]:
    assert state.current_tool is not None, "stage 2 follows a stage-1 selection"
    tool = state.current_tool
    if parsed is not None:
        args = parsed.model_dump(mode="json", exclude_none=True)
        decision = f"stage 2: {_args_text(tool, args)}"
    else:
        args = _raw_object(text)
        decision = f"stage 2 answer does not validate as {call.schema_name}"
    state = _decide(_update(state, current_args=args), "TOOL_SELECT", decision, call.schema_name, text)
    return _enter_execute(state, config, retry_same=False)


# ── ④ TOOL_EXECUTE ──


def _enter_execute(state: AgentState, config: AgentConfig, retry_same: bool) -> tuple[AgentState, Step]:
    assert state.current_tool is not None, "TOOL_EXECUTE follows TOOL_SELECT"
    state = _visit(state, "TOOL_EXECUTE")
    tool = state.current_tool
    args = state.current_args or {}
    check = validate_args(tool, args, rules.known_patient_ids(state))
    if check.args is None:
        fields = ", ".join(check.invalid_fields)
        result = ToolResult(
            tool_name=tool,
            tool_label=TOOLS[tool].label,
            args=args,
            result=None,
            formatted_result=format_error(tool, "invalid_args", args),
            error=f"invalid arguments: {fields}",
            error_type="invalid_args",
        )
        state = _update(state, tool_results=(*state.tool_results, result))
        state = _decide(state, "TOOL_EXECUTE", f"invalid arguments ({fields}): not executed")
        return _enter_error_handler(state, config)
    if not retry_same and rules.is_duplicate(state, tool, check.args):
        state = _decide(
            state, "TOOL_EXECUTE", f"duplicate of an executed call {_args_text(tool, check.args)}"
        )
        state = _visit(state, "DETERMINISTIC_ROUTER")
        state = _decide(
            state, "DETERMINISTIC_ROUTER", "route → SYNTHESIZE: duplicate tool call, not executed"
        )
        last = state.tool_results[-1]
        if last.error is not None and last.formatted_result not in state.error_messages:
            state = _update(state, error_messages=(*state.error_messages, last.formatted_result))
        return _enter_synthesize(state)
    call = ToolCall(tool=tool, args=check.args, deadline_s=TOOLS[tool].deadline_s)
    return _update(state, current_args=check.args, pending=call), call


def _on_outcome(state: AgentState, call: ToolCall, outcome: ToolOutcome) -> tuple[AgentState, Step]:
    tool = call.tool
    if outcome.error is not None:
        formatted = format_error(tool, outcome.error_type, call.args)
        status = outcome.error_type or "error"
    else:
        formatted = format_result(tool, outcome.result)
        status = "success"
    result = ToolResult(
        tool_name=tool,
        tool_label=TOOLS[tool].label,
        args=call.args,
        result=outcome.result,
        formatted_result=formatted,
        error=outcome.error,
        error_type=outcome.error_type,
    )
    retry = state.retry_count > 0
    state = _update(
        state,
        tool_results=(*state.tool_results, result),
        executed=(*state.executed, ToolExecution(tool=tool, args=call.args, outcome=status)),
        step_count=state.step_count + (0 if retry else 1),
    )
    decision = f"{_args_text(tool, call.args)}: {status}" + (f" (retry {state.retry_count})" if retry else "")
    state = _visit(_decide(state, "TOOL_EXECUTE", decision), "RESULT_CLASSIFY")
    messages = prompts.result_classify(state, result)
    return _ask(state, "RESULT_CLASSIFY", ResultAssessment.__name__, messages, prompts.RESULT_CLASSIFY)


# ── ⑤ RESULT_CLASSIFY, ⑥ DETERMINISTIC_ROUTER ──


def _on_assessment(
    state: AgentState, parsed: BaseModel | None, text: str, config: AgentConfig
) -> tuple[AgentState, Step]:
    if isinstance(parsed, ResultAssessment):
        state = _update(
            state, last_result_classification=parsed.quality, last_result_summary=parsed.brief_summary
        )
        decision: str = parsed.quality
    else:
        quality = rules.assessment_fallback(state.tool_results[-1])
        state = _update(state, last_result_classification=quality, last_result_summary=None)
        decision = f"answer invalid → {quality} (from the tool outcome)"
    state = _decide(state, "RESULT_CLASSIFY", decision, ResultAssessment.__name__, text)
    state = _visit(state, "DETERMINISTIC_ROUTER")
    route = rules.route(state, config)
    state = _decide(state, "DETERMINISTIC_ROUTER", f"route → {route.next}: {route.reason}")
    if route.next == "ERROR_HANDLER":
        return _enter_error_handler(state, config)
    if route.next == "TOOL_SELECT":
        return _enter_tool_select(state)
    if route.clarification is not None:
        state = _update(state, clarification_request=route.clarification)
    return _enter_synthesize(state)


# ── ⑤a ERROR_HANDLER ──


def _enter_error_handler(state: AgentState, config: AgentConfig) -> tuple[AgentState, Step]:
    state = _visit(state, "ERROR_HANDLER")
    action = rules.handle_error(state, config)
    if action.kind == "ask_user":
        state = _decide(state, "ERROR_HANDLER", f"ask_user: {action.reason}")
        return _enter_synthesize(_update(state, clarification_request=action.message))
    if action.kind == "skip":
        assert action.message is not None, "a skip carries its message"
        state = _decide(state, "ERROR_HANDLER", f"skip: {action.reason}")
        return _enter_synthesize(_update(state, error_messages=(*state.error_messages, action.message)))
    messages = prompts.retry_strategy(state, state.tool_results[-1])
    return _ask(state, "ERROR_HANDLER", RetryStrategy.__name__, messages, prompts.RETRY)


def _on_retry(
    state: AgentState, parsed: BaseModel | None, text: str, config: AgentConfig
) -> tuple[AgentState, Step]:
    assert state.current_tool is not None, "a retry follows a tool call"
    name = RetryStrategy.__name__
    last = state.tool_results[-1]
    strategy = parsed.strategy if isinstance(parsed, RetryStrategy) else rules.retry_fallback(last)
    if strategy is None:
        state = _decide(state, "ERROR_HANDLER", "answer invalid, error not transient → skip", name, text)
        return _enter_synthesize(
            _update(state, error_messages=(*state.error_messages, last.formatted_result))
        )
    state = _update(state, retry_count=state.retry_count + 1, total_retries=state.total_retries + 1)
    fallback = "" if isinstance(parsed, RetryStrategy) else " (answer invalid, transient error)"
    decision = f"{strategy}{fallback}, retry_count → {state.retry_count}"
    state = _visit(_decide(state, "ERROR_HANDLER", decision, name, text), "TOOL_SELECT")
    if strategy == "retry_same":
        state = _decide(state, "TOOL_SELECT", "retry_same: same tool and arguments, no model call")
        return _enter_execute(state, config, retry_same=True)
    return _ask_args(state, state.current_tool, last)


# ── ⑦ SYNTHESIZE ──


def _enter_synthesize(state: AgentState) -> tuple[AgentState, Step]:
    state = _visit(state, "SYNTHESIZE")
    return _ask(state, "SYNTHESIZE", None, prompts.synthesize(state), prompts.SYNTHESIZE)


def _on_synthesis(state: AgentState, text: str) -> tuple[AgentState, Step]:
    answer = redact_tool_names(text).strip()
    question = state.clarification_request
    decision = f"{'clarification question' if question else 'answer'} ({len(answer.split())} words)"
    if not answer:
        answer = question or " ".join((EMPTY_ANSWER_MESSAGE, *state.error_messages))
        decision = "empty answer → " + ("the ask_user message" if question else "fallback text")
    state = _decide(_update(state, final_response=answer, done=True), "SYNTHESIZE", decision, None, text)
    return state, Respond(answer=answer, clarification=question)
