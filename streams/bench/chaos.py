"""``clingate bench chaos``: exactly-once under SIGKILL, measured on a synthetic stream.

The soak replays a synthetic DBPM stream (the generator of
``clingate bench dbpm``, the paper's proportions) through the broker to real ``clingate worker``
subprocesses while it SIGKILLs a worker at seeded random points and restarts it on the same data
directory, then checks:

1. the memory rebuilt from the workers' changelog equals the in-process engine's final state on the
   same stream (cross-task propagation and maintenance off, as ``replay --via-kafka`` promises);
2. every candidate has a decision (none missing), equal to the in-process engine's decision;
3. no candidate has two decision records as a ``read_committed`` reader reads the decisions topic (the
   gate's transactions and its progress topic, :mod:`streams.runtime.progress`), and none has two
   that differ in any byte.

Workers are driven only through the CLI (``python -m streams.cli worker``), the topics and
:mod:`streams.replay.kafka`, so the soak holds whatever runs inside the worker.

The other faults of the chaos tests (``tests/integration/test_chaos.py``) are here too, each a
:data:`Disruption` with its recovery: a broker SIGKILLed and started again (:func:`kill_broker`), a
broker frozen (:func:`pause_broker`), a worker frozen (:func:`pause_worker`), the workers frozen while a
transaction of theirs is open until its coordinator aborted it (:func:`freeze_in_a_transaction`), and
a worker's disk filled (:func:`fill_disk`). Each is made for real (signals, a filesystem filled); an
outage or a pause lasts its set length, the others end on what the broker or the worker shows.

Choices where the brief left room:

* **Epochs.** The generator alternates one candidate and its verdict; the lockstep publisher of
  ``replay --via-kafka`` costs one round trip per run of gates, i.e. per event pair, which would
  take most of an hour for 100,000 events. The soak cuts the stream into epochs of ``--epoch``
  events and, inside each, publishes the epoch's candidates first (all at the epoch's first event
  time, so one watermark tick covers them), then the epoch's verdicts unchanged: "a batch of
  candidates is decided, then verified", as a pipeline with batched verification runs. The
  reference is the in-process engine on exactly this reordered stream. The verdicts keep their
  order and times, so the final memory is also the one of the original stream.
* **Candidate ids** carry a run tag, so decisions of earlier runs on the same broker never count.
* **Kill points** are numbers of candidates published, drawn from a seeded RNG. The publisher
  itself stops at each one (the pause hook of :func:`streams.replay.kafka.replay_via_kafka`): once
  the candidates up to the point are committed to the broker, :class:`ChaosMonkey` waits a
  seeded delay of up to half a second, so the kill lands while the worker is busy with them and not
  at a quiet point between epochs, and disrupts; only then does the publication go on. So every
  disruption happens, at its point, however fast or slow the publisher and the workers are: a soak
  asked for ``k`` disruptions makes exactly ``k``. The recovery (a worker's restart, the broker's)
  runs while the publication goes on, so records also arrive during the outage; the next
  disruption waits for it. Each kill is logged with its time and progress; the worker is restarted
  at once (its partitions come back after the group notices the dead member:
  ``CLINGATE_CONSUMER_SESSION_TIMEOUT_S``, 6 s here).

``clingate bench restart`` (:func:`restart_bench`) measures the other recovery claim: a worker over a
1M-signature memory is ready again after reading only the changelog tail.

Size: the soak and its faults are one benchmark. Every :data:`Disruption` is made by
:class:`ChaosMonkey` at the publisher's pause points and judged by the same audit
(:func:`audit_decisions`), and the chaos and cluster tests take the faults from here, so the faults
stay beside the soak that decides when they happen.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient

from schemas.dbpm import GateDecision
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.local.bootstrap import require_bootstrap
from streams.local.broker import LocalKafka
from streams.local.paths import output_folder
from streams.local.process import eventually
from streams.replay.kafka import ReplayTimeout, commit_worker_end_offsets, replay_via_kafka
from streams.runtime.kafka_clients import Key, latest_offsets, read_to_end, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.testing.metrics import scraped_sum
from streams.testing.tail import read_between, topic_ends
from streams.testing.worker import COMPARISON_ENV, WorkerProcess, comparison_engine, in_process, soak_stream
from topics.admin import ensure_topics
from topics.catalog import DBPM_DECISIONS, build_catalog

# The decision fields the in-process engine and the workers' decision records share.
_COMPARED = ("candidate_id", "decision", "rule", "signature", "severity", "multiplier")


@dataclass(frozen=True)
class DecisionAudit:
    """What the decisions topic holds for one run's candidates."""

    decided: int
    """Candidates with at least one decision record."""
    missing: list[str]
    """Candidates without any decision record."""
    duplicates: int
    """Decision records beyond the first per candidate (re-deliveries after kills)."""
    conflicting: list[str]
    """Candidates whose decision records differ in any byte."""
    barrier_timeouts: int
    """Decision records made on a partial view (the gate's barrier wait ran out)."""
    first: dict[str, GateDecision]
    """The first decision record per candidate."""


