"""Changelog groups are applied whole or not at all, wherever the changelog is cut."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology
from processors.dbpm.ledger import dispatch_key
from state.base import RESERVED_PREFIX
from state.exceptions import StateError
from state.ram import RamStore
from streams.worker.tablestore import BOUNDARY_KEY, ChangelogFollower, StagedPartition

_keys = st.sampled_from([b"Bner\x00a", b"Bner\x00b", b"Dp-1", b"Pa"])
_write = st.tuples(_keys, st.one_of(st.none(), st.binary(min_size=1, max_size=4)))
_groups = st.lists(st.lists(_write, max_size=4), min_size=1, max_size=6)


def _records(groups: list[list[tuple[bytes, bytes | None]]]) -> list[tuple[bytes, bytes | None]]:
    records: list[tuple[bytes, bytes | None]] = []
    for offset, group in enumerate(groups):
        records += [*group, (BOUNDARY_KEY, str(offset).encode())]
    return records


def _applied(groups: list[list[tuple[bytes, bytes | None]]]) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for offset, group in enumerate(groups):
        for key, value in [*group, (BOUNDARY_KEY, str(offset).encode())]:
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
    return state


@given(groups=_groups, data=st.data())
def test_a_cut_changelog_leaves_exactly_the_complete_groups(groups, data) -> None:
    records = _records(groups)
    cut = data.draw(st.integers(min_value=0, max_value=len(records)))
    follower = ChangelogFollower(RamStore())
    for offset, (key, value) in enumerate(records[:cut]):
        follower.add(key, value, offset)
    complete = sum(1 for key, _ in records[:cut] if key == BOUNDARY_KEY)
    got = {k: v for k, v in follower.store.iter_range(b"", b"\xff")}
    assert got == _applied(groups[:complete])


def test_a_dropped_partial_group_never_reaches_the_store() -> None:
    follower = ChangelogFollower(RamStore())
    follower.add(b"Bner\x00a", b"old", 0)
    follower.drop_partial()
    follower.add(b"Bner\x00b", b"new", 1)
    follower.add(BOUNDARY_KEY, b"7", 2)
    assert follower.store.get(b"Bner\x00a") is None
    assert follower.store.get(b"Bner\x00b") == b"new"
    assert follower.store.get_offset("changelog") == 2


def test_a_gates_view_leaves_the_dispatch_registry_out_and_applies_the_rest_of_the_group() -> None:
    """The memory writer's dispatch registry reaches the changelog; the gate's view never reads it."""
    engine = DBPMEngine(DBPMConfig(), load_ontology())
    writer = RamStore()
    with writer.transaction() as txn:
        engine.dispatch(txn, "c1", 1.0e9)
    group = [*writer.iter_range(b"", b"\xff"), (b"Bner\x00fever", b"pattern"), (BOUNDARY_KEY, b"3")]
    view = ChangelogFollower(RamStore(), skip=dispatch_key)
    view.extend([(key, value, offset) for offset, (key, value) in enumerate(group)])
    assert [key for key, _ in view.store.iter_range(b"", b"\xff")] == [b"Bner\x00fever", BOUNDARY_KEY]
    assert view.store.get_offset("changelog") == len(group) - 1
    assert {key[:1] for key, _ in group[:-2]} == {b"K", b"G", b"M"}


class _Table:
    """A partitioned table of one partition held in a RAM store."""

    def __init__(self, store: RamStore) -> None:
        self.store = store

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.store.get(key)

    def iter_range(self, partition: int, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self.store.iter_range(start, end)


@given(before=st.lists(_write, max_size=4), block=st.lists(_write, min_size=1, max_size=6))
def test_an_atomic_block_that_raises_leaves_the_batchs_writes_and_their_order_as_they_were(
    before, block
) -> None:
    store = RamStore()
    with store.transaction() as txn:
        txn.set(b"Bner\x00a", b"old")
        txn.set(b"Pa", b"old")
    staged = StagedPartition(_Table(store), 0)
    for key, value in before:
        staged.put(key, value)
    writes, pairs = list(staged.writes.items()), list(staged.iter_range(b"", None))
    with pytest.raises(RuntimeError), staged.atomic():
        for key, value in block:
            staged.put(key, value)
        raise RuntimeError("poison")
    assert list(staged.writes.items()) == writes
    assert list(staged.iter_range(b"", None)) == pairs
    with staged.atomic():
        for key, value in block:
            staged.put(key, value)
    replayed = StagedPartition(_Table(store), 0)
    for key, value in [*before, *block]:
        replayed.put(key, value)
    assert list(staged.writes.items()) == list(replayed.writes.items())
    assert list(staged.iter_range(b"", None)) == list(replayed.iter_range(b"", None))


def test_an_engine_key_in_the_stores_reserved_namespace_is_refused_when_written() -> None:
    staged = StagedPartition(_Table(RamStore()), 0)
    with pytest.raises(StateError):
        staged.set(RESERVED_PREFIX + b"x", b"v")
    assert staged.writes == {}


_range_keys = st.text(alphabet="abc", max_size=3).map(str.encode)
_range_values = st.binary(min_size=1, max_size=2)


@given(
    stored=st.dictionaries(_range_keys, st.binary(min_size=1, max_size=2), max_size=12),
    staged_writes=st.lists(
        st.tuples(_range_keys, st.none() | st.binary(min_size=1, max_size=2)), max_size=12
    ),
    start=_range_keys,
    end=st.none() | _range_keys,
    taken=st.integers(0, 30),
)
def test_a_range_read_sees_the_batchs_writes_over_the_store_however_far_it_is_read(
    stored, staged_writes, start, end, taken
) -> None:
    """A range read of a staged partition is the store with the batch's writes applied, in key order, and
    a read stopped early gives a prefix of it (both sides are read lazily)."""
    store = RamStore()
    with store.transaction() as txn:
        for key, value in stored.items():
            txn.set(key, value)
    staged = StagedPartition(_Table(store), 0)
    expected = dict(stored)
    for key, value in staged_writes:
        staged.put(key, value)
        if value is None:
            expected.pop(key, None)
        else:
            expected[key] = value
    in_range = sorted((k, v) for k, v in expected.items() if start <= k and (end is None or k < end))
    assert list(staged.iter_range(start, end)) == in_range
    reader = staged.iter_range(start, end)
    assert [pair for _, pair in zip(range(taken), reader, strict=False)] == in_range[:taken]
