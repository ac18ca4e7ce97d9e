"""``clingate bench memory``: the DBPM memory agent draining a verdict backlog, and its restore.

The verdicts of the synthetic stream (:mod:`streams.testing.dbpm_stream`, the paper's proportions)
are produced to ``clingate.dbpm.verdicts`` of a fresh app id, keyed as the memory expects, before any
worker runs. Then one ``clingate worker --role memory`` (the memory loop and the clinical agent, in the
production configuration but for cross-task propagation and maintenance, the comparison
configuration) is started and timed from its restore line to the moment its group has committed the
topic's end:

* verdicts per second of wall time, and microseconds of the worker's CPU per verdict (user + system of
  the whole process, start-up excluded: the CPU counted at the restore line is subtracted);
* then the worker is stopped, its local stores are deleted and it is started again: the restore of the
  whole changelog it wrote, in changelog records per second (the loop's own restore line).

One run on one broker; the figures are the memory agent's rows of the runtime table in
``docs/performance.md``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import Producer

from schemas.serde import make_serde
from streams.bench.dbpm_kafka import cpu_seconds
from streams.bench.restart import restore_figures
from streams.cli.common import require_bootstrap
from streams.replay.kafka import CommitWatcher, commit_end_offsets, verdict_record
from streams.runtime.kafka_clients import produce_waiting
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.testing.dbpm_stream import generate_events
from streams.testing.worker import COMPARISON_ENV, WorkerProcess, comparison_engine
from streams.worker.dbpm import MEMORY_INPUTS, memory_changelog, producer_config
from streams.worker.memory import memory_group
from topics.admin import ensure_topics
from topics.catalog import DBPM_VERDICTS, build_catalog


def produce_verdicts(bootstrap: str, events: int) -> int:
    """Produce the verdicts among the first ``events`` events of the synthetic stream; how many."""
    engine, serde = comparison_engine(), make_serde(None)
    producer = Producer(producer_config(bootstrap, **{
        "linger.ms": 20, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
    }))  # fmt: skip
    count = 0
    for obj in generate_events(events):
        if obj["kind"] == "verdict":
            record = verdict_record(obj, engine, serde)  # type: ignore[arg-type]
            produce_waiting(producer, record.topic, key=record.key, value=record.value)
            count += 1
    if producer.flush(120):
        raise RuntimeError("the verdicts were not all acknowledged within 120 s")
    return count


def memory_bench(
    bootstrap: str,
    workdir: Path,
    events: int,
    env: Mapping[str, str] = COMPARISON_ENV,
    timeout_s: float = 1800.0,
) -> dict[str, Any]:
    """Drain a verdict backlog with one memory worker configured by ``env``, then restore its
    changelog; the figures."""
    settings = get_settings()
    ensure_topics(admin_client(bootstrap), build_catalog(settings.topic_partitions))
    app_id = f"clingate-membench-{uuid.uuid4().hex[:8]}"
    group = memory_group(app_id)
    commit_end_offsets(bootstrap, group, list(MEMORY_INPUTS))
    verdicts = produce_verdicts(bootstrap, events)
    restored = f"{memory_changelog(app_id)} restored".encode()
    worker = WorkerProcess(bootstrap, app_id, workdir / app_id, dict(env), role="memory")
    worker.start(ready=restored)
    pid = worker.pid
    assert pid is not None
    cpu_start, started = cpu_seconds([pid]), time.monotonic()
    with CommitWatcher(bootstrap, group) as watcher:
        watcher.wait(DBPM_VERDICTS, timeout_s)
    elapsed, cpu = time.monotonic() - started, cpu_seconds([pid]) - cpu_start
    worker.stop()
    shutil.rmtree(worker.datadir / "memory" / "partitions")
    worker.start(ready=restored)
    worker.stop()
    records, restore_s = restore_figures(
        worker.log.read_bytes()[worker.log_offset :].decode(errors="replace")
    )
    return {
        "verdicts": verdicts,
        "memory_agent_verdicts_per_s": verdicts / elapsed,
        "memory_agent_cpu_us_per_verdict": cpu / verdicts * 1e6,
        "restore_records": records,
        "restore_records_per_s": records / restore_s if restore_s else float("nan"),
    }


def memory(
    events: Annotated[
        int, typer.Option("--events", "-n", help="Synthetic stream events (verdicts among them).")
    ] = 200_000,
    workdir: Annotated[
        Path | None, typer.Option(help="Worker data directory and log [default: temporary].")
    ] = None,
) -> None:
    """The memory agent's verdicts/s and CPU per verdict on a backlog, and its changelog restore rate.

    Needs a broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); starts its own worker.
    """
    bootstrap = require_bootstrap(get_settings())
    with tempfile.TemporaryDirectory(prefix="clingate-membench-") as scratch:
        figures = memory_bench(bootstrap, workdir or Path(scratch), events)
    typer.echo(
        f"memory agent: {figures['verdicts']:,} verdicts in a backlog, "
        f"{figures['memory_agent_verdicts_per_s']:,.0f} verdicts/s, "
        f"{figures['memory_agent_cpu_us_per_verdict']:,.0f} us of worker CPU per verdict"
    )
    typer.echo(
        f"restore: {figures['restore_records']:,} changelog records, "
        f"{figures['restore_records_per_s']:,.0f} records/s (local store deleted)"
    )