def audit_decisions(
    bootstrap: str, serde: Serde, start: dict[int, int], candidate_ids: Sequence[str]
) -> DecisionAudit:
    """Group the decision records written since ``start`` by candidate id and check them."""
    wanted = set(candidate_ids)
    records: dict[str, list[bytes]] = defaultdict(list)
    first: dict[str, GateDecision] = {}
    barrier_timeouts = 0
    for value in read_between(bootstrap, DBPM_DECISIONS, start):
        decision = serde.decode(value, GateDecision, topic=DBPM_DECISIONS)
        if decision.candidate_id in wanted:
            records[decision.candidate_id].append(value)
            first.setdefault(decision.candidate_id, decision)
            barrier_timeouts += "barrier_timeout" in decision.provenance
    return DecisionAudit(
        decided=len(records),
        missing=sorted(wanted - records.keys()),
        duplicates=sum(len(r) - 1 for r in records.values()),
        conflicting=sorted(c for c, r in records.items() if len(set(r)) > 1),
        barrier_timeouts=barrier_timeouts,
        first=first,
    )


Recovery = Callable[[], str]
"""Brings back what a disruption broke (a restart); returns what it did, for the log."""

Disruption = Callable[[list["WorkerProcess"], random.Random], tuple[str, Recovery | None]]
"""Given the app's workers and the soak's RNG, break something; return once it is broken, with what
was done (for the log) and how to recover (None: nothing comes back). The recovery runs while the
publication goes on, as it would in production: records keep arriving during an outage."""


def kill_and_restart(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
    """SIGKILL a worker picked by ``rng``; the recovery restarts it on its data directory."""
    index = rng.randrange(len(workers))
    worker = workers[index]
    worker.kill()

    def restart() -> str:
        return f"worker {index} restarted, ready after {worker.start():.1f} s"

    return f"worker {index} SIGKILLed", restart


def kill_for_good(index: int) -> Disruption:
    """SIGKILL worker ``index`` and leave it dead: the others must take over its partitions."""

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, None]:
        workers[index].kill()
        return f"worker {index} SIGKILLed for good", None

    return disrupt


def kill_broker(broker: LocalKafka, outage_s: float = 3.0) -> Disruption:
    """SIGKILL ``broker`` (no controlled shutdown, as a crash); the recovery waits ``outage_s`` and starts
    it again on its data and port. The workers are not restarted: they must ride it out."""

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
        before = broker.bootstrap
        broker.kill()

        def start() -> str:
            time.sleep(outage_s)
            after = broker.start()
            if after != before:
                raise RuntimeError(f"the broker came back at {after}, not {before}")
            return f"broker started again at {after} after {outage_s:g} s"

        return "broker SIGKILLed", start

    return disrupt


def pause_broker(broker: LocalKafka, pause_s: float) -> Disruption:
    """SIGSTOP ``broker`` for ``pause_s`` (longer than the transaction timeout: the coordinator ends the
    epochs of the transactions it finds open when it resumes), then SIGCONT."""

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
        broker.pause()

        def resume() -> str:
            time.sleep(pause_s)
            broker.resume()
            return f"broker resumed after {pause_s:g} s"

        return "broker SIGSTOPped", resume

    return disrupt


