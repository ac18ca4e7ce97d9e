"""Replay a DBPM stream through a running broker and workers; collect decisions and final state.

This is the engine of ``clingate replay --via-kafka``: it produces the replay stream's events to
``clingate.dbpm.verdicts`` and ``clingate.dbpm.candidates``, collects the decisions from
``clingate.dbpm.decisions`` and rebuilds the final memory from the memory table's changelog, in the
same formats as the in-process replay.

Order (the consistency model of :mod:`streams.worker.memory`). The stream is cut into runs of consecutive
verdicts and runs of consecutive gate events. A verdict run is produced as is. Before a gate run,
every verdict partition gets a watermark tick at the first gate's event time naming the run (every
verdict before it is already produced, so the memory writers may advance to it), the candidates carry
the ``clingate-barrier`` header naming the same run (their gates wait until every memory partition
applied the run's tick, so a verdict of the same event-time second just before the run is waited for
too), and the verdicts after the run are
produced only once the decisions of the whole run have been consumed and the workers have
committed the run's candidates (the gate group commits right after its outputs are acknowledged).
A gate therefore sees exactly the verdicts that precede it in the
stream, as in the in-process engine, whatever the workers' lag, and so does a candidate decided
again after a worker crash (its decision record then repeats byte for byte). Without the commit
wait, a SIGKILL between "decisions seen" and "offsets committed" re-delivers the run's candidates
after the next verdicts were applied and some get a different second decision (found by the chaos
soak, ``clingate bench chaos``). (A live pipeline needs no such lockstep: the verdict of a
candidate exists only after its decision.)

Exactly once, and resumable. The records are published in Kafka transactions, each with a progress
record of the publication (:class:`Publication`: how many of its records are committed, where the
decisions topic stood when it began) on ``<app id>-replay-progress``, keyed by the publication's
name (:func:`replay_name`, a digest of the stream: the same stream to the same app is the same
publication). The workers read ``read_committed``, so they see a transaction whole or not at all. A
replay that stops (its wait ran out, a SIGKILL, a lost host) is resumed by running it again: its
producer takes the same transactional id (``<app id>-replay-<name>``), whose initialisation aborts
what the stopped one left open, reads the last committed progress, waits for the decisions of the
candidates already published and the gate's commit of them, and publishes only the rest; the
decisions are read from where the publication began, so the result is whole. A transaction holds at
most :data:`SEGMENT_MAX` records and ends before each wait, so it lasts far less than the transaction
timeout; one the coordinator aborts anyway (a broker outage) is produced again
(:class:`~streams.runtime.transactions.TransactionalProducer`, the workers' abort policy): a broker
outage makes a replay slower, never wrong.

Pauses. A caller may name points of the publication (numbers of candidates published) and a hook:
the publisher stops at each point, with everything before it committed, and goes on only when the
hook returns (:class:`Pauses`). The chaos soak disrupts the app there, so each disruption happens at
its point whatever the relative speed of the publisher and the workers.

Final state: the changelog of the memory table is read from the beginning, complete groups only,
into one in-memory store per partition; :class:`~streams.worker.gateview.MergedView` merges them and the
engine's ``snapshot`` writes the contract's state document. ``as_of`` is the stream's last event
time, as the contract defines it (the workers record only verdict times in the memory).

Size: one protocol, kept whole. Cutting the stream into runs, the pauses, the transactional
publication and its progress record, the waits for decisions and for the workers' commits, and the
state read back all serve the order above and are checked against it together; the waits other code
reuses (:func:`commit_end_offsets`, :class:`CommitWatcher`) are the lockstep's own, so they stay here.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition

from processors.dbpm import DBPMEngine, parse_event
from processors.dbpm.memory import Memory
from schemas.dbpm import Candidate, GateDecision, Verdict
from schemas.serde import Serde
from state.base import Store
from state.ram import RamStore
from streams.runtime.core import BATCH_MAX
from streams.runtime.kafka_clients import (
    CATCH_UP,
    assign_at_ends,
    consume_batch,
    end_offset,
    end_offsets,
    latest_offsets,
    partitions,
    producer_config,
    read_to_end,
    reader,
)
from streams.runtime.kafka_config import admin_client, client_config
from streams.runtime.transactions import Batch, TransactionalProducer
from streams.worker.clinical import INPUTS as CLINICAL_INPUTS
from streams.worker.clinical import clinical_group
from streams.worker.gate import gate_group
from streams.worker.gateview import MergedView
from streams.worker.keys import (
    BARRIER_HEADER,
    MEMORY_INPUTS,
    REPLAYED_HEADER,
    TICK_HEADER,
    TICK_RUN_HEADER,
    memory_changelog,
    run_token,
    verdict_key,
)
from streams.worker.memory import memory_group
from streams.worker.tablestore import ChangelogFollower
from topics.admin import ensure_topics
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_VERDICTS, TopicSpec

#: The most records one publication transaction holds: it lasts as long as producing them takes, and
#: a transaction that outlives the transaction timeout is aborted by its coordinator.
SEGMENT_MAX = 5_000


class ReplayTimeout(TimeoutError):
    """Decisions did not arrive in time: are workers running with the same topics and app id?"""


@dataclass(frozen=True)
class KafkaReplayResult:
    """What a replay through Kafka produced."""

    decisions: list[dict[str, Any]]
    """One contract decision object per gate event, in input order, provenance fields included."""
    state: dict[str, object]
    """The final memory in the contract's state format."""
    longest_wait_s: float = 0.0
    """The longest wait for one run's decisions and their commit, or for the memory's final commit (an
    outage shows here)."""
    resumed: int = 0
    """Records of the publication an earlier, stopped replay had committed (0: all published here)."""


