"""A table's changelog format: groups of records that are applied whole, never ahead of the changelog.

A table writer (the DBPM memory, the clinical patients) keeps each partition in a local RocksDB store
and writes every change to the table's compacted changelog topic first. Two rules make the pair exact
(docs/table-runtime.md):

* Writers group the records of one batch of input and close the group with a *boundary* record
  (:data:`BOUNDARY_KEY`, value: the input offset the group covers). Only complete groups are applied,
  locally and when the changelog is read back (a restore, another host, the gates' replicated view),
  so a crash between two records of one batch never leaves half a batch applied anywhere. A
  re-delivered input at or below the boundary is recognised and skipped (idempotent re-processing).
* A group reaches the local store only after its changelog records are committed, in one
  ``WriteBatch`` with the changelog offset it ends at (:func:`write_group`; ``state.rocksdb``
  transactions). The local store is therefore always a prefix of the changelog, and a restore (the
  local store plus the changelog from its offset on, :class:`ChangelogFollower`) is exact.

What a writer computes does not depend on where the table lives: a table handler reads a
:class:`PartitionedTable` and returns a :class:`TableBatch`, its outputs and its changelog group as
data. The transactional loop (:mod:`streams.worker.tableloop`) commits them in one Kafka transaction;
the topology test driver (:mod:`streams.testing.driver`) applies them to an in-memory changelog. Both
run the same per-record code, and the changelog format is the same for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from state.base import Store as StateStore
from streams.runtime.core import Output
from streams.runtime.dlq import DecodeFailed, SourceRecord

#: Key of the record that closes a group of changelog records (value: decimal input offset).
#: ``\xfe`` keeps it out of the engine's key space (printable keys) and out of the state
#: store's reserved ``\xff\xff`` namespace.
BOUNDARY_KEY = b"\xfe\xfeinput-offset"
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

    The runtime commits the dead letters, the outputs and the group together (one Kafka transaction):
    a durable group (whose input is skipped on re-delivery) never stands for an output or a dead
    letter that was not written, and an output is never written twice.

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
    """The per-partition logic of a table writer, without Kafka or a clock."""

    def apply(self, table: PartitionedTable, partition: int, records: Sequence[SourceRecord]) -> TableBatch:
        """Process ``records`` of ``partition`` (offset order) against the partition's state in ``table``."""
        ...

    def dead_lettered(self, failed: DecodeFailed) -> None:
        """Log and count a dead letter the runtime routes."""
        ...


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
