"""The DBPM engine benchmark (``clingate bench dbpm``).

:func:`run_benchmark` replays a synthetic stream (:mod:`streams.testing.dbpm_stream`, the paper's
proportions) through the engine on the memory or the RocksDB store and reports, per run: verdict
updates/s and gate decisions/s (engine time only), per-event p50/p99 overall and per decile of the run
next to the number of signatures stored at the decile's end (a cost that grew with the memory would
show as rising decile percentiles), the store's logical size and, for RocksDB, its size on disk, the
process RSS, the decisions per task, the channel population (§7.3 (i)) and the gate lift per task (Eq.
10, pairing each gate event with the verdict that follows on the same candidate). By default every
event is its own committed transaction (``--commit-every 1``), the strictest setting a stream worker
could use, so the cost of a commit is in every event's figure.
"""

from __future__ import annotations

import gc
import math
import resource
import tempfile
import time
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from processors.dbpm import DBPMConfig, DBPMEngine, GateEvent, load_ontology, parse_event
from processors.dbpm.measurement import (
    PopulationReport,
    SelectivityCounts,
    SelectivityTracker,
    channel_population,
)
from processors.dbpm.memory import Memory
from state import RamStore, Store, Transaction
from state.kinds import StoreKind
from streams.local.paths import output_file
from streams.testing.dbpm_stream import PATIENTS_PER_DAY, StreamShape, generate_events, write_stream
from streams.testing.stats import mib, percentile, resident_bytes


class BenchStores(StrEnum):
    """Which stores a benchmark run covers."""

    memory = "memory"
    rocksdb = "rocksdb"
    both = "both"

    def kinds(self) -> tuple[StoreKind, ...]:
        """The store kinds this choice stands for, memory first."""
        if self is BenchStores.both:
            return (StoreKind.memory, StoreKind.rocksdb)
        return (StoreKind(self.value),)


@dataclass(frozen=True, slots=True)
class Costs:
    """Per-event cost percentiles in microseconds, on the wall clock and in thread CPU time.

    Wall time is what a caller waits; CPU time is the engine's own work, unaffected by other
    processes competing for the cores (a shared 2-core machine inflates wall-clock tails).
    """

    wall_p50_us: float
    wall_p99_us: float
    cpu_p50_us: float
    cpu_p99_us: float

    @classmethod
    def of(cls, wall_ns: Sequence[int], cpu_ns: Sequence[int]) -> Costs:
        """Percentiles of two equally long series of nanosecond costs."""
        wall, cpu = sorted(wall_ns), sorted(cpu_ns)
        return cls(
            percentile(wall, 0.5) / 1_000.0,
            percentile(wall, 0.99) / 1_000.0,
            percentile(cpu, 0.5) / 1_000.0,
            percentile(cpu, 0.99) / 1_000.0,
        )


@dataclass(frozen=True, slots=True)
class DecileCost:
    """Per-event cost over one tenth of a run, with the memory size reached at its end.

    Attributes:
        decile: 1 to 10.
        first_event: 1-based index of the decile's first event.
        last_event: 1-based index of its last event.
        signatures: blocklist and whitelist signatures stored after its last event (all tasks).
        costs: per-event cost percentiles over the decile.
    """

    decile: int
    first_event: int
    last_event: int
    signatures: int
    costs: Costs