def _reader(bootstrap: str) -> Consumer:
    """A consumer of what the workers committed (transactional outputs included only once committed)."""
    return reader(bootstrap, "replay", **{"isolation.level": "read_committed", **CATCH_UP})


class _DecisionCollector:
    """Consumes ``clingate.dbpm.decisions`` from ``start`` (per partition; None: its end now), keeping
    the first decision of each candidate as its contract object (:func:`read_decision`)."""

    def __init__(self, bootstrap: str, serde: Serde, start: Mapping[int, int] | None) -> None:
        self._serde = serde
        self._consumer = _reader(bootstrap)
        if start is None:
            assigned = assign_at_ends(self._consumer, [DBPM_DECISIONS])
        else:
            assigned = [TopicPartition(DBPM_DECISIONS, p, offset) for p, offset in start.items()]
            self._consumer.assign(assigned)
        self.start = {tp.partition: tp.offset for tp in assigned}
        """Where the collector began reading, per partition."""
        self.seen: dict[str, dict[str, Any]] = {}
        """The contract decision object of each candidate's first decision, by candidate id."""

    def wait_for(self, candidate_ids: Iterable[str], timeout_s: float) -> None:
        """Consume until every id in ``candidate_ids`` has a decision (duplicates are dropped)."""
        missing = set(candidate_ids) - self.seen.keys()
        deadline = time.monotonic() + timeout_s
        while missing:
            if time.monotonic() > deadline:
                raise ReplayTimeout(f"{len(missing)} decisions missing, e.g. {sorted(missing)[:3]}")
            for message in consume_batch(self._consumer, BATCH_MAX, 0.05):
                if message.error():
                    continue
                decision = read_decision(self._serde, message.value())
                self.seen.setdefault(decision["candidate_id"], decision)
                missing.discard(decision["candidate_id"])

    def close(self) -> None:
        self._consumer.close()


def _record(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "kind"}


_REPLAYED = ((REPLAYED_HEADER, b"1"),)


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """One record the replay publisher produces."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None
    """The partition, for a record without a key (a watermark tick); None: the key's (murmur2)."""


@dataclass(frozen=True, slots=True)
class ReplayRun:
    """One run of the stream: consecutive verdicts, or consecutive gate events with their ticks."""

    records: list[ReplayRecord]
    candidate_ids: list[str]
    """The run's candidates, in order (empty for a run of verdicts)."""


