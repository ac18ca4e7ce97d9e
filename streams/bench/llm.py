"""Little's-law benchmark of the LLM client: achieved calls/s against the bound N / L.

A closed loop of N workers, each making calls back to back, against a server that answers every call
after a fixed latency L, can at best complete N / L calls per second (Little's law: throughput =
concurrency / latency). The ratio achieved / (N / L) measures how much the client (HTTP stack,
validation, semaphore, event loop) costs on top of the server's latency; GPU consumer groups need it
near 1 at the paper's 64-way concurrency, so the servers' continuous batching is fed.

The server is ``clingate llm serve --backend test`` (:class:`streams.llm.serving.ServerProcess`) in its
own process, so client and server do not share an event loop (on a 2-core machine they share the CPU).
Each point runs one warm-up round (connections are opened) and then ``rounds`` measured rounds of N
calls; the run time per point is about ``(rounds + 1) * L`` when the bound is reached.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from streams.llm import CallType, ClientPolicy, Endpoint, LlmClient, LlmOk, Role
from streams.llm.schemas import NerVerdict
from streams.llm.serving import ServerProcess
from streams.llm.testserver import DEFAULT_MODEL

CONCURRENCY = (1, 16, 64, 256)
LATENCIES_MS = (50.0, 1000.0)
TARGET_POINT_S = 2.0
MIN_ROUNDS = 5
QUICK_ROUNDS = 2
PROMPT = [{"role": "user", "content": "Is 'type 2 diabetes' a Diagnosis in: metformin for type 2 diabetes?"}]


@dataclass(frozen=True, slots=True)
class BenchPoint:
    """One measured point.

    Attributes:
        concurrency: N, calls in flight.
        latency_s: L, the server's fixed latency.
        calls: measured calls (warm-up excluded).
        failures: measured calls that did not return LlmOk.
        elapsed_s: wall time of the measured rounds.
        calls_per_s: achieved throughput.
        bound_per_s: N / L.
        ratio: calls_per_s / bound_per_s.
        p50_s: median call latency.
        p99_s: 99th-percentile call latency.
        cpu_ms_per_call: client-process CPU per measured call; 1000 / this is the most calls/s one
            client core can make, whatever the machine's load (the server runs in another process).
    """

    concurrency: int
    latency_s: float
    calls: int
    failures: int
    elapsed_s: float
    calls_per_s: float
    bound_per_s: float
    ratio: float
    p50_s: float
    p99_s: float
    cpu_ms_per_call: float


def rounds_for(latency_s: float, quick: bool) -> int:
    """Measured rounds per point: about TARGET_POINT_S of ideal run time, at least MIN_ROUNDS."""
    if quick:
        return QUICK_ROUNDS
    return max(MIN_ROUNDS, math.ceil(TARGET_POINT_S / latency_s))


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (NaN when empty)."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def measure_point(base_url: str, concurrency: int, latency_s: float, rounds: int) -> BenchPoint:
    """Measure one (N, L) point against a server that answers after ``latency_s``.

    Args:
        base_url: the server's OpenAI base URL.
        concurrency: N.
        latency_s: L (the server's configured latency; used for the bound).
        rounds: measured calls per worker.

    Returns:
        The measured point.
    """
    policy = ClientPolicy(max_in_flight=concurrency)
    async with LlmClient({Role.VERIFIER: Endpoint(base_url, DEFAULT_MODEL)}, policy=policy) as client:

        async def worker(calls: int) -> list[float | None]:
            out: list[float | None] = []
            for _ in range(calls):
                result = await client.call(CallType.NER_VERDICT, NerVerdict, PROMPT)
                out.append(result.latency_s if isinstance(result, LlmOk) else None)
            return out

        await asyncio.gather(*[worker(1) for _ in range(concurrency)])
        started, cpu_started = time.perf_counter(), time.process_time()
        per_worker = await asyncio.gather(*[worker(rounds) for _ in range(concurrency)])
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    latencies = sorted(x for calls in per_worker for x in calls if x is not None)
    calls = concurrency * rounds
    bound = concurrency / latency_s
    achieved = calls / elapsed
    return BenchPoint(
        concurrency=concurrency,
        latency_s=latency_s,
        calls=calls,
        failures=calls - len(latencies),
        elapsed_s=elapsed,
        calls_per_s=achieved,
        bound_per_s=bound,
        ratio=achieved / bound,
        p50_s=_percentile(latencies, 0.50),
        p99_s=_percentile(latencies, 0.99),
        cpu_ms_per_call=cpu * 1000.0 / calls,
    )


def run_benchmark(
    concurrency: tuple[int, ...], latencies_s: tuple[float, ...], quick: bool
) -> list[BenchPoint]:
    """Measure every (N, L) point, one server process per latency.

    Args:
        concurrency: the N values.
        latencies_s: the L values.
        quick: two measured rounds per point (CI smoke run) instead of ~2 s of ideal run time.

    Returns:
        The points in (L, N) order.
    """
    points = []
    for latency_s in latencies_s:
        with ServerProcess.start("test", args=["--latency-ms", f"{latency_s * 1000:g}"]) as server:
            for n in concurrency:
                rounds = rounds_for(latency_s, quick)
                points.append(asyncio.run(measure_point(server.base_url, n, latency_s, rounds)))
    return points


def llm(
    quick: Annotated[bool, typer.Option("--quick", help="Two rounds per point (CI smoke run).")] = False,
    concurrency: Annotated[
        list[int] | None, typer.Option("-n", help="Calls in flight N (repeatable).")
    ] = None,
    latency_ms: Annotated[
        list[float] | None, typer.Option("--latency-ms", help="Server latency L in ms (repeatable).")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the points as JSON.")] = None,
) -> None:
    """Achieved LLM calls/s vs the Little's-law bound N/L against a local fixed-latency server."""
    points = run_benchmark(
        tuple(concurrency or CONCURRENCY),
        tuple(ms / 1000.0 for ms in (latency_ms or LATENCIES_MS)),
        quick,
    )
    table = Table(title="LLM client vs Little's law (closed loop, fixed server latency)")
    for column in ("L", "N", "calls", "failed", "calls/s", "N/L", "ratio", "p50", "p99", "CPU/call"):
        table.add_column(column, justify="right")
    for p in points:
        table.add_row(
            f"{p.latency_s * 1000:g} ms", str(p.concurrency), str(p.calls), str(p.failures),
            f"{p.calls_per_s:.1f}", f"{p.bound_per_s:.1f}", f"{p.ratio:.3f}",
            f"{p.p50_s * 1000:.0f} ms", f"{p.p99_s * 1000:.0f} ms", f"{p.cpu_ms_per_call:.2f} ms",
        )
    Console(width=120).print(table)
    if json_out is not None:
        json_out.write_text(json.dumps([asdict(p) for p in points], indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(llm)
