"""The gate's view of the memory: a replica of every memory partition, read as one memory.

* The memory: a replicated view of the memory table (the GlobalKTable pattern).
  :class:`MemoryFollower` reads every partition of the memory changelog from the offset its local
  RocksDB store holds (one store per partition, ``<worker datadir>/gate-view/``), applying whole
  changelog groups only (:class:`streams.worker.tablestore.ChangelogFollower`, which writes data and
  changelog offset in one ``WriteBatch``): a restart reads only the changelog tail, and a group a
  SIGKILLed memory writer left unfinished is never visible.
* The patient-keyed gate state (accepted NER categories, difficulty counters) is part of the memory
  (the engine keeps it as per-partition partial counts that :class:`MergedView` sums,
  ``docs/runtime-reference.md`` section 2 item 6), so it arrives through the same view. The gate itself
  writes nothing: its engine transaction holds only bookkeeping (the as-of clock) and is aborted. No
  gate-side table is needed, hence none is kept (a co-partitioned patient table would need a second
  writer per patient, the verdicts of one patient landing on many signature partitions).

The view also tells the gate which candidates' verdicts it applied (:class:`JudgedTracker`, for the
coverage join) and whether the memory's writers run the gate's configuration (:class:`ConfigWatch`).
:class:`MergedView` reads any set of memory partitions as one memory: besides the gate's replica, a
memory writer's own partitions (its population gauges, :mod:`streams.cli.worker`) and a replay's
stores (:mod:`streams.replay.kafka`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from heapq import merge
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from prometheus_client import Gauge

from processors.dbpm.ledger import dispatch_key, judged_candidate
from processors.dbpm.partitioned import merge_values
from state.base import Store
from state.rocksdb import RocksDBStore
from streams.runtime.core import BATCH_MAX
from streams.runtime.kafka_clients import CATCH_UP, consume_batch
from streams.runtime.kafka_config import client_config
from streams.worker.gate import gate_group
from streams.worker.keys import CONFIG_KEY, barrier_reached, memory_changelog
from streams.worker.tablestore import BOUNDARY_KEY, ChangelogFollower

log = logging.getLogger(__name__)


class MergedView(Store):
    """Read-only view of a partitioned memory as one memory (module docstring: whose partitions).

    Args:
        partitions: returns the partition stores to merge (called on every read, so partitions
            assigned later are seen).
    """

    def __init__(self, partitions: Callable[[], Sequence[Store]]) -> None:
        self._partitions = partitions

    def get(self, key: bytes) -> bytes | None:
        """``key``'s value across partitions (:func:`processors.dbpm.partitioned.merge_values`)."""
        values = [v for db in self._partitions() if (v := db.get(key)) is not None]
        return merge_values(key, values) if values else None

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Merged pairs in ``[start, end)``, ascending, one per key."""
        streams = [db.iter_range(start, end) for db in self._partitions()]
        group: list[bytes] = []
        current: bytes | None = None
        for key, value in merge(*streams, key=lambda kv: kv[0]):
            if key != current:
                if current is not None:
                    yield current, merge_values(current, group)
                current, group = key, []
            group.append(value)
        if current is not None:
            yield current, merge_values(current, group)

    def _apply(self, writes: dict[bytes, object]) -> None:
        # A gate's only writes are bookkeeping (the engine's as-of time); the view is never written.
        return


class JudgedTracker:
    """The candidates whose verdicts a replica of the memory applied, read off its changelog: a verdict
    is applied when the group that records it (its ledger key) is complete (its boundary read).

    Args:
        partitions: the memory's partitions.
    """

    def __init__(self, partitions: int) -> None:
        self.on = False
        """Follow the changelog (off: nothing is kept)."""
        self._judging: list[list[str]] = [[] for _ in range(partitions)]
        self._judged: list[str] = []

    def observe(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Take the next changelog record of ``partition``."""
        if not self.on:
            return
        judging = self._judging[partition]
        if key == BOUNDARY_KEY:  # the group is applied: its verdicts are in the view
            self._judged += judging
            judging.clear()
        elif value is not None and (candidate_id := judged_candidate(key)) is not None:
            judging.append(candidate_id)

    def take(self) -> list[str]:
        """The candidates judged since the last call."""
        judged, self._judged = self._judged, []
        return judged