def pause_worker(index: int, pause_s: float) -> Disruption:
    """SIGSTOP worker ``index`` for ``pause_s`` (longer than the session and transaction timeouts: its
    partitions move to the others and the coordinator ends its open transaction's epoch), then SIGCONT:
    it must notice it was frozen, commit nothing it made before, and rejoin."""

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
        workers[index].signal(signal.SIGSTOP)

        def resume() -> str:
            time.sleep(pause_s)
            workers[index].signal(signal.SIGCONT)
            return f"worker {index} resumed after {pause_s:g} s"

        return f"worker {index} SIGSTOPped", resume

    return disrupt


ABORTED = "clingate_loop_batches_aborted_total"
"""The workers' count of batches whose transaction was aborted (or not committed) and made again."""


def _open_transactions(
    admin: AdminClient, partitions: Sequence[TopicPartition]
) -> dict[Key, tuple[int, int]]:
    """The ``partitions`` holding records of a transaction not ended yet, as the broker has them now:
    ``{(topic, partition): (last stable offset, end offset)}``; the open records lie between the two."""

    asked = [(tp.topic, tp.partition) for tp in partitions]
    ends = latest_offsets(admin, asked, IsolationLevel.READ_UNCOMMITTED)
    stable = latest_offsets(admin, asked, IsolationLevel.READ_COMMITTED)
    return {key: (stable[key], ends[key]) for key in ends if stable[key] < ends[key]}


def _committed_among(bootstrap: str, spans: dict[Key, tuple[int, int]]) -> dict[Key, int]:
    """How many records of ``[start, end)`` of each partition of ``spans`` a ``read_committed`` reader
    reads (0: the transaction that wrote them was aborted)."""
    counts = dict.fromkeys(spans, 0)
    starts: dict[str, dict[int, int]] = defaultdict(dict)
    for (topic, partition), (start, _) in spans.items():
        starts[topic][partition] = start
    client = reader(bootstrap, "probe", **{"isolation.level": "read_committed"})
    try:
        for message in read_to_end(client, starts, named_only=True):
            key = (message.topic(), message.partition())
            counts[key] += message.offset() < spans[key][1]
    finally:
        client.close()
    return counts


def freeze_in_a_transaction(
    bootstrap: str, topics: Sequence[str], limit_s: float, within_s: float = 300.0
) -> Disruption:
    """A batch slower than the transaction timeout: SIGSTOP every worker at a moment one of them has a
    transaction open on one of ``topics`` (records on the broker, no end marker yet; topics only the
    workers write), keep them stopped until the transaction's coordinator aborted it for outliving its
    timeout, then SIGCONT.

    The freeze ends on that condition, not after a set time: while the workers are stopped the broker
    is watched until the open records are followed by an end marker; a ``read_committed`` reader then
    says whether they were aborted, or committed (a commit already on its way when the workers
    stopped: the next transaction is tried). A freeze longer than ``limit_s`` (to be kept below the
    workers' session timeout, so no partition moves and only the transaction is lost) fails the
    disruption, as does no transaction caught open in ``within_s``: the workers need input that keeps
    them opening transactions meanwhile. The coordinator looks for timed-out transactions every
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10 s by default): a broker with a
    shorter interval keeps the freeze near the transaction timeout.

    The recovery waits until a worker counted a batch not committed (:data:`ABORTED`): it noticed its
    producer's epoch ended, aborted or replaced it, rewound and made the batch again; it returns the
    worker's log line that said so.
    """

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
        admin = admin_client(bootstrap)
        watched = [
            TopicPartition(topic, p)
            for topic in topics
            for p in admin.list_topics(topic, timeout=30).topics[topic].partitions
        ]
        aborted = sum(scraped_sum(w.web_port, ABORTED) for w in workers)
        logs = [len(w.output()) for w in workers]
        deadline = time.monotonic() + within_s
        tries = 0
        while time.monotonic() < deadline:
            if not _open_transactions(admin, watched):
                time.sleep(0.02)
                continue
            for worker in workers:
                worker.signal(signal.SIGSTOP)
            frozen = time.monotonic()
            try:
                caught = _open_transactions(admin, watched)
                still = [TopicPartition(*key) for key in caught]
                while caught and _open_transactions(admin, still).keys() & caught.keys():
                    if time.monotonic() - frozen > limit_s:
                        raise RuntimeError(f"the transaction open on {sorted(caught)} was not aborted in "
                                           f"{limit_s:g} s of freeze")  # fmt: skip
                    time.sleep(0.1)
            finally:
                for worker in workers:
                    worker.signal(signal.SIGCONT)
            held_s = time.monotonic() - frozen
            tries += 1
            if caught and 0 in _committed_among(bootstrap, caught).values():
                what = (f"workers SIGSTOPped for {held_s:.1f} s with a transaction open on "
                        f"{sorted({topic for topic, _ in caught})} (caught at try {tries}); its coordinator "
                        "aborted it")  # fmt: skip
                return what, partial(_noticed, workers, aborted, logs)
        raise RuntimeError(f"no transaction caught open on {list(topics)} in {within_s:g} s ({tries} tries)")

    return disrupt


