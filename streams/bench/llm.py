"""Little's-law benchmark of the LLM client: achieved calls/s against the bound N / L.

A closed loop of N workers, each making calls back to back, against a server that answers every call
after a fixed latency L, can at best complete N / L calls per second (Little's law: throughput =
concurrency / latency). The ratio achieved / (N / L) measures how much the client (HTTP stack,
validation, semaphore, event loop) costs on top of the server's latency; GPU consumer groups need it
near 1 at the paper's 64-way concurrency, so the servers' continuous batching is fed.

The server is ``clingate llm serve --backend test`` (:class:`streams.testing.llm_server.ServerProcess`) in its
own process, so client and server do not share an event loop (on a 2-core machine they share the CPU).
Each point runs one warm-up round (connections are opened) and then ``rounds`` measured rounds of N
calls; the run time per point is about ``(rounds + 1) * L`` when the bound is reached.
``--groups`` measures the verifier consumer group instead of the bare client: the same Little's-law
bound, now through the broker. Per point it publishes ``N * rounds`` to-verify records (NER candidates
of 256 patients, with their narratives), runs one verifier group member
(:func:`streams.groups.verifier.run_verifier`) with N records and N client lanes in flight against the
fixed-latency server, and measures its verdict rate between the 10th and the 90th percentile of the verdicts
(so the group's join and the last stragglers are excluded). The rate includes decoding, the narrative
lookup, the verdict semantics, encoding, producing and the in-order commits, all on the one event loop.
The group writes real ``clingate.dbpm.verdicts`` and ``verified`` records (patients ``bench-*``): run it
against a scratch cluster (``clingate broker start``), not a production one. Records per point are
capped at :data:`GROUP_MAX_RECORDS` (at least five rounds).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka import Producer
from prometheus_client import Counter
from rich.console import Console
from rich.table import Table

from schemas.dbpm import Candidate, GateDecision, Narrative, NerPayload
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.groups.llm import new_metrics
from streams.groups.verifier import run_verifier
from streams.llm import CallType, ClientPolicy, Endpoint, LlmClient, LlmOk, Role
from streams.llm.schemas import NerVerdict
from streams.llm.serve.testserver import DEFAULT_MODEL
from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_file
from streams.replay.kafka import commit_end_offsets
from streams.runtime.kafka_clients import produce_waiting, producer_config
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings, get_settings
from streams.testing.llm_server import ServerProcess
from streams.testing.stats import percentile
from topics.admin import ensure_topics
from topics.catalog import DBPM_DECISIONS, DBPM_NARRATIVES, DBPM_TO_VERIFY, build_catalog

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
        p50_s=percentile(latencies, 0.50, empty=math.nan),
        p99_s=percentile(latencies, 0.99, empty=math.nan),
        cpu_ms_per_call=cpu * 1000.0 / calls,
    )


GROUP_MAX_RECORDS = 4000
GROUP_PATIENTS = 256
_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_SUCCESS = {"task": "ner", "verdict": "success", "defaulted": "false"}


def group_records(concurrency: int, latency_s: float, quick: bool) -> int:
    """To-verify records of one group point: ``N * rounds``, capped at GROUP_MAX_RECORDS (>= 5 rounds)."""
    wanted = concurrency * rounds_for(latency_s, quick)
    return wanted if quick else min(wanted, max(GROUP_MAX_RECORDS, concurrency * MIN_ROUNDS))


def _publish_group_input(bootstrap: str, serde: Serde, run: str, records: int) -> None:
    """Narratives of GROUP_PATIENTS patients, then ``records`` ALLOW decisions of NER candidates."""
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    patients = [f"bench-{run}-{i}" for i in range(GROUP_PATIENTS)]
    for patient in patients:
        narrative = Narrative(ts=_T0, patient_id=patient, text="Metformin for type 2 diabetes.")
        value = serde.encode(narrative, topic=DBPM_NARRATIVES)
        producer.produce(DBPM_NARRATIVES, key=patient.encode(), value=value)
    for i in range(records):
        patient = patients[i % GROUP_PATIENTS]
        candidate = Candidate(ts=_T0, task="ner", patient_id=patient, candidate_id=f"{patient}-{i}",
                              payload=NerPayload(entity="type 2 diabetes", category="Diagnosis"))  # fmt: skip
        decision = GateDecision(ts=_T0, task="ner", patient_id=patient, candidate_id=candidate.candidate_id,
                                decision="ALLOW", rule="bench", signature="bench", confidence_multiplier=1.0,
                                candidate=candidate)  # fmt: skip
        produce_waiting(producer, DBPM_TO_VERIFY, key=patient.encode(),
                        value=serde.encode(decision, topic=DBPM_TO_VERIFY))  # fmt: skip
    if producer.flush(60):
        raise RuntimeError("benchmark input not acknowledged by the broker within 60 s")


def _total(counter: Counter) -> float:
    """The value of one labelled counter (its ``_total`` sample)."""
    return next(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))


async def measure_group_point(
    bootstrap: str, settings: Settings, base_url: str, concurrency: int, latency_s: float, records: int
) -> BenchPoint:
    """Measure the verifier group at one (N, L) point (see the module docstring).

    Args:
        bootstrap: Kafka bootstrap servers (the catalog topics exist).
        settings: the process settings (serde, DBPM flags, narrative cache).
        base_url: the fixed-latency server's OpenAI base URL.
        concurrency: N (records and client lanes in flight).
        latency_s: L.
        records: to-verify records to publish.

    Returns:
        The measured point (``calls`` and ``elapsed_s`` cover the 10th to 90th percentile verdicts).
    """
    run = uuid.uuid4().hex[:8]
    group_settings = settings.model_copy(update={"verifier_group_id": f"clingate-bench-{run}"})
    commit_end_offsets(bootstrap, group_settings.verifier_group_id, [DBPM_TO_VERIFY, DBPM_DECISIONS])
    _publish_group_input(bootstrap, make_serde(settings.schema_registry_url), run, records)
    metrics = new_metrics()
    stop = asyncio.Event()
    policy = ClientPolicy(max_in_flight=concurrency)
    async with LlmClient({Role.VERIFIER: Endpoint(base_url, DEFAULT_MODEL)}, policy=policy) as client:
        group = asyncio.create_task(run_verifier(bootstrap, group_settings, stop=stop, client=client,
                                                 metrics=metrics, max_in_flight=concurrency))  # fmt: skip
        low, high = max(1, round(records * 0.1)), max(2, round(records * 0.9))
        marks: dict[int, tuple[float, float]] = {}
        # Read the one counter the marks need: collecting the whole registry every 5 ms would spend
        # CPU of this process, which the figure counts, on series the benchmark never reads.
        verdicts = metrics.verdicts.labels(**_SUCCESS)
        while high not in marks:
            done = int(_total(verdicts))
            for mark in (low, high):
                if done >= mark and mark not in marks:
                    marks[mark] = (time.perf_counter(), time.process_time())
            if group.done():
                group.result()  # raises the group's error
                raise RuntimeError("the verifier group stopped before the benchmark finished")
            await asyncio.sleep(0.005)
        stop.set()
        await group
    calls = high - low
    elapsed, cpu = marks[high][0] - marks[low][0], marks[high][1] - marks[low][1]
    bound = concurrency / latency_s
    achieved = calls / elapsed if elapsed > 0 else math.inf
    return BenchPoint(
        concurrency=concurrency, latency_s=latency_s, calls=calls, failures=0, elapsed_s=elapsed,
        calls_per_s=achieved, bound_per_s=bound, ratio=achieved / bound, p50_s=math.nan, p99_s=math.nan,
        cpu_ms_per_call=cpu * 1000.0 / max(calls, 1),
    )  # fmt: skip


def run_group_benchmark(
    bootstrap: str, concurrency: tuple[int, ...], latencies_s: tuple[float, ...], quick: bool
) -> list[BenchPoint]:
    """Measure the verifier group at every (N, L) point, one server process per latency.

    Args:
        bootstrap: Kafka bootstrap servers (a scratch cluster: the group writes verdicts).
        concurrency: the N values.
        latencies_s: the L values.
        quick: two rounds per point (CI smoke run).

    Returns:
        The points in (L, N) order.
    """
    settings = get_settings()
    catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
    ensure_topics(admin_client(bootstrap), catalog)
    points = []
    for latency_s in latencies_s:
        with ServerProcess.start("test", args=["--latency-ms", f"{latency_s * 1000:g}"]) as server:
            for n in concurrency:
                records = group_records(n, latency_s, quick)
                points.append(
                    asyncio.run(
                        measure_group_point(bootstrap, settings, server.base_url, n, latency_s, records)
                    )
                )
    return points


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
    json_out: Annotated[
        Path | None, typer.Option("--json", callback=output_file, help="Also write the points as JSON.")
    ] = None,
    groups: Annotated[
        bool,
        typer.Option(
            "--groups",
            help="Measure the verifier consumer group through the broker "
            "(KAFKA_BOOTSTRAP_SERVERS or `clingate broker`; use a scratch cluster).",
        ),
    ] = False,
) -> None:
    """Achieved LLM calls/s vs the Little's-law bound N/L against a local fixed-latency server."""
    ns = tuple(concurrency or CONCURRENCY)
    ls = tuple(ms / 1000.0 for ms in (latency_ms or LATENCIES_MS))
    if groups:
        bootstrap = require_bootstrap(get_settings())
        points = run_group_benchmark(bootstrap, ns, ls, quick)
        title = "Verifier group through Kafka vs Little's law (verdicts/s, 10th-90th percentile)"
    else:
        points = run_benchmark(ns, ls, quick)
        title = "LLM client vs Little's law (closed loop, fixed server latency)"
    table = Table(title=title)
    for column in ("L", "N", "calls", "failed", "calls/s", "N/L", "ratio", "p50", "p99", "CPU/call"):
        table.add_column(column, justify="right")
    for p in points:
        table.add_row(
            f"{p.latency_s * 1000:g} ms",
            str(p.concurrency),
            str(p.calls),
            str(p.failures),
            f"{p.calls_per_s:.1f}",
            f"{p.bound_per_s:.1f}",
            f"{p.ratio:.3f}",
            f"{p.p50_s * 1000:.0f} ms",
            f"{p.p99_s * 1000:.0f} ms",
            f"{p.cpu_ms_per_call:.2f} ms",
        )
    Console(width=120).print(table)
    if json_out is not None:
        json_out.write_text(json.dumps([asdict(p) for p in points], indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(llm)
