"""``clingate bench dbpm-kafka``: gate throughput and latency through the broker and running workers.

Drives the application as a client would: candidates produced to ``clingate.dbpm.candidates``,
decisions consumed from ``clingate.dbpm.decisions``. Start the workers first (``clingate worker``;
the same ``CLINGATE_APP_ID`` as here is not needed, the bench only talks to topics).

Measured, in one run:

1. the in-process gate (the engine over an in-memory store holding the same memory): candidates/s,
   the reference for the Kafka overhead ratio; and the in-process gate *pipeline*, the gate worker's
   per-candidate work without Kafka (:class:`streams.worker.gate.Gate`: decode the record, decide, encode
   the decision);
2. the sustained maximum through Kafka: a burst of candidates produced as fast as possible, rate =
   decisions consumed / time from first produce to last decision;
3. end-to-end latency (produce call -> decision consumed) at 25%, 50% and 90% of that maximum,
   candidates paced in 10 ms slices: p50 and p99;
4. with ``--worker-pid`` (repeatable): the CPU the worker processes spent during the burst, per
   candidate, and the candidates one worker process decides per second of its own CPU. On a shared
   machine the wall-clock rate measures the neighbours as much as the worker (the bench's own
   client competes for the same cores); the CPU figure is the capacity of one worker on one core.

Candidates are encoded before each measurement starts, so the client's encoding is not timed; the
client decodes every decision (it needs the candidate id), which costs about as much CPU as the
gate's own decode.

The memory is the replay example's verdicts (published once, before the measurements, when
``--load-memory``); candidates are the example's gate events with fresh candidate ids, so every
run decides real DBPM questions. Candidates carry no barrier header: live gates never wait.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from itertools import cycle
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import Producer

from processors.dbpm import GateEvent, VerdictEvent, parse_event
from schemas.dbpm import Candidate, GateDecision, Verdict
from schemas.serde import Serde
from schemas.wire import make_serde
from state.ram import RamStore
from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_file
from streams.runtime.dlq import Rejected, SourceRecord
from streams.runtime.kafka_clients import assign_at_ends, consume_batch, producer_config, reader
from streams.runtime.settings import get_settings
from streams.testing.stats import percentile
from streams.worker.engine import dbpm_engine
from streams.worker.gate import Gate
from streams.worker.keys import verdict_key
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_VERDICTS

#: The fractions of the sustained maximum the latency is measured at (module docstring, 3).
LATENCY_FRACTIONS = (0.25, 0.5, 0.9)


@dataclass(frozen=True)
class LatencyPoint:
    """Latency at one offered rate."""

    fraction: float
    offered_per_s: float
    achieved_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class BenchResult:
    """One bench run."""

    in_process_per_s: float
    in_process_pipeline_per_s: float
    kafka_max_per_s: float
    overhead_ratio: float
    latency: list[LatencyPoint]
    worker_cpu_us_per_candidate: float | None
    """Worker CPU (user + system, every ``--worker-pid``) per candidate during the burst."""


def _events(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    objects = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [o for o in objects if o["kind"] == "verdict"], [o for o in objects if o["kind"] == "gate"]


def _record(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "kind"}


def _memory(verdicts: list[dict[str, Any]]) -> RamStore:
    engine = dbpm_engine(get_settings())
    store = RamStore()
    with store.transaction() as txn:
        for obj in verdicts:
            event = parse_event(obj)
            engine.process(txn, event, event.time)
    return store


def in_process_rate(verdicts: list[dict[str, Any]], gates: list[dict[str, Any]], n: int) -> float:
    """Gate decisions per second of the engine alone, over the memory the verdicts build."""
    engine = dbpm_engine(get_settings())
    store = _memory(verdicts)
    events = [parse_event(o) for o in gates]
    started = time.perf_counter()
    for _, event in zip(range(n), cycle(events), strict=False):
        txn = store.transaction()
        engine.decide(txn, event, event.time)  # type: ignore[arg-type]
        txn.abort()
    return n / (time.perf_counter() - started)


def in_process_pipeline_rate(
    verdicts: list[dict[str, Any]], encoded: list[tuple[str, bytes, bytes]], serde: Serde
) -> float:
    """Candidates per second of the gate worker's per-candidate work (decode, decide, encode), no Kafka."""
    gate = Gate(dbpm_engine(get_settings()), serde, _memory(verdicts))
    records = [SourceRecord(DBPM_CANDIDATES, 0, i, None, k, v) for i, (_, k, v) in enumerate(encoded)]
    started = time.perf_counter()
    for record in records:
        decoded = gate.decode(record)
        assert not isinstance(decoded, Rejected), decoded.reason
        gate.decide(decoded)
    return len(records) / (time.perf_counter() - started)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (Linux ``/proc/<pid>/stat``)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat(5))
    return total / os.sysconf("SC_CLK_TCK")


