"""An ordered, bounded in-flight consumer loop for slow per-record work (the LLM consumer groups).

The generator, the verifier and the arbiter group (:mod:`streams.groups.generator`,
:mod:`streams.groups.verifier`, :mod:`streams.groups.arbiter`) each do seconds of LLM work per record and
must keep many records in flight without blocking the poll loop (STYLE 10), yet publish and commit in
input order. This loop gives them that, on one confluent-kafka consumer and one producer:

* one asyncio task per record (the caller's *handler*), at most ``max_in_flight`` unfinished at once,
  and up to ``max(max_in_flight, MIN_WAITING)`` more records consumed and waiting to start; when that
  buffer is full the loop pauses its assigned partitions and keeps polling (the group membership stays
  alive), and resumes them when it has room. Why a buffer: a resumed partition is fetched only with the
  consumer's next fetch request, which may wait behind a long poll of the other partitions (librdkafka
  ``fetch.wait.max.ms``); without records at hand every finished call would leave its slot idle for that
  long (measured: the verifier group at N = 1 reached half of N/L);
* per input partition, outputs are produced strictly in input order: a finished record waits for every
  earlier record of its partition, so the outputs of one input key (one partition) keep their order;
* the finished heads of the partitions' queues are published together in one Kafka transaction
  with the group's progress on each partition they advance (:class:`streams.runtime.progress.ProgressLog`,
  ``<group>-progress``): outputs, dead letters and "done up to here" commit all or not at all. A
  ``read_committed`` consumer (the memory, the gates' readers, downstream) therefore reads every
  output once through SIGKILLs, rebalances and broker restarts: a member that gets a partition starts
  where the last committed progress resumes, and the calls of records whose outputs were not committed
  are made again (their outputs replace nothing: the aborted ones were never visible). So a re-issued
  verifier call that judges differently cannot add a second verdict for its candidate. The group's
  offsets are committed after each transaction for lag and tools; once every record read from a
  partition is done they go to the consumer's position, past the transaction markers that follow (the
  gate writes its outputs in transactions; an idle member commits positions that moved over markers
  alone), so a drained input shows as consumed to its end. A transaction that cannot commit (a broker
  outage, a fenced producer: :mod:`streams.runtime.transactions`) is aborted and the member rewinds:
  every record in flight is cancelled and each partition is read again from its last committed
  progress, so the calls of the aborted records are made again;
* a handler returns its outputs as data: records to produce and dead letters (:class:`DecodeFailed`
  values, produced to their dead-letter topics in the same transaction); a handler that raises (a
  bug) dead-letters its record with stage ``process`` instead of crash-looping, and a record with an
  output larger than its topic admits is dead-lettered with stage ``produce``
  (the broker would refuse the output on every retry);
* on revocation the revoked partitions' tasks are cancelled and their offsets stay uncommitted; the
  partition's new owner processes them again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from schemas.serde import Serde
from streams.runtime.dlq import (
    DecodeFailed,
    SourceRecord,
    dead_letter_record,
    oversized_output,
    processing_failed,
)
from streams.runtime.kafka_clients import GroupOffsets, positions, seek_owned
from streams.runtime.kafka_config import client_config, liveness_config
from streams.runtime.progress import Progress, ProgressLog
from streams.runtime.transactions import Batch, TransactionalProducer

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.02
"""How long the loop waits for a record to finish when nothing was published."""

PUBLISH_INTERVAL_S = 0.025
"""Least time between two publications while records are still in flight.

