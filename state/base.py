"""The store interface of clingate: ordered byte keys, byte values, atomic batched writes.

Why this shape. Processors keep their memory as many small records (one per signature, per patient,
per index entry) so that the cost of one event does not depend on how many records exist. They reach
those records only through a :class:`Transaction`, which gives them read-your-writes and is committed
atomically, together with optional *offset markers* (e.g. the input or changelog offset a Kafka
runtime has processed up to), so that data and position can never diverge after a crash.

Contracts (every backend MUST meet them; ``tests/unit/state/test_store.py`` runs one suite on all):

* keys and values are ``bytes``; iteration is in ascending unsigned-byte order of keys;
* a transaction's reads see its own uncommitted writes and deletes, and the committed store
  otherwise; nothing it writes is visible in the store before :meth:`Transaction.commit`;
* :meth:`Transaction.commit` applies every write, delete and offset marker of the transaction at
  once or not at all; a transaction is single-use (commit or abort, then it is closed);
* keys starting with :data:`RESERVED_PREFIX` belong to the store (offset markers); callers MUST NOT
  write them directly.

One writer per store: a store is opened by one process, and at most one transaction is open at a
time (the second one would not see the first one's writes).
"""

from __future__ import annotations

import abc
from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from heapq import merge
from types import TracebackType

from state.exceptions import StateError

