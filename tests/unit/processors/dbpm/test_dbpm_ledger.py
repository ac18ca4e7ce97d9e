"""The verdict ledger: a verdict naming its candidate is applied at most once (its groups are at-least-once).

The verifier and generator groups re-issue in-flight calls after a crash, so a candidate's verdict
may reach the memory twice. Properties: a stream with copies injected after their originals gives
the same decisions and the same raw state as the stream without them; verdicts without a
candidate id are applied as given; the ledger forgets after its event-time horizon.
"""

from __future__ import annotations

import random

import pytest
from dbpm_harness import DAY, T0, iso, ner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dbpm_properties import ONTOLOGY, streams

from processors.dbpm import BadEvent, DBPMConfig, DBPMEngine, parse_event
from processors.dbpm.ledger import EXPIRY_STEP_S
from processors.dbpm.memory import Memory
from state import RamStore

HORIZON = 2 * DAY


def _verdict(cid: str | None, verdict: str = "hard_fail", at: float = T0, entity: str = "fever") -> dict:
    obj = {"kind": "verdict", "ts": iso(at), "task": "ner", "verdict": verdict, "source": "verifier_mmed",
           "patient_id": "p1", "payload": ner(entity)}  # fmt: skip
    return obj if cid is None else {**obj, "candidate_id": cid}


def _run(events: list[dict], config: DBPMConfig) -> tuple[list[dict], list[tuple[bytes, bytes]]]:
    engine = DBPMEngine(config, ONTOLOGY)
    store = RamStore()
    decisions = []
    for obj in events:
        event = parse_event(obj)
        with store.transaction() as txn:
            _, out = engine.process(txn, event, event.time)
        decisions.extend(d.to_json(provenance=True) for d in out)
    return decisions, list(store.iter_range(b"", None))


def _count(store_items: list[tuple[bytes, bytes]], config: DBPMConfig, sig: str = "fever") -> int:
    store = RamStore()
    with store.transaction() as txn:
        for key, value in store_items:
            txn.set(key, value)
    pattern = Memory(store.transaction(), config).pattern("ner", sig)
    return 0 if pattern is None else pattern.count


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=streams(), seed=st.integers(0, 2**32 - 1), maintenance=st.booleans())
def test_duplicates_injected_anywhere_after_their_original_change_nothing(events, seed, maintenance):
    config = DBPMConfig(verdict_dedupe_horizon_s=1000 * DAY).with_flags(maintenance=maintenance)
    unique = [{**e, "candidate_id": f"v{i}"} if e["kind"] == "verdict" else e for i, e in enumerate(events)]
    rng = random.Random(seed)
    with_copies = list(unique)
    for event in unique:
        if event["kind"] == "verdict" and rng.random() < 0.5:
            # A re-issued call may judge differently: the copy's label must not matter either.
            copy = {**event, "verdict": rng.choice(["hard_fail", "soft_downgrade", "success"])}
            after = with_copies.index(event)
            with_copies.insert(rng.randint(after + 1, len(with_copies)), copy)
    assert _run(with_copies, config) == _run(unique, config)


def test_verdicts_without_a_candidate_id_are_applied_every_time():
    config = DBPMConfig()
    _, state = _run([_verdict(None), _verdict(None)], config)
    assert _count(state, config) == 2


def test_a_candidates_second_verdict_is_not_applied_whatever_its_label():
    config = DBPMConfig()
    _, once = _run([_verdict("c1")], config)
    _, twice = _run([_verdict("c1"), _verdict("c1", "success", T0 + 60)], config)
    assert _count(twice, config) == 1
    assert twice == once


def test_learn_reports_a_duplicate_as_none_and_writes_nothing():
    engine = DBPMEngine(DBPMConfig(), ONTOLOGY)
    store = RamStore()
    event = parse_event(_verdict("c1"))
    with store.transaction() as txn:
        _, first = engine.learn(txn, event, event.time)
    before = list(store.iter_range(b"", None))
    with store.transaction() as txn:
        _, second = engine.learn(txn, event, event.time)
        assert txn.pending == 0
    assert first == [] and second is None
    assert list(store.iter_range(b"", None)) == before


def test_a_duplicate_beyond_the_horizon_is_applied_again_and_the_ledger_forgets():
    config = DBPMConfig(verdict_dedupe_horizon_s=HORIZON)
    late = T0 + HORIZON + EXPIRY_STEP_S + 1  # past the first expiry boundary after c1's horizon
    stream = [_verdict("c1"), _verdict("c2", at=late, entity="sepsis"), _verdict("c1", at=T0 + 1)]
    _, state = _run(stream, config)
    ledger = [key for key, _ in state if key.startswith((b"V", b"E"))]
    # c1 expired when c2 arrived, so its late copy was applied and recorded again.
    assert _count(state, config) == 2
    assert sorted(k for k in ledger if k.startswith(b"V")) == [b"Vc1", b"Vc2"]
    assert len(ledger) == 4


def test_the_ledger_holds_only_verdicts_within_the_horizon_and_one_expiry_step():
    config = DBPMConfig(verdict_dedupe_horizon_s=HORIZON)
    stream = [_verdict(f"c{i}", at=T0 + i * DAY) for i in range(10)]
    _, state = _run(stream, config)
    assert [k for k, _ in state if k.startswith(b"V")] == [b"Vc7", b"Vc8", b"Vc9"]


def test_a_copy_within_the_expiry_step_after_the_horizon_is_still_recognised():
    config = DBPMConfig(verdict_dedupe_horizon_s=HORIZON)
    soon = T0 + HORIZON + EXPIRY_STEP_S / 2  # c1 is past its horizon, not past a grid boundary yet
    stream = [_verdict("c1", at=T0 + 1), _verdict("c2", at=soon, entity="sepsis"), _verdict("c1", at=T0 + 1)]
    _, state = _run(stream, config)
    assert _count(state, config) == 1


def test_a_verdicts_candidate_id_must_be_a_string():
    with pytest.raises(BadEvent, match="candidate_id"):
        parse_event({**_verdict(None), "candidate_id": 7})


def test_the_dedupe_horizon_must_be_positive():
    with pytest.raises(ValueError, match="verdict_dedupe_horizon_s"):
        DBPMConfig(verdict_dedupe_horizon_s=0)


def test_a_dispatched_candidate_is_known_until_its_horizon_and_nothing_else_is():
    engine = DBPMEngine(DBPMConfig(verdict_dedupe_horizon_s=HORIZON), ONTOLOGY)
    store = RamStore()
    with store.transaction() as txn:
        engine.dispatch(txn, "c1", T0)
        engine.dispatch(txn, "c1", T0 + DAY)  # decided again after a gate restart: the first record holds
    assert engine.knows(store.transaction(), "c1")
    assert not engine.knows(store.transaction(), "c2")
    with store.transaction() as txn:  # a dispatch past c1's horizon plus one grid step expires it
        engine.dispatch(txn, "c3", T0 + HORIZON + 2 * EXPIRY_STEP_S)
    assert not engine.knows(store.transaction(), "c1")
    assert engine.knows(store.transaction(), "c3")


def test_a_dispatch_writes_only_its_own_records():
    engine = DBPMEngine(DBPMConfig(verdict_dedupe_horizon_s=HORIZON), ONTOLOGY)
    store = RamStore()
    with store.transaction() as txn:
        engine.dispatch(txn, "c1", T0)
    assert engine.snapshot(store.transaction())["as_of"] is None
    assert {key[:1] for key, _ in store.iter_range(b"", None)} == {b"K", b"G", b"M"}
