"""A memory split over partitions by signature decides and snapshots like one memory.

This is the property the Kafka runtime rests on (:mod:`streams.worker.memory`): each memory partition runs
the unchanged engine on the verdicts keyed to it, and gates read all partitions through
:class:`~streams.worker.gateview.MergedView`. With cross-task propagation on, a verdict's propagation events
are applied by the partition of their target signature (:func:`~streams.worker.keys.propagation_key`); when
they are applied before the next event (no hop delay), the partitioned memory is still exactly the
single memory, so every signature has one writer and the view needs no tie-break. No broker:
partitions are in-memory stores.
"""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, GateEvent, load_ontology, parse_event
from processors.dbpm.memory import Memory
from state.base import Store, Transaction
from state.ram import RamStore
from streams.worker.gateview import MergedView
from streams.worker.keys import propagation_key, verdict_key
from tests.replay_example import example_events, needs_example

EVENTS = [parse_event(obj) for obj in example_events(1500)]
ONTOLOGY = load_ontology()


@needs_example
@settings(max_examples=8, deadline=None)
@given(
    partitions=st.integers(min_value=1, max_value=7),
    salt=st.integers(min_value=0, max_value=2**16),
    cross_task=st.booleans(),
)
def test_partitioned_memory_gates_exactly_like_one_memory(
    partitions: int, salt: int, cross_task: bool
) -> None:
    config = DBPMConfig().with_flags(cross_task=cross_task, maintenance=False)
    engine = DBPMEngine(config, ONTOLOGY)

    def partition_of(key: bytes) -> int:
        return zlib.crc32(salt.to_bytes(4, "little") + key) % partitions

    single = RamStore()
    parts: list[Store] = [RamStore() for _ in range(partitions)]
    view = MergedView(lambda: parts)
    for event in EVENTS:
        with single.transaction() as txn:
            _, expected = engine.process(txn, event, event.time)
        if isinstance(event, GateEvent):
            txn = Transaction(view)
            _, got = engine.process(txn, event, event.time)
            txn.abort()
            assert got == expected
            continue
        with parts[partition_of(verdict_key(engine, event))].transaction() as txn:
            _, propagations = engine.learn(txn, event, event.time)
        for propagation in propagations:
            with parts[partition_of(propagation_key(propagation))].transaction() as txn:
                engine.propagate(txn, propagation)
    # Severities are reported at as_of; gates do not record it in the view, so align it first.
    stamp = RamStore()
    with stamp.transaction() as txn:
        Memory(txn, config).set_clock(Memory(single.transaction(), config).clock()[0], None)
    parts.append(stamp)
    assert engine.snapshot(view.transaction()) == engine.snapshot(single.transaction())