A publication is a produce, a ``flush`` (a round trip to the broker, waited for in a worker thread)
and an offset commit. Published as soon as any record finished, the verifier group under load made
a publication per two or three verdicts: ~140 produce requests and ~90 offset commits a second in
the demo's bulk phase (broker request metrics over JMX), each with its thread hand-off. Held for up to
25 ms, a publication carries every record that finished meanwhile, at a latency cost small beside an
LLM call; a loop with nothing left in flight publishes at once, so a lone record (the demo's lockstep
slice, a quiet stream) waits for nothing."""

MIN_WAITING = 32
"""Records kept consumed and waiting to start, at least (``max(max_in_flight, MIN_WAITING)``)."""


def consumer_config(bootstrap: str, group_id: str, session_timeout_s: float) -> dict[str, object]:
    """Consumer settings of a group run by an :class:`OrderedLoop`: manual in-order commits, committed
    reads only.

    ``fetch.wait.max.ms`` 100 (librdkafka default 500): a partition resumed after backpressure is
    fetched within 100 ms instead of waiting behind a 500 ms long poll of the idle partitions.
    ``session_timeout_s`` (``CLINGATE_CONSUMER_SESSION_TIMEOUT_S``, as the DBPM gate's group): how long
    the partitions of a SIGKILLed member wait before they move (librdkafka's default is 45 s).
    """
    return client_config(bootstrap, **{
        "group.id": group_id, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "fetch.wait.max.ms": 100,
        **liveness_config(session_timeout_s),
    })  # fmt: skip


def transactional_producer(config: dict[str, object], group_id: str) -> TransactionalProducer:
    """The transactional producer of a member of ``group_id``, from producer settings ``config``.

    Its transactional id is new at every start (a group member keeps no data directory), so an open
    transaction of a SIGKILLed member is not fenced by its successor but aborted by the coordinator
    after :data:`~streams.runtime.transactions.TRANSACTION_TIMEOUT_MS`; ``read_committed`` readers of
    its outputs wait that long.
    """
    return TransactionalProducer(
        {**config, "transactional.id": f"{group_id}-{uuid.uuid4().hex[:12]}"}, group_id
    )


@dataclass(frozen=True, slots=True)
class Output:
    """One record to produce (bytes already encoded)."""

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


Handled = Sequence[Output | DecodeFailed]
"""What one input record produced: output records and dead letters, produced in this order."""

Handler = Callable[[SourceRecord], Handled | Awaitable[Handled]]
"""Processes one record; returns its outputs directly (cheap records) or an awaitable (LLM work)."""


@dataclass
class _Entry:
    record: SourceRecord
    started: bool = False
    result: Handled | None = None
    task: asyncio.Task[Handled] | None = None

    @property
    def done(self) -> bool:
        return self.started and (self.task is None or self.task.done())

    def outputs(self, expected_schema: str) -> Handled:
        if self.task is None:
            assert self.result is not None
            return self.result
        error = self.task.exception()
        if error is None:
            return fitting(self.record, self.task.result(), expected_schema)
        return handler_failed(self.record, error, expected_schema)


def handler_failed(record: SourceRecord, error: BaseException, expected_schema: str) -> Handled:
    """What a record on which the handler raised produces: its dead letter (stage ``process``)."""
    log.error("handler failed on %s[%d]@%d", record.topic, record.partition, record.offset,
              exc_info=error)  # fmt: skip
    assert isinstance(error, Exception)  # a task's BaseExceptions (cancellation) are raised, not returned
    return [processing_failed(record, error, expected_schema)]


async def handle_record(handle: Handler, record: SourceRecord, expected_schema: str) -> Handled:
    """What the loop publishes for ``record``, computed on its own: the handler's outputs and dead
    letters (awaited if the handler returns an awaitable), its dead letter if the handler raised
    (:func:`handler_failed`), or its ``produce`` dead letter if an output is too large (:func:`fitting`).

    For runners without Kafka (the topology test driver): the loop itself keeps many records in
    flight and computes the same thing in two steps.
    """
    try:
        outcome = handle(record)
        handled = await outcome if inspect.isawaitable(outcome) else outcome
    except Exception as error:  # a handler's bug on one record: its dead letter, not a crash loop
        return handler_failed(record, error, expected_schema)
    return fitting(record, handled, expected_schema)


def fitting(record: SourceRecord, handled: Handled, expected_schema: str) -> Handled:
    """``handled``, or the record's dead letter (stage ``produce``) if an output exceeds its topic's
    ``max.message.bytes``: the broker would refuse it, and the loop would stop on every retry."""
    for item in handled:
        if isinstance(item, Output):
            failed = oversized_output(record, item.topic, item.key, item.value, item.headers, expected_schema)
            if failed is not None:
                return [failed]
    return handled


@dataclass
class OrderedLoop:
    """The loop (see the module docstring).

    Attributes:
        consumer_config: the member's consumer settings (:func:`consumer_config`); :meth:`run` builds
            the consumer, subscribes it and closes it.
        transactions: the member's transactional producer (:func:`transactional_producer`).
        serde: the process's serde (dead letters).
        topics: the input topics.
        handle: the per-record handler.
        max_in_flight: unfinished records at once (>= 1).
        expected_schema: Avro name of the input model, for dead letters of handler failures.
        progress: the group's progress log (where each input partition's outputs are committed to).
        on_in_flight: called with the number of unfinished records after every step (a gauge).
        on_dead_letter: called with every dead letter the loop routes (a handler's or a handler
            failure's), once its transaction committed (to log and count it).
    """

    consumer_config: dict[str, object]
    transactions: TransactionalProducer
    serde: Serde
    topics: Sequence[str]
    handle: Handler
    max_in_flight: int
    expected_schema: str
    progress: ProgressLog
    on_in_flight: Callable[[int], None] | None = None
    on_dead_letter: Callable[[DecodeFailed], None] | None = None
    queues: dict[tuple[str, int], deque[_Entry]] = field(default_factory=dict)
    resume: dict[tuple[str, int], int] = field(default_factory=dict)
    """Where each owned input partition's last committed progress resumes."""
    offsets: GroupOffsets = field(default_factory=GroupOffsets)
    """The group's offsets (lag and tools)."""
    started: dict[tuple[str, int], int] = field(default_factory=dict)
    """The first offset read from each owned input partition since it was assigned."""
    waiting: deque[_Entry] = field(default_factory=deque)
    processed: int = 0
    _paused: bool = False
    consumer: Consumer = field(init=False)

    def __post_init__(self) -> None:
        self.consumer = Consumer({**self.consumer_config, "on_commit": self.offsets.on_commit})

    def in_flight(self) -> list[asyncio.Task[Handled]]:
        """The unfinished records' tasks."""
        return [e.task for q in self.queues.values() for e in q if e.task is not None and not e.task.done()]

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Start each assigned partition where its last committed progress resumes."""
        found = self.progress.assign(consumer, partitions)
        self.resume.update((tp, done.resume) for tp, done in found.items())

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        self.offsets.forget(partitions)
        for key in revoked:
            self.resume.pop(key, None)
            self.started.pop(key, None)
            for entry in self.queues.pop(key, deque()):
                if entry.task is not None:
                    entry.task.cancel()
        self.waiting = deque(e for e in self.waiting if (e.record.topic, e.record.partition) not in revoked)

    def _accept(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer error %s", error)
            return
        record = SourceRecord.from_message(message)
        entry = _Entry(record)
        self.started.setdefault((record.topic, record.partition), record.offset)
        self.queues.setdefault((record.topic, record.partition), deque()).append(entry)
        self.waiting.append(entry)

    def _start(self) -> None:
        """Start waiting records, oldest first, while fewer than ``max_in_flight`` are unfinished."""
        running = len(self.in_flight())
        while self.waiting and running < self.max_in_flight:
            entry = self.waiting.popleft()
            try:
                outcome = self.handle(entry.record)
            except Exception as error:  # a handler's bug on one record: its dead letter, not a crash loop
                outcome = handler_failed(entry.record, error, self.expected_schema)
            if inspect.isawaitable(outcome):
                entry.task = asyncio.ensure_future(outcome)
                running += 1
            else:
                entry.result = fitting(entry.record, outcome, self.expected_schema)
            entry.started = True

    async def _publish_ready(self) -> int:
        """Publish every finished head of queue in order with the progress it makes, in one transaction;
        return the partitions committed (0 also when the transaction was aborted and the member rewound).

        The transaction runs in a worker thread so the calls in flight keep being served meanwhile; it
        only produces what was taken from the queues here, and nothing else produces meanwhile.
        """
        if not any(queue and queue[0].done for queue in self.queues.values()):
            return 0
        items: list[Output | DecodeFailed] = []
        commits: list[TopicPartition] = []
        drained: dict[tuple[str, int], int] = {}
        finished = 0
        for (topic, partition), queue in self.queues.items():
            last = None
            while queue and queue[0].done:
                entry = queue.popleft()
                items += entry.outputs(self.expected_schema)
                finished += 1
                last = entry.record.offset
            if last is None:
                continue
            if queue:
                commits.append(TopicPartition(topic, partition, last + 1))
            else:  # everything read is done: up to the position, past any transaction marker read
                drained[(topic, partition)] = last + 1
        if drained:
            commits += positions(self.consumer, drained)
        progress = [
            self.progress.record(tp.topic, tp.partition, Progress(tp.offset, tp.offset)) for tp in commits
        ]

        def fill(batch: Batch) -> None:
            for item in items:
                if isinstance(item, DecodeFailed):
                    out = dead_letter_record(self.serde, item)
                    batch.produce(out.topic, out.value, out.key, headers=out.headers)
                else:
                    batch.produce(item.topic, item.value, item.key, headers=list(item.headers))
            for topic, key, value, partition in progress:
                batch.produce(topic, value, key, partition=partition)

        if await asyncio.to_thread(self.transactions.run, fill) is None:
            self._rewind()
            return 0
        if self.on_dead_letter is not None:
            for item in items:
                if isinstance(item, DecodeFailed):
                    self.on_dead_letter(item)
        self.processed += finished
        self._commit(commits)
        return len(commits)

    def _rewind(self) -> None:
        """After an aborted transaction: cancel every record in flight or waiting and read each owned
        partition again from its last committed progress (or from where it was first read)."""
        for key, queue in self.queues.items():
            for entry in queue:
                if entry.task is not None:
                    entry.task.cancel()
            offset = self.resume.get(key, self.started.get(key))
            if offset is not None:
                seek_owned(self.consumer, TopicPartition(*key, offset))
        self.queues.clear()
        self.waiting.clear()

    def _commit(self, offsets: list[TopicPartition]) -> None:
        self.resume.update(((tp.topic, tp.partition), tp.offset) for tp in offsets)
        self.offsets.commit(self.consumer, offsets)

    def _commit_idle(self) -> None:
        """When nothing is read or in flight, bring the group's offsets to where the member stands."""
        if not self.waiting and not any(self.queues.values()):
            self.offsets.idle(self.consumer, self.resume)

    @property
    def _buffer(self) -> int:
        return max(self.max_in_flight, MIN_WAITING)

    def _backpressure(self) -> None:
        full = len(self.waiting) >= self._buffer
        if full != self._paused:
            (self.consumer.pause if full else self.consumer.resume)(self.consumer.assignment())
            self._paused = full

    async def run(self, stop: asyncio.Event) -> None:
        """Consume, process, publish and commit until ``stop`` is set.

        Raises:
            streams.runtime.transactions.TransactionRefused: the cluster refuses the member's writes for
                good (authorisation, a record too large for any broker); every other fault is ridden out.
        """
        self.consumer.subscribe(list(self.topics), on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)  # fmt: skip
        loop = asyncio.get_running_loop()
        publish_at = 0.0
        # The transaction's waits (an outage) run in a worker thread: they end when ``stop`` is set.
        halt = self.transactions.stop = threading.Event()
        mirror = asyncio.ensure_future(stop.wait())
        mirror.add_done_callback(lambda _: halt.set())
        try:
            while not stop.is_set():
                self._backpressure()
                room = max(1, self._buffer - len(self.waiting))
                for message in self.consumer.consume(num_messages=room, timeout=0):
                    self._accept(message)
                self._start()
                tasks = self.in_flight()
                published = 0
                if not tasks or loop.time() >= publish_at:
                    published = await self._publish_ready()
                    if published:
                        publish_at = loop.time() + PUBLISH_INTERVAL_S
                        tasks = self.in_flight()
                if self.on_in_flight is not None:
                    self.on_in_flight(len(tasks))
                if published == 0:
                    if tasks:
                        await asyncio.wait(tasks, timeout=IDLE_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
                    else:
                        self._commit_idle()
                        await asyncio.sleep(IDLE_WAIT_S)
        finally:
            mirror.cancel()
            for queue in self.queues.values():
                for entry in queue:
                    if entry.task is not None:
                        entry.task.cancel()
            if stop.is_set():
                self.offsets.close(self.consumer)
            self.consumer.close()