def verdict_record(obj: dict[str, Any], engine: DBPMEngine, serde: Serde) -> ReplayRecord:
    """The ``clingate.dbpm.verdicts`` record of a verdict event (contract JSON object), keyed by
    :func:`~streams.worker.keys.verdict_key` for the memory partition that owns its signature and
    marked replayed (applied as given, :data:`~streams.worker.keys.REPLAYED_HEADER`)."""
    return ReplayRecord(
        DBPM_VERDICTS, verdict_key(engine, parse_event(obj)),  # type: ignore[arg-type]
        serde.encode(Verdict.model_validate(_record(obj)), topic=DBPM_VERDICTS), _REPLAYED,
    )  # fmt: skip


def replay_runs(
    events: Sequence[dict[str, Any]], engine: DBPMEngine, serde: Serde, verdict_partitions: Sequence[int],
    replay: str,
) -> Iterator[ReplayRun]:  # fmt: skip
    """The records of the replay publication, run by run (the order of the module docstring).

    A verdict becomes a verdict record keyed by :func:`~streams.worker.keys.verdict_key`. A run of
    gate events starts with one watermark tick per verdict partition at the run's first event time
    (every verdict before it is published), naming the run (:func:`~streams.worker.keys.run_token`
    of ``replay``), followed by its candidates keyed by patient, each with the barrier header
    naming the same run: its gate waits until every partition applied that run's tick, so ties of
    event time with the verdicts just before the run are waited for too. Nothing here waits: the
    lockstep between runs is the caller's.

    Args:
        events: the replay stream's events (contract JSON objects), in order.
        engine: an engine configured as the workers are (for verdict keys).
        serde: the process's serde.
        verdict_partitions: the partition numbers of ``clingate.dbpm.verdicts``.
        replay: names this publication in the run tokens: unique per publication to one app's memory
            (a token of an earlier replay must not open a later one's barrier).
    """
    for index, (kind, run) in enumerate(groupby(events, key=lambda e: e["kind"])):
        batch = list(run)
        if kind == "verdict":
            yield ReplayRun([verdict_record(obj, engine, serde) for obj in batch], [])
            continue
        token = run_token(replay, index)
        tick = ((TICK_HEADER, batch[0]["ts"].encode()), (TICK_RUN_HEADER, token))
        records = [ReplayRecord(DBPM_VERDICTS, None, b"", tick, p) for p in verdict_partitions]
        candidates = [Candidate.model_validate(_record(obj)) for obj in batch]
        records += [
            ReplayRecord(DBPM_CANDIDATES, c.patient_id.encode(), serde.encode(c, topic=DBPM_CANDIDATES),
                         ((BARRIER_HEADER, token),))
            for c in candidates
        ]  # fmt: skip
        yield ReplayRun(records, [c.candidate_id for c in candidates])


#: What a publisher does at a pause point, given the number of candidates published; it blocks the
#: publication until it returns.
PauseHook = Callable[[int], None]


