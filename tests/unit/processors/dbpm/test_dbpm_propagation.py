"""Cross-task propagation as events (§4.4: one writer per signature).

* ``learn`` returns the RE/QA -> NER evidence as :class:`Propagation` events; applying them in
  process right after their verdict is the inline Algorithm 1 of the engine before the split, record
  for record (the reference below is that inline code, kept here as the oracle);
* the guards that read the target's state are evaluated by the target's writer, when the event is
  applied, not when it is produced;
* delivered late and in any order (the Kafka hop), cross-task evidence alone still never blocks.
"""

from __future__ import annotations

import pytest
from dbpm_harness import T0, iso
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_dbpm_properties import ONTOLOGY, streams

from processors.dbpm import DBPMConfig, DBPMEngine, Propagation, VerdictEvent, parse_event
from processors.dbpm.config import CROSS_TASK_QA, CROSS_TASK_RE, HARD_FAIL, NER, QA, RE, SOFT_DOWNGRADE
from processors.dbpm.maintenance import advance_clock
from processors.dbpm.memory import SOURCE_CROSS_TASK, Memory
from processors.dbpm.signatures import ner_signature, signature
from processors.dbpm.update import apply_verdict, effective_verdict, raised_pattern
from state import RamStore

_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _inline_propagate(mem: Memory, entity: str, weight: float, now: float) -> None:
    """The engine's Propagate(e, w) as it was applied inline before propagation became an event."""
    cfg = mem.config
    if mem.is_whitelisted(NER, entity):
        return
    old = mem.pattern(NER, entity)
    kappa = mem.kappa(old, now)
    if kappa >= cfg.propagation_cap or mem.severity(NER, old, now) >= cfg.severity_zone_guard:
        return
    before = mem.severity(NER, old, now)
    _, raised = raised_pattern(mem, NER, old, SOFT_DOWNGRADE, weight, now, sources=SOURCE_CROSS_TASK)
    halved = before + cfg.propagation_increment_factor * (raised.severity - before)
    new = raised._replace(severity=min(1.0, max(0.0, halved)), kappa=kappa + 1, kappa_ref=now)
    mem.put_pattern(NER, entity, new, old)


def _inline_verdict(mem: Memory, event: VerdictEvent, now: float) -> None:
    """Algorithm 1 with propagation inline: the local writes, then lines 23-45 as they were."""
    apply_verdict(mem, event, now)  # its returned events are ignored: the oracle derives its own
    cfg = mem.config
    if event.task == RE and event.source == "rule_based" and not cfg.flags.ontology_filter:
        return
    if effective_verdict(cfg, event.task, event.verdict) != HARD_FAIL or not cfg.flags.cross_task:
        return
    if event.task == RE:
        targets, weight = [event.payload["head"], event.payload["tail"]], cfg.weight(CROSS_TASK_RE)
    elif event.task == QA:
        targets, weight = str(event.payload["answer"]).split(","), cfg.weight(CROSS_TASK_QA)
    else:
        return
    for entity in dict.fromkeys(ner_signature(t) for t in targets):  # type: ignore[arg-type]
        if cfg.propagation_min_length <= len(entity) <= cfg.propagation_max_length:
            _inline_propagate(mem, entity, weight, now)


def _dump(store: RamStore) -> list[tuple[bytes, bytes]]:
    return list(store.transaction().iter_prefix(b""))


@_settings
@given(events=streams(), maintenance=st.booleans())
def test_propagation_events_applied_in_process_equal_the_inline_algorithm(events, maintenance):
    config = DBPMConfig().with_flags(maintenance=maintenance)
    engine = DBPMEngine(config, ONTOLOGY)
    inline, processed, split = RamStore(), RamStore(), RamStore()
    for obj in events:
        event = parse_event(obj)
        with processed.transaction() as txn:
            engine.process(txn, event, event.time)
        if isinstance(event, VerdictEvent):
            with inline.transaction() as txn:
                mem = Memory(txn, config)
                advance_clock(mem, event.time)
                _inline_verdict(mem, event, event.time)
            # Learn and propagate in separate transactions, as two writers would.
            with split.transaction() as txn:
                _, propagations = engine.learn(txn, event, event.time)
            for propagation in propagations:
                with split.transaction() as txn:
                    engine.propagate(txn, propagation)
        else:
            for store in (inline, split):
                with store.transaction() as txn:
                    engine.process(txn, event, event.time)
    assert _dump(processed) == _dump(inline)
    assert _dump(split) == _dump(inline)


def _verdict(task: str, verdict: str, payload: dict, at: float) -> VerdictEvent:
    obj = {"kind": "verdict", "ts": iso(at), "task": task, "verdict": verdict, "source": "verifier_mmed",
           "patient_id": "p1", "payload": payload}  # fmt: skip
    event = parse_event(obj)
    assert isinstance(event, VerdictEvent)
    return event


