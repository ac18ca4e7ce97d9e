"""Replay a recorded turn: feed its model answers and tool outcomes, in order, through the graph.

Because the graph is pure, the same request, configuration and events reproduce the recorded routing,
trace and answer exactly (``clingate agent replay``, and the tests' scripted turns). A script must fit
the turn: one event per step the graph asks for, no more, no fewer.
"""

from __future__ import annotations

from collections.abc import Sequence

from processors.agent.graph import advance, start
from processors.agent.state import (
    AgentConfig,
    AgentRequest,
    AgentState,
    LlmAnswer,
    Respond,
    ToolCall,
    ToolOutcome,
)


class ScriptError(ValueError):
    """The script does not fit the turn: it ran out before the response, or has events left after it."""


def run_scripted(
    request: AgentRequest, events: Sequence[LlmAnswer | ToolOutcome], config: AgentConfig
) -> tuple[AgentState, Respond]:
    """Run ``request`` with ``events`` as the answers and outcomes of its steps, in order.

    Raises:
        ScriptError: the script ran out while a step was pending, or events remain after the response.
    """
    state, step = start(request, config)
    for index, event in enumerate(events):
        if isinstance(step, Respond):
            raise ScriptError(f"the turn ended after {index} events; {len(events) - index} left over")
        state, step = advance(state, event, config)
    if not isinstance(step, Respond):
        waits = (
            f"tool {step.tool}"
            if isinstance(step, ToolCall)
            else f"{step.node} ({step.schema_name or 'free text'})"
        )
        raise ScriptError(f"the script ran out after {len(events)} events; the graph waits for {waits}")
    return state, step
