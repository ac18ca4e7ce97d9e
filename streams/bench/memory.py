"""``clingate bench memory``: the DBPM memory writer draining a verdict backlog, and its restore.

The verdicts of the synthetic stream (:mod:`streams.testing.dbpm_stream`, the paper's proportions) are
encoded for ``clingate.dbpm.verdicts`` of a fresh app id, keyed as the memory expects, before any worker
runs. Then ``--workers`` ``clingate worker --role memory`` processes (default one; the memory writer and
the clinical agent, in the production configuration but for cross-task propagation and maintenance, the
comparison configuration) are started together with that app id and, once each has restored its
partitions (its restore line), the verdicts are produced in one burst. The drain is timed from the
burst's start to the moment their group has committed the topic's end:

* verdicts per second of wall time, and microseconds of the workers' CPU per verdict (user + system of
  the whole processes, start-up excluded: the CPU counted when the burst starts is subtracted);
* then, with one worker, the worker is stopped, its local stores are deleted and it is started again:
  the restore of the whole changelog it wrote, in changelog records per second (the loop's own restore
  line).

Several workers share the verdicts' partitions (one consumer group): their rate over one worker's is
what a second process adds. One run on one broker; the figures are the memory writer's rows of the
runtime table in ``docs/performance.md``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import Producer

from schemas.wire import make_serde
from streams.bench.dbpm_kafka import cpu_seconds
from streams.bench.restart import restore_figures
from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_folder
from streams.replay.kafka import CommitWatcher, ReplayRecord, commit_worker_end_offsets, verdict_record
from streams.runtime.kafka_clients import produce_waiting, producer_config
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.testing.dbpm_stream import generate_events
from streams.testing.worker import COMPARISON_ENV, WorkerProcess, check_own_input, comparison_engine
from streams.worker.keys import MEMORY_INPUTS, memory_changelog
from streams.worker.memory import memory_group
from topics.admin import ensure_topics
from topics.catalog import DBPM_VERDICTS, build_catalog


def verdict_records(events: int) -> list[ReplayRecord]:
    """The ``clingate.dbpm.verdicts`` records of the verdicts among the first ``events`` events of the
    synthetic stream, keyed as the memory expects."""
    engine, serde = comparison_engine(), make_serde(None)
    return [
        verdict_record(obj, engine, serde)  # type: ignore[arg-type]
        for obj in generate_events(events)
        if obj["kind"] == "verdict"
    ]


def produce(bootstrap: str, records: Sequence[ReplayRecord]) -> None:
    """Produce ``records`` (key and value) as fast as the client can, and wait for their acks."""
    producer = Producer(producer_config(bootstrap, **{
        "linger.ms": 20, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
    }))  # fmt: skip
    for record in records:
        produce_waiting(producer, record.topic, key=record.key, value=record.value)
    if producer.flush(120):
        raise RuntimeError("the verdicts were not all acknowledged within 120 s")


def memory_bench(
    bootstrap: str,
    workdir: Path,
    events: int,
    env: Mapping[str, str] = COMPARISON_ENV,
    timeout_s: float = 1800.0,
    workers: int = 1,
) -> dict[str, Any]:
    """Drain a verdict backlog with ``workers`` memory worker processes configured by ``env`` (one app
    id: they share the topic's partitions); with one, then restore its changelog; the figures.

    The backlog is produced once every worker has restored its partitions (so several workers are
    measured past their group's rebalance, as one is past its start-up), from records encoded before.
    """
    settings = get_settings()
    ensure_topics(admin_client(bootstrap), build_catalog(settings.topic_partitions))
    app_id = f"clingate-membench-{uuid.uuid4().hex[:8]}"
    group = memory_group(app_id)
    commit_worker_end_offsets(bootstrap, app_id)
    backlog = verdict_records(events)
    restored = f"{memory_changelog(app_id)} restored".encode()
    processes = [
        WorkerProcess(bootstrap, app_id, workdir / f"{app_id}-{i}", dict(env), role="memory")
        for i in range(workers)
    ]
    try:
        pids = _start_together(processes, restored)
        cpu_start, started = cpu_seconds(pids), time.monotonic()
        produce(bootstrap, backlog)
        with CommitWatcher(bootstrap, group) as watcher:
            watcher.wait(DBPM_VERDICTS, timeout_s)
        elapsed, cpu = time.monotonic() - started, cpu_seconds(pids) - cpu_start
        check_own_input(processes, MEMORY_INPUTS)
    finally:
        for worker in processes:
            worker.stop()
    figures: dict[str, Any] = {
        "verdicts": len(backlog),
        "memory_agent_verdicts_per_s": len(backlog) / elapsed,
        "memory_agent_cpu_us_per_verdict": cpu / len(backlog) * 1e6,
    }
    if workers == 1:
        figures.update(_restore(processes[0], restored))
    return figures


def _start_together(workers: Sequence[WorkerProcess], ready: bytes) -> list[int]:
    """Start ``workers`` at once, each waiting for its ``ready`` line in a thread of its own; their pids
    (the first error is raised once every start ended: the caller stops them all)."""

    def start(worker: WorkerProcess) -> int:
        worker.start(ready=ready)
        assert worker.pid is not None
        return worker.pid

    with ThreadPoolExecutor(len(workers)) as pool:
        return list(pool.map(start, workers))


def _restore(worker: WorkerProcess, restored: bytes) -> dict[str, Any]:
    """The stopped ``worker`` started again with its local stores deleted: the restore figures."""
    shutil.rmtree(worker.datadir / "memory" / "partitions")
    worker.start(ready=restored)
    worker.stop()
    records, restore_s = restore_figures(
        worker.log.read_bytes()[worker.log_offset :].decode(errors="replace")
    )
    return {
        "restore_records": records,
        "restore_records_per_s": records / restore_s if restore_s else float("nan"),
    }


def memory(
    events: Annotated[
        int, typer.Option("--events", "-n", help="Synthetic stream events (verdicts among them).")
    ] = 200_000,
    workers: Annotated[
        int, typer.Option(min=1, help="Memory worker processes sharing the partitions (restore: one only).")
    ] = 1,
    workdir: Annotated[
        Path | None,
        typer.Option(callback=output_folder, help="Worker data directory and log (default: temporary)."),
    ] = None,
) -> None:
    """The memory writer's verdicts/s and CPU per verdict on a backlog, and its changelog restore rate.

    Needs a broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); starts its own workers.
    """
    bootstrap = require_bootstrap(get_settings())
    with tempfile.TemporaryDirectory(prefix="clingate-membench-") as scratch:
        figures = memory_bench(bootstrap, workdir or Path(scratch), events, workers=workers)
    typer.echo(
        f"memory writer, {workers} worker(s): {figures['verdicts']:,} verdicts in a backlog, "
        f"{figures['memory_agent_verdicts_per_s']:,.0f} verdicts/s, "
        f"{figures['memory_agent_cpu_us_per_verdict']:,.0f} us of worker CPU per verdict"
    )
    if "restore_records" in figures:
        typer.echo(
            f"restore: {figures['restore_records']:,} changelog records, "
            f"{figures['restore_records_per_s']:,.0f} records/s (local store deleted)"
        )