@dataclass(frozen=True, slots=True)
class BenchResult:
    """The figures of one benchmark run (one stream size on one store).

    ``*_cpu_seconds`` are thread CPU time spent in the timed sections, ``*_wall_seconds`` wall time.
    """

    events: int
    store: str
    commit_every: int
    verdicts: int
    gates: int
    verdict_cpu_seconds: float
    gate_cpu_seconds: float
    verdict_wall_seconds: float
    gate_wall_seconds: float
    costs: Costs
    deciles: tuple[DecileCost, ...]
    decisions: tuple[tuple[str, str, int], ...]
    logical_bytes: int
    disk_bytes: int | None
    rss_bytes: int
    rss_growth_bytes: int
    population: PopulationReport
    selectivity: SelectivityCounts

    @property
    def verdict_rate(self) -> float:
        """Verdict events applied per second of engine CPU time."""
        return self.verdicts / self.verdict_cpu_seconds if self.verdict_cpu_seconds else 0.0

    @property
    def gate_rate(self) -> float:
        """Gate decisions per second of engine CPU time."""
        return self.gates / self.gate_cpu_seconds if self.gate_cpu_seconds else 0.0

    @property
    def wall_rate(self) -> float:
        """Events per second of wall-clock time in the timed sections."""
        wall = self.verdict_wall_seconds + self.gate_wall_seconds
        return self.events / wall if wall else 0.0

    def render(self) -> str:
        """The run as a human-readable block: rates, costs per decile, sizes, population, lift."""
        disk = "-" if self.disk_bytes is None else mib(self.disk_bytes)
        c = self.costs
        lines = [
            f"== {self.events:,} events, store={self.store}, commit every {self.commit_every} event(s)",
            f"verdict updates/s {self.verdict_rate:,.0f}   gate decisions/s {self.gate_rate:,.0f}   "
            f"(engine CPU time; wall clock: {self.wall_rate:,.0f} events/s)",
            f"per-event cost: CPU p50 {c.cpu_p50_us:.1f} us, p99 {c.cpu_p99_us:.1f} us; "
            f"wall p50 {c.wall_p50_us:.1f} us, p99 {c.wall_p99_us:.1f} us",
            f"store size: logical {mib(self.logical_bytes)}, on disk {disk}   "
            f"RSS {mib(self.rss_bytes)} (+{mib(self.rss_growth_bytes)} during the run)",
            "decisions: "
            + ", ".join(f"{task} {decision} {count:,}" for task, decision, count in self.decisions),
            f"{'decile':>6} {'events':>21} {'signatures':>11} {'CPU p50':>8} {'CPU p99':>8} "
            f"{'wall p50':>9} {'wall p99':>9}  (us)",
        ]
        for d in self.deciles:
            dc = d.costs
            lines.append(
                f"{d.decile:>6} {f'{d.first_event:,}-{d.last_event:,}':>21} {d.signatures:>11,} "
                f"{dc.cpu_p50_us:>8.1f} {dc.cpu_p99_us:>8.1f} {dc.wall_p50_us:>9.1f} {dc.wall_p99_us:>9.1f}"
            )
        lines.append(self.population.render())
        lines.append("gate selectivity per task (verifier verdicts; DOWNGRADE or BLOCK = tagged):")
        for task in self.selectivity.tasks():
            counts = self.selectivity.task_total(task)
            lines.append(
                f"  {task:<4} FAIL {counts.fail_tagged:,}/{counts.fail_total:,} tagged, "
                f"PASS {counts.pass_tagged:,}/{counts.pass_total:,} tagged, lift {counts.lift()}"
            )
        return "\n".join(lines)


def _rss_bytes() -> int:
    """Current resident set size (Linux ``/proc``), else the peak RSS the OS reports."""
    try:
        return resident_bytes("self")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _signatures(state: Transaction, config: DBPMConfig) -> int:
    memory = Memory(state, config)
    return sum(memory.population(table, task) for table in ("B", "W") for task in config.tasks)


def run_benchmark(
    n_events: int,
    store: StoreKind,
    shape: StreamShape | None = None,
    commit_every: int = 1,
    config: DBPMConfig | None = None,
) -> BenchResult:
    """Drive the DBPM engine with ``n_events`` synthetic events and measure it.

    The timed section of an event is the engine call plus, every ``commit_every`` events, the
    commit of the store transaction; generating and parsing the event and the measurement
    bookkeeping are outside it. Each section is timed on the wall clock and in thread CPU time
    (RocksDB's background flush and compaction threads are not in the latter). Per-event costs are
    kept for the whole run and reported overall and per decile next to the number of stored
    signatures, so a cost that grows with the memory shows as rising decile percentiles.

    Args:
        n_events: stream length.
        store: the store the memory lives in (RocksDB in a temporary directory, removed afterwards).
        shape: the stream's shape (default: the paper's proportions, seed 0).
        commit_every: events per committed transaction (1: every event is its own atomic commit).
        config: the engine configuration (default: the paper's deployed values).

    Returns:
        The run's figures.
    """
    if n_events < 1 or commit_every < 1:
        raise ValueError("n_events and commit_every must be positive")
    config = config or DBPMConfig()
    engine = DBPMEngine(config, load_ontology())
    tasks = tuple(config.tasks)
    bounds = [math.ceil(n_events * k / 10) for k in range(1, 11)]
    wall_costs, cpu_costs = array("q"), array("q")
    wall_spent: Counter[str] = Counter()  # nanoseconds per event kind ("gate", "verdict")
    cpu_spent: Counter[str] = Counter()
    verdicts = 0
    signatures_at: list[int] = []
    decisions: Counter[tuple[str, str]] = Counter()
    tracker = SelectivityTracker()
    gc.collect()
    rss_before = _rss_bytes()
    with tempfile.TemporaryDirectory(prefix="clingate-bench-") as tmp:
        directory = Path(tmp) / "db" if store is StoreKind.rocksdb else None
        kv = _open(directory)
        txn = kv.transaction()
        for index, obj in enumerate(generate_events(n_events, shape), start=1):
            event = parse_event(obj, tasks)
            cpu_started = time.thread_time_ns()
            wall_started = time.perf_counter_ns()
            txn, outputs = engine.process(txn, event, event.time)
            if index % commit_every == 0:
                txn.commit()
                txn = kv.transaction()
            wall = time.perf_counter_ns() - wall_started
            cpu = time.thread_time_ns() - cpu_started
            wall_costs.append(wall)
            cpu_costs.append(cpu)
            wall_spent[obj["kind"]] += wall
            cpu_spent[obj["kind"]] += cpu
            if isinstance(event, GateEvent):
                for decision in outputs:
                    decisions[(event.task, decision.decision)] += 1
                    tracker.gate(event.task, event.patient_id, event.payload, decision.decision)
            else:
                verdicts += 1
                tracker.verdict(event.task, event.patient_id, event.payload, event.verdict, event.source)
            if index == bounds[len(signatures_at)]:
                signatures_at.append(_signatures(txn, config))
        txn.commit()
        snapshot = engine.snapshot(kv.transaction())
        logical = sum(len(k) + len(v) for k, v in kv.iter_range(b"", None))
        rss_after = _rss_bytes()
        kv.close()
        disk = _directory_bytes(directory) if directory is not None else None
    deciles = []
    first = 0
    for decile, (last, signatures) in enumerate(zip(bounds, signatures_at, strict=True), start=1):
        costs = Costs.of(wall_costs[first:last], cpu_costs[first:last])
        deciles.append(DecileCost(decile, first + 1, last, signatures, costs))
        first = last
    selectivity = tracker.counts()
    return BenchResult(
        events=n_events,
        store=store.value,
        commit_every=commit_every,
        verdicts=verdicts,
        gates=n_events - verdicts,
        verdict_cpu_seconds=cpu_spent["verdict"] / 1e9,
        gate_cpu_seconds=cpu_spent["gate"] / 1e9,
        verdict_wall_seconds=wall_spent["verdict"] / 1e9,
        gate_wall_seconds=wall_spent["gate"] / 1e9,
        costs=Costs.of(wall_costs, cpu_costs),
        deciles=tuple(deciles),
        decisions=tuple((task, decision, count) for (task, decision), count in sorted(decisions.items())),
        logical_bytes=logical,
        disk_bytes=disk,
        rss_bytes=rss_after,
        rss_growth_bytes=max(0, rss_after - rss_before),
        population=channel_population(snapshot, config, tracker.fail_events),
        selectivity=selectivity,
    )


