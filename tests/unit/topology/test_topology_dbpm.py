"""DBPM through the topology driver: the worker's memory writer and gate equal the in-process engine.

The driver runs the deployed per-record code (:class:`~streams.worker.memory.MemoryHandler`,
:class:`~streams.worker.gate.Gate`) over in-memory topics with the real serde, keys, murmur2 partitions,
headers and changelog groups, and publishes a stream exactly as ``replay --via-kafka`` does (verdicts
keyed by signature, a watermark tick per verdict partition, candidates with the barrier header).
Everything is processed in production order, so the comparison is event for event: the memory, read
back from its changelog, and every decision with its provenance equal the in-process engine's. With
cross-task propagation on as well: the evidence travels through ``clingate.dbpm.propagations`` to the
target's partition and is applied before the next record, as the engine applies it inline. (On a
broker it is one hop late; ``tests/integration/test_dbpm_worker.py`` measures that difference.)
"""

from __future__ import annotations

import json
import logging
from collections import Counter as CollectionsCounter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge

from processors.dbpm import parse_event
from processors.dbpm.signatures import signature
from schemas.dbpm import Candidate, GateDecision, Verdict
from schemas.dbpm import Propagation as PropagationRecord
from streams.runtime.settings import Settings
from streams.testing.dbpm_stream import StreamShape, generate_events
from streams.testing.driver import TopologyDriver
from streams.testing.worker import COMPARISON_ENV, comparison_engine, in_process, soak_stream
from streams.worker.engine import dbpm_config
from streams.worker.gateview import ConfigWatch
from streams.worker.keys import BARRIER_HEADER, CONFIG_KEY, REPLAYED_HEADER, TICK_HEADER, verdict_key
from streams.worker.wire import contract_event, dispatch_outputs
from tests.dbpm_streams import pin_line, with_candidate_ids, with_copies
from tests.replay_example import EXAMPLE, assert_state_close, example_events, needs_example
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_PROPAGATIONS, DBPM_VERDICTS
from topics.partitioner import partition_for

COMPARISON = Settings(**COMPARISON_ENV)  # type: ignore[arg-type]
"""The workers' settings of the chaos soak and the worker integration tests (propagation, maintenance off)."""
PROPAGATION = Settings(**{**COMPARISON_ENV, "CLINGATE_DBPM_CROSS_TASK": "true"})  # type: ignore[arg-type]
"""As :data:`COMPARISON`, with cross-task propagation on."""
_FIELDS = ("candidate_id", "decision", "rule", "signature", "severity", "multiplier")


