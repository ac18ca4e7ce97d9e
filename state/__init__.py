"""State stores: one small ordered key-value interface, implemented in RAM and in RocksDB.

* :class:`~state.base.Store` / :class:`~state.base.Transaction`: the interface (see its contracts);
* :class:`~state.ram.RamStore`: in the process's RAM;
* :class:`~state.rocksdb.RocksDBStore`: on disk via rocksdict (import ``state.rocksdb`` explicitly,
  so that importing :mod:`state` never loads the RocksDB extension).
"""

from state.base import RESERVED_PREFIX, Store, Transaction, prefix_end
from state.exceptions import StateError
from state.ram import RamStore

__all__ = ["RESERVED_PREFIX", "RamStore", "StateError", "Store", "Transaction", "prefix_end"]
