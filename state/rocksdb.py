"""A RocksDB :class:`~state.base.Store` on rocksdict, committed with one ``WriteBatch`` per transaction.

The batch carries data and offset markers together, so a crash leaves the store at the previous
commit or at this one, never in between (the atomic data+offset write Kafka Streams and quix-streams
rely on). The database runs in raw mode (bytes keys and values, no pickling) with the default
bytewise comparator, which gives the ascending unsigned-byte order the interface promises.

One process owns one directory: RocksDB's LOCK file refuses a second opener. A store that cannot be
opened or written raises :class:`~state.exceptions.StateError` naming its directory and RocksDB's
reason, with what an operator can do where the cause is known: a full disk (RocksDB says "No space
left on device") or a lock another process really holds (asked of the ``LOCK`` file itself, not read
from the message: a failure on a full disk may mention the lock file too). Because of that single
writer, the store can keep a read cache of committed values, absent keys included (a gate mostly asks
about signatures that have no record); commits update it, so it is never stale.

Memory is bounded in bytes, per process, whatever the data on disk: the stores opened with one budget
(``cache_bytes``; a worker opens every store with ``CLINGATE_STORE_CACHE_BYTES``) share it
(:class:`StoreMemory`):

* half of it is the stores' read caches, each open store's at most an equal share, each entry counted
  as its key and value plus :data:`ENTRY_OVERHEAD` (in bytes, not entries: a pattern record and a
  patient's state differ by orders of magnitude). A cache that a new entry would take past its share
  drops its oldest quarter; one left above a share that shrank (another store opened) gives the excess
  back at its next read or commit;
* the other half, at least :data:`ROCKSDB_MIN_BYTES`, is RocksDB's: one LRU block cache for every store
  (data, index and filter blocks), which is also charged with their memtables (a write buffer manager:
  a store whose writes take the memtables past half the cache flushes them to disk). RocksDB's own
  defaults would give each store a block cache of its own, index and filter blocks outside any cache,
  and memtables of up to 64 MiB each: a worker's dozen stores would hold every write in memory up to
  that size, and its resident set would grow with the work done.

What is flushed is read back from files, and most reads are of absent keys (the gate's signatures
without a record, the memory's ledger lookup of each new candidate). So every file carries a bloom
filter (10 bits a key), and its filter and index are partitioned into blocks of a few kB: a miss then
costs a filter probe instead of a data block per level, and the blocks fit the cache's shards (whole
filters, which can outgrow a shard, make reads slower than none at all). Without filters, a read costs
more the more the stores hold on disk (docs/performance.md, Worker memory).

:func:`cache_bytes` sums what the budgets of the process hold (a metric).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import weakref
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
)

from state.base import _TOMBSTONE, Store
from state.exceptions import StateError

ENTRY_OVERHEAD = 160
"""Bytes a cached entry costs beyond its key and value: the dictionary slot and the two bytes objects'
headers (CPython 3.11, 64-bit)."""

DEFAULT_CACHE_BYTES = 64 << 20
"""The budget when none is given (``CLINGATE_STORE_CACHE_BYTES``'s default)."""

ROCKSDB_MIN_BYTES = 4 << 20
"""RocksDB's part of a budget at least: its memtables need room for a few writes between flushes."""

_UNCACHED = object()
_OPEN: weakref.WeakSet[RocksDBStore] = weakref.WeakSet()
_BUDGETS: dict[int, StoreMemory] = {}
_BUDGETS_LOCK = threading.Lock()


class StoreMemory:
    """The memory the open stores of one budget share (module docstring).

    Args:
        budget: bytes of the read caches and RocksDB's block cache and memtables together (0: no read
            caches; RocksDB still gets :data:`ROCKSDB_MIN_BYTES`).
    """

    def __init__(self, budget: int) -> None:
        self._read_bytes = budget // 2
        rocksdb_bytes = max(budget - self._read_bytes, ROCKSDB_MIN_BYTES)
        self.blocks = Cache(rocksdb_bytes)
        """RocksDB's block cache, charged with the memtables."""
        memtables = rocksdb_bytes // 2
        self._memtables = WriteBufferManager.new_write_buffer_manager_with_cache(
            memtables, False, self.blocks
        )
        # One store's memtable is flushed at an eighth of that, so that several busy stores fit in it.
        self._memtable_bytes = memtables // 8
        self.stores = 0
        """The open stores of this budget."""
        self.share = 0
        """The bytes each open store's read cache may hold."""

    def options(self) -> Options:
        """The options of a store of this budget."""
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        table = BlockBasedOptions()
        table.set_block_cache(self.blocks)
        table.set_cache_index_and_filter_blocks(True)
        table.set_bloom_filter(10, False)
        table.set_partition_filters(True)
        table.set_index_type(BlockBasedIndexType.two_level_index_search())
        table.set_metadata_block_size(4096)
        table.set_pin_top_level_index_and_filter(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        options.set_block_based_table_factory(table)
        options.set_write_buffer_manager(self._memtables)
        options.set_write_buffer_size(self._memtable_bytes)
        return options

    def opened(self, change: int) -> None:
        """``change`` stores of this budget were opened (negative: closed); the read caches' shares follow."""
        self.stores += change
        self.share = self._read_bytes // self.stores if self.stores > 0 else 0


def _joined(budget: int) -> StoreMemory:
    """The memory of ``budget``, one more store open in it."""
    with _BUDGETS_LOCK:
        memory = _BUDGETS.get(budget)
        if memory is None:
            memory = _BUDGETS[budget] = StoreMemory(budget)
        memory.opened(1)
        return memory


def _left(budget: int, memory: StoreMemory) -> None:
    """A store of ``budget`` closed (or did not open); the last one releases the memory."""
    with _BUDGETS_LOCK:
        memory.opened(-1)
        if not memory.stores and _BUDGETS.get(budget) is memory:
            del _BUDGETS[budget]


def cache_bytes() -> int:
    """Bytes the budgets of this process's open stores hold: their read caches, and RocksDB's block
    caches with the memtables charged to them."""
    with _BUDGETS_LOCK:
        blocks = sum(memory.blocks.get_usage() for memory in _BUDGETS.values())
    return blocks + sum(store.cached_bytes for store in list(_OPEN))


class RocksDBStore(Store):
    """A :class:`~state.base.Store` persisted in a RocksDB directory."""

    def __init__(self, path: str | Path, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        """Open (creating if needed) the RocksDB database at ``path``.

        Args:
            path: the database directory.
            cache_bytes: the budget this store shares with the process's other stores of the same
                budget (module docstring).

        Raises:
            StateError: the directory cannot be opened (e.g. another process holds its lock, or its disk
                is full).
        """
        self.path = Path(path).absolute()
        self._budget = cache_bytes
        self._memory = _joined(cache_bytes)
        try:
            self._db = Rdict(str(path), self._memory.options())
        except Exception as exc:  # rocksdict raises a bare Exception for I/O and lock errors
            _left(cache_bytes, self._memory)
            raise _failed("open", self.path, exc) from exc
        self._closed = False
        self._broken = False
        self._cache: dict[bytes, bytes | None] = {}
        # The loop that owns the store reads and writes it; the metrics endpoint reads it from its own
        # thread: a miss and a commit change the cache under this lock, a hit needs none.
        self._lock = threading.Lock()
        self.cached_bytes = 0
        """Bytes the read cache holds (entries counted with :data:`ENTRY_OVERHEAD`)."""
        _OPEN.add(self)

    def get(self, key: bytes) -> bytes | None:
        """Return the committed value of ``key``, or None when absent."""
        value = self._cache.get(key, _UNCACHED)
        if value is not _UNCACHED:
            return value  # type: ignore[return-value]
        with self._lock:  # a commit between the read and the caching would leave its old value cached
            value = self._db.get(key)
            share = self._memory.share
            size = _size(key, value)
            if size <= share:
                self._fit(share - size)
                self._cache[key] = value
                self.cached_bytes += size
        return value

    def _fit(self, limit: int) -> None:
        """Drop the oldest quarter of the cached entries (at least one) until they hold ``limit`` bytes
        at most (the lock held)."""
        cache = self._cache
        while self.cached_bytes > limit and cache:
            for old in list(islice(cache, max(1, len(cache) // 4))):
                self.cached_bytes -= _size(old, cache.pop(old))

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Committed pairs with ``start <= key < end`` (``end=None``: unbounded), ascending."""
        if end is None:
            it = self._db.iter()
        else:
            # The bound lets RocksDB stop at ``end`` instead of skipping tombstones beyond it.
            options = ReadOptions()
            options.set_iterate_upper_bound(end)
            it = self._db.iter(options)
        it.seek(start)
        while it.valid():
            key = it.key()
            if end is not None and key >= end:
                return
            yield key, it.value()
            it.next()

    def _apply(self, writes: dict[bytes, object]) -> None:
        if not writes:
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in writes.items():
            if value is _TOMBSTONE:
                batch.delete(key)
            else:
                batch.put(key, value)
        with self._lock:
            try:
                self._db.write(batch)
            except Exception as exc:  # rocksdict raises a bare Exception for I/O errors
                self._broken = True
                raise _failed("write", self.path, exc) from exc
            cache = self._cache
            for key, value in writes.items():
                if key in cache:
                    new = None if value is _TOMBSTONE else value
                    self.cached_bytes += _size(key, new) - _size(key, cache[key])  # type: ignore[arg-type]
                    cache[key] = new  # type: ignore[assignment]
            self._fit(self._memory.share)

    def close(self) -> None:
        """Flush and close the database (idempotent).

        A store whose write failed is closed without raising: RocksDB then refuses the flush with the
        same error ("Writer has previous error"), which the failed write already raised, naming it.

        Raises:
            StateError: the flush failed (e.g. the disk is full).
        """
        if self._closed:
            return
        self._closed = True
        self._cache.clear()
        self.cached_bytes = 0
        _OPEN.discard(self)
        try:
            self._db.close()
        except Exception as exc:  # rocksdict raises a bare Exception for I/O errors
            if not self._broken:
                raise _failed("close", self.path, exc) from exc
        finally:
            _left(self._budget, self._memory)


def _failed(doing: str, path: Path, exc: Exception) -> StateError:
    """The error of a store at ``path`` that RocksDB could not ``doing`` (open, write, close), with
    what an operator can do about it where the cause is known."""
    error = str(exc)
    if "No space left on device" in error:
        hint = "; the disk that holds it is full: free space there, then start again"
    elif doing == "open" and _locked_elsewhere(path):
        hint = "; another process holds its lock (one worker per data directory)"
    else:
        hint = ""
    return StateError(f"cannot {doing} RocksDB store at {path}: {error}{hint}")


def _locked_elsewhere(path: Path) -> bool:
    """Whether another process holds the lock of the RocksDB directory ``path`` now.

    Asked by taking the ``LOCK`` file's POSIX lock (the one RocksDB takes) without waiting, and
    releasing it at once. Not asked while a store of this process has ``path`` open: closing any
    descriptor of the file would release that store's lock (POSIX locks belong to the process), and
    RocksDB then says itself that this process holds it.
    """
    if any(store.path == path for store in list(_OPEN)):
        return False
    try:
        descriptor = os.open(path / "LOCK", os.O_RDWR)
    except OSError:  # no lock file: nobody holds it
        return False
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EACCES, errno.EAGAIN)
    finally:
        os.close(descriptor)  # releases the probe's lock, if it took it
    return False


def _size(key: bytes, value: bytes | None) -> int:
    return len(key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
