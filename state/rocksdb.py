"""A RocksDB :class:`~state.base.Store` on rocksdict, committed with one ``WriteBatch`` per transaction.

The batch carries data and offset markers together, so a crash leaves the store at the previous
commit or at this one, never in between (the atomic data+offset write Kafka Streams and quix-streams
rely on). The database runs in raw mode (bytes keys and values, no pickling) with the default
bytewise comparator, which gives the ascending unsigned-byte order the interface promises.

One process owns one directory: RocksDB's LOCK file refuses a second opener.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from state.base import _TOMBSTONE, Store
from state.exceptions import StateError


class RocksDBStore(Store):
    """A :class:`~state.base.Store` persisted in a RocksDB directory."""

    def __init__(self, path: str | Path) -> None:
        """Open (creating if needed) the RocksDB database at ``path``.

        Raises:
            StateError: the directory cannot be opened (e.g. another process holds its lock).
        """
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            self._db = Rdict(str(path), options)
        except Exception as exc:  # rocksdict raises a bare Exception for I/O and lock errors
            raise StateError(f"cannot open RocksDB store at {path}: {exc}; is another process using it?") from exc
        self._closed = False

    def get(self, key: bytes) -> bytes | None:
        """Return the committed value of ``key``, or None when absent."""
        return self._db.get(key)

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Committed pairs with ``start <= key < end`` (``end=None``: unbounded), ascending."""
        it = self._db.iter()
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

    def close(self) -> None:
        """Flush and close the database (idempotent)."""
        if not self._closed:
            self._db.close()
            self._closed = True
