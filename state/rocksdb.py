"""A RocksDB :class:`~state.base.Store` on rocksdict, committed with one ``WriteBatch`` per transaction.

The batch carries data and offset markers together, so a crash leaves the store at the previous
commit or at this one, never in between (the atomic data+offset write Kafka Streams and quix-streams
rely on). The database runs in raw mode (bytes keys and values, no pickling) with the default
bytewise comparator, which gives the ascending unsigned-byte order the interface promises.

One process owns one directory: RocksDB's LOCK file refuses a second opener. Because of that single
writer, the store can keep a read cache of committed values, absent keys included (a gate mostly asks
about signatures that have no record); commits update it, so it is never stale. The cache is bounded
in bytes, not entries (values differ in size by orders of magnitude: a pattern record against a
patient's state): it holds at most ``cache_bytes``, each entry counted as its key and value plus
:data:`ENTRY_OVERHEAD`, and drops its oldest quarter when a new entry would exceed that.
:func:`cache_bytes` sums the caches of the process's open stores (a metric).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from rocksdict import Options, Rdict, ReadOptions, WriteBatch

from state.base import _TOMBSTONE, Store
from state.exceptions import StateError

ENTRY_OVERHEAD = 160
"""Bytes a cached entry costs beyond its key and value: the dictionary slot and the two bytes objects'
headers (CPython 3.11, 64-bit)."""

DEFAULT_CACHE_BYTES = 16 << 20
"""The read cache's bound when none is given (``CLINGATE_STORE_CACHE_BYTES``'s default)."""

_OPEN: weakref.WeakSet[RocksDBStore] = weakref.WeakSet()


def cache_bytes() -> int:
    """Bytes held by the read caches of this process's open stores."""
    return sum(store.cached_bytes for store in list(_OPEN))


class RocksDBStore(Store):
    """A :class:`~state.base.Store` persisted in a RocksDB directory."""

    def __init__(self, path: str | Path, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        """Open (creating if needed) the RocksDB database at ``path``.

        Args:
            path: the database directory.
            cache_bytes: size bound of the read cache in bytes (0 disables it).

        Raises:
            StateError: the directory cannot be opened (e.g. another process holds its lock).
        """
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            self._db = Rdict(str(path), options)
        except Exception as exc:  # rocksdict raises a bare Exception for I/O and lock errors
            raise StateError(f"cannot open RocksDB store at {path}: {exc}{_hint(str(exc))}") from exc
        self._closed = False
        self._cache: dict[bytes, bytes | None] = {}
        self._cache_bytes = cache_bytes
        self.cached_bytes = 0
        """Bytes the read cache holds (entries counted with :data:`ENTRY_OVERHEAD`)."""
        _OPEN.add(self)

    def get(self, key: bytes) -> bytes | None:
        """Return the committed value of ``key``, or None when absent."""
        cache = self._cache
        if key in cache:
            return cache[key]
        value = self._db.get(key)
        if self._cache_bytes:
            size = _size(key, value)
            if self.cached_bytes + size > self._cache_bytes:
                self._evict()
            if size <= self._cache_bytes:
                cache[key] = value
                self.cached_bytes += size
        return value

    def _evict(self) -> None:
        """Drop the oldest quarter of the cached entries (at least one)."""
        cache = self._cache
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
        self._db.write(batch)
        cache = self._cache
        for key, value in writes.items():
            if key in cache:
                new = None if value is _TOMBSTONE else value
                self.cached_bytes += _size(key, new) - _size(key, cache[key])  # type: ignore[arg-type]
                cache[key] = new  # type: ignore[assignment]
        while self.cached_bytes > self._cache_bytes and cache:
            self._evict()

    def close(self) -> None:
        """Flush and close the database (idempotent)."""
        if not self._closed:
            self._db.close()
            self._closed = True
            self._cache.clear()
            self.cached_bytes = 0
            _OPEN.discard(self)


def _hint(error: str) -> str:
    """What an operator can do about a store that does not open, where RocksDB's message says it."""
    if "No space left on device" in error:
        return "; the disk that holds it is full: free space there, then start again"
    if "lock" in error.lower():
        return "; is another process using it (one worker per data directory)?"
    return ""


def _size(key: bytes, value: bytes | None) -> int:
    return len(key) + (0 if value is None else len(value)) + ENTRY_OVERHEAD
