"""Hypothesis invariants of the DBPM engine over random event streams.

* cross-task evidence alone never reaches BLOCK (§4.4 severity-zone guard + recursion prevention);
* whitelisted NER signatures never receive propagated evidence (§4.4 whitelist protection);
* every severity and confidence stays in [0, 1] (constraint C3);
* decay is lazy and exact: reading twice, extra maintenance calls or a different commit rhythm never
  change a result (Eq. 5, §4.6);
* the same stream gives the same output.
"""

from __future__ import annotations

import json

from dbpm_harness import DAY, T0, iso
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology, parse_event
from processors.dbpm.maintenance import maintain
from processors.dbpm.memory import SOURCE_CROSS_TASK, Memory
from processors.dbpm.signatures import ner_signature
from state import RamStore

ENTITIES = ["metformin", "Sepsis", "the patient", "yes", "type 2 diabetes", "fever", "pneumonia"]
TYPES = ["Treatment", "Diagnosis", "Symptom", "Anatomy", "Tests"]
RELATIONS = ["TREATS", "CAUSES", "DIAGNOSES", "REVEALS", "LOCATED_IN"]
SOURCES = ["verifier_mmed", "rule_based", "cross_task", "unknown_src"]
CATEGORIES = ["diagnosis", "adverse_event", "tests", "outcome_mortality"]
ONTOLOGY = load_ontology()

_ner = st.builds(lambda e, c: {"entity": e, "category": c}, st.sampled_from(ENTITIES), st.sampled_from(TYPES))
_re = st.builds(
    lambda h, ht, r, t, tt: {"head": h, "head_type": ht, "relation": r, "tail": t, "tail_type": tt},
    st.sampled_from(ENTITIES), st.sampled_from(TYPES), st.sampled_from(RELATIONS),
    st.sampled_from(ENTITIES), st.sampled_from(TYPES),
)  # fmt: skip


def _qa_payload(question: str, parts: list[str], category: str, error_class: str | None) -> dict:
    payload = {"question": question, "answer": ", ".join(parts), "category": category}
    return {**payload, "error_class": error_class} if error_class else payload


_qa = st.builds(
    _qa_payload,
    st.sampled_from(["Q1?", "Q2?"]), st.lists(st.sampled_from(ENTITIES), max_size=3),
    st.sampled_from(CATEGORIES), st.sampled_from([None, "unsupported", "contradicted"]),
)  # fmt: skip
_payload = st.one_of(
    st.tuples(st.just("ner"), _ner), st.tuples(st.just("re"), _re), st.tuples(st.just("qa"), _qa)
)


@st.composite
def streams(draw: st.DrawFn, max_size: int = 40, direct_ner: bool = True) -> list[dict]:
    events = []
    now = T0
    for i in range(draw(st.integers(1, max_size))):
        now += draw(st.sampled_from([0.0, 60.0, 3600.0, 0.7 * DAY, 3 * DAY]))
        task, payload = draw(_payload)
        kind = draw(st.sampled_from(["verdict", "verdict", "gate"]))
        if kind == "gate":
            events.append({"kind": "gate", "ts": iso(now), "task": task, "patient_id": "p1",
                           "candidate_id": f"c{i}", "payload": payload})  # fmt: skip
            continue
        verdict = draw(st.sampled_from(["hard_fail", "hard_fail", "soft_downgrade", "success"]))
        if task == "ner" and not direct_ner:
            verdict = "success" if draw(st.booleans()) else None
            if verdict is None:
                continue
        source, patient = draw(st.sampled_from(SOURCES)), draw(st.sampled_from(["p1", "p2"]))
        events.append({"kind": "verdict", "ts": iso(now), "task": task, "verdict": verdict,
                       "source": source, "patient_id": patient, "payload": payload})  # fmt: skip
    return events


def _run(events: list[dict], config: DBPMConfig, *, commit_every: int = 1, extra_maintenance: bool = False):
    engine = DBPMEngine(config, ONTOLOGY)
    store = RamStore()
    txn = store.transaction()
    decisions = []
    for n, obj in enumerate(events, start=1):
        event = parse_event(obj)
        if extra_maintenance:
            maintain(Memory(txn, config), event.time - 1800.0)
        txn, out = engine.process(txn, event, event.time)
        decisions.extend(d.to_json(provenance=True) for d in out)
        if n % commit_every == 0:
            txn.commit()
            txn = store.transaction()
    txn.commit()
    return decisions, engine.snapshot(store.transaction())


