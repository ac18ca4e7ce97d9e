"""An ordered, bounded in-flight consumer loop for slow per-record work (the LLM consumer groups).

The generator, the verifier, the arbiter group and the clinician's agent
(:mod:`streams.groups.generator`, :mod:`streams.groups.verifier`, :mod:`streams.groups.arbiter`,
:mod:`streams.agent.worker`) each do seconds of LLM work per record and must keep many records in
flight without blocking the poll loop (one call at a time would cap a member at one record per call
latency, and a member that stops polling for ``max.poll.interval.ms`` is put out of its group), yet
publish and commit in input order. This loop gives them that, on one confluent-kafka consumer and one
producer:

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
* a handler returns its outputs as data: records to produce and dead letters (:class:`Rejected`
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

from confluent_kafka import Message, TopicPartition

from streams.runtime.core import BatchCore, Output, Step
from streams.runtime.dlq import Rejected, SourceRecord, oversized_output, processing_failed
from streams.runtime.kafka_config import client_config, liveness_config
from streams.runtime.progress import Progress, ProgressLog
from streams.runtime.transactions import TransactionalProducer

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.02
"""How long the loop waits for a record to finish when nothing was published."""

PUBLISH_INTERVAL_S = 0.025
"""Least time between two publications while records are still in flight.

A publication is a Kafka transaction (its records and its commit, round trips to the broker waited
for in a worker thread) and an offset commit. Published as soon as any record finished, the verifier
group under load made a publication per two or three verdicts: ~140 produce requests and ~90 offset
commits a second in the demo's bulk phase (broker request metrics over JMX), each with its thread
hand-off. Held for up to 25 ms, a publication carries every record that finished meanwhile, at a
latency cost small beside an LLM call; a loop with nothing left in flight publishes at once, so a lone
record (the demo's lockstep slice, a quiet stream) waits for nothing."""

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


Handled = Sequence[Output | Rejected]
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
    """The loop (see the module docstring), on a :class:`~streams.runtime.core.BatchCore`.

    Attributes:
        core: the member's batch core (its consumer from :func:`consumer_config`, its producer from
            :func:`transactional_producer`); :meth:`run` subscribes it and closes it.
        topics: the input topics.
        handle: the per-record handler.
        max_in_flight: unfinished records at once (>= 1).
        expected_schema: Avro name of the input model, for dead letters of handler failures.
        progress: the group's progress log (where each input partition's outputs are committed to).
        on_in_flight: called with the number of unfinished records after every step (a gauge).
    """

    core: BatchCore
    topics: Sequence[str]
    handle: Handler
    max_in_flight: int
    expected_schema: str
    progress: ProgressLog
    on_in_flight: Callable[[int], None] | None = None
    queues: dict[tuple[str, int], deque[_Entry]] = field(default_factory=dict)
    waiting: deque[_Entry] = field(default_factory=deque)
    processed: int = 0
    _paused: bool = False

    def in_flight(self) -> list[asyncio.Task[Handled]]:
        """The unfinished records' tasks."""
        return [e.task for q in self.queues.values() for e in q if e.task is not None and not e.task.done()]

    def _assigned(self, partitions: list[TopicPartition]) -> dict[tuple[str, int], int]:
        """Start each assigned partition where its last committed progress resumes."""
        return {tp: done.resume for tp, done in self.progress.assigned(partitions).items()}

    def _revoked(self, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        for key in revoked:
            for entry in self.queues.pop(key, deque()):
                if entry.task is not None:
                    entry.task.cancel()
        self.waiting = deque(e for e in self.waiting if (e.record.topic, e.record.partition) not in revoked)

    def _accept(self, message: Message) -> None:
        entry = _Entry(SourceRecord.from_message(message))
        self.queues.setdefault((entry.record.topic, entry.record.partition), deque()).append(entry)
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
        """Publish every finished head of queue in order with the progress it makes, in one step;
        return the partitions committed (0 also when the step was aborted and the member rewound).

        The step is committed in a worker thread so the calls in flight keep being served meanwhile; it
        only produces what was taken from the queues here, and nothing else produces meanwhile.
        """
        if not any(queue and queue[0].done for queue in self.queues.values()):
            return 0
        outputs: list[Output] = []
        dead_letters: list[Rejected] = []
        commits: list[TopicPartition] = []
        drained: dict[tuple[str, int], int] = {}
        finished = 0
        for (topic, partition), queue in self.queues.items():
            last = None
            while queue and queue[0].done:
                entry = queue.popleft()
                for item in entry.outputs(self.expected_schema):
                    (dead_letters if isinstance(item, Rejected) else outputs).append(item)
                finished += 1
                last = entry.record.offset
            if last is None:
                continue
            if queue:
                commits.append(TopicPartition(topic, partition, last + 1))
            else:  # everything read is done: up to the position, past any transaction marker read
                drained[(topic, partition)] = last + 1
        if drained:
            commits += self.core.positions(drained)
        progress = [
            self.progress.record(tp.topic, tp.partition, Progress(tp.offset, tp.offset)) for tp in commits
        ]
        step = Step(dead_letters, outputs, progress, commits)
        if not await asyncio.to_thread(self.core.commit, step):
            self._rewound()
            return 0
        self.processed += finished
        return len(commits)

    def _rewound(self) -> None:
        """After an aborted step (the core sought every partition back to its last commit): cancel every
        record in flight or waiting; they are read and their calls made again."""
        for queue in self.queues.values():
            for entry in queue:
                if entry.task is not None:
                    entry.task.cancel()
        self.queues.clear()
        self.waiting.clear()

    @property
    def _buffer(self) -> int:
        return max(self.max_in_flight, MIN_WAITING)

    def _backpressure(self) -> None:
        full = len(self.waiting) >= self._buffer
        if full != self._paused:
            consumer = self.core.consumer
            (consumer.pause if full else consumer.resume)(consumer.assignment())
            self._paused = full

    async def run(self, stop: asyncio.Event) -> None:
        """Consume, process, publish and commit until ``stop`` is set.

        Raises:
            streams.runtime.transactions.TransactionRefused: the cluster refuses the member's writes for
                good (authorisation, a record too large for any broker); every other fault is ridden out.
        """
        self.core.subscribe(self.topics, self._assigned, self._revoked)
        loop = asyncio.get_running_loop()
        publish_at = 0.0
        # The transaction's waits (an outage) run in a worker thread: they end when ``stop`` is set.
        halt = self.core.transactions.stop = threading.Event()
        mirror = asyncio.ensure_future(stop.wait())
        mirror.add_done_callback(lambda _: halt.set())
        try:
            while not stop.is_set():
                self._backpressure()
                for message in self.core.read(max(1, self._buffer - len(self.waiting)), 0):
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
                        if not self.waiting and not any(self.queues.values()):
                            self.core.idle()
                        await asyncio.sleep(IDLE_WAIT_S)
        finally:
            mirror.cancel()
            for queue in self.queues.values():
                for entry in queue:
                    if entry.task is not None:
                        entry.task.cancel()
            self.core.close(durable=stop.is_set())