def _noticed(workers: list[WorkerProcess], aborted: float, logs: list[int]) -> str:
    """Wait until the workers counted more batches not committed than ``aborted``; the first line of
    their logs since ``logs`` (lengths) that says why."""

    def counted() -> bool:
        # A worker thawing from SIGSTOP may reset the connections its endpoint queued while frozen; a
        # scraper asks again at its next interval, and so does this probe (a dead worker fails the run's
        # own check that every worker is still running).
        try:
            return sum(scraped_sum(w.web_port, ABORTED) for w in workers) > aborted
        except OSError:
            return False

    eventually("a worker counting a batch not committed", counted, timeout_s=120)
    said = [line for w, start in zip(workers, logs, strict=True) for line in w.output()[start:].splitlines()
            if "was not committed" in line or "cannot go on" in line]  # fmt: skip
    return f"a worker aborted its batch and made it again: {said[0] if said else '(no log line)'}"


def fill_disk(mount: Path, index: int, exit_status: int, within_s: float = 300.0) -> Disruption:
    """Fill the filesystem at ``mount``, which holds worker ``index``'s data directory and nothing the
    test needs, to its last byte.

    The recovery checks what a full disk does, then frees it: the worker stops by itself (once a write
    to a store fails) with status ``exit_status`` and an ERROR line naming ``No space left on device``
    and a path under its data directory; started again on the still-full disk it stops the same way
    and its log says the disk is full and nothing of another process holding a lock; then the space is
    freed and the worker started again. Raises AssertionError (with the log's end) where a check fails.
    """
    filler = mount / "filler"

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
        written = 0
        descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            for chunk in (1 << 20, 4096, 1):  # down to the last byte the filesystem gives
                with contextlib.suppress(OSError):
                    while True:
                        written += os.write(descriptor, b"\0" * chunk)
        finally:
            os.close(descriptor)
        return f"{mount} filled ({written:,} bytes written to fill it)", partial(recover, workers[index])

    def recover(worker: WorkerProcess) -> str:
        stopped = _stopped_on_a_full_disk(worker, exit_status, within_s)
        with contextlib.suppress(RuntimeError):  # it stopped before its ready line: checked next
            worker.start(timeout_s=within_s)
        again = _stopped_on_a_full_disk(worker, exit_status, within_s)
        assert "another process" not in worker.output(), f"a start on a full disk blamed a lock:\n{again}"
        filler.unlink()
        return f"stopped: {stopped}; started on the full disk: {again}; space freed, ready again after " \
            f"{worker.start(timeout_s=within_s):.1f} s"  # fmt: skip

    return disrupt