class _Client:
    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self.serde = serde
        self.producer = Producer(
            producer_config(bootstrap, **{"linger.ms": 2, "queue.buffering.max.messages": 1_000_000})
        )
        self.consumer = reader(bootstrap, "bench")
        assign_at_ends(self.consumer, [DBPM_DECISIONS])

    def load(self, engine_verdicts: list[dict[str, Any]]) -> None:
        engine = dbpm_engine(get_settings())
        for obj in engine_verdicts:
            event = parse_event(obj)
            assert isinstance(event, VerdictEvent)
            value = self.serde.encode(Verdict.model_validate(_record(obj)), topic=DBPM_VERDICTS)
            self.producer.produce(DBPM_VERDICTS, key=verdict_key(engine, event), value=value)
        self.producer.flush()

    def candidates(self, gates: list[dict[str, Any]], n: int) -> list[tuple[str, bytes, bytes]]:
        """``n`` encoded candidates (fresh ids) cycling through the stream's gate events."""
        run = uuid.uuid4().hex[:8]
        out = []
        for i, obj in zip(range(n), cycle(gates), strict=False):
            assert isinstance(parse_event(obj), GateEvent)
            candidate = Candidate.model_validate({**_record(obj), "candidate_id": f"bench-{run}-{i}"})
            out.append((candidate.candidate_id, candidate.patient_id.encode(), self.serde.encode(candidate)))
        return out

    def run(self, encoded: list[tuple[str, bytes, bytes]], rate: float | None) -> tuple[float, list[float]]:
        """Produce ``encoded`` (paced at ``rate``/s if given); (achieved rate, latencies in s)."""
        n = len(encoded)
        stream = iter(encoded)
        sent: dict[str, float] = {}
        latencies: list[float] = []
        started = time.perf_counter()
        slice_s = 0.01
        produced = 0
        while produced < n or len(latencies) < n:
            now = time.perf_counter()
            due = n if rate is None else min(n, int((now - started) * rate) + 1)
            while produced < due:
                candidate_id, key, value = next(stream)
                sent[candidate_id] = time.perf_counter()
                self.producer.produce(DBPM_CANDIDATES, key=key, value=value)
                produced += 1
            self.producer.poll(0)
            # A decision is timed as soon as the reader has it: the batch read returns at the first
            # record, and each is looked up by its datum's candidate id, not decoded into the model (the
            # bench's client shares the machine's cores with the workers it measures).
            for message in consume_batch(self.consumer, 10_000, slice_s):
                if message.error():
                    continue
                datum = self.serde.read_datum(message.value(), GateDecision, topic=DBPM_DECISIONS)
                t0 = sent.pop(datum["candidate_id"], None)
                if t0 is not None:
                    latencies.append(time.perf_counter() - t0)
            if time.perf_counter() - started > 600:
                raise TimeoutError(f"only {len(latencies)} of {n} decisions in 600 s: are workers running?")
        return n / (time.perf_counter() - started), latencies


