"""The batch core every consumer loop runs on: read a batch, let Kafka-free logic say what it means,
commit that in one transaction, then write local state and count.

Every loop of a worker (the memory writer and the clinical patients, :mod:`streams.worker.tableloop`;
the gate, :mod:`streams.worker.gateloop`) and of the LLM consumer groups (the generator, the verifier, the
arbiter and the clinician's agent, :mod:`streams.groups.ordered`) is one :class:`BatchCore` and the
logic of its job. The core owns what is the same for all of them, written once:

* **Membership.** One consumer (``read_committed``, manual offsets) in the loop's group; a rebalance
  is counted, the revoked partitions' offsets, lag and positions are forgotten, and the job is told
  (:class:`Job`): a table loop restores the partitions it got, a progress loop reads where their last
  committed progress resumes (:mod:`streams.runtime.progress`) and the core starts them there.
* **A batch** (:meth:`BatchCore.read`): up to a limit, what is already fetched once the first record
  is there (:func:`~streams.runtime.kafka_clients.consume_batch`), counted per topic once; the first
  offset of each partition read since it was assigned is kept (where a rewind goes when nothing was
  committed yet).
* **A step** (:class:`Step`): what the job made of the batch, as data: dead letters, outputs and the
  records of the loop's own state (a changelog group, progress), with the group offsets it reaches.
  :meth:`BatchCore.commit` produces them in one Kafka transaction (:mod:`streams.runtime.transactions`,
  the one abort policy): dead letters first, then outputs, then state, so a ``read_committed`` reader
  sees a step whole or not at all. A step with nothing to produce opens no transaction.
* **After the commit**, in this order: the job's local writes (``Step.done``, given the offsets of the
  state records it asked to track: a changelog group's boundary, where the local store is at), the
  dead letters handed to the job's log and counters, the records produced counted, the group offsets
  sent (asynchronously: the transaction's own records already say where each partition resumes) and
  the lag they leave.
* **Abort**: a step whose transaction cannot commit (an outage, a paused broker, a coordinator move, a
  fenced producer) is aborted and every owned partition is sought back to where its last commit left
  it: nothing of the step happened and it is read and made again. The member never stops on an
  abortable error; only what no restart fixes (:class:`~streams.runtime.transactions.TransactionRefused`,
  a full disk, a bug) leaves :meth:`BatchCore.run`.
* **Idle**: with nothing read, the group's offsets are brought to where the loop stands
  (:meth:`~streams.runtime.kafka_clients.GroupOffsets.idle`), so a drained input shows consumed to
  its end, transaction markers included.

A job is synchronous and keeps its own state (the table loop's stores, the gate's coverage join);
:meth:`BatchCore.run` drives it. The LLM groups keep many slow records in flight on an asyncio loop and
use the core's steps directly (:meth:`read`, :meth:`commit` in a worker thread, :meth:`idle`), their
in-flight bound on top.

A job in a few lines (a loop that upper-cases records into ``out``, each once)::

    class Upper:
        def __init__(self, core):
            self.core = core
            core.subscribe(["in"], self.assigned, self.revoked)
        def assigned(self, partitions): return {}
        def revoked(self, partitions): pass
        def prepare(self): pass
        def close(self): pass
        def step(self, messages):
            if not messages:
                return None
            read = {(m.topic(), m.partition()): m.offset() + 1 for m in messages}
            outputs = [Output("out", m.key(), m.value().upper()) for m in messages]
            return Step(outputs=outputs, offsets=self.core.positions(read))

    core.run(stop, Upper(core))

A loop without progress records of its own (this one, the table loops) resumes from its group's
committed offsets, so a crash between the commit and the offsets re-delivers records: the table loops
skip them by the input offsets their changelog group records; a progress loop's progress is in the
transaction itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from schemas.serde import Serde
from streams.runtime.dlq import Rejected, dead_letter_record
from streams.runtime.kafka_clients import GroupOffsets, Key, consume_batch, positions, seek_owned
from streams.runtime.metrics import LoopMetrics
from streams.runtime.transactions import COMMIT_STEP_S, Batch, TransactionalProducer

log = logging.getLogger(__name__)

#: Most records one batch holds.
BATCH_MAX = 5000
#: Longest wait for a batch's first record (the first record ends the wait). Fetches keep librdkafka's
#: default long poll (``fetch.wait.max.ms`` 500): the broker answers as soon as a record arrives, so a
#: shorter wait only adds idle fetch requests (with 1-5 ms, the clients' broker threads cost ~50 us of
#: CPU per candidate of the gate).
POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Output:
    """One record to produce (bytes already encoded).

    Attributes:
        partition: the partition to write (a re-drive: its source's); None: the key's, by the
            producer's partitioner.
    """

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None


@dataclass(frozen=True, slots=True)
class StateRecord:
    """A record of the loop's own state: a changelog group's record or a progress record, written to a
    given partition of its topic.

    Attributes:
        tracked: the offset it is written at is handed to :attr:`Step.done` (keyed by ``partition``):
            a changelog group's boundary, the offset the local store records.
    """

    topic: str
    partition: int
    key: bytes
    value: bytes | None
    tracked: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    """What a job made of one batch, committed together or not at all (module docstring).

    Attributes:
        dead_letters: records that go to their dead-letter topics.
        outputs: records to produce, in order.
        state: the loop's own state records (a changelog group closed by its boundary, progress).
        offsets: the group offsets the step reaches (sent once it is committed; a rewind starts there).
        reread: input partitions to read again from the given offset (records past it were read but not
            applied); the offsets committed for them are these.
        done: called once the step is committed, with the offsets of its tracked state records by
            partition: the job's local writes and counters.
        aborted: called once the step's transaction was aborted and the partitions sought back: the
            job forgets what it kept of the step (it is made again).
    """

    dead_letters: Sequence[Rejected] = ()
    outputs: Sequence[Output] = ()
    state: Sequence[StateRecord] = ()
    offsets: Sequence[TopicPartition] = ()
    reread: Sequence[TopicPartition] = ()
    done: Callable[[Mapping[int, int]], None] | None = None
    aborted: Callable[[], None] | None = None


class Abandoned(Exception):
    """Raised by a job's step when the loop is stopped inside the batch (a candidate at its replay
    barrier): nothing of the batch is committed and the partitions' next owner reads it."""


