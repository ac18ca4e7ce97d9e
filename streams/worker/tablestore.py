"""A table's changelog format: groups of records that are applied whole, never ahead of the changelog.

A table writer (the DBPM memory, the clinical patients) keeps each partition in a local RocksDB store
and writes every change to the table's compacted changelog topic first. Two rules make the pair exact
(docs/runtime-reference.md, section 2):

* Writers group the records of one batch of input and close the group with a *boundary* record
  (:data:`BOUNDARY_KEY`). Only complete groups are applied, locally and when the changelog is read
  back (a restore, another host, the gates' replicated view), so a crash between two records of one
  batch never leaves half a batch applied anywhere. Each group records, per input topic, the last
  offset it applied (:func:`input_offset_key`), so a re-delivered input at or below it is recognised
  and skipped, for every table alike (:func:`apply_batch`: idempotent re-processing).
* A group reaches the local store only after its changelog records are committed, in one
  ``WriteBatch`` with the changelog offset it ends at (:func:`write_group`; ``state.rocksdb``
  transactions). The local store is therefore always a prefix of the changelog, and a restore (the
  local store plus the changelog from its offset on, :class:`ChangelogFollower`) is exact.

What a writer computes does not depend on where the table lives: a table handler reads and writes a
:class:`StagedPartition` (the partition as its batch leaves it) and returns a :class:`TableBatch`, its
outputs and dead letters as data; :func:`apply_batch` skips re-delivered input, stages the input
offsets and closes the group. The transactional loop (:mod:`streams.worker.tableloop`) commits the
result in one Kafka transaction; the topology test driver (:mod:`streams.testing.driver`) applies it
to an in-memory changelog. Both run the same code, and the changelog format is the same for both.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

from state.base import OrderedReads, Store, buffered_range, check_data_key
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord

#: Key of the record that closes a group of changelog records (value: the batch's last input offset).
#: ``\xfe`` keeps it out of the engine's key space (printable keys) and out of the state
#: store's reserved ``\xff\xff`` namespace.
BOUNDARY_KEY = b"\xfe\xfeinput-offset"
#: Prefix of the keys holding, per input topic, the last offset a partition applied
#: (:func:`input_offset_key`).
INPUT_OFFSET_PREFIX = b"\xfe\xfeoffset|"
# Offset marker (state.base offset markers) holding the last changelog offset applied locally.
_CHANGELOG_MARKER = "changelog"


def table_changelog(app_id: str, table: str) -> str:
    """The changelog topic of table ``table`` of the workers of ``app_id``."""
    return f"{app_id}-{table}-changelog"


class PartitionedTable(Protocol):
    """What a table handler reads: one key space per partition."""

    def get(self, partition: int, key: bytes) -> bytes | None:
        """The value of ``key`` in ``partition`` as its writer sees it, or None."""
        ...

    def iter_range(self, partition: int, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of ``partition`` with ``start <= key < end`` (None: unbounded), ascending."""
        ...


