"""One contract suite for every state store backend (memory and RocksDB)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state import RESERVED_PREFIX, RamStore, StateError, Store, prefix_end
from state.rocksdb import ROCKSDB_MIN_BYTES, RocksDBStore, cache_bytes


@pytest.fixture(params=["memory", "rocksdb"])
def store(request, tmp_path) -> Iterator[Store]:
    if request.param == "memory":
        yield RamStore()
    else:
        with RocksDBStore(tmp_path / "db") as db:
            yield db


def _put(store: Store, items: dict[bytes, bytes]) -> None:
    with store.transaction() as txn:
        for key, value in items.items():
            txn.set(key, value)


def test_committed_writes_are_readable(store):
    _put(store, {b"a": b"1", b"b": b"2"})
    assert store.get(b"a") == b"1"
    assert store.exists(b"b")
    assert store.get(b"c") is None
    assert not store.exists(b"c")


def test_transaction_reads_its_own_writes_and_deletes(store):
    _put(store, {b"a": b"1"})
    txn = store.transaction()
    txn.set(b"b", b"2")
    txn.delete(b"a")
    assert txn.get(b"b") == b"2"
    assert txn.get(b"a") is None
    assert not txn.exists(b"a")
    assert store.get(b"a") == b"1", "uncommitted delete must not be visible in the store"
    assert store.get(b"b") is None, "uncommitted write must not be visible in the store"
    txn.commit()
    assert store.get(b"a") is None
    assert store.get(b"b") == b"2"


def test_abort_discards_everything(store):
    txn = store.transaction()
    txn.set(b"k", b"v")
    txn.set_offset("input", 7)
    txn.abort()
    assert store.get(b"k") is None
    assert store.get_offset("input") is None


def test_exception_in_context_aborts(store):
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.set(b"k", b"v")
        raise RuntimeError("boom")
    assert store.get(b"k") is None


def test_offset_commits_atomically_with_data(store):
    with store.transaction() as txn:
        txn.set(b"k", b"v")
        txn.set_offset("input-0", 41)
    assert store.get_offset("input-0") == 41
    assert store.get(b"k") == b"v"
    with store.transaction() as txn:
        txn.set_offset("input-0", 42)
    assert store.get_offset("input-0") == 42


def test_reserved_keys_cannot_be_written_directly(store):
    txn = store.transaction()
    with pytest.raises(StateError):
        txn.set(RESERVED_PREFIX + b"x", b"v")


_records = st.lists(
    st.tuples(st.binary(min_size=1, max_size=2), st.none() | st.binary(max_size=3)), max_size=20
)


@settings(max_examples=30, deadline=None)
@given(before=_records, records=_records, offset=st.integers(min_value=0, max_value=2**40))
@pytest.mark.parametrize("kind", ["memory", "rocksdb"])
def test_a_write_of_records_is_the_transaction_that_makes_them(
    kind, tmp_path_factory, before, records, offset
):
    """``Store.write`` (a changelog group replayed) leaves the store as a transaction making the same
    writes and setting the same offset would, deletions and a key written twice included."""
    records = [(key, value) for key, value in records if not key.startswith(RESERVED_PREFIX)]
    before = [(key, value) for key, value in before if not key.startswith(RESERVED_PREFIX)]
    directory = tmp_path_factory.mktemp("write")
    stores = [RamStore(), RamStore()] if kind == "memory" else [RocksDBStore(directory / n) for n in "ab"]
    written, made = stores
    try:
        for store in stores:
            store.write(before, {})
        written.write(records, {"changelog": offset})
        with made.transaction() as txn:
            for key, value in records:
                txn.delete(key) if value is None else txn.set(key, value)
            txn.set_offset("changelog", offset)
        assert list(written.iter_range(b"", None)) == list(made.iter_range(b"", None))
        assert written.get_offset("changelog") == made.get_offset("changelog") == offset
    finally:
        for store in stores:
            store.close()


def test_a_write_refuses_reserved_keys_and_writes_nothing(store):
    with pytest.raises(StateError):
        store.write([(b"a", b"1"), (RESERVED_PREFIX + b"x", b"v")], {"changelog": 3})
    assert store.get(b"a") is None
    assert store.get_offset("changelog") is None


def test_closed_transaction_refuses_writes(store):
    txn = store.transaction()
    txn.commit()
    with pytest.raises(StateError):
        txn.set(b"a", b"b")


def test_prefix_and_range_iteration_are_ordered_and_bounded(store):
    _put(store, {b"a\x00": b"0", b"ab": b"1", b"ac": b"2", b"b": b"3", b"a\xff": b"4"})
    assert [k for k, _ in store.iter_prefix(b"a")] == [b"a\x00", b"ab", b"ac", b"a\xff"]
    assert [k for k, _ in store.iter_range(b"ab", b"b")] == [b"ab", b"ac", b"a\xff"]
    assert [k for k, _ in store.iter_range(b"ac", None)] == [b"ac", b"a\xff", b"b"]


def test_transaction_iteration_merges_pending_writes(store):
    _put(store, {b"p1": b"old", b"p2": b"x", b"p4": b"y"})
    txn = store.transaction()
    txn.set(b"p1", b"new")
    txn.delete(b"p2")
    txn.set(b"p3", b"z")
    txn.set(b"q", b"outside")
    assert list(txn.iter_prefix(b"p")) == [(b"p1", b"new"), (b"p3", b"z"), (b"p4", b"y")]


def test_prefix_end_is_the_first_key_after_the_prefix():
    assert prefix_end(b"ab") == b"ac"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None


def test_rocksdb_store_survives_reopen(tmp_path):
    with RocksDBStore(tmp_path / "db") as db, db.transaction() as txn:
        txn.set(b"k", b"v")
        txn.set_offset("changelog", 3)
    with RocksDBStore(tmp_path / "db") as db:
        assert db.get(b"k") == b"v"
        assert db.get_offset("changelog") == 3


def test_rocksdb_directory_has_one_owner(tmp_path):
    with RocksDBStore(tmp_path / "db"), pytest.raises(StateError):
        RocksDBStore(tmp_path / "db")


_keys = st.binary(min_size=1, max_size=4).filter(lambda k: not k.startswith(RESERVED_PREFIX))


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), _keys, st.binary(max_size=3)), max_size=30))
def test_memory_store_matches_a_dict_model(ops):
    store = RamStore()
    model: dict[bytes, bytes] = {}
    with store.transaction() as txn:
        for is_set, key, value in ops:
            if is_set:
                txn.set(key, value)
                model[key] = value
            else:
                txn.delete(key)
                model.pop(key, None)
        assert list(txn.iter_range(b"", None)) == sorted(model.items())
    assert list(store.iter_range(b"", None)) == sorted(model.items())


def test_the_read_caches_of_a_budget_share_half_of_it_and_follow_commits(tmp_path: Path) -> None:
    """Values of mixed sizes read through two stores of a 40 kB budget: each read cache holds at most an
    equal share of the budget's half (entries counted with their overhead), the process's total says
    what they hold, a commit that grows a cached value is counted, and every read still sees the
    committed value. A third store of the budget shrinks the shares: the first store gives its excess
    back at its next read."""
    budget = 40_000
    with RocksDBStore(tmp_path / "a", cache_bytes=budget) as a, RocksDBStore(tmp_path / "b", budget) as b:
        for db in (a, b):
            with db.transaction() as txn:
                for i in range(400):
                    txn.set(f"k{i:03d}".encode(), bytes(10 if i % 2 else 1_000))
        for i in range(400):
            for db in (a, b):
                assert len(db.get(f"k{i:03d}".encode()) or b"") == (10 if i % 2 else 1_000)
                assert 0 < db.cached_bytes <= budget // 4
        assert cache_bytes() >= a.cached_bytes + b.cached_bytes
        key = next(iter(a._cache))
        before = a.cached_bytes
        with a.transaction() as txn:
            txn.set(key, bytes(5_000))
        assert a.get(key) == bytes(5_000)
        assert a.cached_bytes <= budget // 4 and a.cached_bytes != before
        assert a.get(b"absent") is None
        with RocksDBStore(tmp_path / "c", budget):
            assert a.cached_bytes > budget // 6
            assert a.get(b"absent too") is None
            assert a.cached_bytes <= budget // 6
    assert a.cached_bytes == 0


def test_rocksdb_keeps_what_it_is_written_within_the_budget(tmp_path: Path) -> None:
    """A store written five times its budget: RocksDB's block cache, charged with the memtables, stays
    within its half of the budget (what it cannot hold is flushed to disk), every value reads back, and
    the budget's memory is released with its last store."""
    budget = 2 * ROCKSDB_MIN_BYTES
    before = cache_bytes()
    written: dict[bytes, bytes] = {}
    with RocksDBStore(tmp_path / "db", cache_bytes=budget) as db:
        for i in range(20):
            with db.transaction() as txn:
                for j in range(1_000):
                    key = f"k{(i * 7_919 + j * 104_729) % 50_000:05d}".encode()
                    written[key] = bytes([i]) * 1_024
                    txn.set(key, written[key])
            assert cache_bytes() - before <= budget // 2
        for key in list(written)[::97]:
            assert db.get(key) == written[key]
    assert cache_bytes() == before


def test_a_value_larger_than_the_cache_is_read_and_not_cached(tmp_path: Path) -> None:
    with RocksDBStore(tmp_path / "db", cache_bytes=1_000) as db:
        with db.transaction() as txn:
            txn.set(b"big", bytes(5_000))
        assert db.get(b"big") == bytes(5_000)
        assert db.cached_bytes == 0
