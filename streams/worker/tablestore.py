"""A Faust table store that is never ahead of its changelog and applies whole events atomically.

Why this exists (docs/faust-runtime.md, findings (a)-(c)). Faust's own RocksDB store writes a key
to the local database the moment the table is assigned, long before the changelog record is
acknowledged or the input offset committed, and it records the changelog offset with a separate
``put``. After ``kill -9`` the local database holds writes that exist nowhere else; the input event
is delivered again and a non-idempotent update (DBPM's counts and severities) is applied twice.
Faust's exactly-once mode does not help (its persisted offset is never written, robinhood/faust#599,
and the local store is not rolled back on abort).

This store keeps Faust's changelog, recovery, standby and rebalance machinery and changes only what
reaches the disk and when:

* A write is *staged* (visible to the writer's reads at once) and sent to the changelog. It reaches
  the partition's RocksDB only when the changelog has acknowledged it, in one ``WriteBatch`` with
  the changelog offset (``state.rocksdb.RocksDBStore`` transactions). The local database is
  therefore always a prefix of the changelog, and Faust's recovery (local store + changelog tail
  from the persisted offset) is exact.
* Writers group the records of one input event (or batch) and close the group with a *boundary*
  record (:data:`BOUNDARY_KEY`, value: the input offset the group covers). Only complete groups are
  flushed, locally and when the changelog is read back (recovery, standby, another host), so a
  crash between two records of one event can never leave half an event applied anywhere. The
  boundary's value is the input offset processed up to: a re-delivered input event at or below it
  is recognised and skipped (idempotent re-processing).

Writes go through :meth:`ChangelogStore.stage` with an explicit partition, not ``table[key] =
value``: Faust's ``__setitem__`` finds the partition through the implicit ``current_event()``
(STYLE: state reached through implicit context), and cannot express groups.

Keys and values are raw bytes (the table is declared with the ``raw`` serializers); the engine's
records are encoded by the engine's own codec, not by Faust.

What a writer computes does not depend on this store: a table handler (the DBPM memory, the clinical
patients) reads a :class:`PartitionedTable` and returns a :class:`TableBatch`, its outputs and its
changelog group as data. The Faust agent (:class:`streams.worker.app.TableAgent`, the clinical
patients) sends and stages them here; the transactional loop (:mod:`streams.worker.tableloop`, the
DBPM memory) commits them in one Kafka transaction with its input offsets; the topology test driver
(:mod:`streams.testing.driver`) applies them to an in-memory changelog. All run the same per-record
code, and the changelog format (groups closed by :data:`BOUNDARY_KEY`) is the same for all.
"""

from __future__ import annotations

import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from heapq import merge
from pathlib import Path
from typing import Any, Protocol

from faust.stores.base import SerializedStore
from faust.types import TP, EventT
from faust.types.tuples import FutureMessage

from state.base import RESERVED_PREFIX
from state.base import Store as StateStore
from state.rocksdb import RocksDBStore
from streams.groups.ordered import Output
from streams.runtime.dlq import DecodeFailed, SourceRecord

#: URL scheme under which :func:`streams.worker.app.create_app` registers this store with Faust.
STORE_SCHEME = "clingate"
#: Key of the record that closes a group of changelog records (value: decimal input offset).
#: ``\xfe`` keeps it out of the engine's key space (printable keys) and out of the state
#: store's reserved ``\xff\xff`` namespace.
BOUNDARY_KEY = b"\xfe\xfeinput-offset"
# Offset marker (state.base offset markers) holding the last changelog offset applied locally.
_CHANGELOG_MARKER = "changelog"
_WRITE_THROUGH_STAGE = "write through ChangelogStore.stage(partition, writes, input_offset)"


def table_changelog(app_id: str, table: str) -> str:
    """The changelog topic of table ``table`` of the workers of ``app_id`` (Faust's naming)."""
    return f"{app_id}-{table}-changelog"


