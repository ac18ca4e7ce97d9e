"""The DBPM engine run by real ``clingate worker`` processes against the session broker.

Each test starts workers as subprocesses (the only way to SIGKILL one), with their own app id (so
their own consumer group and memory changelog) and with the group's input offsets committed at the
current end of the catalog topics, so records other tests left there are not theirs to process.

Exactly-once of the memory across a SIGKILLed and restarted worker, across a broker restart and across
workers that stop cleanly or are SIGKILLed and never come back is proven by the soaks of
``test_chaos.py`` (the same lockstep replay, :func:`streams.replay.kafka.replay_via_kafka`, on a
synthetic stream); this module keeps the scenarios those do not cover (propagation, a stop at a
barrier). The worker
equals the in-process engine, repeated verdicts included, on the broker-free topology driver too
(tests/unit/topology).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from processors.dbpm import DBPMEngine, VerdictEvent, parse_event
from schemas.common import DeadLetter
from schemas.dbpm import Candidate, Coverage, GateDecision, PinAction, Verdict
from schemas.wire import make_serde
from state.ram import RamStore
from streams.replay.kafka import KafkaReplayResult, replay_via_kafka
from streams.runtime.kafka_clients import assign_at_ends, produce_waiting, producer_config, reader
from streams.runtime.kafka_config import client_config
from streams.runtime.settings import Settings
from streams.testing.metrics import scraped_sum
from streams.testing.worker import COMPARISON_ENV, LiveGate, WorkerProcess, comparison_engine
from streams.worker.engine import dbpm_engine
from streams.worker.gate import gate_group
from streams.worker.keys import BARRIER_HEADER, verdict_key
from streams.worker.wire import contract_event, dispatch_outputs, pin_record
from tests.dbpm_streams import coverage_narrative, ner_success
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_VERDICTS, dlq_name

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The public replay example lives next to the repository (``../shared/specs/...``); from a nested
# checkout (a worktree) it is found in the nearest ancestor that has it.
EXAMPLE = next(
    (p / "shared" / "specs" / "replay-example" / "events.jsonl" for p in REPO.parents
     if (p / "shared" / "specs" / "replay-example" / "events.jsonl").exists()),
    REPO.parent / "shared" / "specs" / "replay-example" / "events.jsonl",
)  # fmt: skip
# The workers' settings for an event-for-event comparison, shared with the chaos soak.
COMPARISON_FLAGS = COMPARISON_ENV


def _events(limit: int) -> list[dict[str, Any]]:
    with EXAMPLE.open() as lines:
        return [json.loads(line) for _, line in zip(range(limit), lines, strict=False)]


def _in_process(engine: DBPMEngine, events: list[dict[str, Any]]) -> tuple[list[dict[str, object]], object]:
    store = RamStore()
    decisions: list[dict[str, object]] = []
    for obj in events:
        event = parse_event(obj)
        with store.transaction() as txn:
            _, out = engine.process(txn, event, event.time)
        decisions += [d.to_json() for d in out]
    return decisions, engine.snapshot(store.transaction())


def _contract(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"candidate_id": d["candidate_id"], "decision": d["decision"]} for d in decisions]


def _kill_and_restart(worker: WorkerProcess, kills: list[int]) -> Callable[[int], None]:
    """A pause hook: SIGKILL ``worker`` and start it again, noting the candidates published."""

    def hook(published: int) -> None:
        worker.kill()
        kills.append(published)
        worker.start()

    return hook


def _propagation_engine() -> DBPMEngine:
    engine = dbpm_engine(Settings(CLINGATE_DBPM_CROSS_TASK=True, CLINGATE_DBPM_MAINTENANCE=False))
    return engine


def _by_signature(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["signature"]: e for e in entries}


def _propagation_difference(
    got: KafkaReplayResult, events: list[dict[str, Any]], engine: DBPMEngine
) -> dict[str, Any]:
    """What differs between a replay through workers and the in-process engine, by kind."""
    decisions, state = _in_process(engine, events)
    expected = {d["candidate_id"]: d for d in decisions}
    tasks = {e["candidate_id"]: e["task"] for e in events if e["kind"] == "gate"}
    changed = [d for d in got.decisions if d["decision"] != expected[d["candidate_id"]]["decision"]]
    mine, theirs = _by_signature(got.state["blocklist"]["ner"]), _by_signature(state["blocklist"]["ner"])
    differing = sorted(s for s in mine.keys() | theirs.keys() if mine.get(s) != theirs.get(s))
    return {
        "decisions": (len(decisions), len(got.decisions)),
        "changed_decisions": [(d["candidate_id"], expected[d["candidate_id"]]["decision"], d["decision"])
                              for d in changed],
        "changed_tasks": sorted({tasks[d["candidate_id"]] for d in changed}),
        "decision_counts": (Counter(d["decision"] for d in decisions),
                            Counter(d["decision"] for d in got.decisions)),
        "ner_patterns": (len(theirs), len(mine)),
        "ner_patterns_differing": differing,
        "differing_not_targets": sorted(set(differing) - _propagation_targets(engine, events)),
        "state": state,
    }  # fmt: skip


def _propagation_targets(engine: DBPMEngine, events: list[dict[str, Any]]) -> set[str]:
    """Every NER signature the stream's verdicts propagate to."""
    store, targets = RamStore(), set()
    for obj in events:
        event = parse_event(obj)
        if isinstance(event, VerdictEvent):
            with store.transaction() as txn:
                _, propagations = engine.learn(txn, event, event.time)
            targets |= {p.signature for p in propagations}
    return targets