class Job(Protocol):
    """What a synchronous loop adds to the core (:meth:`BatchCore.run`)."""

    def assigned(self, partitions: list[TopicPartition]) -> Mapping[Key, int]:
        """Partitions were assigned (the consumer is not yet reading them): where each starts, for the
        partitions whose start the job knows (a progress record); the rest start at the group's offset."""
        ...

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """Partitions were revoked or lost (no transaction is open: each step commits or aborts first)."""
        ...

    def prepare(self) -> None:
        """After each read, before the step: restore what was assigned, follow a replicated view."""
        ...

    def step(self, messages: list[Message]) -> Step | None:
        """What the batch ``messages`` (may be empty) means; None: nothing to do (the loop is idle)."""
        ...

    def close(self) -> None:
        """The loop stopped: close what the job opened."""
        ...


class FreezeWatch:
    """Notices this process being frozen (SIGSTOP, a paused VM or container, a host that stopped
    scheduling it): a thread that ticks every :attr:`TICK_S` and remembers every gap between two
    ticks longer than a second.

    A member frozen longer than its session timeout stops heartbeating (librdkafka heartbeats from a
    thread of its own, which a freeze stops too), so its partitions move; a long step of a running
    process does not (the heartbeats go on). Only a freeze is therefore a reason to doubt membership.
    """

    TICK_S = 0.1

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._gaps: list[tuple[float, float]] = []  # (end, length) of the gaps longer than a second
        self._lock = threading.Lock()
        threading.Thread(target=self._run, name="freeze-watch", daemon=True).start()

    def _run(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            now = time.monotonic()
            with self._lock:
                if now - self._last > 1.0:
                    self._gaps = [*self._gaps[-15:], (now, now - self._last)]
                self._last = now

    def frozen_since(self, since: float, limit_s: float) -> bool:
        """The process was frozen for more than ``limit_s`` at some time after ``since`` (monotonic),
        or is just coming out of such a freeze (the watch has not ticked since)."""
        with self._lock:
            if time.monotonic() - self._last > limit_s:
                return True
            return any(end > since and length > limit_s for end, length in self._gaps)


_WATCH: FreezeWatch | None = None
_WATCH_LOCK = threading.Lock()


def freeze_watch() -> FreezeWatch:
    """The process's freeze watch (started on first use)."""
    global _WATCH
    with _WATCH_LOCK:
        if _WATCH is None:
            _WATCH = FreezeWatch()
        return _WATCH


class BatchCore:
    """One member of a loop's consumer group with its transactional producer (module docstring).

    Args:
        name: the loop, in metrics (label ``loop``) and log lines.
        consumer_config: the consumer's settings (group, isolation, liveness); the core adds its
            offsets' ``on_commit``.
        transactions: the loop's transactional producer.
        serde: the process's serde (dead letters).
        metrics: where reads, commits, aborts and rebalances are counted.
        on_dead_letter: called with each dead letter once its step is committed (log and count it).
    """

    def __init__(
        self,
        name: str,
        consumer_config: Mapping[str, object],
        transactions: TransactionalProducer,
        serde: Serde,
        metrics: LoopMetrics,
        on_dead_letter: Callable[[Rejected], None] | None = None,
    ) -> None:
        self.name = name
        self.transactions = transactions
        self.offsets = GroupOffsets()
        self.consumer = Consumer({**consumer_config, "on_commit": self.offsets.on_commit})
        self._serde = serde
        self._metrics = metrics
        self._on_dead_letter = on_dead_letter
        self.resume: dict[Key, int] = {}
        """Where each owned partition's last commit (or its committed progress) left it."""
        self.started: dict[Key, int] = {}
        """The first offset read from each owned partition since it was assigned."""
        self._lag: dict[Key, int] = {}
        session_ms = float(consumer_config.get("session.timeout.ms", 45_000))  # type: ignore[arg-type]
        heartbeat_ms = float(consumer_config.get("heartbeat.interval.ms", session_ms / 10))  # type: ignore[arg-type]
        self._freeze_limit_s = (session_ms - 2 * heartbeat_ms) / 1000
        """A freeze this long may have cost the member its partitions (a heartbeat sent just before it,
        the next one missed by a margin)."""
        self._member_at = time.monotonic()
        """When the member last knew its partitions were its own (assigned, or a membership check)."""
        self._watch = freeze_watch()

    def subscribe(
        self,
        topics: Sequence[str],
        assigned: Callable[[list[TopicPartition]], Mapping[Key, int]],
        revoked: Callable[[list[TopicPartition]], None],
    ) -> None:
        """Join the group on ``topics``; ``assigned`` and ``revoked`` are the job's rebalance hooks
        (:meth:`Job.assigned`, :meth:`Job.revoked`)."""

        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self._member_at = time.monotonic()
            self._metrics.rebalances.labels(self.name, "assigned").inc(len(partitions))
            starts = assigned(partitions)
            self.resume.update(starts)
            for tp in partitions:
                if (start := starts.get((tp.topic, tp.partition))) is not None:
                    tp.offset = start
            consumer.assign(partitions)

        def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self._metrics.rebalances.labels(self.name, "revoked").inc(len(partitions))
            self.offsets.forget(partitions)
            for tp in partitions:
                key = (tp.topic, tp.partition)
                self._lag.pop(key, None)
                self.resume.pop(key, None)
                self.started.pop(key, None)
            revoked(partitions)

        self.consumer.subscribe(list(topics), on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)

    def read(self, limit: int, timeout_s: float = POLL_S) -> list[Message]:
        """Up to ``limit`` records, waiting up to ``timeout_s`` for the first; errors are logged and left
        out (librdkafka retries what it can)."""
        messages = []
        for message in consume_batch(self.consumer, limit, timeout_s):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("%s consumer: %s", self.name, error)
                continue
            self.started.setdefault((message.topic(), message.partition()), message.offset())
            messages.append(message)
        if messages:
            self._metrics.count(self._metrics.consumed, self.name, (m.topic() for m in messages))
        return messages

    def positions(self, read: Mapping[Key, int]) -> list[TopicPartition]:
        """The offsets to commit for partitions read up to ``read`` (the next offset), past the
        transaction markers that follow (:func:`~streams.runtime.kafka_clients.positions`)."""
        return positions(self.consumer, read)

    def commit(self, step: Step) -> bool:
        """Commit ``step`` (module docstring); False when its transaction was aborted and every owned
        partition was sought back to its last commit (the step is made again from there).

        Raises:
            streams.runtime.transactions.TransactionRefused: the cluster refuses the writes for good.
        """
        if not self._owned(step) or not self._confirmed():
            # A partition of the step is no longer this member's, or the member was frozen past its
            # session timeout and the group no longer counts it: a successor may have made this step
            # already. Not committed; the next read learns what is still owned.
            return self._abandon(step)
        tracked: dict[int, int] = {}
        produced: list[str] = []
        if step.dead_letters or step.outputs or step.state:

            def report(_error: KafkaError | None, message: Message) -> None:
                tracked[message.partition()] = message.offset()

            def fill(batch: Batch) -> None:
                for failed in step.dead_letters:
                    out = dead_letter_record(self._serde, failed)
                    batch.produce(out.topic, out.value, out.key, headers=out.headers)
                for output in step.outputs:
                    batch.produce(output.topic, output.value, output.key, partition=output.partition,
                                  headers=list(output.headers))  # fmt: skip
                for record in step.state:
                    batch.produce(record.topic, record.value, record.key, partition=record.partition,
                                  on_delivery=report if record.tracked else None)  # fmt: skip

            # Asked again once the records are written: a freeze while they were (no heartbeat, so
            # the partitions may have moved) must not end in the commit of a batch a successor makes.
            committed = self.transactions.run(fill, self._confirmed)
            if committed is None:
                return self._abandon(step)
            produced = committed.topics
        if step.done is not None:
            step.done(tracked)
        if self._on_dead_letter is not None:
            for failed in step.dead_letters:
                self._on_dead_letter(failed)
        if produced:
            self._metrics.count(self._metrics.produced, self.name, produced)
        again = {(tp.topic, tp.partition): tp.offset for tp in step.reread}
        offsets = [
            TopicPartition(tp.topic, tp.partition, again.get((tp.topic, tp.partition), tp.offset))
            for tp in step.offsets
        ]
        for tp in step.reread:
            seek_owned(self.consumer, TopicPartition(tp.topic, tp.partition, tp.offset))
        self.resume.update(((tp.topic, tp.partition), tp.offset) for tp in offsets)
        self.offsets.commit(self.consumer, offsets)
        self._count_lag(offsets)
        return True

    def _abandon(self, step: Step) -> bool:
        """``step`` is not committed: count it, seek every owned partition back to its last commit and
        let the job forget the step; False (what :meth:`commit` returns)."""
        self._metrics.aborted.labels(self.name).inc()
        self.rewind()
        if step.aborted is not None:
            step.aborted()
        return False

    def _owned(self, step: Step) -> bool:
        """Every input partition ``step`` advances is assigned to this member now (a read that served a
        lost assignment may have returned records of partitions revoked in the same call)."""
        owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        return all((tp.topic, tp.partition) in owned for tp in (*step.offsets, *step.reread))

    def _confirmed(self) -> bool:
        """Whether this member may commit: not frozen past its session timeout since it last knew its
        partitions were its own, or, if it was, still counted by the group (:meth:`_still_member`)."""
        return not self._watch.frozen_since(self._member_at, self._freeze_limit_s) or self._still_member()

    def _still_member(self) -> bool:
        """After a freeze: whether the group still counts this member in the generation its partitions
        were assigned in, proven by a synchronous offset commit (the group refuses one from a member it
        removed) of the offsets last sent to it (or those it holds), so nothing moves. True where there
        is nothing to prove it with (no offset committed yet for the partitions it owns)."""
        owned = self.consumer.assignment()
        sent = self.offsets.sent
        offsets = [TopicPartition(tp.topic, tp.partition, sent[(tp.topic, tp.partition)])
                   for tp in owned if (tp.topic, tp.partition) in sent]  # fmt: skip
        try:
            if not offsets:
                offsets = [
                    tp for tp in self.consumer.committed(owned, timeout=COMMIT_STEP_S) if tp.offset >= 0
                ]
            if offsets:
                self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("%s: after a freeze this member may no longer own its partitions (%s); its "
                        "batch is not committed and is read again", self.name, exc)  # fmt: skip
            return False
        log.info("%s: still a member of its group after a freeze", self.name)
        self._member_at = time.monotonic()
        return True

    def rewind(self) -> None:
        """Seek every owned partition back to where its last commit left it (or to the first offset read
        since it was assigned): what was read since is read again."""
        for key in {*self.resume, *self.started}:
            offset = self.resume.get(key, self.started.get(key))
            if offset is not None:
                seek_owned(self.consumer, TopicPartition(*key, offset))

    def idle(self) -> None:
        """Nothing was read: bring the group's offsets to where the loop stands."""
        self._count_lag(self.offsets.idle(self.consumer, self.resume))

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, high watermark - committed offset) of the owned partitions."""
        for (topic, partition), value in list(self._lag.items()):
            yield topic, partition, value

    def run(self, stop: threading.Event, job: Job) -> None:
        """Read, step and commit until ``stop`` is set (or a step is :class:`Abandoned`); then make the
        group's offsets durable, leave the group and close the job."""
        self.transactions.stop = stop
        clean = False
        try:
            while not stop.is_set():
                messages = self.read(BATCH_MAX)
                job.prepare()
                try:
                    step = job.step(messages)
                except Abandoned:
                    break
                if step is None:
                    self.idle()
                else:
                    self.commit(step)
            clean = True
        finally:
            try:
                try:
                    self.close(durable=clean)
                finally:
                    job.close()
            except Exception:
                if clean:
                    raise
                # The error that stopped the loop is the one to report (a full disk fails the close too).
                log.exception("%s: closing after the error that stopped the loop failed too", self.name)

    def close(self, *, durable: bool) -> None:
        """Leave the group; with ``durable`` (a clean stop) the last offsets are committed synchronously
        first (a failing loop leaves them to its partitions' next owner)."""
        try:
            if durable:
                self.offsets.close(self.consumer)
        finally:
            self.consumer.close()

    def _count_lag(self, offsets: Sequence[TopicPartition]) -> None:
        for tp in offsets:
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            self._lag[(tp.topic, tp.partition)] = max(high - tp.offset, 0)
