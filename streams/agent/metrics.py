"""Prometheus metrics of the clinician's agent (``clingate agent worker``): its turns (:class:`AgentMetrics`).

They sit on the agent worker's registry beside its LLM group metrics
(:class:`streams.groups.metrics.LlmGroupMetrics`); names, types and labels in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram

from streams.llm.metrics import LLM_BUCKETS


class AgentMetrics:
    """The clinician's agent's turns (``clingate agent worker``), against the DocGemma budget.

    * ``clingate_agent_turns_total{path,outcome}``: turns by path kind (``direct``, ``single_tool``,
      ``multi_tool``, ``no_tool``: the tool path with nothing executed) and how they ended (``answer``,
      ``clarification``);
    * ``clingate_agent_llm_calls_per_turn{path}``: model requests per turn (budget with the two-stage
      tool selection: direct 2, single tool 5, each further tool 3 more; docs/agent.md);
    * ``clingate_agent_turn_seconds{path}``: wall time of a turn;
    * ``clingate_agent_tool_calls_total{tool,outcome}``: executions by tool and ``success`` or error type;
    * ``clingate_agent_turns_resumed_total``: turns a member resumed from their trace after a restart.
    The model calls themselves are :class:`streams.llm.metrics.LlmMetrics` with ``group="agent"``.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.turns = Counter(
            "clingate_agent_turns", "Turns answered, by path kind and outcome.", ["path", "outcome"],
            registry=registry,
        )  # fmt: skip
        self.llm_calls = Histogram(
            "clingate_agent_llm_calls_per_turn", "Model requests per turn, by path kind.", ["path"],
            buckets=(1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20), registry=registry,
        )  # fmt: skip
        self.seconds = Histogram(
            "clingate_agent_turn_seconds", "Wall time of a turn, by path kind.", ["path"],
            buckets=LLM_BUCKETS, registry=registry,
        )  # fmt: skip
        self.tool_calls = Counter(
            "clingate_agent_tool_calls", "Tool executions, by tool and outcome.", ["tool", "outcome"],
            registry=registry,
        )  # fmt: skip
        self.resumed = Counter(
            "clingate_agent_turns_resumed",
            "Turns resumed from their trace after a restart.",
            registry=registry,
        )

    def turned(
        self,
        path: str,
        outcome: str,
        llm_calls: int,
        seconds: float,
        tools: Sequence[tuple[str, str]],
        resumed: bool,
    ) -> None:
        """Count one finished turn."""
        self.turns.labels(path, outcome).inc()
        self.llm_calls.labels(path).observe(llm_calls)
        self.seconds.labels(path).observe(seconds)
        for tool, result in tools:
            self.tool_calls.labels(tool, result).inc()
        if resumed:
            self.resumed.inc()
