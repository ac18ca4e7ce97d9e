"""State stores: a RocksDB-backed store (rocksdict) and an in-memory store with the same interface."""