RELATION = {"head": "metformin", "head_type": "Treatment", "relation": "TREATS", "tail": "pneumonia",
            "tail_type": "Diagnosis"}  # fmt: skip


def test_a_relation_hard_fail_yields_one_event_per_entity_with_its_provenance():
    engine = DBPMEngine(DBPMConfig(), ONTOLOGY)
    _, propagations = engine.learn(RamStore().transaction(), _verdict(RE, HARD_FAIL, RELATION, T0), T0)
    weight = DBPMConfig().weight(CROSS_TASK_RE)
    origin = signature(RE, RELATION)
    assert propagations == [
        Propagation(NER, "metformin", weight, CROSS_TASK_RE, T0, RE, origin, "p1"),
        Propagation(NER, "pneumonia", weight, CROSS_TASK_RE, T0, RE, origin, "p1"),
    ]


def test_learning_writes_only_the_origin_signature_records():
    engine = DBPMEngine(DBPMConfig().with_flags(maintenance=False), ONTOLOGY)
    store = RamStore()
    with store.transaction() as txn:
        engine.learn(txn, _verdict(RE, HARD_FAIL, RELATION, T0), T0)
    assert list(Memory(store.transaction(), engine.config).patterns(NER)) == []


def test_the_whitelist_guard_reads_the_target_when_the_event_is_applied():
    engine = DBPMEngine(DBPMConfig().with_flags(maintenance=False), ONTOLOGY)
    origin, target = RamStore(), RamStore()
    with origin.transaction() as txn:
        _, propagations = engine.learn(txn, _verdict(RE, HARD_FAIL, RELATION, T0), T0)
    # The target's writer confirms "metformin" after the evidence was produced, before it arrives.
    with target.transaction() as txn:
        confirmed = _verdict(NER, "success", {"entity": "metformin", "category": "drug"}, T0 + 1)
        engine.process(txn, confirmed, T0 + 1)
    applied = []
    for propagation in propagations:
        with target.transaction() as txn:
            applied.append(engine.propagate(txn, propagation)[1])
    assert applied == [False, True]
    mem = Memory(target.transaction(), engine.config)
    assert mem.pattern(NER, "metformin") is None
    assert mem.pattern(NER, "pneumonia") is not None


def test_the_propagation_cap_stops_the_fourth_hit_on_one_target():
    engine = DBPMEngine(DBPMConfig().with_flags(maintenance=False), ONTOLOGY)
    store = RamStore()
    event = Propagation(NER, "pneumonia", 0.4, CROSS_TASK_RE, T0, RE, "x", "p1")
    results = []
    for i in range(4):
        with store.transaction() as txn:
            results.append(engine.propagate(txn, event._replace(time=T0 + i))[1])
    assert results == [True, True, True, False]


@pytest.mark.parametrize("flags", [{"disabled": True}, {"cross_task": False}])
def test_an_engine_without_cross_task_neither_emits_nor_applies_propagations(flags):
    engine = DBPMEngine(DBPMConfig().with_flags(**flags), ONTOLOGY)
    store = RamStore()
    with store.transaction() as txn:
        _, propagations = engine.learn(txn, _verdict(RE, HARD_FAIL, RELATION, T0), T0)
    assert propagations == []
    before = _dump(store)
    with store.transaction() as txn:
        evidence = Propagation(NER, "pneumonia", 0.4, CROSS_TASK_RE, T0 + 1, RE, "x", "p1")
        _, applied = engine.propagate(txn, evidence)
    assert applied is False
    assert _dump(store) == before


@_settings
@given(events=streams(direct_ner=False), delays=st.lists(st.integers(0, 6), max_size=200))
def test_cross_task_evidence_alone_never_blocks_in_any_delivery_order(events, delays):
    config = DBPMConfig()
    engine = DBPMEngine(config, ONTOLOGY)
    store = RamStore()
    min_block = min(p.block_threshold for p in config.tasks.values())
    in_flight: list[tuple[int, Propagation]] = []
    for step, obj in enumerate(events, start=1):
        event = parse_event(obj)
        with store.transaction() as txn:
            if isinstance(event, VerdictEvent):
                _, out = engine.learn(txn, event, event.time)
                for propagation in out:
                    delay = delays[len(in_flight) % len(delays)] if delays else 0
                    in_flight.append((step + delay, propagation))
            due = [p for at, p in in_flight if at <= step]
            in_flight = [(at, p) for at, p in in_flight if at > step]
            for propagation in reversed(due):  # late and out of order
                engine.propagate(txn, propagation)
            mem = Memory(txn, config)
            for sig, pattern in mem.patterns(NER):
                assert pattern.sources == SOURCE_CROSS_TASK, "no direct NER failure in this stream"
                assert mem.severity(NER, pattern, pattern.ref_time) < min_block, sig
