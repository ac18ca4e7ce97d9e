"""The kinds of store a run can keep its state in, and how to open an empty one of a kind."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path

from state.base import Store
from state.ram import RamStore


class StoreKind(StrEnum):
    """Where the replay keeps the DBPM memory: ``memory`` is in RAM (:class:`~state.ram.RamStore`; the
    value is the replay contract's ``--store memory``), ``rocksdb`` on disk."""

    memory = "memory"
    rocksdb = "rocksdb"


@contextmanager
def open_store(kind: StoreKind, path: Path | None) -> Iterator[Store]:
    """Open an empty store of ``kind`` (RocksDB at ``path``, or in a temporary directory).

    Raises:
        FileExistsError: ``path`` exists (a replay always starts from an empty memory).
    """
    if kind is StoreKind.memory:
        yield RamStore()
        return
    from state.rocksdb import RocksDBStore  # deferred: the memory path never loads RocksDB

    if path is not None:
        if path.exists():
            raise FileExistsError(f"{path} exists; a replay starts from an empty store, pick a new path")
        with RocksDBStore(path) as store:
            yield store
        return
    with (
        tempfile.TemporaryDirectory(prefix="clingate-replay-") as tmp,
        RocksDBStore(Path(tmp) / "db") as store,
    ):
        yield store
