"""A memory split over partitions by signature decides and snapshots like one memory.

This is the property the Kafka runtime rests on (:mod:`streams.dbpm`): each memory partition runs
the unchanged engine on the verdicts keyed to it, and gates read all partitions through
:class:`~streams.dbpm.MergedView`. No broker: partitions are in-memory stores.
"""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, GateEvent, load_ontology, parse_event
from processors.dbpm.memory import Memory
from state.base import Store, Transaction
from state.memory import MemoryStore
from streams.dbpm import MergedView, verdict_key
from tests.replay_example import example_events, needs_example

EVENTS = [parse_event(obj) for obj in example_events(1500)]
CONFIG = DBPMConfig().with_flags(cross_task=False, maintenance=False)
ENGINE = DBPMEngine(CONFIG, load_ontology())


@needs_example
@settings(max_examples=8, deadline=None)
@given(partitions=st.integers(min_value=1, max_value=7), salt=st.integers(min_value=0, max_value=2**16))
def test_partitioned_memory_gates_exactly_like_one_memory(partitions: int, salt: int) -> None:
    single = MemoryStore()
    parts: list[Store] = [MemoryStore() for _ in range(partitions)]
    view = MergedView(lambda: parts)
    for event in EVENTS:
        with single.transaction() as txn:
            _, expected = ENGINE.process(txn, event, event.time)
        if isinstance(event, GateEvent):
            txn = Transaction(view)
            _, got = ENGINE.process(txn, event, event.time)
            txn.abort()
            assert got == expected
        else:
            partition = zlib.crc32(salt.to_bytes(4, "little") + verdict_key(ENGINE, event)) % partitions
            with parts[partition].transaction() as txn:
                ENGINE.process(txn, event, event.time)
    # Severities are reported at as_of; gates do not record it in the view, so align it first.
    stamp = MemoryStore()
    with stamp.transaction() as txn:
        Memory(txn, CONFIG).set_clock(Memory(single.transaction(), CONFIG).clock()[0], None)
    parts.append(stamp)
    assert ENGINE.snapshot(view.transaction()) == ENGINE.snapshot(single.transaction())
