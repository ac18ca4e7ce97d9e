"""``clingate bench agent``: model calls and latency per path of the clinician's agent, against its budget.

Runs the demo's scripted questions (:func:`streams.testing.agent_session.demo_questions`: direct, one
tool, two and three tools, a write tool, a search that ends in a question) ``--repeat`` times each
through the production client against the local test server (each answer delayed ``--latency-ms``, an
emulated model) and the real tools (clingate's patient data, drug data and the local literature
services), and prints per path:

* model calls per turn, measured, beside two budgets: DocGemma §1/§2's (direct 2, single tool 4,
  multi-tool 4+N, counting TOOL_SELECT as one call) and this implementation's (the two-stage TOOL_SELECT
  of §4.3 makes two calls: direct 2, single tool 5, 5 + 3 per further tool; a search ending in a
  question 4, no synthesis);
* turn latency p50 / p99 and the share of it spent waiting for the model (calls x latency);
* the graph's own time per turn (turn latency minus model and tool time), i.e. what the deterministic
  nodes cost.

Nothing is asserted: the figures go to docs/performance.md.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Annotated

import typer

from streams.agent.patients import BundlePatients
from streams.agent.runner import path_kind
from streams.data import CLINICAL
from streams.data.timeline import fhir_timeline
from streams.testing.agent_session import demo_questions, scripted_agent, two_stage_budget
from streams.testing.stats import percentile

AS_OF = datetime(2026, 3, 29, tzinfo=UTC)
SPEC_BUDGET = {"direct": "2", "single_tool": "4", "multi_tool": "4+N", "clarification": "-"}
"""DocGemma §2's calls per path (TOOL_SELECT counted once)."""


def patients() -> BundlePatients:
    """The golden patients and the first generated ones, as of the golden time."""
    golden = [json.loads(p.read_text("utf-8")) for p in sorted(CLINICAL.glob("*.json"))]
    generated = [json.loads(u.resource_json()) for u in fhir_timeline(20)]
    return BundlePatients([*golden, *generated], AS_OF)


async def measure(repeat: int, latency_s: float) -> dict[str, dict[str, float | str]]:
    """Run every question ``repeat`` times; figures per question label."""
    questions = demo_questions()
    scripts = {q.query: q.answers for q in questions}
    rows: dict[str, dict[str, float | str]] = {}
    async with scripted_agent(scripts, patients(), latency_s=latency_s) as session:
        for question in questions:
            seconds: list[float] = []
            calls: set[int] = set()
            tools: set[int] = set()
            for _ in range(repeat):
                started = time.perf_counter()
                turn, _ = await session.ask(question.query, AS_OF, question.patient_id)
                seconds.append(time.perf_counter() - started)
                calls.add(turn.state.llm_calls)
                tools.add(len(turn.state.executed))
                kind = path_kind(turn.state) if turn.respond.clarification is None else "clarification"
            [llm_calls], [executed] = sorted(calls), sorted(tools)
            model_s = llm_calls * latency_s
            p50 = percentile(seconds, 0.5)
            rows[question.query] = {
                "path": kind, "tools": executed, "llm_calls": llm_calls,
                "budget": two_stage_budget(kind, executed), "spec": SPEC_BUDGET[kind],
                "p50_ms": 1000 * p50, "p99_ms": 1000 * percentile(seconds, 0.99),
                "model_share": model_s / p50 if p50 else 0.0,
            }  # fmt: skip
    return rows


def agent(
    repeat: Annotated[int, typer.Option(min=1, help="Turns per question.")] = 20,
    latency_ms: Annotated[float, typer.Option(min=0, help="Delay of every model answer (ms).")] = 0.0,
) -> None:
    """Model calls and latency per path of the clinician's agent (module docstring)."""
    rows = asyncio.run(measure(repeat, latency_ms / 1000.0))
    typer.echo(f"clingate bench agent: {repeat} turns per question, model answers delayed {latency_ms:g} ms")
    columns = ("tools", "calls", "budget", "spec", "p50 ms", "p99 ms", "model")
    typer.echo(f"{'path':<13} " + " ".join(f"{c:>{max(len(c), 5)}}" for c in columns))
    for query, row in rows.items():
        typer.echo(
            f"{row['path']:<13} {row['tools']:>5} {row['llm_calls']:>5} {row['budget']:>6} {row['spec']:>5} "
            f"{row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} {row['model_share']:>6.0%}  {query[:60]}"
        )
    over = [q for q, r in rows.items() if int(r["llm_calls"]) > int(r["budget"])]
    typer.echo("every turn within its budget" if not over else f"OVER BUDGET: {over}")
