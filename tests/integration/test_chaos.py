"""Exactly-once under chaos: SIGKILLed workers, a restarted or frozen broker, workers frozen inside a
transaction, a full disk, a worker that never comes back, a replay killed and resumed.

The DBPM scenarios run the soak of :mod:`streams.bench.chaos` (the CI-sized version of ``clingate
bench chaos``): a synthetic stream replayed through ``clingate worker`` subprocesses while something is
broken at seeded points, then the end conditions: every candidate has exactly one decision record as
a ``read_committed`` consumer reads the decisions topic, and decisions and memory equal the in-process
engine's. Each disruption happens at its point by construction (the replay stops there until it is done);
the soaks also check it on the broker: when a disruption starts, the candidates topic holds exactly
the candidates of its point. The survivor scenario stops one of three workers cleanly and
SIGKILLs another. The clinical scenario SIGKILLs the worker in the middle of a patient's FHIR updates.
The fault scenarios run without a supervisor: every worker rides the fault out (the full disk's once
restarted on freed space), and each prints its longest stall. Each has a short version for ``make
test`` and a long one (the ``slow`` marker) for ``make soak``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Producer

from schemas.clinical import ClinicalAssessment
from schemas.dbpm import Candidate, GateDecision
from schemas.wire import make_serde
from streams.bench.chaos import (
    ChaosMonkey,
    Disruption,
    Recovery,
    SoakReport,
    audit_decisions,
    fill_disk,
    freeze_in_a_transaction,
    kill_and_restart,
    kill_broker,
    kill_for_good,
    pause_broker,
    pause_worker,
    run_soak,
)
from streams.cli.worker import LOOP_FAILED_EXIT
from streams.local.broker import LocalKafka
from streams.local.images import kafka_image
from streams.local.process import SOURCE_ROOT, ProcessHandle, eventually, python_module
from streams.replay.kafka import (
    CommitWatcher,
    commit_end_offsets,
    commit_worker_end_offsets,
    replay_via_kafka,
    verdict_record,
    wait_until_consumed,
)
from streams.runtime.kafka_clients import produce_waiting, producer_config
from streams.runtime.kafka_config import admin_client
from streams.runtime.progress import progress_topic
from streams.runtime.settings import get_settings
from streams.testing.dbpm_stream import generate_events
from streams.testing.metrics import scraped_sum
from streams.testing.tail import Tail, read_between, topic_ends
from streams.testing.worker import COMPARISON_ENV, WorkerProcess, comparison_engine, in_process, soak_stream
from streams.worker import READY
from streams.worker.clinical import INPUTS as CLINICAL_INPUTS
from streams.worker.clinical import clinical_group
from streams.worker.gate import gate_group
from streams.worker.keys import memory_changelog
from streams.worker.memory import memory_group
from tests.clinical_scenario import PATIENT, concur_review, expected_assessments, scenario
from topics.admin import ensure_topics
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_REVIEWS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    FHIR_UPDATES,
    build_catalog,
)

# Each soak restarts workers (a Python start-up each, over a minute on a saturated 2-core machine),
# hence the generous per-epoch wait and test timeout; a healthy run takes a fraction of either.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REDELIVERED = "clingate_dbpm_gate_redelivered_total"


class _AtItsPoint:
    """Wraps a disruption: first counts the candidates the soak has committed to the broker (records a
    ``read_committed`` reader reads: the publication's transaction markers take offsets too).

    Create it before the soak (it takes the candidates topic's end then); :meth:`check` compares the
    counts with the points the soak reports.
    """

    def __init__(self, bootstrap: str, disrupt: Disruption) -> None:
        ensure_topics(admin_client(bootstrap), build_catalog(get_settings().topic_partitions))
        self._bootstrap = bootstrap
        self._disrupt = disrupt
        self._base = topic_ends(bootstrap, DBPM_CANDIDATES)
        self.on_broker: list[int] = []

    def __call__(self, workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery | None]:
        self.on_broker.append(sum(1 for _ in read_between(self._bootstrap, DBPM_CANDIDATES, self._base)))
        return self._disrupt(workers, rng)

    def check(self, report: SoakReport) -> None:
        assert self.on_broker == [e.candidates_published for e in report.disruptions]


def _assert_exactly_once(report: SoakReport, disruptions: int, at_its_point: _AtItsPoint) -> None:
    print(report.render())
    assert len(report.disruptions) == disruptions, "a disruption did not happen"
    at_its_point.check(report)
    assert report.audit.missing == []
    assert report.audit.duplicates == 0, "a read_committed consumer read a decision twice"
    assert report.audit.conflicting == []
    assert report.decisions_equal
    assert report.state_equal


def test_soak_keeps_exactly_once_under_repeated_sigkill(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Scenario: one worker is SIGKILLed twice at random points of a 3,000-event soak, restarted each time.

    Re-delivered verdicts are skipped (the memory equals the in-process engine's), re-delivered
    candidates repeat their decision byte for byte, and no candidate is committed without one.
    """
    disrupt = _AtItsPoint(kafka_bootstrap, kill_and_restart)
    report = run_soak(
        kafka_bootstrap, tmp_path, events=3000, disruptions=2, epoch=500, seed=11, disrupt=disrupt,
        timeout_s=300.0,
    )  # fmt: skip
    _assert_exactly_once(report, 2, disrupt)


def _stop_then_kill_for_good(stopped: int, killed: int) -> Disruption:
    """First disruption: SIGTERM worker ``stopped`` (a clean stop); second: SIGKILL worker ``killed``.
    Neither comes back."""

    def stop(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, None]:
        workers[stopped].stop()
        return f"worker {stopped} stopped for good", None

    steps = iter([stop, kill_for_good(killed)])

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery | None]:
        return next(steps)(workers, rng)

    return disrupt


def test_the_survivor_takes_over_a_stopped_and_a_sigkilled_workers_partitions_with_state(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: three workers share the app; one is stopped cleanly mid-soak, later another is SIGKILLed;
    neither comes back.

    The clean stop hands its partitions over at once (a rebalance on leaving the group), the SIGKILLed
    worker's after the session timeout. The last worker continues from its standby copies of the memory
    (changelog tail only) and the soak ends exactly once, equal to the in-process engine.
    """
    disrupt = _AtItsPoint(kafka_bootstrap, _stop_then_kill_for_good(stopped=2, killed=1))
    report = run_soak(
        kafka_bootstrap, tmp_path, events=2000, disruptions=2, epoch=500, seed=5, workers=3,
        disrupt=disrupt, timeout_s=120.0,
    )  # fmt: skip
    _assert_exactly_once(report, 2, disrupt)


#: Longer than the transaction timeout (10 s) and the workers' session timeout (6 s): the transactions
#: open at the fault are aborted by the coordinator and their producers' epochs ended, and the group
#: moves the partitions of a member that stopped answering.
PAUSE_S = 15.0
#: Events of the faults' stream: every candidate first, then every verdict (about half each); the soak's
#: (``make soak``) are four times as many, so that the fault lands in a longer backlog.
FAULT_EVENTS = 12_000
SOAK_EVENTS = 4 * FAULT_EVENTS
#: The long version of a fault case: ``make soak`` (the ``slow`` marker), with time for its backlog.
SOAK = pytest.param(SOAK_EVENTS, marks=[pytest.mark.slow, pytest.mark.timeout(3600)], id="soak")
#: The dedicated broker's coordinator looks for transactions past their timeout every second (Kafka's
#: default: every 10 s), so a worker frozen inside a transaction is caught out soon after its timeout.
FAULT_BROKER = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
#: The session timeout of the workers frozen inside a transaction: far past the transaction timeout
#: (10 s) and the coordinator's look (1 s), so the freeze loses the transaction and keeps the partitions.
SLOW_BATCH_SESSION_S = 45
#: The longest freeze allowed inside a transaction: below the session timeout less the two heartbeat
#: intervals after which a worker proves its membership (the batch core's freeze watch).
SLOW_BATCH_FREEZE_S = SLOW_BATCH_SESSION_S * 0.7
#: Events per epoch of the slow batch's stream.
SLOW_BATCH_EPOCH = 1_000


@dataclass(frozen=True)
class _Fault:
    """A fault of :func:`test_workers_ride_out_a_fault_without_a_supervisor`: how to make its disruption
    and the workers' settings."""

    disruption: Callable[[str, str], Disruption]
    """Given the broker and the app id, the disruption."""
    env: dict[str, str] = field(default_factory=lambda: COMPARISON_ENV)
    epoch: int | None = None
    """Events per epoch of the stream (None: one epoch, every candidate first, then every verdict)."""


def _faults(broker: LocalKafka) -> dict[str, _Fault]:
    slow_env = {**COMPARISON_ENV, "CLINGATE_CONSUMER_SESSION_TIMEOUT_S": str(SLOW_BATCH_SESSION_S)}
    return {
        "broker SIGKILL and restart": _Fault(lambda bootstrap, app_id: kill_broker(broker)),
        "broker SIGSTOP": _Fault(lambda bootstrap, app_id: pause_broker(broker, PAUSE_S)),
        # Past its session and transaction timeouts: its partitions move, its open transaction is
        # aborted, and once thawed it commits nothing it made before.
        "worker SIGSTOP until fenced": _Fault(lambda bootstrap, app_id: pause_worker(0, PAUSE_S)),
        # Epochs: the workers open transactions all along (a backlog is a few large ones), and the
        # freeze is tried on the next one wherever it caught a commit already on its way.
        "a batch slower than the transaction timeout": _Fault(
            lambda bootstrap, app_id: freeze_in_a_transaction(
                bootstrap, [memory_changelog(app_id), progress_topic(gate_group(app_id))], SLOW_BATCH_FREEZE_S
            ),
            slow_env,
            SLOW_BATCH_EPOCH,
        ),
    }


class _InTheVerdicts(threading.Thread):
    """Runs ``disrupt`` and its recovery once the memory writers have committed a fifth of the verdicts
    published after ``start``: the fault lands while their batches' transactions come and go."""

    def __init__(
        self, bootstrap: str, app_id: str, start: dict[int, int], verdicts: int, disrupt: Disruption,
        workers: list[WorkerProcess],
    ) -> None:  # fmt: skip
        super().__init__(name="fault")
        self._watch = CommitWatcher(bootstrap, memory_group(app_id))
        self._start, self._verdicts, self._disrupt, self._workers = start, verdicts, disrupt, workers
        self.done: list[str] = []
        self.failure: BaseException | None = None

    def applied(self) -> int:
        committed = self._watch.committed(DBPM_VERDICTS)
        return sum(max(offset - self._start[p], 0) for p, offset in committed.items())

    def run(self) -> None:
        try:
            eventually("the memory writers applying verdicts", lambda: self.applied() >= self._verdicts // 5,
                       timeout_s=300, poll_s=0.05)  # fmt: skip
            what, recover = self._disrupt(self._workers, random.Random(3))
            self.done += [what, recover() if recover is not None else "no recovery"]
        except BaseException as exc:  # re-raised by the test
            self.failure = exc
        finally:
            self._watch.close()


@pytest.mark.parametrize("events", [pytest.param(FAULT_EVENTS, id="short"), SOAK])
def test_workers_ride_out_a_fault_without_a_supervisor(tmp_path: Path, events: int) -> None:
    """Scenario: two workers share an app on a dedicated broker (in a container where Docker runs, else
    native). The stream's candidates are decided, then its verdicts are published at once; while the
    memory writers work through them one fault strikes: the broker SIGKILLed and started again, the
    broker frozen for longer than the transaction timeout, one worker frozen past its session and
    transaction timeouts (its partitions move on, its open transaction is aborted), or the workers frozen
    while one of them has a transaction open until its coordinator aborted it (a batch slower than the
    transaction timeout, shorter than the session timeout; its stream comes in epochs, so that the
    workers open transactions all along). One fault per app, one after the other on the same broker
    (one broker and two workers at a time, like the other soaks). Nothing restarts a worker or the
    replay's publisher.

    Every worker is still running at the end (each aborted what it had in flight, rewound and went on);
    a ``read_committed`` reader reads each decision once, equal to the in-process engine's, and the
    memory rebuilt from the changelog equals the engine's. Each fault's longest stall is printed.
    """
    settings = get_settings()
    broker = LocalKafka(
        tmp_path / "broker", home=settings.home, image=kafka_image(settings), extra_properties=FAULT_BROKER
    )
    bootstrap = broker.start()
    try:
        for name, fault in _faults(broker).items():
            _ride_out(bootstrap, tmp_path / name.replace(" ", "-"), name, fault.disruption, fault.env, events,
                      epoch=fault.epoch)  # fmt: skip
    finally:
        broker.stop()


@pytest.mark.parametrize("events", [pytest.param(FAULT_EVENTS // 2, id="short"), SOAK])
def test_a_full_disk_stops_the_worker_with_one_line_and_loses_nothing(
    kafka_bootstrap: str, tmp_path: Path, events: int
) -> None:
    """Scenario: the worker's data directory is a small tmpfs of its own; once the stream's candidates
    are published, the tmpfs is filled to its last byte, and then the verdicts are published.

    The worker stops by itself with status 70 and one ERROR line saying ``No space left on device`` and
    where; started again on the still-full disk it stops the same way, its log saying the disk is full
    and nothing of a lock held by another process. Once the space is freed and the worker started
    again, nothing is lost: a ``read_committed`` reader reads each decision once, equal to the
    in-process engine's, and the memory equals the engine's (the committed batch the local store
    missed is restored from the changelog). The longest stall is printed.
    """
    directory = tmp_path / "app"
    mount = directory / "worker-0"
    mount.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)],
                             capture_output=True, text=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(
            f"a tmpfs cannot be mounted here (root or CAP_SYS_ADMIN needed): {mounted.stderr.strip()}"
        )
    try:
        disruption = lambda *_: fill_disk(mount, 0, LOOP_FAILED_EXIT)  # noqa: E731
        _ride_out(kafka_bootstrap, directory, "a full disk", disruption, COMPARISON_ENV, events, workers=1,
                  before_the_verdicts=True)  # fmt: skip
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def _ride_out(
    bootstrap: str, directory: Path, fault: str, disruption: Callable[[str, str], Disruption],
    env: dict[str, str] = COMPARISON_ENV, events: int = FAULT_EVENTS, workers: int = 2, *,
    epoch: int | None = None, before_the_verdicts: bool = False,
) -> None:  # fmt: skip
    """One app through ``disruption`` (:func:`test_workers_ride_out_a_fault_without_a_supervisor`): its
    workers (``worker-<i>`` under ``directory``) started with ``env``, ``events`` events in epochs of
    ``epoch`` (None: one).

    The disruption strikes once the memory writers applied a fifth of the verdicts, or, with
    ``before_the_verdicts``, while the publication stops after the last candidate: then the verdicts
    are still to come, so the memory's writes follow the disruption whatever the workers' speed.
    """
    settings = get_settings()
    tag = f"fault-{uuid.uuid4().hex[:6]}"
    stream = soak_stream(events, epoch or events, tag)
    candidate_ids = [e["candidate_id"] for e in stream if e["kind"] == "gate"]
    engine, serde = comparison_engine(), make_serde(None)
    expected_decisions, expected_state = in_process(engine, stream)
    app_id = f"clingate-{tag}"
    directory.mkdir(parents=True, exist_ok=True)
    procs = [WorkerProcess(bootstrap, app_id, directory / f"worker-{i}", env) for i in range(workers)]
    try:
        ensure_topics(admin_client(bootstrap), build_catalog(settings.topic_partitions))
        commit_worker_end_offsets(bootstrap, app_id)
        decisions_start = topic_ends(bootstrap, DBPM_DECISIONS)
        for worker in procs:
            worker.start()
        if before_the_verdicts:
            done: list[str] = []
            monkey = ChaosMonkey(procs, [len(candidate_ids)], disruption(bootstrap, app_id), random.Random(3),
                                 done.append)  # fmt: skip
            try:
                result = replay_via_kafka(bootstrap, stream, engine, serde, app_id, timeout_s=300.0,
                                          pause_at=monkey.points, on_pause=monkey)  # fmt: skip
            finally:
                monkey.finish()
        else:
            verdicts = len(stream) - len(candidate_ids)
            fault_thread = _InTheVerdicts(
                bootstrap, app_id, topic_ends(bootstrap, DBPM_VERDICTS), verdicts,
                disruption(bootstrap, app_id), procs,
            )  # fmt: skip
            fault_thread.start()
            result = replay_via_kafka(bootstrap, stream, engine, serde, app_id, timeout_s=300.0)
            fault_thread.join()
            if fault_thread.failure is not None:
                raise fault_thread.failure
            done = fault_thread.done
        exited = {i: w.returncode for i, w in enumerate(procs) if not w.running}
        audit = audit_decisions(bootstrap, serde, decisions_start, candidate_ids)
    finally:
        for worker in procs:
            worker.stop()
    print(fault, done, f"longest stall: {result.longest_wait_s:.1f} s")
    assert exited == {}, f"{fault}: a worker stopped on its own: {exited}"
    assert (audit.missing, audit.duplicates, audit.conflicting) == ([], 0, []), f"{fault}: {audit}"
    compared = ("candidate_id", "decision", "rule", "signature", "severity", "multiplier")
    got = [{k: d[k] for k in compared} for d in result.decisions]
    wanted = [{k: d[k] for k in compared} for d in expected_decisions]
    differ = [(g, w) for g, w in zip(got, wanted, strict=True) if g != w]
    assert differ == [], f"{fault}: {len(differ)} decisions differ, e.g. {differ[:2]}"
    difference = _difference(result.state, expected_state)
    assert result.state == expected_state, f"{fault}: the memory differs: {difference}"


@pytest.mark.parametrize("events", [pytest.param(3_000, id="short"), SOAK])
def test_a_replay_sigkilled_midway_resumes_and_publishes_nothing_twice(
    kafka_bootstrap: str, tmp_path: Path, events: int
) -> None:
    """Scenario: ``clingate replay --via-kafka`` (a process of its own) publishes a stream in epochs to
    a worker and is SIGKILLed once a third of the candidates are decided; the same command is run
    again and finishes.

    The second run resumes: it says how many records the first had committed and publishes only the
    rest (what the killed one left in an open transaction is aborted, never read). A ``read_committed``
    reader reads each candidate and each verdict of the stream once on their topics, and the decisions
    and memory the second run writes equal the in-process engine's. Its longest wait is printed.
    """
    tag = f"resume-{uuid.uuid4().hex[:6]}"
    stream = soak_stream(events, 500, tag)
    engine, serde = comparison_engine(), make_serde(None)
    expected_decisions, expected_state = in_process(engine, stream)
    candidate_ids = [e["candidate_id"] for e in stream if e["kind"] == "gate"]
    app_id = f"clingate-{tag}"
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(get_settings().topic_partitions))
    commit_worker_end_offsets(kafka_bootstrap, app_id)
    starts = {topic: topic_ends(kafka_bootstrap, topic) for topic in (DBPM_CANDIDATES, DBPM_VERDICTS)}
    events_file, out, state_out = (
        tmp_path / "events.jsonl",
        tmp_path / "decisions.jsonl",
        tmp_path / "state.json",
    )
    events_file.write_text("".join(json.dumps(e) + "\n" for e in stream), encoding="utf-8")
    argv = python_module(
        "streams.cli", "replay", "--via-kafka", "--in", str(events_file), "--out", str(out),
        "--state-out", str(state_out), "--provenance", "--no-maintenance",
    )  # fmt: skip
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "CLINGATE_APP_ID": app_id,
        **COMPARISON_ENV,
    }
    worker = WorkerProcess(kafka_bootstrap, app_id, tmp_path / "worker", COMPARISON_ENV)
    decided = Tail(kafka_bootstrap, DBPM_DECISIONS)
    try:
        worker.start()
        first = ProcessHandle("replay", argv, env=env, cwd=SOURCE_ROOT, log=tmp_path / "replay-1.log").start()
        decided.until(len(candidate_ids) // 3, timeout_s=300)
        first.kill()
        second = ProcessHandle(
            "replay", argv, env=env, cwd=SOURCE_ROOT, log=tmp_path / "replay-2.log"
        ).start()
        assert second.wait(600), "the resumed replay did not finish"
    finally:
        decided.close()
        worker.stop()
    said = second.output().decode()
    assert second.returncode == 0, said
    print("replay SIGKILLed and run again:", said.strip().splitlines()[-1])
    assert "published before (resumed)" in said, "the second run did not resume the first"
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    compared = ("candidate_id", "decision", "rule", "signature", "severity", "multiplier")
    assert [{k: d[k] for k in compared} for d in got] == [
        {k: d[k] for k in compared} for d in expected_decisions
    ]
    assert json.loads(state_out.read_text(encoding="utf-8")) == expected_state
    candidates = Counter(
        serde.decode(value, Candidate, topic=DBPM_CANDIDATES).candidate_id
        for value in read_between(kafka_bootstrap, DBPM_CANDIDATES, starts[DBPM_CANDIDATES])
    )
    assert candidates == Counter(candidate_ids), "a candidate was published twice, or not at all"
    verdicts = Counter(
        value for value in read_between(kafka_bootstrap, DBPM_VERDICTS, starts[DBPM_VERDICTS]) if value
    )
    published = Counter(verdict_record(e, engine, serde).value for e in stream if e["kind"] == "verdict")
    assert verdicts == published, "a verdict was published twice, or not at all"


def _difference(got: object, wanted: object, path: str = "") -> str:
    """Where two JSON documents first differ, and how (for a failure's message)."""
    if isinstance(got, dict) and isinstance(wanted, dict):
        for key in sorted(got.keys() | wanted.keys(), key=str):
            if got.get(key) != wanted.get(key):
                return _difference(got.get(key), wanted.get(key), f"{path}/{key}")
    if isinstance(got, list) and isinstance(wanted, list) and len(got) == len(wanted):
        for index, (a, b) in enumerate(zip(got, wanted, strict=True)):
            if a != b:
                return _difference(a, b, f"{path}[{index}]")
    if isinstance(got, list) and isinstance(wanted, list):
        extra = [item for item in got if item not in wanted]
        missing = [item for item in wanted if item not in got]
        return f"{path}: {len(got)} items instead of {len(wanted)}; extra {extra[:3]}, missing {missing[:3]}"
    return f"{path or '/'}: {str(got)[:300]} instead of {str(wanted)[:300]}"


def _live_candidates(tag: str, count: int) -> list[Candidate]:
    """``count`` live candidates of the synthetic stream, each patient's with one document date (a
    narrative for the NER-coverage join)."""
    candidates = []
    for event in generate_events(count * 3):
        if event["kind"] != "gate":
            continue
        fields = {k: v for k, v in event.items() if k != "kind"}
        fields["candidate_id"] = f"{tag}-{fields['candidate_id']}"
        fields["document_ts"] = "2026-11-20T00:00:00Z"
        candidates.append(Candidate.model_validate(fields))
        if len(candidates) == count:
            return candidates
    raise AssertionError(f"the synthetic stream has fewer than {count} candidates")


def test_a_gate_sigkilled_twice_in_its_backlog_sends_every_decision_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: 20,000 live candidates wait on the broker; the gate (NER-coverage join on, QA candidates
    released after 2 s) is SIGKILLed when a third and when two thirds of them are decided, and restarted
    each time, so each kill lands in a batch whose outputs are partly produced.

    A ``read_committed`` reader of the decisions and to-verify topics reads every candidate's decision,
    and its to-verify record unless it was BLOCKed, exactly once: the killed batch's transaction is
    aborted, and the restarted gate reads the candidates the last committed progress covers only to
    rebuild its join (``clingate_dbpm_gate_redelivered_total``).
    """
    app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(get_settings().topic_partitions))
    commit_worker_end_offsets(kafka_bootstrap, app_id)
    candidates = _live_candidates(app_id, 20_000)
    wanted = {c.candidate_id for c in candidates}
    serde = make_serde(None)
    starts = {topic: topic_ends(kafka_bootstrap, topic) for topic in (DBPM_DECISIONS, DBPM_TO_VERIFY)}
    decisions = Tail(kafka_bootstrap, DBPM_DECISIONS)
    producer = Producer(producer_config(kafka_bootstrap))
    for candidate in candidates:
        key = candidate.patient_id.encode()
        produce_waiting(producer, DBPM_CANDIDATES, key=key, value=serde.encode(candidate))
    producer.flush(60)
    gate = WorkerProcess(
        kafka_bootstrap, app_id, tmp_path / app_id, {"CLINGATE_DBPM_COVERAGE_WAIT_S": "2"}, role="gate"
    )
    redelivered = 0.0
    try:
        gate.start(ready=READY)
        for share in (1 / 3, 2 / 3):
            decisions.until(int(len(candidates) * share), timeout_s=180)
            redelivered += scraped_sum(gate.web_port, REDELIVERED)  # a process's own, before it dies
            gate.kill()
            gate.start(ready=READY)
        wait_until_consumed(kafka_bootstrap, gate_group(app_id), DBPM_CANDIDATES, timeout_s=180)
        redelivered += scraped_sum(gate.web_port, REDELIVERED)
    finally:
        decisions.close()
        gate.stop()
    counts = {
        topic: Counter(
            serde.decode(value, GateDecision, topic=topic).candidate_id
            for value in read_between(kafka_bootstrap, topic, start)
        )
        for topic, start in starts.items()
    }
    decided = {c: n for c, n in counts[DBPM_DECISIONS].items() if c in wanted}
    assert set(decided) == wanted, f"{len(wanted - set(decided))} candidates without a decision"
    assert [c for c, n in decided.items() if n > 1] == [], "a read_committed reader read a decision twice"
    assert all(n == 1 for c, n in counts[DBPM_TO_VERIFY].items() if c in wanted)
    assert redelivered > 0, "the restarted gates read no decided candidate again: the kills missed it"


def test_the_clinical_loop_sends_every_assessment_once_across_sigkill(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: the worker is SIGKILLed while it processes PT-TEST-010's FHIR updates, then restarted.

    A batch's assessments and the patient's state commit in one transaction: the killed worker's open
    batch is aborted, the restarted one applies it again from the last committed state, and a
    ``read_committed`` reader reads exactly what the pure processor emits, each assessment once.
    """
    updates, _, _ = scenario()
    review = concur_review()
    expected = expected_assessments(updates, review)
    serde = make_serde(None)
    app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(get_settings().topic_partitions))
    commit_end_offsets(kafka_bootstrap, clinical_group(app_id), list(CLINICAL_INPUTS))
    worker = WorkerProcess(kafka_bootstrap, app_id, tmp_path / app_id, COMPARISON_ENV)
    assessments = Tail(kafka_bootstrap, CLINICAL_ASSESSMENTS)
    producer = Producer(producer_config(kafka_bootstrap))
    try:
        worker.start()
        for update in updates:
            value = serde.encode(update, topic=FHIR_UPDATES)
            producer.produce(FHIR_UPDATES, key=PATIENT.encode(), value=value)
        producer.flush(30)
        assessments.until(2, timeout_s=120)
        worker.kill()  # mid-stream: some updates committed, some in an open transaction, some unread
        worker.start()
        assessments.until(len(expected) - 1, timeout_s=120)
        # The review is another topic, in no order with the updates: it is published once the group
        # committed the updates' end, so it meets the state they made.
        wait_until_consumed(kafka_bootstrap, clinical_group(app_id), FHIR_UPDATES, timeout_s=120)
        producer.produce(
            CLINICAL_REVIEWS, key=PATIENT.encode(), value=serde.encode(review, topic=CLINICAL_REVIEWS)
        )
        producer.flush(30)
        assessments.until(len(expected), timeout_s=120)
        wait_until_consumed(kafka_bootstrap, clinical_group(app_id), CLINICAL_REVIEWS, timeout_s=120)
        with pytest.raises(AssertionError):  # nothing more: a repeat would show here
            assessments.until(len(expected) + 1, timeout_s=3)
    finally:
        assessments.close()
        worker.stop()

    got = [serde.decode(m.value(), ClinicalAssessment, topic=CLINICAL_ASSESSMENTS).model_dump(mode="json")
           for m in assessments.records]  # fmt: skip
    assert got == expected