class MemoryFollower:
    """The gate's replicated view of the memory: every changelog partition, whole groups only.

    Args:
        bootstrap: Kafka bootstrap servers.
        app_id: the workers' application id (names the changelog).
        partitions: the number of memory partitions (= verdict topic partitions).
        directory: where the per-partition RocksDB stores live (the process MUST own it).
        cache_bytes: the bound of each store's read cache.
    """

    def __init__(
        self, bootstrap: str, app_id: str, partitions: int, directory: Path, cache_bytes: int
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.topic = memory_changelog(app_id)
        self._stores = [RocksDBStore(directory / f"{p}.db", cache_bytes) for p in range(partitions)]
        # The dispatch registry is the memory writer's alone: a view that only decides leaves it out.
        self._followers = [ChangelogFollower(store, skip=dispatch_key) for store in self._stores]
        self.view = MergedView(lambda: self._stores)
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": f"{gate_group(app_id)}-view",  # required by librdkafka; never joined (assign)
            "enable.auto.commit": False, "enable.partition.eof": False, "auto.offset.reset": "earliest",
            **CATCH_UP,
        }))  # fmt: skip
        # Tail only: each partition resumes after the last group its store holds.
        self._consumer.assign([
            TopicPartition(self.topic, p, OFFSET_BEGINNING if (o := f.next_offset()) is None else o)
            for p, f in enumerate(self._followers)
        ])  # fmt: skip
        self.judged = JudgedTracker(partitions)
        """The candidates whose verdicts the view applied (followed with ``judged.on``: the coverage
        join's)."""

    def poll(self, timeout_s: float) -> int:
        """Apply the changelog records available within ``timeout_s``; returns how many were read."""
        messages = consume_batch(self._consumer, BATCH_MAX, timeout_s)
        batch: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
        for message in messages:
            error = message.error()
            if error is not None:  # e.g. the changelog does not exist yet: librdkafka retries
                log.debug("memory changelog: %s", error)
                continue
            partition, key, value = message.partition(), message.key(), message.value()
            batch.setdefault(partition, []).append((key, value, message.offset()))
            self.judged.observe(partition, key, value)
        for partition, records in batch.items():
            self._followers[partition].extend(records)
        return len(messages)

    def reached(self, ts: float, run: bytes) -> bool:
        """This view reached a candidate's barrier (:func:`~streams.worker.keys.barrier_reached`)."""
        return barrier_reached(self._stores, ts, run)

    def configs(self) -> dict[int, str]:
        """Per memory partition written yet, the configuration fingerprint of its last writer."""
        found = {p: store.get(CONFIG_KEY) for p, store in enumerate(self._stores)}
        return {p: raw.decode() for p, raw in found.items() if raw is not None}

    def close(self) -> None:
        """Close the changelog consumer and the stores."""
        self._consumer.close()
        for store in self._stores:
            store.close()


class ConfigWatch:
    """Reports memory partitions written by a process configured otherwise than this one.

    Every process of one app id must run one DBPM configuration: a memory writer and a gate that
    disagree (say, on the ontology filter or DOWNGRADE-first) would mix two rule sets silently. Each
    memory group records its writer's fingerprint (:data:`~streams.worker.keys.CONFIG_KEY`); the gate
    compares every partition's with its own, logs each new disagreement once (both fingerprints; ``clingate
    config --dbpm`` expands them) and shows how many partitions disagree on a gauge.

    Args:
        own: this process's configuration fingerprint.
        app_id: the workers' application id (named in the log line).
        gauge: where the number of disagreeing partitions is shown.
    """

    def __init__(self, own: str, app_id: str, gauge: Gauge) -> None:
        self.own = own
        self._app_id = app_id
        self._gauge = gauge
        self.mismatched: dict[int, str] = {}
        """Memory partition -> the other configuration's fingerprint, as last observed."""

    def observe(self, configs: Mapping[int, str]) -> None:
        """Take the fingerprints of the memory partitions' last writers."""
        others = {p: f for p, f in configs.items() if f != self.own}
        self._gauge.set(len(others))
        if others and others != self.mismatched:
            log.error(
                "memory partitions %s were written with DBPM configuration %s, this gate runs %s "
                "(clingate config --dbpm prints a process's flags): every process of app id %s must "
                "run one configuration", sorted(others), sorted(set(others.values())), self.own, self._app_id,
            )  # fmt: skip
        self.mismatched = others
