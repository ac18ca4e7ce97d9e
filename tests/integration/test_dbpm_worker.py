"""The DBPM engine run by real ``clingate worker`` processes against the session broker.

Each test starts workers as subprocesses (the only way to SIGKILL one), with their own app id (so
their own consumer group and memory changelog) and with the group's input offsets committed at the
current end of the catalog topics, so records other tests left there are not theirs to process.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from processors.dbpm import DBPMEngine, parse_event
from schemas.serde import make_serde
from state.memory import MemoryStore
from streams.bench.chaos import COMPARISON_ENV, WorkerProcess, comparison_engine
from streams.broker import Broker
from streams.kafka_replay import commit_end_offsets, replay_via_kafka
from streams.settings import Settings
from topics.admin import admin_client, ensure_topics
from topics.catalog import DBPM_CANDIDATES, DBPM_VERDICTS, build_catalog

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


@pytest.fixture
def start_workers(
    kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Callable[..., tuple[str, list[WorkerProcess]]]]:
    """Factory: ``start_workers(n, **env)`` -> (app id, n ready workers of one fresh app)."""
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    started: list[WorkerProcess] = []

    def start(count: int = 1, **env: str) -> tuple[str, list[WorkerProcess]]:
        app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
        commit_end_offsets(kafka_bootstrap, app_id, [DBPM_VERDICTS, DBPM_CANDIDATES])
        workers = [
            WorkerProcess(kafka_bootstrap, app_id, tmp_path / f"{app_id}-{i}", env) for i in range(count)
        ]
        for worker in workers:
            started.append(worker)
            worker.start()
        return app_id, workers

    yield start
    for worker in started:
        worker.stop()


def _events(limit: int) -> list[dict[str, Any]]:
    with EXAMPLE.open() as lines:
        return [json.loads(line) for _, line in zip(range(limit), lines, strict=False)]


def _in_process(engine: DBPMEngine, events: list[dict[str, Any]]) -> tuple[list[dict[str, object]], object]:
    store = MemoryStore()
    decisions: list[dict[str, object]] = []
    for obj in events:
        event = parse_event(obj)
        with store.transaction() as txn:
            _, out = engine.process(txn, event, event.time)
        decisions += [d.to_json() for d in out]
    return decisions, engine.snapshot(store.transaction())


def _contract(decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"candidate_id": d["candidate_id"], "decision": d["decision"]} for d in decisions]


def test_worker_decides_and_learns_like_the_in_process_engine(kafka_bootstrap: str, start_workers) -> None:
    """Scenario: a worker replays a slice of the public replay example through the broker.

    With cross-task propagation and maintenance off, every gate event gets exactly one decision,
    the same as the in-process engine gives, and the memory rebuilt from the worker's changelog is
    the in-process engine's final state.
    """
    app_id, _ = start_workers(1, **COMPARISON_FLAGS)
    events = _events(600)
    engine = comparison_engine()

    result = replay_via_kafka(kafka_bootstrap, events, engine, make_serde(None), app_id)

    expected_decisions, expected_state = _in_process(engine, events)
    assert _contract(result.decisions) == expected_decisions
    assert result.state == expected_state


def test_memory_survives_sigkill_and_restart_exactly_once(kafka_bootstrap: str, start_workers) -> None:
    """Scenario: the worker is SIGKILLed at random points of a replay and restarted each time.

    Killed workers leave uncommitted input, unacknowledged changelog records and staged writes
    behind. After every restart (local RocksDB plus changelog tail) the replay completes with every
    decision and the memory the in-process engine has: no verdict is lost or applied twice.
    """
    app_id, [worker] = start_workers(1, **COMPARISON_FLAGS)
    events = _events(800)
    engine = comparison_engine()
    done = threading.Event()
    kills: list[float] = []

    def chaos() -> None:
        for delay in (2.0, 3.5, 2.5):
            if done.wait(delay):
                return
            worker.kill()
            kills.append(time.monotonic())
            worker.start()

    thread = threading.Thread(target=chaos, daemon=True)
    thread.start()
    try:
        result = replay_via_kafka(
            kafka_bootstrap, events, engine, make_serde(None), app_id,
            timeout_s=120.0,
        )  # fmt: skip
    finally:
        done.set()
        thread.join()

    expected_decisions, expected_state = _in_process(engine, events)
    assert kills, "the replay finished before the first kill; lengthen the stream"
    assert _contract(result.decisions) == expected_decisions
    assert result.state == expected_state


def test_survivor_takes_over_a_stopped_workers_partitions_with_state(
    kafka_bootstrap: str, start_workers
) -> None:
    """Scenario: two workers of one app share the partitions; one is stopped mid-replay.

    The survivor is assigned the stopped worker's memory and candidate partitions, continues from
    its standby copy of their memory (changelog tail only), and the replay ends with the in-process
    engine's decisions and state.
    """
    app_id, [first, second] = start_workers(2, **COMPARISON_FLAGS)
    events = _events(800)
    engine = comparison_engine()
    stopper = threading.Timer(4.0, second.stop)
    stopper.start()
    try:
        result = replay_via_kafka(
            kafka_bootstrap, events, engine, make_serde(None), app_id, timeout_s=120.0
        )
    finally:
        stopper.cancel()
        stopper.join()

    expected_decisions, expected_state = _in_process(engine, events)
    assert b"[^Worker]: Ready" in first.log.read_bytes()
    assert _contract(result.decisions) == expected_decisions
    assert result.state == expected_state


def test_replay_completes_exactly_across_a_broker_restart(kafka_broker: Broker, start_workers) -> None:
    """Scenario: the (native, single-node) broker is stopped and started again mid-replay.

    Producers and the worker ride out the outage (retries, reconnects, a group rejoin); afterwards
    every candidate has its decision and the memory is the in-process engine's.
    """
    if kafka_broker.local is None:
        pytest.skip("needs the native broker the session starts (KAFKA_BOOTSTRAP_SERVERS is set)")
    local = kafka_broker.local
    app_id, _ = start_workers(1, **COMPARISON_FLAGS)
    events = _events(800)
    engine = comparison_engine()

    def restart() -> None:
        local.stop()
        time.sleep(2.0)
        # No port given: a restart keeps its address, so the clients find the broker again.
        assert local.start() == kafka_broker.bootstrap

    outage = threading.Timer(3.0, restart)
    outage.start()
    try:
        result = replay_via_kafka(
            kafka_broker.bootstrap, events, engine, make_serde(None), app_id, timeout_s=180.0
        )
    finally:
        outage.join()

    expected_decisions, expected_state = _in_process(engine, events)
    assert _contract(result.decisions) == expected_decisions
    assert result.state == expected_state