def _open(directory: Path | None) -> Store:
    """An empty store: in memory without a directory, else RocksDB in ``directory``."""
    if directory is None:
        return RamStore()
    from state.rocksdb import RocksDBStore  # deferred: a memory-only run never loads RocksDB

    return RocksDBStore(directory)


# --- command ----------------------------------------------------------------------------------

app = typer.Typer(help="Benchmark the DBPM engine on a synthetic stream, or write that stream.")


def _parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part.strip().replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"expected comma-separated event counts, got {text!r}") from exc
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter("event counts must be positive integers, e.g. 10000,100000")
    return sizes


@app.callback(invoke_without_command=True)
def dbpm(
    events: Annotated[
        str, typer.Option("--events", help="Comma-separated stream sizes to benchmark, e.g. 10000,100000.")
    ] = "10000,100000,1000000",
    store: Annotated[BenchStores, typer.Option("--store", help="Store(s) to benchmark.")] = BenchStores.both,
    write_stream_to: Annotated[
        Path | None,
        typer.Option(
            "--write-stream",
            callback=output_file,
            help="Only write the synthetic stream (the largest --events size; smaller sizes are its "
            "prefixes) to this JSON Lines file, and benchmark nothing.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the synthetic stream.")] = 0,
    patients_per_day: Annotated[
        float, typer.Option("--patients-per-day", min=1.0, help="Patient arrival rate (event time).")
    ] = PATIENTS_PER_DAY,
    commit_every: Annotated[
        int, typer.Option("--commit-every", min=1, help="Events per committed store transaction.")
    ] = 1,
) -> None:
    """Print verdict updates/s, gate decisions/s, per-event p50/p99 (overall and per decile, CPU
    and wall time), store size and RSS for each size on each store; or just write the stream."""
    sizes = _parse_sizes(events)
    shape = StreamShape(seed=seed, patients_per_day=patients_per_day)
    if write_stream_to is not None:
        written = write_stream(write_stream_to, max(sizes), shape)
        typer.echo(f"wrote {written:,} events to {write_stream_to}")
        return
    results = []
    for size in sizes:
        for kind in store.kinds():
            result = run_benchmark(size, kind, shape, commit_every)
            typer.echo(result.render() + "\n")
            results.append(result)
    typer.echo(
        f"{'events':>10} {'store':>8} {'verdicts/s':>11} {'gates/s':>9} {'CPU p50':>8} {'CPU p99':>8} "
        f"{'wall p99':>9} {'disk':>10} {'RSS':>10}"
    )
    for r in results:
        disk = "-" if r.disk_bytes is None else mib(r.disk_bytes)
        typer.echo(
            f"{r.events:>10,} {r.store:>8} {r.verdict_rate:>11,.0f} {r.gate_rate:>9,.0f} "
            f"{r.costs.cpu_p50_us:>8.1f} {r.costs.cpu_p99_us:>8.1f} {r.costs.wall_p99_us:>9.1f} "
            f"{disk:>10} {mib(r.rss_bytes):>10}"
        )