class Pauses:
    """Points where a publisher stops, and the hook it calls there.

    The publisher calls :meth:`reached` after producing each candidate, with the number produced so
    far, counting 1, 2, 3, ... up to ``candidates``. At a point ``n`` :meth:`reached` commits what the
    publisher produced, so the first ``n`` candidates (and every record before them) are on the
    broker for the workers to consume, then calls ``hook(n)`` (once per occurrence of ``n`` in
    ``points``) and returns only after the hook did: nothing after the ``n``-th candidate is produced
    before the hook has run.

    Every point lies in ``1..candidates`` (checked here, before anything is published) and the
    publisher passes through every count in that range, so the hook runs exactly ``len(points)``
    times, in ascending order of the points, by the time the publication ends: the number of pauses
    does not depend on how fast the publisher or the workers are.

    Args:
        points: numbers of candidates published at which to pause, in any order.
        hook: what to do at a pause (required when ``points`` is not empty).
        candidates: the candidates the publisher will produce.

    Raises:
        ValueError: a point outside ``1..candidates``, or points without a hook.
    """

    def __init__(self, points: Sequence[int], hook: PauseHook | None, candidates: int) -> None:
        outside = sorted(n for n in points if not 1 <= n <= candidates)
        if outside:
            raise ValueError(f"pause points {outside} outside 1..{candidates} (the stream's candidates)")
        if points and hook is None:
            raise ValueError("pause points need a hook")
        self._hook = hook
        self._todo = sorted(points, reverse=True)  # the next point last
        self.paused: list[int] = []
        """The points passed so far, in order."""

    @property
    def pending(self) -> list[int]:
        """The points not passed yet, ascending."""
        return self._todo[::-1]

    def reached(self, published: int, commit: Callable[[], object]) -> None:
        """The ``published``-th candidate was produced: at a point, ``commit`` and run the hook."""
        if not self._todo or self._todo[-1] != published:
            return
        commit()
        while self._todo and self._todo[-1] == published:
            self._todo.pop()
            assert self._hook is not None  # checked in __init__
            self._hook(published)
            self.paused.append(published)

    def passed(self, published: int) -> None:
        """An earlier publication of the stream had produced its first ``published`` candidates: the
        points up to there are passed (a publication resumed after them does not stop there)."""
        while self._todo and self._todo[-1] <= published:
            self._todo.pop()

    def finish(self) -> None:
        """Check that the publication passed every point.

        Raises:
            RuntimeError: a point was not reached (the publisher skipped a count or stopped early).
        """
        if self._todo:
            raise RuntimeError(f"the publication ended before the pause points {self.pending}")


_NAMED_JSON = json.JSONEncoder(sort_keys=True)
"""What :func:`replay_name` digests of each event: ``json.dumps(event, sort_keys=True)`` byte for byte,
by one encoder (``json.dumps`` with an option builds a new one per call)."""


