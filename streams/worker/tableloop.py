"""A table writer as a confluent-kafka consumer group: one Kafka transaction per batch.

A table handler (:class:`~streams.worker.tablestore.TableHandler`: the DBPM memory) decides what a
batch of one partition's records means; this loop does the rest:

* **Consume** a batch (up to :data:`BATCH_MAX` records) from the co-partitioned input topics with
  ``isolation.level=read_committed``; the range assignor hands partition p of every input to the same
  member (the inputs have one partition count).
* **Apply** it per partition: the handler reads the partition's local RocksDB store
  (:class:`LocalTable`) and returns outputs, dead letters and one changelog group, closed by a
  boundary record that holds the last input offset the group covers.
* **Commit** the dead letters, the outputs and the changelog group (to changelog partition p) in one
  transaction. A ``read_committed`` reader sees a batch's outputs and state all or not at all:
  downstream consumers of the outputs see each exactly once, and so do the changelog's readers (the
  gates' replicated view, a restore).
* **Then** write the group to the local store, with the changelog offset of its boundary, in one
  ``WriteBatch`` (the local store is never ahead of the changelog; a crash between the commit and the
  local write is repaired by the restore), and commit the input offsets.

Input offsets are committed after the transaction, not in it. The transaction's boundary record
already says which input the state covers, and the handler skips re-delivered records at or below it
(and propagations by their identity), so a crash between the transaction and the offset commit
re-delivers records that change nothing and send nothing. Sending the offsets to the transaction
(KIP-447) would add zombie fencing by group generation, but librdkafka's
``send_offsets_to_transaction`` blocks forever, its timeout unchecked, when the group coordinator's
connection goes down and up again, as in a broker restart (librdkafka#5456, #5511, open in 2.16).
Zombies are fenced instead by the stable transactional id
(:func:`transactional_id`: a restarted member fences its predecessor's open transaction at once)
and by the group: a member that lost its partitions learns it at its next ``consume``, before its next
batch. What remains unfenced is a member that stalls longer than the session timeout inside one
batch (milliseconds of work) and then commits it after its successor restored.

Restore. When a partition is assigned, before any of its records is applied, the loop reads its
changelog from the local store's offset to the last stable offset (librdkafka's partition EOF under
``read_committed``) and applies the complete groups in bulk: a worker restarted on its data directory
reads only the tail, a new host the whole (compacted) changelog. Records of an open transaction of a
dead member are past the last stable offset: they are aborted when the transaction times out
(:data:`~streams.runtime.transactions.TRANSACTION_TIMEOUT_MS`) or a restart of that member fences
it, and never applied.

Failures follow the one abort policy of :mod:`streams.runtime.transactions`: a batch whose transaction
cannot commit (a broker outage or freeze, a coordinator move, a fenced producer) is aborted and its
partitions rewound to their first offsets: nothing of the batch happened, the local store is untouched
and the records are applied again. Only what no restart fixes (the cluster refusing the writes for
good, a full disk, a handler bug) raises out of :meth:`TableLoop.run`, and the worker stops.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from schemas.serde import Serde
from state.rocksdb import RocksDBStore
from streams.runtime.dlq import PRODUCER_LIMITS, DecodeFailed, SourceRecord, dead_letter_record
from streams.runtime.kafka_clients import (
    GroupOffsets,
    consume_batch,
    positions,
    seek_owned,
)
from streams.runtime.kafka_config import admin_client, client_config, liveness_config
from streams.runtime.metrics import LoopMetrics
from streams.runtime.settings import Settings
from streams.runtime.transactions import COMMIT_STEP_S, Batch, TransactionalProducer
from streams.worker.dbpm import producer_config
from streams.worker.tablestore import (
    BOUNDARY_KEY,
    ChangelogFollower,
    TableHandler,
    group_records,
    write_group,
)
from topics.admin import ensure_topics
from topics.catalog import DATA_MAX_MESSAGE_BYTES, TopicSpec

log = logging.getLogger(__name__)

#: Most records one ``consume`` call returns (one transaction at most this many inputs).
BATCH_MAX = 5000
#: Longest wait for a batch's first record (:func:`~streams.runtime.kafka_clients.consume_batch`).
POLL_S = 0.05


def transactional_id(directory: Path, prefix: str) -> str:
    """``<prefix>-<id>`` with an id kept in ``directory``: the same for every start on that directory."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "transactional-id"
    if not path.exists():
        path.write_text(uuid.uuid4().hex[:12] + "\n")
    return f"{prefix}-{path.read_text().strip()}"


