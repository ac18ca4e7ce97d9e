"""A table writer as a confluent-kafka consumer group: one Kafka transaction per batch.

A table handler (:class:`~streams.worker.tablestore.TableHandler`: the DBPM memory's, the clinical
patients') decides what a batch of one partition's records means; this loop does the rest:

* **Consume** a batch (up to :data:`~streams.runtime.core.BATCH_MAX` records) from the
  co-partitioned input topics with ``isolation.level=read_committed``; the range assignor hands
  partition p of every input to the same member (the inputs have one partition count).
* **Apply** it per partition (:func:`~streams.worker.tablestore.apply_batch`): the handler reads the
  partition's local RocksDB store (:class:`LocalTable`) through a staged view and returns outputs and
  dead letters; its writes and the last input offset applied per topic make one changelog group,
  closed by a boundary record.
* **Commit** the dead letters, the outputs and the changelog group (to changelog partition p) in one
  transaction. A ``read_committed`` reader sees a batch's outputs and state all or not at all:
  downstream consumers of the outputs see each exactly once, and so do the changelog's readers (the
  gates' replicated view, a restore).
* **Then** write the group to the local store, with the changelog offset of its boundary, in one
  ``WriteBatch`` (the local store is never ahead of the changelog; a crash between the commit and the
  local write is repaired by the restore), and commit the input offsets.

Input offsets are committed after the transaction, not in it. The transaction's changelog group
already says which input the state covers, and re-delivered records at or below it are skipped, so
a crash between the transaction and the offset commit
re-delivers records that change nothing and send nothing. Sending the offsets to the transaction
(KIP-447) would add zombie fencing by group generation, but librdkafka's
``send_offsets_to_transaction`` blocks forever, its timeout unchecked, when the group coordinator's
connection goes down and up again, as in a broker restart (librdkafka#5456, #5511, open in 2.16).
Zombies are fenced instead by the stable transactional id
(:func:`transactional_id`: a restarted member fences its predecessor's open transaction at once)
and by the group: a member that lost its partitions learns it at its next ``consume``, before its next
batch; and one frozen longer than its session timeout (whose heartbeats stopped with it, so its
partitions may have moved) proves its membership before it commits the batch it was making
(:class:`~streams.runtime.core.FreezeWatch`). A member that merely runs long keeps heartbeating and
its partitions.

Restore. When a partition is assigned, before any of its records is applied, the loop reads its
changelog from the local store's offset to the last stable offset (librdkafka's partition EOF under
``read_committed``) and applies the complete groups in bulk: a worker restarted on its data directory
reads only the tail, a new host the whole (compacted) changelog. Records of an open transaction of a
dead member are past the last stable offset: they are aborted when the transaction times out
(:data:`~streams.runtime.transactions.TRANSACTION_TIMEOUT_MS`) or a restart of that member fences
it, and never applied.

The loop is a job on the batch core (:mod:`streams.runtime.core`), so failures follow its one abort
policy: a batch whose transaction cannot commit (a broker outage or freeze, a coordinator move, a
fenced producer) is aborted and its partitions rewound to their last commit: nothing of the batch
happened, the local store is untouched and the records are applied again. Only what no restart fixes
(the cluster refusing the writes for good, a full disk, a handler bug) raises out of
:meth:`TableLoop.run`, and the worker stops.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
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
from streams.runtime.core import BATCH_MAX, BatchCore, Output, StateRecord, Step
from streams.runtime.dlq import PRODUCER_LIMITS, Rejected, SourceRecord
from streams.runtime.kafka_clients import CATCH_UP, consume_batch, producer_config
from streams.runtime.kafka_config import admin_client, client_config, liveness_config
from streams.runtime.metrics import LoopMetrics
from streams.runtime.settings import Settings
from streams.runtime.transactions import COMMIT_STEP_S, TransactionalProducer
from streams.worker.tablestore import (
    BOUNDARY_KEY,
    ChangelogFollower,
    TableHandler,
    apply_batch,
    write_group,
)
from topics.admin import ensure_topics
from topics.catalog import DATA_MAX_MESSAGE_BYTES, TopicSpec

log = logging.getLogger(__name__)


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
    sharing the process's store memory of ``cache_bytes`` (:class:`state.rocksdb.StoreMemory`)."""

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
    """One member of a table writer's consumer group (module docstring): the table's job on a
    :class:`~streams.runtime.core.BatchCore`.

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
        cache_bytes: the memory the process's stores share (:class:`state.rocksdb.StoreMemory`).
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
        self.changelog = changelog
        self._handler = handler
        self.table = LocalTable(directory / "partitions", cache_bytes)
        self.core = BatchCore(
            directory.name,
            client_config(bootstrap, **{
                "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "enable.partition.eof": False, "isolation.level": "read_committed",
                # Range: partition p of every input to one member (the handler's state is per partition).
                "partition.assignment.strategy": "range",
                **liveness_config(session_timeout_s),
            }),
            TransactionalProducer(producer_config(bootstrap, **{
                "transactional.id": transactional_id(directory, group),
                "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                **PRODUCER_LIMITS,
            }), group),
            serde, metrics, on_dead_letter=handler.dead_lettered,
        )  # fmt: skip
        self._restorer = Consumer(client_config(bootstrap, **{
            "group.id": f"{group}-restore",  # required by librdkafka; never joined (assign)
            "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed",
            **CATCH_UP,
        }))  # fmt: skip
        self._restoring: set[int] = set()
        self.core.subscribe(inputs, self.assigned, self.revoked)

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, high watermark - committed offset) of the assigned input partitions."""
        return self.core.lag()

    def run(self, stop: threading.Event) -> None:
        """Apply batches until ``stop`` is set; then leave the group and close the clients and stores."""
        self.core.run(stop, self)

    def step(self, messages: list[Message]) -> Step | None:
        """One batch applied per partition by the handler (before any transaction begins: what a handler
        asks the broker, the memory's dispatch end, is not asked with a transaction open), as one step:
        its outputs, dead letters and one changelog group per partition that changed, the group written
        to the local store once committed."""
        if not messages:
            return None
        by_partition: dict[int, list[SourceRecord]] = {}
        read: dict[tuple[str, int], int] = {}
        for message in messages:
            read[(message.topic(), message.partition())] = message.offset() + 1
            by_partition.setdefault(message.partition(), []).append(SourceRecord.from_message(message))
        dead_letters: list[Rejected] = []
        outputs: list[Output] = []
        state: list[StateRecord] = []
        reread: list[TopicPartition] = []
        groups: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for partition, records in by_partition.items():
            applied = apply_batch(self._handler, self.table, partition, records)
            dead_letters += applied.dead_letters
            outputs += applied.outputs
            if applied.reread is not None:
                reread.append(TopicPartition(applied.reread[0], partition, applied.reread[1]))
            if applied.group is None:
                continue
            group = groups[partition] = applied.group
            state += [StateRecord(self.changelog, partition, key, value) for key, value in group[:-1]]
            state.append(StateRecord(self.changelog, partition, BOUNDARY_KEY, group[-1][1], tracked=True))

        def done(boundaries: Mapping[int, int]) -> None:
            for partition, group in groups.items():
                write_group(self.table.open(partition), group, boundaries[partition])

        return Step(dead_letters, outputs, state, self.core.positions(read), reread, done)

    def read_to_end(self, topic: str, partition: int) -> bool:
        """This member has read input ``topic``'s ``partition`` up to its end as the broker has it now
        (one request to its leader); False when the broker cannot say (asked again later)."""
        consumer = self.core.consumer
        tp = TopicPartition(topic, partition)
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=COMMIT_STEP_S, cached=False)
            position = consumer.position([tp])[0].offset
            if position < 0:  # nothing read from it since it was assigned: it starts where the group is
                committed = consumer.committed([tp], timeout=COMMIT_STEP_S)[0].offset
                position = committed if committed >= 0 else low
        except KafkaException as exc:
            log.warning("%s: the end of %s[%d] is not known: %s", self.group, topic, partition, exc)
            return False
        return position >= high

    def prepare(self) -> None:
        """Bring every newly assigned partition's store up to its changelog's last stable offset."""
        if not self._restoring:
            return
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

    def assigned(self, partitions: list[TopicPartition]) -> Mapping[tuple[str, int], int]:
        """Partitions start at the group's offsets; their stores are restored before their first batch."""
        self._restoring.update(tp.partition for tp in partitions)
        return {}

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """Close the revoked partitions' stores (their next owner opens its own)."""
        for tp in partitions:
            self._restoring.discard(tp.partition)
            self.table.close(tp.partition)

    def close(self) -> None:
        """Close the restore reader and the stores."""
        self._restorer.close()
        self.table.close_all()
