"""``clingate bench restart``: how long a worker over a 1M-signature memory takes to be ready again.

Recovery must come from the local RocksDB store plus the changelog tail, not a full changelog
replay. The bench builds the memory table of a fresh app the way the worker would, restarts a real
``clingate worker --role memory`` on it and reports, per restart, the time from the process start to
the memory writer's restore line (:class:`streams.worker.tableloop.TableLoop`: the partitions
restored, the changelog records read and the restore's own seconds):

1. **tail**: the local stores hold all but the last ``--tail`` fraction of each partition's
   changelog groups, rounded up (so at least one group is left to read whenever the fraction is
   above 0: a worker that died before its last acknowledgements reached its disk);
2. **full**: the local stores are wiped (a new host): the whole changelog is replayed.

The worker's ``clingate_dbpm_memory_patterns`` gauge (the partitions it writes) is scraped after each
restart: the restored memory must hold every signature.

Building through the worker itself (publishing 1M verdicts) would take most of an hour at the
worker's measured rate, so the memory is built in process instead, exactly as the memory writer
builds it: each verdict (one NER pattern each, a fresh signature) goes through the comparison
engine on the store of its memory partition (``task|signature`` key, murmur2, as the worker's
input); the writes of ``--group`` consecutive verdicts of a partition form one changelog group
closed by the boundary record (:func:`streams.worker.tablestore.write_group` for the local store,
the same records in the same order to the changelog, where a restore reads them like the writer's
own). The boundary's input offset is the verdict topic's end at build time (the memory group is
committed there), so the worker starts exactly where the memory ends. Choice: the groups carry no
watermark record (only replay candidates wait for watermarks).
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka import Producer

from processors.dbpm import DBPMEngine, parse_event
from state.base import Transaction
from state.ram import RamStore
from state.rocksdb import RocksDBStore
from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_folder
from streams.replay.kafka import commit_worker_end_offsets
from streams.runtime.kafka_clients import produce_waiting, producer_config
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.testing.tail import topic_ends
from streams.testing.worker import COMPARISON_ENV, WorkerProcess, comparison_engine
from streams.worker.keys import memory_changelog, verdict_key
from streams.worker.tablestore import BOUNDARY_KEY, write_group
from topics.admin import ensure_topics
from topics.catalog import DBPM_VERDICTS, build_catalog
from topics.partitioner import partition_for

_CATEGORIES = ("Symptoms", "Diagnosis", "Tests", "Treatment", "History", "Observation")
_START = datetime(2026, 5, 4, tzinfo=UTC)
#: The memory writer's restore line (``streams.worker.tableloop.TableLoop``): records read and seconds.
_RESTORED = re.compile(
    r"-dbpm-memory-changelog restored: partitions \[[\d, ]*\], (\d+) changelog records in ([\d.]+) s"
)


class _RecordingStore(RamStore):
    """A memory store that also keeps every committed write, for the changelog group."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[bytes, bytes | None] = {}

    def _apply(self, writes: dict[bytes, object]) -> None:
        super()._apply(writes)
        for key, value in writes.items():
            self.pending[key] = value if isinstance(value, bytes) else None