def changelog_spec(settings: Settings, changelog: str) -> TopicSpec:
    """A table's changelog topic: compacted (the latest record per key is the table), kept forever, one
    partition per input partition, records as large as the data topics' (a table's value can hold a
    whole input: a patient's FHIR resources)."""
    return TopicSpec(
        changelog, "table key", "raw bytes",
        partitions=settings.topic_partitions, replication=settings.topic_replication,
        cleanup_policy="compact", retention_ms=-1, max_message_bytes=DATA_MAX_MESSAGE_BYTES,
    )  # fmt: skip


def build_table_loop(
    settings: Settings, bootstrap: str, group: str, inputs: Sequence[str], changelog: str,
    handler: TableHandler, serde: Serde, name: str, metrics: LoopMetrics,
) -> TableLoop:  # fmt: skip
    """Loop ``name`` of a worker: a member of table writer ``group``, its changelog topic created when
    missing, its stores and transactional id under ``<worker datadir>/<name>``."""
    ensure_topics(admin_client(bootstrap), [changelog_spec(settings, changelog)])
    return TableLoop(
        bootstrap, group, inputs, changelog, handler, serde, settings.worker_dir / name,
        settings.consumer_session_timeout_s, metrics, settings.store_cache_bytes,
    )  # fmt: skip