class PartitionedTable(Protocol):
    """What a table handler reads: one key space per partition, its writer's staged writes included."""

    def get(self, partition: int, key: bytes) -> bytes | None:
        """The value of ``key`` in ``partition`` as its writer sees it, or None."""
        ...

    def iter_range(self, partition: int, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of ``partition`` with ``start <= key < end`` (None: unbounded), ascending."""
        ...


def input_offset(table: PartitionedTable, partition: int) -> int | None:
    """The input offset the state of ``partition`` covers (its last group's boundary), or None."""
    raw = table.get(partition, BOUNDARY_KEY)
    return None if raw is None else int(raw)


def group_records(
    writes: Iterable[tuple[bytes, bytes | None]], input_offset: int
) -> list[tuple[bytes, bytes | None]]:
    """The changelog records of one group: ``writes`` in order, closed by the boundary of ``input_offset``."""
    return [*writes, (BOUNDARY_KEY, str(int(input_offset)).encode())]


@dataclass(frozen=True, slots=True)
class TableBatch:
    """What a table handler made of one batch of a partition's records, as data.

    The runtime produces the dead letters and the outputs and waits for their acknowledgement before
    it stages the group: a durable group (whose input is skipped on re-delivery) then never stands
    for an output or a dead letter that was not written.

    Attributes:
        outputs: records to produce, in order.
        dead_letters: records that go to their topic's dead-letter topic.
        writes: the changelog group (``None`` values delete); None when the batch changed nothing
            and no group is staged.
        input_offset: the input offset the group's boundary records (meaningful with ``writes``).
        reread: ``(topic, offset)``: the records of that input partition from that offset on were
            not applied and must be read again (the runtime seeks there and commits no further).
    """

    outputs: list[Output]
    dead_letters: list[DecodeFailed]
    writes: dict[bytes, bytes | None] | None
    input_offset: int
    reread: tuple[str, int] | None = None


class TableHandler(Protocol):
    """The per-partition logic of a table writer, without Kafka, Faust or a clock."""

    def apply(self, table: PartitionedTable, partition: int, records: Sequence[SourceRecord]) -> TableBatch:
        """Process ``records`` of ``partition`` (offset order) against the partition's state in ``table``."""
        ...

    def dead_lettered(self, failed: DecodeFailed) -> None:
        """Log and count a dead letter the runtime routes."""
        ...


@dataclass(slots=True)
class _Staged:
    """One changelog record sent by the writer and not yet durable locally."""

    key: bytes
    value: bytes | None
    future: FutureMessage | None = None


def write_group(
    store: StateStore, records: Iterable[tuple[bytes, bytes | None]], changelog_offset: int
) -> None:
    """Apply one changelog group to ``store`` atomically, with the changelog offset it ends at."""
    with store.transaction() as txn:
        for key, value in records:
            if value is None:
                txn.delete(key)
            else:
                txn.set(key, value)
        txn.set_offset(_CHANGELOG_MARKER, changelog_offset)


@dataclass(slots=True)
class ChangelogFollower:
    """Applies changelog records read in order to a store, whole groups only.

    Records after the last boundary are held until their boundary arrives; :meth:`drop_partial`
    discards them (the writer that produced them died and its input will be processed again).
    """

    store: StateStore
    partial: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    skip: Callable[[bytes], bool] | None = None
    """Keys this reader never reads: left out of its store (the group's boundary is always kept)."""

    def add(self, key: bytes, value: bytes | None, offset: int) -> None:
        """Feed the next changelog record (``value=None``: deletion) at changelog ``offset``."""
        self.extend([(key, value, offset)])

    def extend(self, records: Sequence[tuple[bytes, bytes | None, int]]) -> None:
        """Feed the next changelog records ``(key, value, offset)``, in order.

        Every complete group among them is applied in one write (a restore reads thousands of small
        groups per fetch: one ``WriteBatch`` per fetch, not per group); the tail after the last
        boundary is held.
        """
        last = next((i for i in range(len(records) - 1, -1, -1) if records[i][0] == BOUNDARY_KEY), None)
        if last is None:
            self.partial += [(key, value) for key, value, _ in records]
            return
        complete = self.partial + [(key, value) for key, value, _ in records[: last + 1]]
        if self.skip is not None:
            complete = [(key, value) for key, value in complete if not self.skip(key)]
        write_group(self.store, complete, records[last][2])
        self.partial = [(key, value) for key, value, _ in records[last + 1 :]]

    def next_offset(self) -> int | None:
        """The changelog offset to resume reading at (after the last applied group), or None."""
        offset = self.store.get_offset(_CHANGELOG_MARKER)
        return None if offset is None else offset + 1

    def drop_partial(self) -> None:
        """Forget the records of an unfinished group."""
        self.partial = []


@dataclass(slots=True)
class _Partition:
    """Per-partition state: the local database, staged writes, and an incomplete changelog group."""

    db: RocksDBStore
    staged: deque[_Staged] = field(default_factory=deque)
    # Latest staged entry per key: the writer's read-your-writes overlay.
    overlay: dict[bytes, _Staged] = field(default_factory=dict)
    follower: ChangelogFollower = field(init=False)

    def __post_init__(self) -> None:
        self.follower = ChangelogFollower(self.db)


class ChangelogStore(SerializedStore):
    """Faust store backend: RocksDB per partition, durable only after changelog acknowledgement."""

    def __init__(self, url: Any, app: Any, table: Any, **kwargs: Any) -> None:
        super().__init__(url, app, table, **kwargs)
        self._partitions: dict[int, _Partition] = {}

    # -- the writer's interface -------------------------------------------------------------

    def stage(
        self, partition: int, writes: Iterable[tuple[bytes, bytes | None]], input_offset: int
    ) -> list[FutureMessage]:
        """Send one group of writes for ``partition`` to the changelog, closed by a boundary.

        The writes are visible to :meth:`get` at once and become durable locally when the
        changelog has acknowledged the whole group. ``value=None`` deletes the key.

        The caller MUST await the returned futures before it lets the input offsets the group
        covers be committed (i.e. before its agent body returns). Faust flushes its producer
        before a commit, but that flush (``ProducerBuffer.flush_atmost``) gives up as soon as one
        message takes longer than 0.1 s, and a buffered record is then committed past: a SIGKILL
        loses the update. The chaos soak found this (``clingate bench chaos``).

        Args:
            partition: the changelog partition, equal to the input partition (co-partitioning).
            writes: ``(key, value)`` pairs in the order they must be applied.
            input_offset: the offset of the last input record this group covers.

        Returns:
            The delivery futures of the group's changelog records.
        """
        part = self._partition(partition)
        records = group_records(writes, input_offset)
        futures: list[FutureMessage] = []
        for key, value in records:
            entry = _Staged(key, value)
            entry.future = self.table.send_changelog(partition, key, value, "raw", "raw")
            futures.append(entry.future)
            part.staged.append(entry)
            part.overlay[key] = entry
        return futures

    def get(self, partition: int, key: bytes) -> bytes | None:
        """Read ``key`` in ``partition`` as its writer sees it (staged writes first)."""
        part = self._partition(partition)
        entry = part.overlay.get(key)
        if entry is not None:
            return entry.value
        return part.db.get(key)

    def iter_range(self, partition: int, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of ``partition`` with ``start <= key < end``, staged writes merged, ascending."""
        part = self._partition(partition)
        pending = {k: e.value for k, e in part.overlay.items() if k >= start and (end is None or k < end)}
        committed = ((k, v) for k, v in part.db.iter_range(start, end) if k not in pending)
        staged = ((k, v) for k, v in sorted(pending.items()) if v is not None)
        yield from merge(committed, staged)  # type: ignore[misc]

    def durable_partitions(self) -> list[StateStore]:
        """The durable (changelog-acknowledged) data of every partition held locally, in partition order."""
        return [self._partitions[p].db for p in sorted(self._partitions)]

    # -- Faust's store interface ------------------------------------------------------------

    def persisted_offset(self, tp: TP) -> int | None:
        """Last changelog offset durable in the local database of ``tp.partition``."""
        return self._partition(tp.partition).db.get_offset(_CHANGELOG_MARKER)

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        """Changelog acknowledgement: flush every complete, acknowledged group of ``tp``."""
        part = self._partition(tp.partition)
        # Acknowledgements may be reported out of order; flush the longest acknowledged prefix
        # that ends with a boundary.
        cut = 0
        for i, entry in enumerate(part.staged):
            if entry.future is None or not entry.future.done():
                break
            if entry.key == BOUNDARY_KEY:
                cut = i + 1
        if not cut:
            return
        group = [part.staged.popleft() for _ in range(cut)]
        last_offset = group[-1].future.result().offset  # type: ignore[union-attr]
        write_group(part.db, ((e.key, e.value) for e in group), last_offset)
        for entry in group:
            if part.overlay.get(entry.key) is entry:
                del part.overlay[entry.key]

    def apply_changelog_batch(self, batch: Iterable[EventT], to_key: Any, to_value: Any) -> None:
        """Recovery and standby: apply complete groups read from the changelog, hold partial ones."""
        for event in batch:
            message = event.message
            self._partition(message.partition).follower.add(message.key, message.value, message.offset)

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        """Drop incomplete groups of partitions this worker now writes: their input is re-delivered."""
        for tp in active_tps:
            if tp.topic == self.table.changelog_topic_name and tp not in standby_tps:
                self._partition(tp.partition).follower.drop_partial()

    def revoke_partitions(self, tps: Iterable[TP]) -> None:
        """Close the databases of revoked partitions (their staged writes are flushed or lost)."""
        for tp in tps:
            part = self._partitions.pop(tp.partition, None)
            if part is not None:
                part.db.close()

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        """Close the revoked partitions and open every assigned one (its reads must work before its
        first record arrives)."""
        topic = self.table.changelog_topic_name
        self.revoke_partitions(tp for tp in revoked if tp.topic == topic)
        for tp in assigned:
            if tp.topic == topic:
                self._partition(tp.partition)

    async def stop(self) -> None:
        """Close every partition database (releases the RocksDB locks)."""
        self.revoke_partitions(TP(self.table.changelog_topic_name, p) for p in list(self._partitions))
        await super().stop()

    def _get(self, key: bytes) -> bytes | None:
        for db in self.durable_partitions():
            value = db.get(key)
            if value is not None:
                return value
        return None

    def _set(self, key: bytes, value: bytes | None) -> None:
        raise TypeError(_WRITE_THROUGH_STAGE)

    def _del(self, key: bytes) -> None:
        raise TypeError(_WRITE_THROUGH_STAGE)

    def _iteritems(self) -> Iterator[tuple[bytes, bytes]]:
        # Faust's table views (len, iteration, the web /table pages): durable data, partition by
        # partition, without the store's own bookkeeping keys.
        for db in self.durable_partitions():
            for key, value in db.iter_range(b"", None):
                if not key.startswith((BOUNDARY_KEY, RESERVED_PREFIX)):
                    yield key, value

    def _iterkeys(self) -> Iterator[bytes]:
        return (k for k, _ in self._iteritems())

    def _itervalues(self) -> Iterator[bytes]:
        return (v for _, v in self._iteritems())

    def _size(self) -> int:
        return sum(1 for _ in self._iteritems())

    def _contains(self, key: bytes) -> bool:
        return self._get(key) is not None

    def reset_state(self) -> None:
        """Delete the local data of every partition (Kafka's changelog is untouched)."""
        for partition in list(self._partitions):
            self._partitions.pop(partition).db.close()
        for path in Path(self.app.conf.tabledir).glob(f"{self.table.name}-*.db"):
            shutil.rmtree(path)

    async def backup_partition(
        self, tp: TP | int, flush: bool = True, purge: bool = False, keep: int = 1
    ) -> None:
        """Not offered: the changelog is the backup (a new host recovers from it)."""
        raise NotImplementedError("ChangelogStore has no local backups; the changelog is the backup")

    def restore_backup(self, tp: TP | int, latest: bool = True, backup_id: int = 0) -> None:
        """Not offered: see :meth:`backup_partition`."""
        raise NotImplementedError("ChangelogStore has no local backups; the changelog is the backup")

    def _clear(self) -> None:
        raise TypeError("a changelog-backed table is cleared by deleting its topic and data directory")

    # -- internals --------------------------------------------------------------------------

    def _partition(self, partition: int) -> _Partition:
        part = self._partitions.get(partition)
        if part is None:
            part = _Partition(RocksDBStore(self._path(partition)))
            self._partitions[partition] = part
        return part

    def _path(self, partition: int) -> Path:
        directory = Path(self.app.conf.tabledir)
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{self.table.name}-{partition}.db"