def memory_groups(
    engine: DBPMEngine, signatures: int, partitions: int, group: int, input_offsets: dict[int, int]
) -> Iterator[tuple[int, list[tuple[bytes, bytes | None]]]]:
    """``(partition, records)`` of every changelog group of a memory of ``signatures`` NER patterns.

    Args:
        engine: the memory engine.
        signatures: verdicts, one fresh NER signature each.
        partitions: memory (= verdict topic) partitions.
        group: verdicts per changelog group and partition.
        input_offsets: per partition, the input offset the boundaries record.
    """
    stores = [_RecordingStore() for _ in range(partitions)]
    counts = [0] * partitions
    for i in range(signatures):
        event = parse_event({
            "kind": "verdict", "ts": (_START + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
            "task": "ner", "verdict": "hard_fail" if i % 4 == 0 else "success", "source": "verifier_mmed",
            "patient_id": f"p-{i // 40:06d}",
            "payload": {"entity": f"finding {i:07d}", "category": _CATEGORIES[i % len(_CATEGORIES)]},
        })  # fmt: skip
        p = partition_for(verdict_key(engine, event), partitions)
        with Transaction(stores[p]) as txn:
            engine.process(txn, event, event.time)
        counts[p] += 1
        if counts[p] % group == 0:
            yield p, _close(stores[p], input_offsets[p])
    for p, store in enumerate(stores):
        if store.pending:
            yield p, _close(store, input_offsets[p])


def _close(store: _RecordingStore, input_offset: int) -> list[tuple[bytes, bytes | None]]:
    records = [*store.pending.items(), (BOUNDARY_KEY, str(input_offset).encode())]
    store.pending = {}
    return records


def restore_figures(log: str) -> tuple[int, float]:
    """Changelog records the memory writer's restores read, and their seconds, from one start's log."""
    found = [(int(m.group(1)), float(m.group(2))) for m in _RESTORED.finditer(log)]
    return sum(r for r, _ in found), sum(s for _, s in found) if found else float("nan")


def _patterns(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("clingate_dbpm_memory_patterns{") and 'task="ner"' in line
    )  # fmt: skip


@dataclass(frozen=True)
class Restart:
    """One measured restart."""

    name: str
    ready_s: float
    """Process start to the memory restored (Python and group start-up included)."""
    recovery_s: float
    """The restore alone (changelog read and applied)."""
    records_read: int
    patterns: float


def restart_bench(
    bootstrap: str, workdir: Path, signatures: int, tail: float, group: int, full: bool = True
) -> dict[str, object]:
    """Build the memory, restart a worker on it (tail; then wiped, if ``full``), return the figures."""
    settings = get_settings()
    partitions = settings.topic_partitions
    ensure_topics(admin_client(bootstrap), build_catalog(partitions))
    app_id = f"clingate-restart-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(bootstrap, app_id)
    # The text log format, whatever the caller's environment says: the recovery is read from the log.
    env = {**COMPARISON_ENV, "CLINGATE_LOG_FORMAT": "text"}
    worker = WorkerProcess(bootstrap, app_id, workdir / app_id, env, role="memory")
    changelog = memory_changelog(app_id)
    restored = f"{changelog} restored".encode()
    worker.start(ready=restored)  # creates the changelog topic and the partition databases
    worker.stop()
    tables = worker.datadir / "memory" / "partitions"

    started = time.monotonic()
    verdict_ends = topic_ends(bootstrap, DBPM_VERDICTS)
    groups = list(memory_groups(comparison_engine(), signatures, partitions, group,
                                {p: end - 1 for p, end in verdict_ends.items()}))  # fmt: skip
    built_s = time.monotonic() - started
    producer = Producer(producer_config(bootstrap, **{
        "linger.ms": 50, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
    }))  # fmt: skip
    next_offset = dict(topic_ends(bootstrap, changelog))
    per_partition: dict[int, list[tuple[list[tuple[bytes, bytes | None]], int]]] = {}
    for p, records in groups:
        for key, value in records:
            produce_waiting(producer, changelog, key=key, value=value, partition=p)
        next_offset[p] += len(records)
        per_partition.setdefault(p, []).append((records, next_offset[p] - 1))
    producer.flush()
    total = sum(next_offset.values())
    if topic_ends(bootstrap, changelog) != next_offset:
        raise RuntimeError("the changelog's end offsets are not the ones counted: was it written twice?")
    for p, written in per_partition.items():
        store = RocksDBStore(tables / f"{p}.db")
        try:
            for records, offset in written[: len(written) - math.ceil(len(written) * tail)]:
                write_group(store, records, offset)
        finally:
            store.close()
    stored_s = time.monotonic() - started

    results = []
    for name in ("tail", "full") if full else ("tail",):
        if name == "full":
            shutil.rmtree(tables)
        ready_s = worker.start(ready=restored)
        patterns = _patterns(worker.web_port)
        worker.stop()
        log = worker.log.read_bytes()[worker.log_offset :].decode(errors="replace")
        read, restore_s = restore_figures(log)
        results.append(Restart(name, ready_s, restore_s, read, patterns))
    return {"signatures": signatures, "changelog_records": total, "built_s": built_s, "stored_s": stored_s,
            "restarts": results}  # fmt: skip


def restart(
    signatures: Annotated[int, typer.Option("--signatures", "-n", help="Signatures in the memory.")] = 10**6,
    tail: Annotated[float, typer.Option(help="Fraction of changelog groups not in the local store.")] = 0.01,
    group: Annotated[int, typer.Option(help="Verdicts per changelog group and partition.")] = 500,
    full: Annotated[bool, typer.Option(help="Also restart on a wiped local store (full replay).")] = True,
    workdir: Annotated[
        Path | None,
        typer.Option(
            callback=output_folder, help="Worker data directory and log (default: a temporary one)."
        ),
    ] = None,
) -> None:
    """Restart time of a worker over a large memory: local store + changelog tail vs full replay.

    Needs a broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); starts its own worker.
    """
    bootstrap = require_bootstrap(get_settings())
    with tempfile.TemporaryDirectory(prefix="clingate-restart-") as scratch:
        figures = restart_bench(bootstrap, workdir or Path(scratch), signatures, tail, group, full)
    total = figures["changelog_records"]
    typer.echo(
        f"memory: {figures['signatures']:,} signatures, {total:,} changelog records (built in "
        f"{figures['built_s']:.0f} s, changelog + local store written by {figures['stored_s']:.0f} s)"
    )
    for r in figures["restarts"]:  # type: ignore[attr-defined]
        typer.echo(
            f"restart {r.name:>4}: ready after {r.ready_s:6.1f} s (recovery {r.recovery_s:6.1f} s), "
            f"changelog records read {r.records_read:>9,} of {total:,}, NER patterns served {r.patterns:,.0f}"
        )
