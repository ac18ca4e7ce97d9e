"""One turn of the clinician's agent: the pure graph driven by real model calls and tool executions.

:func:`run_turn` starts the graph on a request and answers each step it asks for (a model request through
the production client, a tool through the :class:`~streams.agent.tools.ToolBox`) until it responds. Every
decision becomes an :class:`~schemas.agent.AgentTrace` record, handed to ``on_trace`` as soon as it is made;
the first decision an event caused carries the event (the model's answer or the tool's outcome, as JSON)
and the wall time it took. Replaying a turn's events in order through the graph reproduces its
decisions and answer exactly (:func:`trace_events`, :func:`replay_turn`), which is how a worker resumes
a turn it had begun before it was killed (``resume``): the graph takes the recorded events again, makes
no call for them, and goes on from the first step without one.

The turn's time is the request's event time: charts, gates and proposals are as of it, so the same
request and events give the same records.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from processors.agent.graph import advance, start
from processors.agent.replay import run_scripted
from processors.agent.state import (
    AgentConfig,
    AgentState,
    Event,
    LlmAnswer,
    LlmCall,
    Respond,
    Step,
    ToolOutcome,
    Turn,
)
from processors.agent.state import AgentRequest as GraphRequest
from schemas.agent import AgentRequest, AgentResponse, AgentToolCall, AgentTrace
from streams.agent.llm import ask_model
from streams.agent.tools import ToolBox, TurnContext
from streams.llm import LlmClient, LlmFailed, LlmOk

TraceSink = Callable[[AgentTrace], Awaitable[None] | None]
"""Where each trace record goes as it is made."""
CallObserver = Callable[[LlmOk[object] | LlmFailed], None]
"""What sees each model call's result (metrics)."""


@dataclass(frozen=True)
class TurnResult:
    """A finished turn: the graph's last state, its response, and every trace record of the turn."""

    state: AgentState
    respond: Respond
    traces: list[AgentTrace]

    def response(self, request: AgentRequest) -> AgentResponse:
        """The response record of ``request``."""
        return AgentResponse(
            conversation_id=request.conversation_id,
            request_id=request.request_id,
            event_time=request.event_time,
            answer=self.respond.answer,
            clarification=self.respond.clarification,
            path=list(self.state.path),
            tool_calls=[
                AgentToolCall(tool=e.tool, args=json.dumps(e.args, sort_keys=True), outcome=e.outcome)
                for e in self.state.executed
            ],
            llm_calls=self.state.llm_calls,
            proposals=proposal_ids(self.state),
        )


def path_kind(state: AgentState) -> str:
    """The turn's path as the DocGemma budget names it: ``direct`` (no tool selected), ``single_tool``,
    ``multi_tool`` (two or more executions) or ``no_tool`` (a tool selected, none executed)."""
    if "TOOL_SELECT" not in state.path:
        return "direct"
    executed = len(state.executed)
    return "no_tool" if executed == 0 else "single_tool" if executed == 1 else "multi_tool"


def graph_request(request: AgentRequest) -> GraphRequest:
    """The graph's view of a request record."""
    return GraphRequest(
        conversation_id=request.conversation_id,
        query=request.query,
        history=tuple(Turn(role=t.role, content=t.content) for t in request.history),
        patient_id=request.patient_id,
        image_ref=request.image_ref,
    )


def proposal_ids(state: AgentState) -> list[str]:
    """The proposals the turn's write tools made, in order (their results name them)."""
    return [
        str(r.result["proposal_id"]) for r in state.tool_results if r.result and "proposal_id" in r.result
    ]


def event_json(event: Event) -> str:
    """An event as the trace records it: key order kept (a tool result is shown to the model in its
    order, so the replayed prompt is the recorded one)."""
    kind = "llm" if isinstance(event, LlmAnswer) else "tool"
    return json.dumps({"kind": kind, **event.model_dump(mode="json")})


def event_of(text: str) -> Event:
    """The event of a trace record's ``event``."""
    data = json.loads(text)
    kind = data.pop("kind")
    return LlmAnswer.model_validate(data) if kind == "llm" else ToolOutcome.model_validate(data)


def trace_events(traces: Sequence[AgentTrace]) -> list[Event]:
    """The events of a turn's trace records, in their order."""
    return [event_of(t.event) for t in sorted(traces, key=lambda t: t.step) if t.event is not None]


def replay_turn(
    request: AgentRequest, traces: Sequence[AgentTrace], config: AgentConfig
) -> tuple[AgentState, Respond]:
    """Re-run a recorded turn from its request and trace records, with no call made.

    Raises:
        processors.agent.replay.ScriptError: the trace does not complete the turn (or has events left).
    """
    return run_scripted(graph_request(request), trace_events(traces), config)


async def run_turn(
    request: AgentRequest,
    *,
    client: LlmClient,
    tools: ToolBox,
    config: AgentConfig,
    resume: Sequence[AgentTrace] = (),
    on_trace: TraceSink | None = None,
    on_call: CallObserver | None = None,
) -> TurnResult:
    """Answer ``request`` (module docstring); ``resume`` is the trace the turn already has."""
    context = TurnContext(request.request_id, request.conversation_id, request.event_time, request.image_ref)
    state, step = start(graph_request(request), config)
    recorded = sorted(resume, key=lambda t: t.step)
    for event in trace_events(recorded):
        state, step = advance(state, event, config)
    traces = list(recorded)
    await _record(request, state, traces, None, 0.0, on_trace)
    while not isinstance(step, Respond):
        started = time.perf_counter()
        event = await _answer(step, client, tools, context, len(state.trace), on_call)
        elapsed_ms = 1000.0 * (time.perf_counter() - started)
        before = len(state.trace)
        state, step = advance(state, event, config)
        if len(state.trace) == before:
            raise AssertionError(f"the graph took an event without a decision after {state.path[-1:]}")
        await _record(request, state, traces, event, elapsed_ms, on_trace)
    return TurnResult(state, step, traces)


async def _answer(
    step: Step,
    client: LlmClient,
    tools: ToolBox,
    context: TurnContext,
    index: int,
    on_call: CallObserver | None,
) -> Event:
    if isinstance(step, LlmCall):
        answer, result = await ask_model(client, step)
        if result is not None and on_call is not None:
            on_call(result)
        return answer
    assert not isinstance(step, Respond)
    return await tools.execute(step, context, index)


async def _record(
    request: AgentRequest,
    state: AgentState,
    traces: list[AgentTrace],
    event: Event | None,
    elapsed_ms: float,
    on_trace: TraceSink | None,
) -> None:
    """Turn the decisions not yet recorded into trace records; the first carries ``event``."""
    start_at = len(traces)
    for index in range(start_at, len(state.trace)):
        decision = state.trace[index]
        first = index == start_at
        record = AgentTrace(
            conversation_id=request.conversation_id,
            request_id=request.request_id,
            step=index,
            node=decision.node,
            decision=decision.decision,
            schema_name=decision.schema_name,
            llm_answer=decision.llm_answer,
            event=event_json(event) if first and event is not None else None,
            latency_ms=elapsed_ms if first else 0.0,
        )
        traces.append(record)
        if on_trace is not None:
            sent = on_trace(record)
            if inspect.isawaitable(sent):
                await sent