#: Key prefix owned by the store itself (offset markers). Data keys MUST NOT start with it.
RESERVED_PREFIX = b"\xff\xff"
_OFFSET_PREFIX = RESERVED_PREFIX + b"offset\x00"
# A deleted key inside a transaction's write buffer (``None`` would be ambiguous with "absent").
_TOMBSTONE = object()


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key that starts with ``prefix`` (None: no upper bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _offset_key(name: str) -> bytes:
    return _OFFSET_PREFIX + name.encode()


def _offset_value(offset: int) -> bytes:
    return str(int(offset)).encode()


def check_data_key(key: bytes) -> None:
    """Refuse a data key in the store's reserved namespace, where its offset markers live.

    Raises:
        StateError: ``key`` starts with :data:`RESERVED_PREFIX`.
    """
    if key.startswith(RESERVED_PREFIX):
        raise StateError(f"key {key!r} is in the store's reserved namespace (offset markers: set_offset())")


def buffered_range(
    committed: Iterable[tuple[bytes, bytes]],
    keys: Sequence[bytes],
    writes: Mapping[bytes, object],
    deleted: object,
    start: bytes,
    end: bytes | None,
) -> Iterator[tuple[bytes, bytes]]:
    """The pairs in ``[start, end)`` of a store with a write buffer over it, ascending: the range as the
    store has it (``committed``), the buffer's writes by key (``writes``, their keys ascending in
    ``keys``, the value ``deleted`` marking a deletion) taking precedence.

    Lazy on both sides, so a read that stops after a few entries (the memory's maintenance walks) costs
    those entries, not every write the buffer holds in the range. The caller MUST NOT write to the
    buffer while consuming the iterator (collect first, then write).
    """
    low = bisect_left(keys, start)
    high = len(keys) if end is None else bisect_left(keys, end)
    if low == high:
        return iter(committed)
    older = ((k, v) for k, v in committed if k not in writes)
    newer = ((k, v) for k in (keys[i] for i in range(low, high)) if (v := writes[k]) is not deleted)
    return merge(older, newer)  # type: ignore[arg-type]


class OrderedReads(abc.ABC):
    """Reads of ordered byte keys, given a point read and a range read: what a store, a transaction
    and a batch's staged partition each answer as they see the keys."""

    __slots__ = ()

    @abc.abstractmethod
    def get(self, key: bytes) -> bytes | None:
        """The value of ``key``, or None when absent."""

    def exists(self, key: bytes) -> bool:
        """True when ``key`` has a value."""
        return self.get(key) is not None

    @abc.abstractmethod
    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < end`` in ascending unsigned-byte order of keys.

        ``end=None`` means no upper bound. Writing while iterating is not allowed.
        """

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs whose key starts with ``prefix``, ascending."""
        return self.iter_range(prefix, prefix_end(prefix))


class Store(OrderedReads):
    """A committed key-value store with ordered iteration (its reads see committed values only); writes
    go through :meth:`transaction`."""

    @abc.abstractmethod
    def _apply(self, writes: dict[bytes, object]) -> None:
        """Apply a write buffer (value bytes, or the tombstone) atomically. Transactions only."""

    def get_offset(self, name: str) -> int | None:
        """The committed offset marker ``name`` (see :meth:`Transaction.set_offset`), or None."""
        raw = self.get(_offset_key(name))
        return None if raw is None else int(raw)

    def write(self, records: Iterable[tuple[bytes, bytes | None]], offsets: Mapping[str, int]) -> None:
        """Apply ``records`` (``None``: a deletion; of two records of one key the later wins) and the
        offset markers ``offsets`` atomically, as a transaction that wrote them would on commit.

        For a writer that only replays writes made elsewhere (a changelog group): it reads nothing
        back, so it keeps no read-your-writes index (a restore applies hundreds of thousands of
        records).

        Raises:
            StateError: a key of ``records`` is reserved (:func:`check_data_key`).
        """
        writes: dict[bytes, object] = {}
        for key, value in records:
            check_data_key(key)
            writes[key] = _TOMBSTONE if value is None else value
        for name, offset in offsets.items():
            writes[_offset_key(name)] = _offset_value(offset)
        self._apply(writes)

    def transaction(self) -> Transaction:
        """Open a transaction over this store (at most one at a time)."""
        return Transaction(self)

    def close(self) -> None:
        """Release the store's resources; the store MUST NOT be used afterwards."""

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Transaction(OrderedReads):
    """A write buffer over a :class:`Store` with read-your-writes and an atomic commit.

    Used as a context manager it commits when the block exits normally and aborts on an exception.
    """

    __slots__ = ("_closed", "_keys", "_store", "_writes")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._writes: dict[bytes, object] = {}
        # The keys of ``_writes``, ascending: a range read slices them instead of scanning every write
        # (an engine's maintenance reads ranges of its indexes between writes, in long transactions).
        self._keys: list[bytes] = []
        self._closed = False

    def get(self, key: bytes) -> bytes | None:
        """The value of ``key`` as this transaction sees it (its own writes first)."""
        value = self._writes.get(key)
        if value is None:
            return self._store.get(key)
        return None if value is _TOMBSTONE else value  # type: ignore[return-value]

    def set(self, key: bytes, value: bytes) -> None:
        """Write ``value`` under ``key`` (visible to this transaction at once, to others on commit).

        Raises:
            StateError: the transaction is closed, or ``key`` is reserved (:func:`check_data_key`).
        """
        self._check_open()
        check_data_key(key)
        self._write(key, value)

    def delete(self, key: bytes) -> None:
        """Delete ``key`` (a no-op when absent)."""
        self._check_open()
        self._write(key, _TOMBSTONE)

    def set_offset(self, name: str, offset: int) -> None:
        """Record offset marker ``name`` so that it commits atomically with this transaction's data."""
        self._check_open()
        self._write(_offset_key(name), _offset_value(offset))

    def _write(self, key: bytes, value: object) -> None:
        writes = self._writes
        if key not in writes:
            insort(self._keys, key)
        writes[key] = value

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` pairs with ``start <= key < end`` as this transaction sees them, ascending:
        its buffered writes over the committed store (:func:`buffered_range`). The caller MUST NOT
        write through this transaction while consuming the iterator (collect first, then write).
        """
        committed = self._store.iter_range(start, end)
        return buffered_range(committed, self._keys, self._writes, _TOMBSTONE, start, end)

    @property
    def pending(self) -> int:
        """Number of keys written or deleted and not yet committed."""
        return len(self._writes)

    def commit(self) -> None:
        """Apply every buffered write, delete and offset marker atomically, then close."""
        self._check_open()
        self._store._apply(self._writes)
        self._close()

    def abort(self) -> None:
        """Discard the buffered writes and close."""
        self._close()

    def _close(self) -> None:
        """Drop the write buffer (applied or discarded) and refuse further writes."""
        self._writes = {}
        self._keys = []
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StateError("transaction already committed or aborted; open a new one")

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and not self._closed:
            self.commit()
        else:
            self.abort()