def _stopped_on_a_full_disk(worker: WorkerProcess, exit_status: int, within_s: float) -> str:
    """Check that ``worker``'s latest start stops by itself within ``within_s`` with ``exit_status`` and
    one ERROR line saying its disk is full and where; that line."""
    status = worker.wait(within_s)
    output = worker.output()
    tail = "\n".join(output.splitlines()[-15:])
    assert status == exit_status, f"the worker's status on a full disk: {status}, not {exit_status}:\n{tail}"
    errors = [line for line in output.splitlines() if " ERROR " in line]
    said = [line for line in errors if "No space left on device" in line and str(worker.datadir) in line]
    assert said, f"no ERROR line says the disk under {worker.datadir} is full:\n{tail}"
    return said[0][said[0].index(" ERROR ") + 1 :]


@dataclass
class Event:
    """One disruption as it happened: when (seconds since the replay started), where, what."""

    at_s: float
    candidates_published: int
    what: str


@dataclass
class ChaosMonkey:
    """Disrupts the app at seeded points of the publication: the replay's pause hook.

    :func:`run_soak` passes :attr:`points` and this object to
    :func:`~streams.replay.kafka.replay_via_kafka`, which calls it once the first ``n`` candidates are
    committed to the broker, for each ``n`` in :attr:`points`, and publishes nothing more until it
    returns (:class:`~streams.replay.kafka.Pauses`). A call waits a seeded delay, then runs the
    disruption (a restart included) in the publisher's thread. So when the replay returns, one
    :class:`Event` per point is recorded, at that point: no thread races the publisher.

    Args:
        workers: the app's workers.
        points: numbers of published candidates at which to disrupt, ascending.
        disrupt: what to do at each point.
        rng: seeded source of the extra delay and of the disruption's choices.
        log: where each disruption is reported.
        max_delay_s: the longest delay between reaching a point and disrupting.
    """

    workers: list[WorkerProcess]
    points: list[int]
    disrupt: Disruption
    rng: random.Random
    log: Callable[[str], None]
    max_delay_s: float = 0.5
    events: list[Event] = field(default_factory=list)
    _t0: float = field(default_factory=time.monotonic)
    _recovery: threading.Thread | None = None
    _failure: BaseException | None = None

    def start(self) -> None:
        """Start the clock of :attr:`Event.at_s` (the replay's start)."""
        self._t0 = time.monotonic()

    def __call__(self, published: int) -> None:
        """Disrupt at the point ``published`` (the next of :attr:`points`); return once it is disrupted.

        The previous disruption's recovery is waited for first, so disruptions never overlap; this
        one's recovery runs in a thread of its own while the publication goes on (:meth:`finish`).

        Raises:
            RuntimeError: ``published`` is not the next point (the caller does not pause as promised).
        """
        expected = self.points[len(self.events)] if len(self.events) < len(self.points) else None
        if published != expected:
            raise RuntimeError(f"paused at {published:,} candidates, the next disruption point is {expected}")
        self._join()
        time.sleep(self.rng.uniform(0.0, self.max_delay_s))
        at_s = round(time.monotonic() - self._t0, 2)
        self.log(f"disruption {len(self.events) + 1} at {at_s:.2f} s, {published:,} candidates out")
        what, recover = self.disrupt(self.workers, self.rng)
        self.events.append(Event(at_s, published, what))
        self.log(f"  {what}")
        if recover is not None:
            self._recovery = threading.Thread(target=self._recover, args=(recover,), name="recovery")
            self._recovery.start()

    def finish(self) -> None:
        """Wait for the last recovery; re-raise a recovery's failure."""
        self._join()

    def _recover(self, recover: Recovery) -> None:
        try:
            self.log(f"  {recover()}")
        except BaseException as exc:  # re-raised in the publisher's thread by _join
            self._failure = exc

    def _join(self) -> None:
        if self._recovery is not None:
            self._recovery.join()
            self._recovery = None
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure


class TooFewCandidates(ValueError):
    """The soak's stream has fewer possible disruption points than disruptions asked for."""