_settings = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_settings
@given(events=streams(direct_ner=False))
def test_cross_task_evidence_alone_never_blocks(events):
    config = DBPMConfig()
    engine = DBPMEngine(config, ONTOLOGY)
    store = RamStore()
    min_block = min(p.block_threshold for p in config.tasks.values())
    for obj in events:
        event = parse_event(obj)
        with store.transaction() as txn:
            engine.process(txn, event, event.time)
            mem = Memory(txn, config)
            for sig, pattern in mem.patterns("ner"):
                assert pattern.sources == SOURCE_CROSS_TASK, "no direct NER failure in this stream"
                assert mem.severity("ner", pattern, event.time) < min_block
                gate = {"kind": "gate", "ts": obj["ts"], "task": "ner", "patient_id": "p1",
                        "candidate_id": "probe", "payload": {"entity": sig, "category": "x"}}  # fmt: skip
                _, (decision,) = engine.process(txn, parse_event(gate), event.time)
                assert decision.decision != "BLOCK"


@_settings
@given(events=streams())
def test_whitelisted_signatures_never_receive_propagated_evidence(events):
    # Maintenance off: a boundary falling on the event could prune the pattern, which is not propagation.
    config = DBPMConfig().with_flags(maintenance=False)
    engine = DBPMEngine(config, ONTOLOGY)
    store = RamStore()
    for obj in events:
        event = parse_event(obj)
        with store.transaction() as txn:
            mem = Memory(txn, config)
            targets = []
            if obj["kind"] == "verdict" and obj["task"] == "re":
                targets = [obj["payload"]["head"], obj["payload"]["tail"]]
            elif obj["kind"] == "verdict" and obj["task"] == "qa":
                targets = obj["payload"]["answer"].split(",")
            protected = {ner_signature(t) for t in targets} - {
                "",
                ner_signature(obj["payload"].get("entity", "")),
            }
            protected = {t for t in protected if mem.is_whitelisted("ner", t)}
            before = {t: mem.pattern("ner", t) for t in protected}
            engine.process(txn, event, event.time)
            assert {t: mem.pattern("ner", t) for t in protected} == before


@_settings
@given(events=streams())
def test_all_severities_and_confidences_stay_in_the_unit_interval(events):
    config = DBPMConfig(maintenance_interval_s=7200.0)
    engine = DBPMEngine(config, ONTOLOGY)
    store = RamStore()
    for obj in events:
        event = parse_event(obj)
        with store.transaction() as txn:
            _, out = engine.process(txn, event, event.time)
            for decision in out:
                assert decision.severity is None or 0.0 <= decision.severity <= 1.0
        snapshot = engine.snapshot(store.transaction())
        for task in config.tasks:
            assert all(0.0 <= p["severity"] <= 1.0 for p in snapshot["blocklist"][task])
            assert all(0.0 <= w["confidence"] <= 1.0 for w in snapshot["whitelist"][task])


@_settings
@given(events=streams(), commit_every=st.integers(1, 50))
def test_results_do_not_depend_on_commit_or_maintenance_rhythm(events, commit_every):
    config = DBPMConfig()
    reference = _run(events, config)
    assert _run(events, config, commit_every=commit_every) == reference
    assert _run(events, config, extra_maintenance=True) == reference


@_settings
@given(events=streams(), at=st.floats(0, 40 * DAY))
def test_reading_decayed_state_twice_gives_the_same_value(events, at):
    config = DBPMConfig()
    _, first = _run(events, config)
    store = RamStore()
    engine = DBPMEngine(config, ONTOLOGY)
    with store.transaction() as txn:
        for obj in events:
            event = parse_event(obj)
            engine.process(txn, event, event.time)
    mem = Memory(store.transaction(), config)
    now = T0 + at
    reads = [[mem.severity(t, p, now) for _, p in mem.patterns(t)] for t in config.tasks for _ in range(2)]
    assert reads[0::2] == reads[1::2]
    assert engine.snapshot(store.transaction()) == first


@_settings
@given(events=streams())
def test_the_same_stream_twice_gives_identical_output(events):
    config = DBPMConfig().with_flags(maintenance=False)
    first, second = _run(events, config), _run(events, config)
    assert json.dumps(first) == json.dumps(second)
