"""The live channel population (:func:`memory_population`) equals the snapshot's, without a scan."""

from __future__ import annotations

import pytest

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology, parse_event
from processors.dbpm.measurement import channel_population, memory_population
from processors.dbpm.memory import Memory
from state import RamStore
from streams.testing.dbpm_stream import generate_events


@pytest.mark.parametrize("maintenance", [True, False])
def test_memory_population_equals_the_snapshots_population_along_the_stream(maintenance: bool) -> None:
    config = DBPMConfig().with_flags(maintenance=maintenance)
    engine = DBPMEngine(config, load_ontology())
    store = RamStore()
    fails = {"ner": 3, "re": 1}
    checked = 0
    with store.transaction() as txn:
        for i, obj in enumerate(generate_events(6_000)):
            event = parse_event(obj)
            txn, _ = engine.process(txn, event, event.time)
            if i % 1_500 == 1_499:
                live = memory_population(Memory(txn, config), fails)
                assert live == channel_population(engine.snapshot(txn), config, fails)
                checked += sum(c.block_eligible + c.downgrade_band for c in live.channels)
    assert checked > 0  # the zones were exercised, not only empty memories


def test_an_empty_memory_has_an_empty_population_and_no_time() -> None:
    config = DBPMConfig()
    with RamStore().transaction() as txn:
        report = memory_population(Memory(txn, config), {})
    assert report.as_of is None
    assert all(c.patterns == c.block_eligible == c.whitelist == 0 for c in report.channels)