class LocalTable:
    """The partitions of a table this process writes: one RocksDB store each, under ``directory``, each
    with a read cache of ``cache_bytes``."""

    def __init__(self, directory: Path, cache_bytes: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._directory = directory
        self._cache_bytes = cache_bytes
        self._stores: dict[int, RocksDBStore] = {}

    def open(self, partition: int) -> RocksDBStore:
        """The store of ``partition``, opened if it is not."""
        store = self._stores.get(partition)
        if store is None:
            store = RocksDBStore(self._directory / f"{partition}.db", self._cache_bytes)
            self._stores[partition] = store
        return store

    def close(self, partition: int) -> None:
        """Close the store of ``partition`` (revoked: its next owner opens its own)."""
        store = self._stores.pop(partition, None)
        if store is not None:
            store.close()

    def close_all(self) -> None:
        """Close every open store."""
        for partition in list(self._stores):
            self.close(partition)

    def partitions(self) -> list[RocksDBStore]:
        """The open stores, in partition order."""
        return [self._stores[p] for p in sorted(self._stores)]

    def get(self, partition: int, key: bytes) -> bytes | None:
        """The value of ``key`` in ``partition``, or None."""
        return self.open(partition).get(key)

    def iter_range(self, partition: int, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of ``partition`` with ``start <= key < end``, ascending."""
        return self.open(partition).iter_range(start, end)


class TableLoop:
    """One member of a table writer's consumer group (module docstring).

    Args:
        bootstrap: Kafka bootstrap servers.
        group: the consumer group.
        inputs: the co-partitioned input topics.
        changelog: the table's changelog topic (as many partitions as each input).
        handler: the per-partition logic.
        serde: the process's serde (dead letters).
        directory: this member's local stores and transactional id (the process MUST own it).
        session_timeout_s: the group's session timeout.
        metrics: where its traffic is counted (label ``loop``: the directory's name).
    """

    def __init__(
        self,
        bootstrap: str,
        group: str,
        inputs: Sequence[str],
        changelog: str,
        handler: TableHandler,
        serde: Serde,
        directory: Path,
        session_timeout_s: float,
        metrics: LoopMetrics,
        cache_bytes: int,
    ) -> None:
        self.group = group
        self._name = directory.name
        self._metrics = metrics
        self.changelog = changelog
        self._inputs = tuple(inputs)
        self._handler = handler
        self._serde = serde
        self.table = LocalTable(directory / "partitions", cache_bytes)
        self._offsets = GroupOffsets()
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "on_commit": self._offsets.on_commit,
            "enable.partition.eof": False, "isolation.level": "read_committed",
            # Range: partition p of every input to one member (the handler's state is per partition).
            "partition.assignment.strategy": "range",
            **liveness_config(session_timeout_s),
        }))  # fmt: skip
        self._restorer = Consumer(client_config(bootstrap, **{
            "group.id": f"{group}-restore",  # required by librdkafka; never joined (assign)
            "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed",
        }))  # fmt: skip
        self._transactions = TransactionalProducer(producer_config(bootstrap, **{
            "transactional.id": transactional_id(directory, group),
            "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
            **PRODUCER_LIMITS,
        }), group)  # fmt: skip
        self._restoring: set[int] = set()
        self._lag: dict[tuple[str, int], int] = {}
        self._consumer.subscribe(list(self._inputs), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_revoke)  # fmt: skip

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, high watermark - next offset) of the assigned input partitions."""
        for (topic, partition), value in list(self._lag.items()):
            yield topic, partition, value

    def run(self, stop: threading.Event) -> None:
        """Apply batches until ``stop`` is set; then leave the group and close the clients and stores."""
        self._transactions.stop = stop
        try:
            while not stop.is_set():
                messages = consume_batch(self._consumer, BATCH_MAX, POLL_S)
                if self._restoring:
                    self._restore()
                if messages:
                    self.process(messages)
                else:
                    self._commit_idle()
            self._offsets.close(self._consumer)
        finally:
            self._consumer.close()
            self._restorer.close()
            self.table.close_all()

    def process(self, messages: list[Message]) -> None:
        """Apply one batch and commit it with its outputs, dead letters, changelog groups and offsets."""
        by_partition: dict[int, list[SourceRecord]] = {}
        first: dict[tuple[str, int], int] = {}
        read: dict[tuple[str, int], int] = {}
        for message in messages:
            if message.error() is not None:
                log.warning("%s consumer: %s", self.group, message.error())
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            first.setdefault((topic, partition), offset)
            read[(topic, partition)] = offset + 1
            by_partition.setdefault(partition, []).append(SourceRecord.from_message(message))
        if not read:
            return
        self._metrics.count(self._metrics.consumed, self._name, (m.topic() for m in messages))
        boundaries: dict[int, int] = {}
        groups: dict[int, list[tuple[bytes, bytes | None]]] = {}
        rereads: dict[tuple[str, int], int] = {}
        dead_letters: list[DecodeFailed] = []

        def report(error: KafkaError | None, message: Message) -> None:
            # A boundary's delivery: where its group ends in the changelog (the local store's offset).
            boundaries[message.partition()] = message.offset()

        # The handlers run before the transaction begins: what they ask the broker (the memory's
        # dispatch end) is not asked with a transaction open, and the transaction lasts as long as
        # producing the batch takes, not as long as deciding it.
        batches = {partition: self._handler.apply(self.table, partition, records)
                   for partition, records in by_partition.items()}  # fmt: skip
        for partition, applied in batches.items():
            if applied.reread is not None:
                rereads[(applied.reread[0], partition)] = applied.reread[1]
            dead_letters += applied.dead_letters
            if applied.writes is not None:
                groups[partition] = group_records(applied.writes.items(), applied.input_offset)

        def fill(batch: Batch) -> None:
            for partition, applied in batches.items():
                for failed in applied.dead_letters:
                    out = dead_letter_record(self._serde, failed)
                    batch.produce(out.topic, out.value, out.key, headers=out.headers)
                for output in applied.outputs:
                    batch.produce(output.topic, output.value, output.key, headers=list(output.headers))
                if partition not in groups:
                    continue
                group = groups[partition]
                for key, value in group[:-1]:
                    batch.produce(self.changelog, value, key, partition=partition)
                batch.produce(
                    self.changelog, group[-1][1], BOUNDARY_KEY, partition=partition, on_delivery=report
                )

        committed = self._transactions.run(fill)
        if committed is None:
            self._metrics.aborted.labels(self._name).inc()
            for (topic, partition), offset in first.items():
                seek_owned(self._consumer, TopicPartition(topic, partition, offset))
            return
        for failed in dead_letters:
            self._handler.dead_lettered(failed)
        self._metrics.count(self._metrics.produced, self._name, committed.topics)
        for partition, group in groups.items():
            write_group(self.table.open(partition), group, boundaries[partition])
        offsets = positions(self._consumer, read)
        for tp in offsets:
            if (again := rereads.get((tp.topic, tp.partition))) is not None:
                tp.offset = again
                seek_owned(self._consumer, TopicPartition(tp.topic, tp.partition, again))
        self._commit_offsets(offsets)

    def read_to_end(self, topic: str, partition: int) -> bool:
        """This member has read input ``topic``'s ``partition`` up to its end as the broker has it now
        (one request to its leader); False when the broker cannot say (asked again later)."""
        tp = TopicPartition(topic, partition)
        try:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=COMMIT_STEP_S, cached=False)
            position = self._consumer.position([tp])[0].offset
            if position < 0:  # nothing read from it since it was assigned: it starts where the group is
                committed = self._consumer.committed([tp], timeout=COMMIT_STEP_S)[0].offset
                position = committed if committed >= 0 else low
        except KafkaException as exc:
            log.warning("%s: the end of %s[%d] is not known: %s", self.group, topic, partition, exc)
            return False
        return position >= high

    def _commit_offsets(self, offsets: list[TopicPartition]) -> None:
        """Commit input offsets (asynchronously: the boundaries already cover what they say) and
        update the lag they leave."""
        self._offsets.commit(self._consumer, offsets)
        self._count_lag(offsets)

    def _count_lag(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            _, high = self._consumer.get_watermark_offsets(tp, cached=True)
            self._lag[(tp.topic, tp.partition)] = max(high - tp.offset, 0)

    def _commit_idle(self) -> None:
        """When idle, bring the group's offsets to where the loop stands (:meth:`GroupOffsets.idle`)."""
        self._count_lag(self._offsets.idle(self._consumer, {}))

    def _restore(self) -> None:
        """Bring every newly assigned partition's store up to its changelog's last stable offset."""
        started = time.monotonic()
        partitions = sorted(self._restoring)
        followers = {p: ChangelogFollower(self.table.open(p)) for p in partitions}
        self._restorer.assign([
            TopicPartition(self.changelog, p, OFFSET_BEGINNING if (o := f.next_offset()) is None else o)
            for p, f in followers.items()
        ])  # fmt: skip
        remaining, read = set(partitions), 0
        while remaining:
            batch: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
            for message in consume_batch(self._restorer, BATCH_MAX, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        remaining.discard(message.partition())
                    else:  # e.g. the changelog is not known to this broker yet: librdkafka retries
                        log.debug("%s restore: %s", self.changelog, error)
                    continue
                batch.setdefault(message.partition(), []).append(
                    (message.key(), message.value(), message.offset())
                )
            for partition, records in batch.items():
                followers[partition].extend(records)
                read += len(records)
        self._restorer.unassign()
        for follower in followers.values():
            follower.drop_partial()  # a group a dead writer left unfinished: its input is applied again
        self._restoring.difference_update(partitions)
        elapsed = time.monotonic() - started
        log.info(
            "%s restored: partitions %s, %d changelog records in %.3f s",
            self.changelog, partitions, read, elapsed,
            extra={"restored_records": read, "restore_s": round(elapsed, 6)},
        )  # fmt: skip

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances.labels(self._name, "assigned").inc(len(partitions))
        self._restoring.update(tp.partition for tp in partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._metrics.rebalances.labels(self._name, "revoked").inc(len(partitions))
        self._offsets.forget(partitions)
        # Each batch is committed or aborted before the next consume: no transaction is open here.
        for tp in partitions:
            self._lag.pop((tp.topic, tp.partition), None)
            self._restoring.discard(tp.partition)
            self.table.close(tp.partition)