def measure_gate(
    bootstrap: str,
    serde: Serde,
    verdicts: list[dict[str, Any]],
    gates: list[dict[str, Any]],
    n: int,
    load_memory: bool = True,
    pids: list[int] | None = None,
    loaded: Callable[[], None] | None = None,
    fractions: Sequence[float] = LATENCY_FRACTIONS,
) -> BenchResult:
    """The measurements of the module docstring, against the workers serving ``bootstrap``.

    Args:
        bootstrap: the broker.
        serde: the process's serde.
        verdicts: the verdict events that make the memory (published first with ``load_memory``).
        gates: the gate events the candidates cycle through.
        n: candidates per measurement.
        load_memory: publish ``verdicts`` first.
        pids: worker processes to charge CPU to.
        loaded: called once the verdicts are published, before anything is measured (to wait until
            the workers applied them, so that the gate's CPU is not the memory's catching up).
        fractions: the fractions of the maximum the latency is measured at (none: the maximum alone).
    """
    client = _Client(bootstrap, serde)
    reference = in_process_rate(verdicts, gates, n)
    burst = client.candidates(gates, n)
    pipeline = in_process_pipeline_rate(verdicts, burst, serde)
    if load_memory:
        client.load(verdicts)
        if loaded is not None:
            loaded()
    pids = pids or []
    cpu_before = cpu_seconds(pids)
    maximum, _ = client.run(burst, None)
    cpu_us = (cpu_seconds(pids) - cpu_before) / n * 1e6 if pids else None
    points = []
    for fraction in fractions:
        offered = maximum * fraction
        achieved, latencies = client.run(client.candidates(gates, max(1000, int(n * fraction))), offered)
        points.append(LatencyPoint(
            fraction, offered, achieved, percentile(latencies, 0.5) * 1e3, percentile(latencies, 0.99) * 1e3
        ))  # fmt: skip
    return BenchResult(reference, pipeline, maximum, reference / maximum, points, cpu_us)


def dbpm_kafka(
    events: Annotated[Path, typer.Option("--events", exists=True, help="A replay-contract stream.")],
    n: Annotated[int, typer.Option("-n", help="Candidates per measurement.")] = 20_000,
    load_memory: Annotated[
        bool, typer.Option(help="Publish the stream's verdicts first (once per deployment).")
    ] = True,
    json_out: Annotated[
        Path | None, typer.Option("--json", callback=output_file, help="Also write the result as JSON.")
    ] = None,
    worker_pid: Annotated[
        list[int] | None, typer.Option(help="A worker process to charge CPU to (repeatable; Linux).")
    ] = None,
) -> None:
    """Measure gate throughput and latency through Kafka against the in-process engine."""
    settings = get_settings()
    verdicts, gates = _events(events)
    serde = make_serde(settings.schema_registry_url)
    result = measure_gate(require_bootstrap(settings), serde, verdicts, gates, n, load_memory, worker_pid)
    typer.echo(
        f"in-process gate: {result.in_process_per_s:,.0f} candidates/s (engine); "
        f"{result.in_process_pipeline_per_s:,.0f} candidates/s (decode + engine + encode)"
    )
    typer.echo(
        f"through Kafka:   {result.kafka_max_per_s:,.0f} candidates/s sustained "
        f"(overhead x{result.overhead_ratio:.1f})"
    )
    cpu_us = result.worker_cpu_us_per_candidate
    if cpu_us is not None:
        typer.echo(f"worker CPU:      {cpu_us:,.0f} us per candidate = {1e6 / cpu_us:,.0f} candidates "
                   "per worker CPU-second")  # fmt: skip
    for p in result.latency:
        typer.echo(
            f"  at {p.fraction:.0%} ({p.offered_per_s:,.0f}/s offered, {p.achieved_per_s:,.0f}/s achieved): "
            f"p50 {p.p50_ms:.1f} ms, p99 {p.p99_ms:.1f} ms"
        )
    if json_out is not None:
        json_out.write_text(json.dumps(asdict(result), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(dbpm_kafka)
