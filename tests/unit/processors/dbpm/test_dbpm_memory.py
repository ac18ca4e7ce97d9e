"""The record layer: eviction index order, low-water mark, incremental counts, clock record."""

from __future__ import annotations

from dbpm_harness import DAY, T0
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig
from processors.dbpm.memory import Memory, Pattern, order_key
from state import MemoryStore

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
    with MemoryStore().transaction() as txn:
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
    with MemoryStore().transaction() as txn:
        mem = Memory(txn, DBPMConfig())
        assert mem.clock() == (None, None)
        mem.set_clock(None, 7)
        assert mem.clock() == (None, 7)
        mem.set_clock(T0, None)
        assert mem.clock() == (T0, None)
