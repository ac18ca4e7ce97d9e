"""State stores: one small ordered key-value interface, an in-memory and a RocksDB implementation.

* :class:`~state.base.Store` / :class:`~state.base.Transaction`: the interface (see its contracts);
* :class:`~state.memory.MemoryStore`: in process memory;
* :class:`~state.rocksdb.RocksDBStore`: on disk via rocksdict (import ``state.rocksdb`` explicitly,
  so that importing :mod:`state` never loads the RocksDB extension).
"""

from state.base import RESERVED_PREFIX, Store, Transaction, prefix_end
from state.exceptions import StateError
from state.memory import MemoryStore

__all__ = ["RESERVED_PREFIX", "MemoryStore", "StateError", "Store", "Transaction", "prefix_end"]
