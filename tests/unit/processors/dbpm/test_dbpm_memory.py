"""The record layer: eviction index order, low-water mark, incremental counts, clock record."""

from __future__ import annotations

from dataclasses import replace

from dbpm_harness import DAY, T0
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig
from processors.dbpm.config import DEFAULT_TASKS
from processors.dbpm.maintenance import maintain
from processors.dbpm.memory import Memory, Pattern, order_key
from state import RamStore

_ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete", "raise"]),
        st.sampled_from(["a", "b", "c", "d", "e"]),
        st.floats(0.001, 1.0),
        st.floats(0, 30 * DAY),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=_ops)
def test_index_walk_from_the_low_water_mark_sees_every_live_pattern_in_severity_order(ops):
    config = DBPMConfig()
    with RamStore().transaction() as txn:
        mem = Memory(txn, config)
        for op, sig, severity, offset in ops:
            old = mem.pattern("ner", sig)
            if op == "put":
                new = Pattern(severity, T0 + offset, T0 + offset, (old.count if old else 0) + 1, 0, T0, 1, "")
                mem.put_pattern("ner", sig, new, old)
            elif op == "delete" and old is not None:
                mem.delete_pattern("ner", sig, old)
            else:
                mem.set_low_water("ner")
        live = dict(mem.patterns("ner"))
        h = mem.half_life_s("ner")
        expected = sorted(live, key=lambda s: (order_key(live[s].severity, live[s].ref_time, h), s))
        assert [sig for sig, _ in mem.lowest("ner")] == expected
        assert mem.population("B", "ner") == len(live)


def test_clock_record_round_trips_absent_values():
    with RamStore().transaction() as txn:
        mem = Memory(txn, DBPMConfig())
        assert mem.clock() == (None, None)
        mem.set_clock(None, 7)
        assert mem.clock() == (None, 7)
        mem.set_clock(T0, None)
        assert mem.clock() == (T0, None)


@settings(max_examples=60, deadline=None)
@given(ops=_ops, cap=st.integers(0, 4), at=st.floats(31 * DAY, 60 * DAY))
def test_maintenance_removes_exactly_the_patterns_below_the_floor_then_the_lowest_over_the_cap(ops, cap, at):
    config = DBPMConfig(tasks={**DEFAULT_TASKS, "ner": replace(DEFAULT_TASKS["ner"], cap=cap)})
    with RamStore().transaction() as txn:
        mem = Memory(txn, config)
        for op, sig, severity, offset in ops:
            old = mem.pattern("ner", sig)
            if op == "put":
                new = Pattern(severity, T0 + offset, T0 + offset, 1, 0, T0, 1, "")
                mem.put_pattern("ner", sig, new, old)
            elif op == "delete" and old is not None:
                mem.delete_pattern("ner", sig, old)
        now = T0 + at
        boundary = (now // config.maintenance_interval_s) * config.maintenance_interval_s
        live = dict(mem.patterns("ner"))
        h = mem.half_life_s("ner")
        ordered = sorted(live, key=lambda s: (order_key(live[s].severity, live[s].ref_time, h), s))
        survivors = [s for s in ordered if mem.severity("ner", live[s], boundary) >= config.prune_floor]
        expected = survivors[max(0, len(survivors) - cap) :]
        maintain(mem, now)
        assert sorted(sig for sig, _ in mem.patterns("ner")) == sorted(expected)
        assert [sig for sig, _ in mem.lowest("ner")] == expected
        assert mem.population("B", "ner") == len(expected)