def test_a_candidate_waits_for_every_verdict_before_it_in_the_same_second(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: a replay whose verdicts share their event-time second with the candidates around them:
    a candidate at ``t``, then 300 hard-fail verdicts of one signature at ``t``, then a candidate of that
    signature at ``t``.

    The first run's ticks already brought every memory partition's watermark to ``t``, so a barrier on
    event time alone lets the second candidate be decided before the 300 verdicts are applied. Its
    barrier names its run instead, whose ticks follow the verdicts: it waits until every partition
    applied them, and its decision and the memory equal the in-process engine's, value for value.
    """
    app_id, _ = start_workers(1, **COMPARISON_FLAGS)
    run, t = uuid.uuid4().hex[:8], "2026-11-26T09:00:00Z"
    tied = {"entity": f"tied-{run}", "category": "Symptoms"}
    base = {"ts": t, "task": "ner"}
    events: list[dict[str, Any]] = [
        {**base, "kind": "gate", "patient_id": "p-first", "candidate_id": f"{run}-first",
         "payload": {"entity": f"other-{run}", "category": "Symptoms"}},
        *({**base, "kind": "verdict", "patient_id": f"p-{i}", "verdict": "hard_fail",
           "source": "verifier_mmed", "payload": tied} for i in range(300)),
        {**base, "kind": "gate", "patient_id": "p-tied", "candidate_id": f"{run}-tied", "payload": tied},
    ]  # fmt: skip
    engine = comparison_engine()

    result = replay_via_kafka(kafka_bootstrap, events, engine, make_serde(None), app_id)

    decisions, state = _in_process(engine, events)
    assert _contract(result.decisions) == decisions
    assert decisions[1]["decision"] == "BLOCK"  # the 300 verdicts are in the memory it must see
    assert "barrier_timeout" not in result.decisions[1]["sources"]
    assert result.state == state


def test_propagation_through_kafka_differs_from_the_engine_only_by_the_hop(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: a replay with cross-task propagation ON through one worker, compared with the engine.

    Propagation travels as events keyed by the target signature (``clingate.dbpm.propagations``), so
    it reaches the target's memory partition one hop after its verdict. Two orderings can then
    differ from the in-process engine, which applies it inline: (1) the target partition may apply
    later verdicts of the target signature first (the severity update is not commutative: Eq. 3 damps
    the older value, and a success whitelists the target before the evidence arrives, so the guard
    stops it); (2) a gate's barrier waits for the verdict partitions' watermarks, which propagated
    evidence does not hold back, so a NER gate right after its origin verdict may decide on memory
    without it. Neither touches anything but NER blocklist patterns that are propagation targets:
    every candidate has one decision, RE and QA blocklists, whitelists and the preemption set equal
    the engine's exactly. The measured difference is printed (``-s``) and bounded below.

    CI replays the first 400 events of the example (50 propagation events); on a synthetic stream the
    same comparison without the hop (in-process topics) is a topology test (tests/unit/topology).
    Measured on the
    first 1,500 events of each (186 and 152 propagation events, every NER pattern of the example and
    39 of 43 synthetic ones carry cross-task hits): no decision and no pattern differs; the same on
    the whole example (4,904 events, 491 propagation events) and on 5,000 synthetic events (484),
    measured once by hand. The lockstep publisher leaves only short windows
    for either ordering, and these streams rarely put a verdict of a target right after the failure
    that propagates to it;
    :func:`test_a_target_verdict_published_with_its_origin_is_applied_before_the_evidence` shows a
    stream that does.
    """
    app_id, _ = start_workers(1, **{**COMPARISON_FLAGS, "CLINGATE_DBPM_CROSS_TASK": "true"})
    events = _events(400)
    engine = _propagation_engine()

    result = replay_via_kafka(kafka_bootstrap, events, engine, make_serde(None), app_id)

    difference = _propagation_difference(result, events, engine)
    state = difference.pop("state")
    print(f"\nreplay-example: {json.dumps(difference, default=str)}")
    gates = [e["candidate_id"] for e in events if e["kind"] == "gate"]
    assert [d["candidate_id"] for d in result.decisions] == gates
    assert set(difference["changed_tasks"]) <= {"ner"}
    assert difference["differing_not_targets"] == []
    for task in ("re", "qa"):
        assert result.state["blocklist"][task] == state["blocklist"][task]  # type: ignore[index]
    assert result.state["whitelist"] == state["whitelist"]  # type: ignore[index]
    assert result.state["preempted_entities"] == state["preempted_entities"]  # type: ignore[index]


def test_a_target_verdict_published_with_its_origin_is_applied_before_the_evidence(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: a relation is hard-failed and, in the same run of verdicts, its tail is confirmed.

    In process the evidence reaches "pneumonia" first (a cross-task pattern), then the success
    whitelists it. Through Kafka the success is on the verdict partition of "pneumonia" and is
    applied with the batch it was published in, while the evidence needs a hop (produced by the
    relation's partition, acknowledged, fetched from the propagation topic): the whitelist guard
    then stops it, so "pneumonia" has no pattern. The head ("metformin") and everything else agree.
    """
    app_id, _ = start_workers(1, **{**COMPARISON_FLAGS, "CLINGATE_DBPM_CROSS_TASK": "true"})
    relation = {"head": "metformin", "head_type": "Treatment", "relation": "TREATS", "tail": "pneumonia",
                "tail_type": "Diagnosis"}  # fmt: skip
    events = [
        {"kind": "verdict", "ts": "2026-01-01T00:00:00Z", "task": "re", "verdict": "hard_fail",
         "source": "verifier_mmed", "patient_id": "p1", "payload": relation},
        {"kind": "verdict", "ts": "2026-01-01T00:00:01Z", "task": "ner", "verdict": "success",
         "source": "verifier_mmed", "patient_id": "p1",
         "payload": {"entity": "pneumonia", "category": "Diagnosis"}},
        {"kind": "gate", "ts": "2026-01-01T00:00:02Z", "task": "ner", "patient_id": "p1",
         "candidate_id": "c1", "payload": {"entity": "metformin", "category": "Treatment"}},
    ]  # fmt: skip
    engine = _propagation_engine()

    result = replay_via_kafka(kafka_bootstrap, events, engine, make_serde(None), app_id)

    difference = _propagation_difference(result, events, engine)
    state = difference.pop("state")
    assert difference["changed_decisions"] == []
    assert difference["ner_patterns_differing"] == ["pneumonia"]
    assert "pneumonia" in _by_signature(state["blocklist"]["ner"])
    assert "pneumonia" not in _by_signature(result.state["blocklist"]["ner"])  # type: ignore[index]
    assert result.state["whitelist"] == state["whitelist"]  # type: ignore[index]


def _relation_failures(count: int) -> list[dict[str, Any]]:
    """Hard-failed relations whose heads are each hit twice and tails once, a NER gate every tenth."""
    events: list[dict[str, Any]] = []
    for i in range(count):
        ts = f"2026-01-01T{i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        relation = {"head": f"drug-{i // 2:05d}", "head_type": "Treatment", "relation": "TREATS",
                    "tail": f"finding-{i:05d}", "tail_type": "Diagnosis"}  # fmt: skip
        patient = f"p{i % 7}"
        events.append({"kind": "verdict", "ts": ts, "task": "re", "verdict": "hard_fail",
                       "source": "verifier_mmed", "patient_id": patient, "payload": relation})  # fmt: skip
        if i % 10 == 9:
            gate = {"entity": relation["head"], "category": "x"}
            events.append({"kind": "gate", "ts": ts, "task": "ner", "patient_id": patient,
                           "candidate_id": f"c{i}", "payload": gate})  # fmt: skip
    return events


def test_propagated_evidence_is_applied_exactly_once_across_sigkills(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: propagation ON, the worker is SIGKILLed twice mid-replay and restarted each time.

    Every relation failure sends evidence to its head and tail; kills leave verdicts applied but
    not committed, evidence sent but its verdict's group not durable, and evidence applied but not
    committed. Each target receives at most two hits (no guard stops any), so a pattern's count is
    the number of times evidence was applied to it, whatever the order: the counts equal the
    engine's (none lost, none doubled), and the relation blocklist and every decision too.
    """
    app_id, [worker] = start_workers(1, **{**COMPARISON_FLAGS, "CLINGATE_DBPM_CROSS_TASK": "true"})
    events = _relation_failures(700)
    engine = _propagation_engine()

    kills: list[int] = []
    result = replay_via_kafka(
        kafka_bootstrap, events, engine, make_serde(None), app_id, timeout_s=120.0,
        pause_at=[20, 45], on_pause=_kill_and_restart(worker, kills),
    )  # fmt: skip

    decisions, state = _in_process(engine, events)
    assert kills == [20, 45]
    counts = {
        name: {e["signature"]: (e["count"], e["cross_task_hits"]) for e in s["blocklist"]["ner"]}  # type: ignore[index]
        for name, s in (("kafka", result.state), ("engine", state))
    }
    assert len(counts["engine"]) == 700 + 350
    assert counts["kafka"] == counts["engine"]
    assert result.state["blocklist"]["re"] == state["blocklist"]["re"]  # type: ignore[index]
    assert sorted(d["candidate_id"] for d in result.decisions) == sorted(d["candidate_id"] for d in decisions)


def _until_held(worker: WorkerProcess, count: int, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while scraped_sum(worker.web_port, "clingate_dbpm_coverage_held") < count:
        assert time.monotonic() < deadline, f"fewer than {count} QA candidates held in {timeout_s:.0f} s"
        time.sleep(0.05)


def test_qa_candidates_held_by_the_coverage_join_survive_a_sigkill_and_are_decided_once_settled(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: a narrative's NER and QA candidates arrive live; the QA ones are held for the NER
    verdicts; the worker is SIGKILLed while they are held and restarted; then the verdicts come.

    The gate's progress resumes no later than the narrative's first candidate while it is open, so the
    restarted gate reads the narrative again: the NER candidates only to rebuild the join (their
    decisions are committed: nothing is sent again), the QA candidates to hold them again; once the
    verdicts are in the memory it decides each QA candidate, ``coverage`` settled, with the NER category
    the verdicts accepted stamped on it. A ``read_committed`` reader reads every decision once.
    """
    _, [worker] = start_workers(1, **{**COMPARISON_FLAGS, "CLINGATE_DBPM_COVERAGE_WAIT_S": "300"})
    serde = make_serde(None)
    patient = f"p-{uuid.uuid4().hex[:8]}"
    ner, qa = coverage_narrative(patient)
    decisions = _tail(kafka_bootstrap, DBPM_DECISIONS)
    producer = Producer(producer_config(kafka_bootstrap))
    for candidate in (*ner, *qa):
        producer.produce(DBPM_CANDIDATES, key=patient.encode(), value=serde.encode(candidate))
    producer.flush(30)
    try:
        _until_held(worker, len(qa))
        worker.kill()
        worker.start()
        _until_held(worker, len(qa))
        engine = dbpm_engine(Settings())
        for candidate in ner:
            verdict = ner_success(candidate)
            event = parse_event({"kind": "verdict", **verdict.model_dump(mode="json")})
            producer.produce(DBPM_VERDICTS, key=verdict_key(engine, event), value=serde.encode(verdict))
        producer.flush(30)

        def patients_decisions(timeout_s: float) -> list[GateDecision]:
            consumed = decisions.consume(100, timeout_s)
            return [serde.decode(m.value(), GateDecision) for m in consumed if m.key() == patient.encode()]

        records: list[GateDecision] = []
        deadline = time.monotonic() + 90
        while sum(d.task == "qa" for d in records) < len(qa):
            assert time.monotonic() < deadline, f"QA decisions: {[d.candidate_id for d in records]}"
            records += patients_decisions(0.5)
        records += patients_decisions(2.0)  # a repeated decision would arrive after the last QA one
    finally:
        decisions.close()
    by_id: dict[str, list[GateDecision]] = {}
    for record in records:
        by_id.setdefault(record.candidate_id, []).append(record)
    assert set(by_id) == {c.candidate_id for c in (*ner, *qa)}
    for candidate in ner:
        assert len(by_id[candidate.candidate_id]) == 1
    for candidate in qa:
        [decided] = by_id[candidate.candidate_id]
        assert decided.coverage is Coverage.SETTLED
        assert decided.candidate.payload.ner_categories, "the accepted categories are stamped on it"  # type: ignore[union-attr]
        assert decided.coverage_wait_s is not None and decided.coverage_wait_s > 0


def test_a_verdict_read_before_its_candidates_dispatch_waits_for_it_and_one_no_gate_decided_is_dead_lettered(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: while the worker is stopped, the gate's dispatches of 40,000 candidates of one memory
    partition (several fetches' worth) are published, then a live verdict of the last of them and one
    of a candidate no gate decided; the worker starts again.

    The memory reads the first verdict before it has read its dispatch: it defers it (counted in
    ``clingate_dbpm_verdicts_deferred_total``), reads the partition's dispatches on and learns it. The
    other verdict, whose candidate is still unknown once the dispatches are read to their end, goes to
    ``clingate.dbpm.verdicts.dlq`` as ``UnknownCandidate``; nothing else does.
    """
    _, [worker] = start_workers(1, **COMPARISON_FLAGS)
    worker.stop()
    serde = make_serde(None)
    engine = dbpm_engine(Settings())
    run = uuid.uuid4().hex[:8]
    base = {"ts": "2026-11-26T09:00:00Z", "task": "ner", "patient_id": f"p-{run}"}
    payload = {"entity": f"fever-{run}", "category": "Symptoms"}
    dead = _tail(kafka_bootstrap, dlq_name(DBPM_VERDICTS))
    producer = Producer(producer_config(kafka_bootstrap, **{"linger.ms": 20}))
    last = f"{run}-39999"
    for index in range(40_000):
        candidate = Candidate.model_validate({**base, "candidate_id": f"{run}-{index}", "payload": payload})
        for out in dispatch_outputs(serde, contract_event(candidate)):  # type: ignore[arg-type]
            produce_waiting(producer, out.topic, key=out.key, value=out.value)
    producer.flush(30)
    verdicts = [
        Verdict.model_validate({**base, "candidate_id": candidate_id, "verdict": "hard_fail",
                                "source": "verifier_mmed", "payload": {**payload, "entity": entity}})
        for candidate_id, entity in ((last, payload["entity"]), (f"{run}-stranger", f"chills-{run}"))
    ]  # fmt: skip
    for verdict in verdicts:
        key = verdict_key(engine, contract_event(verdict))  # type: ignore[arg-type]
        producer.produce(DBPM_VERDICTS, key=key, value=serde.encode(verdict))
    producer.flush(30)
    try:
        worker.start()
        letters: list[DeadLetter] = []
        # A bound on the wait for a condition, not on the machine's speed (the suite runs beside it on
        # two cores); the pytest timeout (300 s) stays the outer bound.
        deadline = time.monotonic() + 240
        while not letters or scraped_sum(worker.web_port, "clingate_dbpm_verdicts_total") < 1:
            assert time.monotonic() < deadline, "the verdicts were not applied or dead-lettered in time"
            letters += [serde.decode(m.value(), DeadLetter) for m in dead.consume(100, 0.5)]
        deferred = scraped_sum(worker.web_port, "clingate_dbpm_verdicts_deferred_total")
        applied = scraped_sum(worker.web_port, "clingate_dbpm_verdicts_total")
        letters += [serde.decode(m.value(), DeadLetter) for m in dead.consume(100, 2.0)]
    finally:
        dead.close()
    mine = [letter for letter in letters if run in letter.error]
    assert [(letter.error_type, letter.stage.value) for letter in mine] == [("UnknownCandidate", "validate")]
    assert f"'{run}-stranger'" in mine[0].error
    assert applied == 1
    assert deferred >= 1, "the verdict was read after its dispatch: the backlog was read in one fetch"


def _tail(bootstrap: str, topic: str) -> Consumer:
    """A consumer of ``topic`` from its current end (no group offsets)."""
    consumer = reader(bootstrap, "tail")
    assign_at_ends(consumer, [topic])
    return consumer


def test_a_sigtermed_worker_stops_at_once_leaving_candidates_at_their_barrier_to_the_next_owner(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: the gate holds replay candidates whose barrier the memory will not reach (their event
    time is ahead of every verdict), and the worker gets SIGTERM.

    It stops within seconds instead of waiting out a barrier timeout per candidate, publishes no
    decision for them (never a ``barrier_timeout`` one a replay would not make) and commits none of
    them: the gate group's next owner decides them.
    """
    app_id, [worker] = start_workers(1, CLINGATE_DBPM_BARRIER_TIMEOUT_S="30")
    serde = make_serde(None)
    patient = f"p-{uuid.uuid4().hex[:8]}"
    decisions = _tail(kafka_bootstrap, DBPM_DECISIONS)
    producer = Producer(producer_config(kafka_bootstrap))
    placed: list[tuple[int, int]] = []
    for i in range(3):
        candidate = Candidate.model_validate({
            "ts": "2099-01-01T00:00:00Z", "task": "ner", "patient_id": patient,
            "candidate_id": f"{patient}-{i}", "payload": {"entity": "fever", "category": "Symptoms"},
        })  # fmt: skip
        producer.produce(DBPM_CANDIDATES, key=patient.encode(), value=serde.encode(candidate),
                         headers=[(BARRIER_HEADER, b"")],
                         on_delivery=lambda _e, m: placed.append((m.partition(), m.offset())))  # fmt: skip
    producer.flush(30)
    deadline = time.monotonic() + 60
    while scraped_sum(worker.web_port, "clingate_dbpm_barrier_waiting") < 1:
        assert time.monotonic() < deadline, "no candidate reached its barrier in 60 s"
        time.sleep(0.05)
    started = time.monotonic()
    worker.stop()
    stopped_in = time.monotonic() - started
    try:
        assert not worker.running
        assert stopped_in < 15, f"stopped in {stopped_in:.1f} s"
        assert b"stopping at a barrier" in worker.log.read_bytes()[worker.log_offset :]
        assert all(m.key() != patient.encode() for m in decisions.consume(1000, 2.0))
        (partition, first), *_ = placed
        watcher = Consumer(client_config(kafka_bootstrap, **{"group.id": gate_group(app_id)}))
        [committed] = watcher.committed([TopicPartition(DBPM_CANDIDATES, partition)], timeout=30)
        watcher.close()
        assert committed.offset <= first
    finally:
        decisions.close()


def test_an_operators_block_pin_blocks_the_next_candidate_and_its_removal_gives_the_learnt_allow_back(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: a live NER entity the verifier judged a success (its candidates ALLOWed by the whitelist);
    an operator pins it BLOCK (the console's record on ``clingate.dbpm.verdicts``): the next candidate the
    gate decides after the memory applied the pin is BLOCKed by rule ``operator_pin`` with the pin named in
    its provenance; the pin removed, the whitelist decides again."""
    start_workers(1, **COMPARISON_FLAGS)
    run = uuid.uuid4().hex[:8]
    gate = LiveGate(kafka_bootstrap, f"Rash-{run}", f"p-{run}")
    sig = f"rash-{run}"
    try:
        gate.verdict("success")
        learnt = gate.until(lambda d: d.rule == "whitelist")[-1]
        gate.send(pin_record("ner", sig, PinAction.BLOCK, "ops", "verifier misses it", f"pin-{run}", _now()))
        *before, pinned = gate.until(lambda d: d.rule == "operator_pin")
        gate.send(pin_record("ner", sig, PinAction.UNPIN, "ops", "fixed upstream", f"unpin-{run}", _now()))
        *still, restored = gate.until(lambda d: d.rule != "operator_pin")
    finally:
        gate.close()
    assert (learnt.decision.value, learnt.signature) == ("ALLOW", sig)
    assert all(d.rule == "whitelist" for d in before) and all(d.rule == "operator_pin" for d in still)
    assert (pinned.decision.value, pinned.confidence_multiplier) == ("BLOCK", 0.0)
    assert pinned.provenance[:3] == ("operator_pin", f"pin_id=pin-{run}", "pinned_by=ops")
    assert "pin_reason=verifier misses it" in pinned.provenance
    assert (restored.decision.value, restored.rule) == ("ALLOW", "whitelist")


def _now() -> datetime:
    return datetime.now(UTC)