class StagedPartition(OrderedReads):
    """One partition of a table with a batch's writes on top: what a table handler reads and writes.

    Reads see the batch's writes first; :meth:`put` (and :meth:`set` and :meth:`delete`, this being the
    key-value state an engine writes, :class:`processors.dbpm.memory.KeyValue`) stages a write;
    :attr:`writes` is the batch's changelog group in the making. The runtime hands a handler one per
    partition and batch (:func:`apply_batch`).

    One record's writes are made all or nothing by :meth:`atomic`: the writes of a block that raises
    are undone, so the batch's writes, their order included, are as if the block had never run (a
    poison record leaves the memory unchanged). The engine writes straight into the batch instead of
    into a transaction per record that is copied into it on commit.
    """

    def __init__(self, table: PartitionedTable, partition: int) -> None:
        self.table = table
        self.partition = partition
        self.writes: dict[bytes, bytes | None] = {}
        """The batch's writes in the order first made (``None``: deleted)."""
        # The keys of :attr:`writes`, ascending: a range read slices them instead of scanning the
        # batch's writes (the memory's maintenance walks its indexes in every event-time step).
        self._keys: list[bytes] = []
        # While an :meth:`atomic` block runs: each key it wrote, with the batch's write of it before the
        # block (:data:`_UNWRITTEN`: none).
        self._undo: dict[bytes, bytes | object | None] | None = None

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` as the batch left it."""
        writes = self.writes
        if key in writes:
            return writes[key]
        return self.table.get(self.partition, key)

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """The pairs in ``[start, end)`` as the batch left them, ascending: its writes over the table
        (:func:`state.base.buffered_range`). The caller MUST NOT write to the partition while consuming
        the iterator (collect first, then write)."""
        committed = self.table.iter_range(self.partition, start, end)
        return buffered_range(committed, self._keys, self.writes, None, start, end)

    def keys(self, start: bytes, end: bytes | None) -> list[bytes]:
        """The keys in ``[start, end)`` as the batch left them, ascending."""
        return [key for key, _ in self.iter_range(start, end)]

    def put(self, key: bytes, value: bytes | None) -> None:
        """Stage ``key`` (``None``: deleted) in the batch's writes."""
        writes = self.writes
        undo = self._undo
        if undo is not None and key not in undo:
            undo[key] = writes.get(key, _UNWRITTEN)
        if key not in writes:
            insort(self._keys, key)
        writes[key] = value

    def set(self, key: bytes, value: bytes) -> None:
        """Stage ``value`` under ``key``.

        Raises:
            state.exceptions.StateError: ``key`` is in the local store's reserved namespace
                (:func:`state.base.check_data_key`), which the store would refuse only once the batch
                is committed.
        """
        check_data_key(key)
        self.put(key, value)

    def delete(self, key: bytes) -> None:
        """Stage the deletion of ``key``."""
        self.put(key, None)

    def atomic(self) -> AtomicWrites:
        """A ``with`` block whose writes to this partition are undone if it raises (not nested)."""
        return AtomicWrites(self)

    def _begin(self) -> None:
        self._undo = {}

    def _end(self, undone: bool) -> None:
        undo, self._undo = self._undo, None
        if not undone or not undo:
            return
        writes, keys = self.writes, self._keys
        for key, before in undo.items():
            if before is _UNWRITTEN:
                del writes[key]
                del keys[bisect_left(keys, key)]
            else:
                writes[key] = before  # type: ignore[assignment]  # keeps its place in the order


_UNWRITTEN = object()
"""A key the batch had not written when an :meth:`StagedPartition.atomic` block began."""


class AtomicWrites:
    """The context of :meth:`StagedPartition.atomic`: its writes kept when the block ends normally,
    undone when it raises."""

    __slots__ = ("_staged",)

    def __init__(self, staged: StagedPartition) -> None:
        self._staged = staged

    def __enter__(self) -> StagedPartition:
        self._staged._begin()
        return self._staged

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._staged._end(exc_type is not None)


def group_records(
    writes: Iterable[tuple[bytes, bytes | None]], input_offset: int
) -> list[tuple[bytes, bytes | None]]:
    """The changelog records of one group: ``writes`` in order, closed by the boundary of ``input_offset``."""
    return [*writes, (BOUNDARY_KEY, str(int(input_offset)).encode())]


@dataclass(frozen=True, slots=True)
class TableBatch:
    """What a table handler made of one batch of a partition's records, as data (its writes are in the
    :class:`StagedPartition` it was given).

    Attributes:
        outputs: records to produce, in order.
        dead_letters: records that go to their topic's dead-letter topic.
        reread: ``(topic, offset)``: the records of that input partition from that offset on were
            not applied and must be read again (the runtime seeks there and commits no further).
    """

    outputs: list[Output]
    dead_letters: list[Rejected]
    reread: tuple[str, int] | None = None


class TableHandler(Protocol):
    """The per-partition logic of a table writer, without Kafka or a clock."""

    def apply(self, staged: StagedPartition, records: Sequence[SourceRecord]) -> TableBatch:
        """Process ``records`` of one partition (offset order, none applied before) against its state,
        staging the changes in ``staged``."""
        ...

    def dead_lettered(self, failed: Rejected) -> None:
        """Log and count a dead letter the runtime routes."""
        ...


@dataclass(frozen=True, slots=True)
class AppliedBatch:
    """One partition's batch applied (:func:`apply_batch`): what to commit together.

    Attributes:
        outputs: records to produce, in order.
        dead_letters: records that go to their dead-letter topics.
        group: the changelog group, closed by its boundary; None when no record was applied.
        reread: as :attr:`TableBatch.reread`.
    """

    outputs: list[Output]
    dead_letters: list[Rejected]
    group: list[tuple[bytes, bytes | None]] | None
    reread: tuple[str, int] | None


def input_offset_key(topic: str) -> bytes:
    """The key under which a partition records the last offset of input ``topic`` it applied."""
    return INPUT_OFFSET_PREFIX + topic.encode()


def apply_batch(
    handler: TableHandler, table: PartitionedTable, partition: int, records: Sequence[SourceRecord]
) -> AppliedBatch:
    """Apply a batch of ``partition``'s records (offset order per topic) with ``handler``: what the
    table loop commits and the topology driver stages, by the same code.

    Re-delivered input is skipped here, for every handler: the group records per input topic the last
    offset applied (:func:`input_offset_key`), so a record at or below it (read again after a crash
    between the transaction and the offset commit) is not handed to the handler and sends nothing. The
    offsets recorded leave out what the handler says to read again (``reread``).
    """
    staged = StagedPartition(table, partition)
    done: dict[str, int | None] = {}
    fresh = []
    for record in records:
        if record.topic not in done:
            raw = staged.get(input_offset_key(record.topic))
            done[record.topic] = None if raw is None else int(raw)
        applied = done[record.topic]
        if applied is None or record.offset > applied:
            fresh.append(record)
    if not fresh:
        return AppliedBatch([], [], None, None)
    batch = handler.apply(staged, fresh)
    last: dict[str, int] = {}
    for record in fresh:
        if batch.reread is None or record.topic != batch.reread[0] or record.offset < batch.reread[1]:
            last[record.topic] = record.offset
    if not last:
        return AppliedBatch(batch.outputs, batch.dead_letters, None, batch.reread)
    for topic, offset in last.items():
        staged.put(input_offset_key(topic), str(offset).encode())
    group = group_records(staged.writes.items(), max(last.values()))
    return AppliedBatch(batch.outputs, batch.dead_letters, group, batch.reread)


def write_group(store: Store, records: Iterable[tuple[bytes, bytes | None]], changelog_offset: int) -> None:
    """Apply one changelog group to ``store`` atomically, with the changelog offset it ends at."""
    store.write(records, {_CHANGELOG_MARKER: changelog_offset})


@dataclass(slots=True)
class ChangelogFollower:
    """Applies changelog records read in order to a store, whole groups only.

    Records after the last boundary are held until their boundary arrives; :meth:`drop_partial`
    discards them (the writer that produced them died and its input will be processed again).
    """

    store: Store
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