def disruption_points(candidates: int, disruptions: int, rng: random.Random) -> list[int]:
    """``disruptions`` distinct numbers of published candidates, drawn by ``rng``, ascending.

    They lie between 5 % and 90 % of the candidates (at least 1): the app is disrupted after it has
    started and before the last epochs.

    Raises:
        TooFewCandidates: fewer such numbers than ``disruptions`` (too few events for that many).
    """
    population = range(max(1, candidates // 20), candidates * 9 // 10)
    if not 0 <= disruptions <= len(population):
        raise TooFewCandidates(
            f"{disruptions} disruptions need as many distinct points between 5 % and 90 % of the "
            f"{candidates:,} candidates; there are {len(population):,}: replay more events"
        )
    return sorted(rng.sample(population, disruptions))


@dataclass(frozen=True)
class SoakReport:
    """The outcome of one soak."""

    events: int
    candidates: int
    disruptions: list[Event]
    duration_s: float
    in_process_s: float
    audit: DecisionAudit
    decisions_equal: bool
    state_equal: bool
    exited: dict[int, int | None] = field(default_factory=dict)
    """Workers (by index) that were not running when the soak ended, with their exit status: those a
    disruption stopped for good, and any that stopped on their own (a worker must ride faults out)."""
    longest_stall_s: float = 0.0
    """The longest wait of the replay for one run's decisions and their commit (the outage included)."""

    @property
    def passed(self) -> bool:
        """Every end condition of the soak holds."""
        return (not self.audit.missing and not self.audit.duplicates and not self.audit.conflicting
                and self.decisions_equal and self.state_equal)  # fmt: skip

    def render(self) -> str:
        """A human-readable summary."""
        a = self.audit
        return "\n".join([
            f"events {self.events:,} ({self.candidates:,} candidates), disruptions {len(self.disruptions)}",
            f"through Kafka with disruptions: {self.duration_s:.1f} s "
            f"({self.events / self.duration_s:,.0f} events/s); in process: {self.in_process_s:.1f} s",
            f"decisions: {a.decided:,} candidates decided, {len(a.missing)} missing, "
            f"{a.duplicates:,} duplicate records, {len(a.conflicting)} conflicting, "
            f"{a.barrier_timeouts} decided on a partial view (barrier_timeout)",
            f"decisions equal the in-process engine's: {self.decisions_equal}",
            f"memory state equals the in-process engine's: {self.state_equal}",
            f"workers not running at the end: {self.exited or 'none'}",
            f"longest stall: {self.longest_stall_s:.1f} s",
            f"RESULT: {'PASS' if self.passed else 'FAIL'}",
        ])  # fmt: skip


def run_soak(
    bootstrap: str,
    workdir: Path,
    *,
    events: int,
    disruptions: int,
    seed: int = 7,
    epoch: int = 2000,
    workers: int = 1,
    disrupt: Disruption = kill_and_restart,
    timeout_s: float = 300.0,
    log: Callable[[str], None] = print,
) -> SoakReport:
    """Run the chaos soak against ``bootstrap`` (see the module docstring).

    Args:
        bootstrap: the broker (the workers are started here, as subprocesses).
        workdir: where the workers' data directories and logs go.
        events: synthetic events to replay.
        disruptions: how many times to disrupt the app during the replay (exactly: the replay
            pauses at each point until its disruption is done, see :class:`ChaosMonkey`).
        seed: seeds the kill points, delays and the worker picked.
        epoch: events per epoch (candidates first, then verdicts).
        workers: workers of the app.
        disrupt: what each disruption does (default: SIGKILL a random worker and restart it).
        timeout_s: longest wait for the decisions of one epoch (the catching up after a disruption
            included; the disruption itself, run while the publication pauses, is not timed).
        log: progress lines.

    Raises:
        TooFewCandidates: the stream has too few candidates for ``disruptions`` distinct points.
        streams.replay.kafka.ReplayTimeout: the workers stopped making progress.
    """
    rng = random.Random(seed)
    tag = f"chaos{seed}-{uuid.uuid4().hex[:6]}"
    stream = soak_stream(events, epoch, tag)
    candidate_ids = [e["candidate_id"] for e in stream if e["kind"] == "gate"]
    points = disruption_points(len(candidate_ids), disruptions, rng)
    engine = comparison_engine()
    serde = make_serde(None)

    t0 = time.monotonic()
    expected_decisions, expected_state = in_process(engine, stream)
    in_process_s = time.monotonic() - t0
    log(f"in process: {len(stream):,} events in {in_process_s:.1f} s")

    ensure_topics(admin_client(bootstrap), build_catalog(get_settings().topic_partitions))
    app_id = f"clingate-chaos-{tag}"
    commit_worker_end_offsets(bootstrap, app_id)
    decisions_start = topic_ends(bootstrap, DBPM_DECISIONS)
    workdir.mkdir(parents=True, exist_ok=True)
    procs = [
        WorkerProcess(bootstrap, app_id, workdir / f"{app_id}-{i}", COMPARISON_ENV) for i in range(workers)
    ]
    monkey = ChaosMonkey(procs, points, disrupt, rng, log)
    try:
        for proc in procs:
            proc.start()
        log(f"{workers} worker(s) ready (app {app_id}); disruptions at candidates published: {points}")
        t0 = time.monotonic()
        monkey.start()
        try:
            result = replay_via_kafka(
                bootstrap, stream, engine, serde, app_id,
                timeout_s=timeout_s, pause_at=points, on_pause=monkey,
            )  # fmt: skip
        finally:
            monkey.finish()
        duration_s = time.monotonic() - t0
        exited = {i: proc.returncode for i, proc in enumerate(procs) if not proc.running}
    finally:
        for proc in procs:
            proc.stop()
    audit = audit_decisions(bootstrap, serde, decisions_start, candidate_ids)
    expected = [{k: d[k] for k in _COMPARED} for d in expected_decisions]
    got = [{k: d[k] for k in _COMPARED} for d in result.decisions]
    return SoakReport(
        events=len(stream), candidates=len(candidate_ids), disruptions=monkey.events, duration_s=duration_s,
        in_process_s=in_process_s, audit=audit, decisions_equal=got == expected,
        state_equal=result.state == expected_state, exited=exited, longest_stall_s=result.longest_wait_s,
    )  # fmt: skip


def chaos(
    events: Annotated[int, typer.Option("--events", "-n", help="Synthetic events to replay.")] = 100_000,
    kills: Annotated[int, typer.Option(help="SIGKILLs of a worker during the replay.")] = 5,
    seed: Annotated[int, typer.Option(help="Seeds kill points, delays and the worker picked.")] = 7,
    epoch: Annotated[int, typer.Option(help="Events per epoch (candidates first, then verdicts).")] = 2000,
    workers: Annotated[int, typer.Option(help="Workers of the app; each kill picks one.")] = 1,
    timeout: Annotated[float, typer.Option(help="Longest wait for an epoch's decisions (s).")] = 300.0,
    workdir: Annotated[
        Path | None,
        typer.Option(
            callback=output_folder, help="Workers' data directories and logs (default: a temporary one)."
        ),
    ] = None,
) -> None:
    """Replay a synthetic stream through workers while SIGKILLing them; check exactly-once.

    Needs a broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); starts its own workers.
    Exit status 1 if any end condition fails.
    """
    import tempfile

    bootstrap = require_bootstrap(get_settings())
    with tempfile.TemporaryDirectory(prefix="clingate-chaos-") as scratch:
        try:
            report = run_soak(
                bootstrap, workdir or Path(scratch), events=events, disruptions=kills, seed=seed,
                epoch=epoch, workers=workers, timeout_s=timeout, log=typer.echo,
            )  # fmt: skip
        except TooFewCandidates as few:
            raise typer.BadParameter(str(few), param_hint="'--kills' / '--events'") from few
        except ReplayTimeout as stalled:
            # Nothing was committed past the missing decisions; the workers stopped making progress.
            typer.echo(f"RESULT: FAIL (stalled: {stalled})")
            raise typer.Exit(1) from stalled
    typer.echo(report.render())
    if not report.passed:
        raise typer.Exit(1)
