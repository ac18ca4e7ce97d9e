"""A :class:`~state.base.Store` in RAM: tests, replays and benchmarks without RocksDB. (Named for RAM:
in clingate "the memory" is the DBPM pattern memory, which either kind of store can hold.)

Keys live in a :class:`sortedcontainers.SortedDict`, so point reads are a hash lookup and ordered
range scans (the eviction index of DBPM maintenance) cost O(log n + k) instead of a full sort.
"""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedDict

from state.base import _TOMBSTONE, Store


class RamStore(Store):
    """A :class:`~state.base.Store` held in process memory; lost when the process ends."""

    def __init__(self) -> None:
        self._data: SortedDict = SortedDict()

    def get(self, key: bytes) -> bytes | None:
        """Return the committed value of ``key``, or None when absent."""
        return self._data.get(key)

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Committed pairs with ``start <= key < end`` (``end=None``: unbounded), ascending."""
        data = self._data
        for key in data.irange(start, end, inclusive=(True, False)):
            yield key, data[key]

    def _apply(self, writes: dict[bytes, object]) -> None:
        data = self._data
        for key, value in writes.items():
            if value is _TOMBSTONE:
                data.pop(key, None)
            else:
                data[key] = value

    def __len__(self) -> int:
        return len(self._data)