def replay_name(events: Sequence[dict[str, Any]]) -> str:
    """The name of a publication of ``events``: a digest of the stream, so a replay of the same stream
    run again is the same publication (it resumes, never publishes twice)."""
    digest = hashlib.sha256()
    for event in events:
        digest.update(_NAMED_JSON.encode(event).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def replay_progress_topic(app_id: str) -> str:
    """The topic of the replays' progress records to app ``app_id``'s workers."""
    return f"{app_id}-replay-progress"


@dataclass(frozen=True)
class Publication:
    """How far one publication is committed: where a replay run again goes on."""

    published: int
    """Records of the publication (:func:`replay_runs`, run after run) committed so far."""
    decisions: dict[int, int]
    """Where ``clingate.dbpm.decisions`` ended, per partition, when the publication began: its
    decisions are read from there."""

    def encode(self) -> bytes:
        """The progress record's value (JSON)."""
        return json.dumps({"published": self.published, "decisions": self.decisions}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Publication:
        """The publication a progress record's value describes."""
        value = json.loads(raw)
        return cls(value["published"], {int(p): offset for p, offset in value["decisions"].items()})


class Publisher:
    """Produces a publication's records in Kafka transactions, each with its :class:`Publication`
    (module docstring).

    Its transactional id is ``<app id>-replay-<name>``: opening it aborts what a stopped publisher of
    the same publication left open, so :meth:`last` then reads every progress that will ever be
    committed before this one's. The progress topic is created when missing (compacted, kept forever,
    one partition, replicated as the candidates topic).

    Args:
        bootstrap: the broker.
        app_id: the workers' application id.
        name: the publication's name (:func:`replay_name`).
    """

    def __init__(self, bootstrap: str, app_id: str, name: str) -> None:
        self._bootstrap = bootstrap
        self._key = name.encode()
        self.topic = replay_progress_topic(app_id)
        probe = _reader(bootstrap)
        try:
            model = probe.list_topics(DBPM_CANDIDATES, timeout=30).topics[DBPM_CANDIDATES]
        finally:
            probe.close()
        spec = TopicSpec(
            self.topic, "publication name", "streams.replay.kafka.Publication (JSON)", partitions=1,
            replication=len(model.partitions[0].replicas), cleanup_policy="compact", retention_ms=-1,
        )  # fmt: skip
        ensure_topics(admin_client(bootstrap), [spec])
        self._transactions = TransactionalProducer(
            producer_config(bootstrap, **{"transactional.id": f"{app_id}-replay-{name}", "linger.ms": 2}),
            f"replay {name}",
        )

    def last(self, timeout_s: float) -> Publication | None:
        """The publication's last committed progress (None: nothing of it was committed yet).

        Raises:
            TimeoutError: the progress topic was not read to its end within ``timeout_s``.
        """
        consumer = _reader(self._bootstrap)
        found = None
        try:
            for message in read_to_end(consumer, {self.topic: {}}, timeout_s):
                if message.key() == self._key:
                    found = message.value()
        finally:
            consumer.close()
        return None if found is None else Publication.decode(found)

    def commit(self, records: Sequence[ReplayRecord], progress: Publication) -> None:
        """Produce ``records`` and ``progress`` in one transaction and commit it; a transaction that
        is aborted instead (an outage) is produced again, until one commits."""

        def fill(batch: Batch) -> None:
            for record in records:
                batch.produce(record.topic, record.value, record.key, partition=record.partition,
                              headers=list(record.headers))  # fmt: skip
            batch.produce(self.topic, progress.encode(), self._key)

        while self._transactions.run(fill) is None:
            pass  # nothing of it is visible: the same records again


def replay_via_kafka(
    bootstrap: str,
    events: Sequence[dict[str, Any]],
    engine: DBPMEngine,
    serde: Serde,
    app_id: str,
    *,
    timeout_s: float = 60.0,
    pause_at: Sequence[int] = (),
    on_pause: PauseHook | None = None,
) -> KafkaReplayResult:
    """Publish ``events`` (contract objects, in order), wait for every decision, rebuild the state.

    A publication of the same stream to the same app that an earlier call left unfinished is resumed
    (module docstring): only what it had not committed is published, and the result is the whole
    publication's. The state is read only once the workers have committed every verdict and every
    propagation: a stream that ends with verdicts has no decision to wait for, and reading the
    changelog when the last decision arrives would miss them.

    With ``pause_at``, the publication stops once the first ``n`` candidates are committed, for each
    ``n`` in ``pause_at``, calls ``on_pause(n)`` and goes on when it returns (see :class:`Pauses`): by
    the time this function returns, ``on_pause`` ran once for each point past the candidates an
    earlier call published. The wait for a run's decisions starts after the run's pauses, so time
    spent in ``on_pause`` (a worker restart, say) does not count against ``timeout_s``.

    Args:
        bootstrap: the broker.
        events: the replay stream's events (already validated JSON objects).
        engine: an engine configured as the workers are (for verdict keys and the snapshot).
        serde: the process's serde.
        app_id: the workers' application id (their consumer group; names the memory changelog).
        timeout_s: longest wait for the decisions of one gate run, for the final commit and for the
            broker to answer a read.
        pause_at: numbers of candidates published at which to pause, each in ``1..`` the stream's
            candidates.
        on_pause: called at each pause with the number of candidates published; blocks the publisher.

    Raises:
        ReplayTimeout: a run's decisions, or the workers' final commit, did not arrive in ``timeout_s``
            (what was committed stays: the same call again resumes).
        ValueError: a pause point outside the stream's candidates (raised before anything is published).
    """
    name = replay_name(events)
    gate_commits = CommitWatcher(bootstrap, gate_group(app_id))
    publisher = Publisher(bootstrap, app_id, name)
    try:
        runs = replay_runs(events, engine, serde, gate_commits.partitions(DBPM_VERDICTS, timeout_s), name)
        earlier = publisher.last(timeout_s)
        collector = _DecisionCollector(bootstrap, serde, None if earlier is None else earlier.decisions)
        try:
            published, longest_wait_s, order = _publish(
                runs, earlier or Publication(0, collector.start), publisher, collector, gate_commits,
                Pauses(pause_at, on_pause, sum(e["kind"] == "gate" for e in events)), timeout_s,
            )  # fmt: skip
            decisions = [collector.seen[c] for c in order]
        finally:
            collector.close()
    finally:
        gate_commits.close()
    # Verdicts first: a verdict's offset commits in the transaction of the propagations it produced,
    # so the propagation topic's end is final once every verdict is committed.
    waited = time.monotonic()
    with CommitWatcher(bootstrap, memory_group(app_id)) as memory_commits:
        for topic in MEMORY_INPUTS:
            memory_commits.wait(topic, timeout_s)
    longest_wait_s = max(longest_wait_s, time.monotonic() - waited)
    last = parse_event(events[-1]).time if events else None
    state = read_state(bootstrap, memory_changelog(app_id), engine, last)
    return KafkaReplayResult(decisions, state, longest_wait_s, published)


def _publish(
    runs: Iterable[ReplayRun], earlier: Publication, publisher: Publisher, collector: _DecisionCollector,
    gate_commits: CommitWatcher, pauses: Pauses, timeout_s: float,
) -> tuple[int, float, list[str]]:  # fmt: skip
    """Publish ``runs`` from where ``earlier`` left them, in lockstep with the workers (module
    docstring); the records ``earlier`` had committed, the longest wait and the candidates of the whole
    publication in order.

    ``runs`` is taken ahead: the runs up to the next one of gate events are made (their records
    encoded) once a run of gate events is committed and before its decisions are waited for, so that
    the encoding overlaps the workers' work instead of adding to it. Before anything new goes out, the
    candidates ``earlier`` published are waited for as a run's are: the verdicts after them must not
    reach the memory before those candidates are decided.
    """
    longest_wait_s = 0.0

    def settle(candidate_ids: Sequence[str]) -> None:
        nonlocal longest_wait_s
        waited = time.monotonic()
        collector.wait_for(candidate_ids, timeout_s)
        # A decision seen is not yet final: until the workers commit the candidates' offsets, a
        # crash re-delivers them, and a re-delivered candidate is decided again on the memory as it
        # is then. The next verdicts must not be in that memory.
        gate_commits.wait(DBPM_CANDIDATES, timeout_s)
        longest_wait_s = max(longest_wait_s, time.monotonic() - waited)

    order: list[str] = []
    before: list[str] | None = []  # the candidates earlier published; None from the first record it had not
    segment: list[ReplayRecord] = []
    index = produced = 0

    def resume() -> None:
        nonlocal before, produced
        assert before is not None
        pauses.passed(len(before))
        if before:
            settle(before)
        produced, before = len(before), None

    def commit() -> None:
        if segment:
            publisher.commit(segment, Publication(index, earlier.decisions))
            segment.clear()

    source = iter(runs)
    ahead: deque[ReplayRun] = deque()

    def take_ahead() -> None:  # the runs up to the next one of gate events, encoded
        for run in source:
            ahead.append(run)
            if run.candidate_ids:
                return

    take_ahead()
    while ahead:
        run = ahead.popleft()
        order += run.candidate_ids
        candidates = iter(run.candidate_ids)
        for record in run.records:
            index += 1
            if before is not None:
                if index <= earlier.published:
                    if record.topic == DBPM_CANDIDATES:
                        before.append(next(candidates))
                    continue
                resume()
            segment.append(record)
            if record.topic == DBPM_CANDIDATES:
                produced += 1
                pauses.reached(produced, commit)
            if len(segment) >= SEGMENT_MAX:
                commit()
        decided = run.candidate_ids if index > earlier.published else []
        if decided:
            commit()
        if not ahead:
            take_ahead()  # while the workers decide the run just committed
        if decided:
            settle(decided)
    if before is not None:
        resume()
    commit()
    pauses.finish()
    return earlier.published, longest_wait_s, order


#: Commit errors that mean the group's coordinator is loading or moving (a broker just started or
#: restarted): the same commit is asked again.
_COORDINATOR_BUSY = frozenset({
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
})  # fmt: skip


def commit_end_offsets(bootstrap: str, group: str, topics: Sequence[str], timeout_s: float = 60.0) -> None:
    """Start ``group`` at the current end of ``topics``: records already there are not this run's.

    The commit is asked again while the group's coordinator loads or moves, up to ``timeout_s``.

    Raises:
        KafkaException: the commit failed otherwise, or the coordinator was still busy at the deadline.
    """
    consumer = Consumer(client_config(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        ends = [
            TopicPartition(topic, p, end)
            for topic in topics
            for p, end in end_offsets(consumer, topic).items()
        ]
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                consumer.commit(offsets=ends, asynchronous=False)
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                busy = isinstance(error, KafkaError) and error.code() in _COORDINATOR_BUSY
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def commit_worker_end_offsets(bootstrap: str, app_id: str) -> None:
    """Start the workers of a fresh ``app_id`` at the current end of their input topics.

    Three groups: the memory writers' (:func:`streams.worker.memory.memory_group`: verdicts and
    propagations), the clinical writers' (:func:`streams.worker.clinical.clinical_group`) and the
    gate's (:func:`streams.worker.gate.gate_group`, candidates). Without it a fresh app on a shared broker
    would process every earlier run's records.
    """
    commit_end_offsets(bootstrap, memory_group(app_id), list(MEMORY_INPUTS))
    commit_end_offsets(bootstrap, clinical_group(app_id), list(CLINICAL_INPUTS))
    commit_end_offsets(bootstrap, gate_group(app_id), [DBPM_CANDIDATES])


class CommitWatcher:
    """Waits until a consumer group has committed the end of a topic; one client for many waits.

    A lockstep publisher waits once per run of gate events: a client of its own per wait (connect,
    find the group coordinator, close) cost ~45 ms a wait on the development VM, the wait itself on a
    kept client ~5 ms. Use it as a context manager, or :meth:`close` it.
    """

    def __init__(self, bootstrap: str, group: str) -> None:
        """Connect a client of ``group`` (it never subscribes, so it never joins the group)."""
        self.group = group
        self._consumer = Consumer(
            client_config(bootstrap, **{"group.id": group, "enable.auto.commit": False})
        )
        self._partitions: dict[str, list[int]] = {}

    def __enter__(self) -> CommitWatcher:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def partitions(self, topic: str, timeout_s: float = 30.0) -> list[int]:
        """The partition numbers of ``topic`` (looked up once, waiting up to ``timeout_s`` for the
        broker)."""
        if topic not in self._partitions:
            self._partitions[topic] = partitions(self._consumer, topic, timeout_s)
        return self._partitions[topic]

    def ends(self, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        """The current end offset of every partition of ``topic`` (waiting up to ``timeout_s`` for each
        partition's leader)."""
        return {p: end_offset(self._consumer, topic, p, timeout_s) for p in self.partitions(topic, timeout_s)}

    def committed(self, topic: str, timeout_s: float = 30.0) -> dict[int, int]:
        """The group's committed offset of every partition of ``topic`` (negative: none yet); empty while
        the group coordinator moves or loads (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS: a broker
        restart) or does not answer within ``timeout_s``."""
        wanted = [TopicPartition(topic, p) for p in self.partitions(topic, timeout_s)]
        try:
            return {tp.partition: tp.offset for tp in self._consumer.committed(wanted, timeout=timeout_s)}
        except KafkaException:
            return {}

    def wait(self, topic: str, timeout_s: float) -> None:
        """Block until the group has committed the current end offset of every partition of ``topic``.

        A DBPM worker commits an input offset only after the changelog acknowledged the writes of the
        records before it, so once this returns the changelog holds the memory after every record
        published to ``topic`` so far. A partition that never held a record has nothing to consume and
        counts as consumed: a group that started at the earliest offset never commits one there.

        Raises:
            ReplayTimeout: the group did not get there within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        ends = self.ends(topic, timeout_s)
        while True:
            committed = self.committed(topic, max(deadline - time.monotonic(), 1.0))
            done = [offset >= ends[p] or ends[p] == 0 for p, offset in committed.items()]
            if committed and all(done):
                return
            if time.monotonic() > deadline:
                raise ReplayTimeout(
                    f"group {self.group} did not commit the end of {topic} in {timeout_s:.0f} s"
                )
            time.sleep(0.02)

    def close(self) -> None:
        """Close the client."""
        self._consumer.close()


def wait_until_consumed(bootstrap: str, group: str, topic: str, timeout_s: float) -> None:
    """One :meth:`CommitWatcher.wait` on a client of its own (for a single wait).

    Raises:
        ReplayTimeout: the group did not commit the end of ``topic`` within ``timeout_s``.
    """
    with CommitWatcher(bootstrap, group) as watcher:
        watcher.wait(topic, timeout_s)


def read_decision(serde: Serde, value: bytes) -> dict[str, Any]:
    """The contract decision object of a ``clingate.dbpm.decisions`` record value, its provenance as
    ``sources``: the seven fields as its :class:`~schemas.dbpm.GateDecision` holds them, read from its
    Avro datum (:meth:`~schemas.serde.Serde.read_datum`) without building the model, whose checks tie the
    decision to its candidate and change none of them.

    Raises:
        SchemaDecodeError: ``value`` is not a decision record.
    """
    datum = serde.read_datum(value, GateDecision, topic=DBPM_DECISIONS)
    return {
        "candidate_id": datum["candidate_id"],
        "decision": datum["decision"],
        "rule": datum["rule"],
        "signature": datum["signature"],
        "severity": datum["severity"],
        "multiplier": datum["confidence_multiplier"],
        "sources": list(datum["provenance"]),
    }


def _changelog(bootstrap: str, topic: str) -> Iterator[tuple[int, bytes, bytes | None, int]]:
    """Every committed record of ``topic`` written so far: ``(partition, key, value, offset)``.

    The read goes to the end of everything written, not to the last stable offset: a transaction still
    open holds that offset back, and the groups committed after it would be missed. Such a transaction
    is a writer's whose partitions moved while it was frozen or dead; it ends within the transaction
    timeout (its writer aborts it once it thaws, or the coordinator does), and the read waits for it.
    """
    consumer = _reader(bootstrap)
    try:
        written = latest_offsets(
            admin_client(bootstrap),
            [(topic, p) for p in partitions(consumer, topic)],
            IsolationLevel.READ_UNCOMMITTED,
        )
        for message in read_to_end(consumer, {topic: {}}, ends=written):
            yield message.partition(), message.key(), message.value(), message.offset()
    finally:
        consumer.close()


def read_state(bootstrap: str, changelog: str, engine: DBPMEngine, as_of: float | None) -> dict[str, object]:
    """The memory's state document, rebuilt from the memory table's changelog.

    Args:
        bootstrap: the broker.
        changelog: the memory table's changelog topic.
        engine: for the snapshot (its configuration decides the tasks listed).
        as_of: the stream's last event time (None: the memory's own).
    """
    return changelog_state(_changelog(bootstrap, changelog), engine, as_of)


def changelog_state(
    records: Iterable[tuple[int, bytes, bytes | None, int]], engine: DBPMEngine, as_of: float | None
) -> dict[str, object]:
    """The memory's state document from the memory changelog's records, whole groups only.

    Args:
        records: ``(partition, key, value, offset)`` of the changelog, in offset order per partition.
        engine: for the snapshot (its configuration decides the tasks listed).
        as_of: the stream's last event time (None: the memory's own).
    """
    followers: dict[int, ChangelogFollower] = {}
    for partition, key, value, offset in records:
        follower = followers.get(partition)
        if follower is None:
            follower = followers[partition] = ChangelogFollower(RamStore())
        follower.add(key, value, offset)
    stores: list[Store] = [followers[p].store for p in sorted(followers)]
    if as_of is not None:
        # A one-record partition holding the stream's clock; the view takes the latest time.
        stamp = RamStore()
        with stamp.transaction() as txn:
            Memory(txn, engine.config).set_clock(as_of, None)
        stores.append(stamp)
    return engine.snapshot(MergedView(lambda: stores).transaction())