def _engine_decisions(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The in-process engine's decisions as the worker's decision records carry them."""
    return [{**{k: d[k] for k in _FIELDS}, "provenance": d["sources"] + d["policy"]} for d in decisions]


def _worker_decisions(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**{k: d[k] for k in _FIELDS}, "provenance": d["sources"]} for d in decisions]


def _assert_equals_the_engine(settings: Settings, events: list[dict[str, Any]]) -> TopologyDriver:
    """Replay ``events`` through a driver with ``settings``; its decisions and memory are the engine's."""
    with TopologyDriver(settings) as driver:
        result = driver.replay(events)
    decisions, state = in_process(driver.engine, events)
    assert _worker_decisions(result.decisions) == _engine_decisions(decisions)
    assert result.state == state
    return driver


def _total(counter: Counter, **labels: str) -> float:
    """The sum of ``counter``'s samples whose labels include ``labels``."""
    return sum(
        s.value
        for metric in counter.collect()
        for s in metric.samples
        if s.name.endswith("_total") and labels.items() <= s.labels.items()
    )


@needs_example
def test_the_replay_example_gives_the_examples_decisions_and_state_and_the_engines_provenance() -> None:
    """Scenario: the replay contract's example (4,904 events, cross-task propagation on, maintenance off,
    as ``clingate replay --no-maintenance`` made it) published as ``replay --via-kafka`` publishes it.

    Every candidate gets the example's decision, the state read back from the memory changelog is the
    example's state (floats within 1e-9), and decisions with their provenance and the state are exactly
    the in-process engine's; no gate waited out its barrier (the ticks brought every partition to it).
    """
    events = example_events()
    driver = _assert_equals_the_engine(Settings(CLINGATE_DBPM_MAINTENANCE=False), events)

    got = [(d.candidate_id, d.decision.value) for d in driver.values(DBPM_DECISIONS, GateDecision)]
    want = [json.loads(line) for line in (EXAMPLE / "decisions.jsonl").read_text().splitlines()]
    assert got == [(d["candidate_id"], d["decision"]) for d in want]
    assert_state_close(driver.memory_state(), json.loads((EXAMPLE / "state.json").read_text()))
    assert not any("barrier_timeout" in d.provenance for d in driver.values(DBPM_DECISIONS, GateDecision))
    assert driver.records(DBPM_PROPAGATIONS), "the example propagates cross-task evidence"


@pytest.mark.parametrize("settings", [COMPARISON, PROPAGATION], ids=["propagation-off", "propagation-on"])
def test_the_synthetic_stream_gives_the_engines_decisions_and_memory(settings: Settings) -> None:
    """Scenario: 3,000 events of ``clingate bench dbpm``'s stream (the paper's proportions)."""
    _assert_equals_the_engine(settings, list(generate_events(3000)))


def test_the_chaos_soaks_stream_gives_the_engines_decisions_and_memory() -> None:
    """Scenario: the chaos soak's stream (epochs of candidates, then their verdicts), without the kills.

    What the soak compares after its SIGKILLs holds without them: decisions and memory equal the
    in-process engine's on the same reordered stream.
    """
    _assert_equals_the_engine(COMPARISON, soak_stream(3000, 500, "topology"))


def test_operator_pins_on_the_verdict_topic_decide_as_the_engine_decides_them() -> None:
    """Scenario: the synthetic stream with an operator's pins of three gated signatures (BLOCK, ALLOW, then
    UNPIN of one) published on ``clingate.dbpm.verdicts`` keyed like the verdicts of their signatures:
    the memory partition of each signature records its pin, and decisions, provenance (the pin named) and
    memory equal the in-process engine's."""
    events = list(generate_events(1200))
    recurring = CollectionsCounter(
        (e["task"], signature(e["task"], e["payload"])) for e in events[200:] if e["kind"] == "gate"
    )
    (a, _), (b, _), (c, _) = recurring.most_common(3)
    early, late = events[199]["ts"], events[899]["ts"]
    pins = [(200, pin_line(*a, "BLOCK", early)), (201, pin_line(*b, "ALLOW", early)),
            (202, pin_line(*c, "BLOCK", early)), (900, pin_line(*c, "UNPIN", late))]  # fmt: skip
    for at, event in reversed(pins):
        events.insert(at, event)

    driver = _assert_equals_the_engine(COMPARISON, events)

    pinned = [d for d in driver.values(DBPM_DECISIONS, GateDecision) if d.rule == "operator_pin"]
    assert {d.signature for d in pinned} == {a[1], b[1], c[1]}
    assert all("pinned_by=olga" in d.provenance for d in pinned)
    unpinned = {e["candidate_id"] for e in events[904:]
                if e["kind"] == "gate" and (e["task"], signature(e["task"], e["payload"])) == c}  # fmt: skip
    assert unpinned and not unpinned & {d.candidate_id for d in pinned}, "the UNPIN gave the learnt rule back"


@settings(max_examples=12, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.integers(min_value=1, max_value=600),
    seed=st.integers(min_value=0, max_value=2**16),
    propagation=st.booleans(),
)
def test_any_synthetic_stream_gives_the_engines_decisions_and_memory(
    events: int, seed: int, propagation: bool
) -> None:
    """Property: for any length and seed of the synthetic stream, with propagation on or off."""
    _assert_equals_the_engine(PROPAGATION if propagation else COMPARISON,
                              list(generate_events(events, StreamShape(seed=seed))))  # fmt: skip


@needs_example
def test_a_repeated_verdict_is_applied_once_and_counted() -> None:
    """Scenario: every other verdict names its candidate, and every second of those is published again
    after the next gate (an at-least-once verifier re-issuing a call).

    Decisions and memory equal the engine's on the stream without the copies, and
    ``clingate_dbpm_verdicts_duplicate_total`` counts every copy.
    """
    unique = with_candidate_ids(example_events(600))
    published, copies = with_copies(unique, every=2)

    with TopologyDriver(COMPARISON) as driver:
        result = driver.replay(published)

    decisions, state = in_process(driver.engine, unique)
    assert copies >= 50
    assert _worker_decisions(result.decisions) == _engine_decisions(decisions)
    assert result.state == state
    assert _total(driver.dbpm_metrics.verdicts_duplicate) == copies


def test_redelivered_records_change_no_memory_and_a_candidate_is_decided_on_the_memory_as_it_is() -> None:
    """Scenario: after a stream, records are delivered again at their offsets, as after a crash before
    the commit: verdicts and propagations (skipped by the input offsets the memory partition records)
    and candidates (covered by the gate's committed progress); and copies of propagations appended
    anew, as an origin partition's writer re-sends them after its crash (skipped by their identity).

    The memory is unchanged, no new propagation is sent and no candidate is decided twice.
    """
    events = list(generate_events(800))
    with TopologyDriver(PROPAGATION) as driver:
        driver.replay(events)
        state = driver.memory_state()
        propagations = driver.records(DBPM_PROPAGATIONS)
        decided = len(driver.records(DBPM_DECISIONS))
        candidates = driver.records(DBPM_CANDIDATES)[::11]
        for record in [*driver.records(DBPM_VERDICTS)[::7], *propagations[::3], *candidates]:
            driver.redeliver(record)
        for record in propagations[::5]:
            driver.pipe(record.topic, record.key, record.value, record.headers, partition=record.partition)

        assert propagations, "the stream propagates cross-task evidence"
        assert driver.memory_state() == state
        assert driver.records(DBPM_PROPAGATIONS)[: len(propagations)] == propagations
        assert len(driver.records(DBPM_PROPAGATIONS)) == len(propagations) + len(propagations[::5])
        assert _total(driver.dbpm_metrics.propagations, outcome="duplicate") == len(propagations[::5])
        assert len(driver.records(DBPM_DECISIONS)) == decided
        assert driver.dbpm_metrics.gate_redelivered._value.get() == len(candidates)  # type: ignore[attr-defined]


def test_a_propagation_reaches_the_partition_of_its_target_signature() -> None:
    """Scenario: one relation hard-failed with propagation on.

    Its evidence leaves the relation's partition as two records keyed by the target ``ner|<entity>``,
    each on the partition murmur2 gives that key (the target's verdict partition), naming its origin
    partition and offset; the targets get their cross-task patterns there.
    """
    relation = {"head": "metformin", "head_type": "Treatment", "relation": "TREATS", "tail": "pneumonia",
                "tail_type": "Diagnosis"}  # fmt: skip
    events = [{"kind": "verdict", "ts": "2026-01-01T00:00:00Z", "task": "re", "verdict": "hard_fail",
               "source": "verifier_mmed", "patient_id": "p1", "payload": relation}]  # fmt: skip
    with TopologyDriver(PROPAGATION) as driver:
        driver.replay(events)
        [verdict] = driver.records(DBPM_VERDICTS)
        sent = driver.records(DBPM_PROPAGATIONS)
        models = driver.values(DBPM_PROPAGATIONS, PropagationRecord)
        state = driver.memory_state()

    assert [r.key for r in sent] == [b"ner|metformin", b"ner|pneumonia"]
    for record, model in zip(sent, models, strict=True):
        assert record.partition == partition_for(record.key or b"", COMPARISON.topic_partitions)
        assert (model.origin_partition, model.origin_offset) == (verdict.partition, verdict.offset)
    assert {e["signature"] for e in state["blocklist"]["ner"]} == {"metformin", "pneumonia"}  # type: ignore[index]


def test_a_candidate_decides_after_its_barrier_or_as_timed_out_when_the_memory_cannot_reach_it() -> None:
    """Scenario: two replay candidates (barrier header); ticks bring every memory partition to the first
    one's event time, none to the second's.

    The first is decided on the memory at its time. While the second waits nothing else can arrive, so
    it is decided as the gate loop decides after its barrier timeout: on the memory it has,
    ``barrier_timeout`` in its provenance, counted in ``clingate_dbpm_barrier_timeouts_total``.
    """
    gate = {"kind": "gate", "ts": "2026-01-01T00:00:00Z", "task": "ner", "patient_id": "p1",
            "candidate_id": "c1", "payload": {"entity": "fever", "category": "Symptoms"}}  # fmt: skip
    later = Candidate.model_validate({**_record(gate), "ts": "2026-01-02T00:00:00Z", "candidate_id": "c2"})
    with TopologyDriver(COMPARISON) as driver:
        driver.replay([gate])
        driver.pipe(DBPM_CANDIDATES, b"p1", later, [(BARRIER_HEADER, b"")])
        ticks = driver.records(DBPM_VERDICTS)
        first, second = driver.values(DBPM_DECISIONS, GateDecision)
        timeouts = _total(driver.dbpm_metrics.barrier_timeouts)

    assert {(r.partition, r.header(TICK_HEADER)) for r in ticks} == {
        (p, b"2026-01-01T00:00:00Z") for p in range(COMPARISON.topic_partitions)
    }
    assert "barrier_timeout" not in first.provenance
    assert "barrier_timeout" in second.provenance
    assert timeouts == 1


def _record(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "kind"}


def test_the_driver_engine_is_the_one_the_comparison_workers_run() -> None:
    """The driver's memory engine is configured as workers started with ``COMPARISON_ENV`` are."""
    with TopologyDriver(COMPARISON) as driver:
        assert driver.engine.config == comparison_engine().config


def _relation(candidate_id: str, relation: str) -> Candidate:
    return Candidate.model_validate({
        "ts": "2026-11-26T09:00:00Z", "task": "re", "patient_id": "p-1", "candidate_id": candidate_id,
        "payload": {"head": "troponin", "head_type": "Tests", "relation": relation,
                    "tail": "myocardial infarction", "tail_type": "Diagnosis"},
    })  # fmt: skip


def test_the_gate_runs_the_ontology_filter_on_live_relations_and_the_memory_learns_its_verdicts() -> None:
    """Scenario: live relation candidates (no barrier header) whose triple the ontology does not admit
    (Tests -ASSOCIATED_WITH-> Diagnosis), one admitted triple, and a replayed violating candidate.

    Each live violation is decided and its Filter verdict (rule_based hard_fail, its own id, the
    rejection-log fields, the candidate's time) is published keyed for the memory, which learns it
    until the triple's pattern BLOCKs (the paper's verifier-independent RE channel), with
    ``rule_based`` in the BLOCK's provenance; the admitted triple and the replayed candidate get none;
    every decision and every memory group names the configuration.
    """
    settings = Settings(CLINGATE_DBPM_MAINTENANCE=False)
    with TopologyDriver(settings) as driver:
        for index in range(14):
            driver.pipe(DBPM_CANDIDATES, b"p-1", _relation(f"c{index}", "ASSOCIATED_WITH"))
        driver.pipe(DBPM_CANDIDATES, b"p-1", _relation("admitted", "CONFIRMS"))
        driver.pipe(
            DBPM_CANDIDATES, b"p-1", _relation("replayed", "ASSOCIATED_WITH"), ((BARRIER_HEADER, b""),)
        )
        verdicts = driver.values(DBPM_VERDICTS, Verdict)
        decisions = driver.values(DBPM_DECISIONS, GateDecision)
        configs = {store.get(CONFIG_KEY) for store in driver.memory.stores()} - {None}
    assert [v.candidate_id for v in verdicts] == [f"c{index}:ontology" for index in range(14)]
    first = verdicts[0]
    assert (first.source, first.verdict.value, first.stage, first.reason, first.confidence) == (
        "rule_based",
        "hard_fail",
        "gatekeeper",
        "Ontology_Mismatch_Tests",
        1.0,
    )
    assert first.ts == decisions[0].ts
    by_id = {d.candidate_id: d for d in decisions}
    assert by_id["c0"].decision.value == "ALLOW" and by_id["c13"].decision.value == "BLOCK"
    assert "rule_based" in by_id["c13"].provenance
    assert by_id["admitted"].rule == "ontology_admitted"
    assert by_id["replayed"].decision.value == "BLOCK"  # decided on what the live ones taught
    assert {d.config for d in decisions} == {driver.engine.config.fingerprint()}
    assert configs == {driver.engine.config.fingerprint().encode()}


def test_a_verdict_under_the_filters_id_that_is_not_the_filters_is_dead_lettered_with_its_reason() -> None:
    """Scenario: verdicts carrying the Filter's reserved id (``<candidate>:ontology``): one about an entity
    (NER), one about a relation from the verifier, and the Filter's own kind (rule_based, relation).

    The first two go to the verdict DLQ at the validate stage with a reason naming what is wrong, and
    teach nothing; the third, whose candidate the gate decided, is learnt. Processing goes on after each.
    """
    entity = {"entity": "fever", "category": "Symptoms"}
    triple = _relation("c", "ASSOCIATED_WITH").payload.model_dump(mode="json")
    verdicts = [
        Verdict.model_validate({"ts": "2026-11-26T09:00:00Z", "task": task, "verdict": "hard_fail",
                                "source": source, "patient_id": "p-1", "payload": payload,
                                "candidate_id": f"{name}:ontology"})
        for name, task, source, payload in (("ner", "ner", "rule_based", entity),
                                            ("verifier", "re", "verifier_mmed", triple),
                                            ("filter", "re", "rule_based", triple))
    ]  # fmt: skip
    with TopologyDriver(Settings(CLINGATE_DBPM_MAINTENANCE=False)) as driver:
        _dispatch(driver, verdicts[-1].model_copy(update={"candidate_id": "filter"}))
        for verdict in verdicts:
            event = parse_event({"kind": "verdict", **verdict.model_dump(mode="json")})
            driver.pipe(DBPM_VERDICTS, verdict_key(driver.engine, event), verdict)
        dead = [d.letter for d in driver.dead_letters(DBPM_VERDICTS)]
        state = driver.memory_state()
    assert [(d.stage.value, d.error_type) for d in dead] == [("validate", "MisfiledFilterVerdict")] * 2
    assert "relation candidates only" in dead[0].error and "'ner'" in dead[0].error
    assert "'verifier_mmed'" in dead[1].error
    assert [p["signature"] for p in state["blocklist"]["re"]] == ["TESTS|ASSOCIATED_WITH|DIAGNOSIS"]  # type: ignore[index]
    # The relation's head and tail have cross-task evidence from the learnt verdict; "fever" nothing.
    assert {p["signature"] for p in state["blocklist"]["ner"]} == {"troponin", "myocardial infarction"}  # type: ignore[index]


def _dispatch(driver: TopologyDriver, verdict: Verdict) -> None:
    """Send the gate's dispatches of the candidate ``verdict`` judges, as the gate sends them."""
    event = contract_event(Candidate.model_validate(verdict.model_dump(include=set(Candidate.model_fields))))
    for dispatch in dispatch_outputs(driver.serde, event):  # type: ignore[arg-type]
        driver.pipe(dispatch.topic, dispatch.key, dispatch.value)


def _qa(candidate_id: str) -> Candidate:
    return Candidate.model_validate({
        "ts": "2026-11-26T09:00:00Z", "task": "qa", "patient_id": "p-1", "candidate_id": candidate_id,
        "payload": {"question": "What dose of metformin?", "answer": "500 mg", "category": "Treatment"},
    })  # fmt: skip


def _verdict_of(candidate: Candidate, **changes: Any) -> Verdict:
    fields = candidate.model_dump(mode="json", exclude={"document_ts"})
    return Verdict.model_validate({**fields, "verdict": "hard_fail", "source": "verifier_mmed", **changes})


def test_a_verdict_of_a_candidate_no_gate_decided_is_dead_lettered_and_the_rest_is_learnt() -> None:
    """Scenario: live candidates decided by the gate (a relation, a QA pair), then verdicts published
    as an external verifier would: of the relation, of the QA pair failing with an error class (it
    updates the class pattern, another memory partition), of a candidate no gate decided, the same
    one replayed (``clingate-replayed``) and one that names no candidate.

    The verdict of the undecided candidate goes to the verdict DLQ (stage ``validate``,
    ``UnknownCandidate``, its id in the reason) and teaches nothing; every other verdict is learnt,
    the replayed and the anonymous one as given (replay contract).
    """
    relation, question = _relation("c-re", "CONFIRMS"), _qa("c-qa")
    unsupported = {**question.payload.model_dump(), "error_class": "unsupported"}
    stranger = _relation("c-stranger", "CAUSES")
    anonymous = _verdict_of(_relation("", "INDICATES")).model_copy(update={"candidate_id": None})
    with TopologyDriver(Settings(CLINGATE_DBPM_MAINTENANCE=False)) as driver:
        for candidate in (relation, question):
            driver.pipe(DBPM_CANDIDATES, b"p-1", candidate)
        for verdict, headers in (
            (_verdict_of(relation), ()),
            (_verdict_of(question, payload=unsupported), ()),
            (_verdict_of(stranger), ()),
            (_verdict_of(stranger), ((REPLAYED_HEADER, b"1"),)),
            (anonymous, ()),
        ):
            event = parse_event({"kind": "verdict", **verdict.model_dump(mode="json")})
            driver.pipe(DBPM_VERDICTS, verdict_key(driver.engine, event), verdict, headers)
        dead = [d.letter for d in driver.dead_letters(DBPM_VERDICTS)]
        state = driver.memory_state()
    assert [(d.stage.value, d.error_type) for d in dead] == [("validate", "UnknownCandidate")]
    assert "'c-stranger'" in dead[0].error and "no gate decided" in dead[0].error
    learnt = {p["signature"]: p["count"] for p in state["blocklist"]["re"]}  # type: ignore[index]
    assert learnt == {f"TESTS|{r}|DIAGNOSIS": 1 for r in ("CONFIRMS", "CAUSES", "INDICATES")}
    assert [p["signature"] for p in state["blocklist"]["qa"]] == ["qa::treatment|unsupported"]  # type: ignore[index]


def test_a_memory_written_with_another_configuration_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """Scenario: the gate's configuration against memory partitions written by itself and by a process
    with DOWNGRADE-first on. The disagreeing partitions are on the gauge and logged once per change."""
    own = Settings(CLINGATE_DBPM_MAINTENANCE=False)
    other = Settings(CLINGATE_DBPM_MAINTENANCE=False, CLINGATE_DBPM_DOWNGRADE_FIRST=True)
    mine, theirs = dbpm_config(own).fingerprint(), dbpm_config(other).fingerprint()
    assert mine != theirs
    gauge = Gauge("config_mismatch", "test", registry=CollectorRegistry())
    watch = ConfigWatch(mine, "clingate", gauge)
    with caplog.at_level(logging.ERROR, logger="streams.worker.gateview"):
        watch.observe({0: mine, 1: mine})
        assert gauge._value.get() == 0 and not caplog.records
        watch.observe({0: mine, 1: theirs, 2: theirs})
        watch.observe({0: mine, 1: theirs, 2: theirs})
    assert gauge._value.get() == 2 and watch.mismatched == {1: theirs, 2: theirs}
    [record] = caplog.records
    assert theirs in record.getMessage() and mine in record.getMessage()
