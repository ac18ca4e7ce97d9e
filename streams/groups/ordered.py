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
* an offset is committed only after the outputs of that record and of every earlier record of its
  partition were acknowledged by the broker (``flush``, then an asynchronous commit: a commit lost in a
  crash re-delivers, it never skips). A crash re-delivers the uncommitted records and their calls are
  made again: delivery is at least once. Outputs are idempotent downstream: candidates carry
  content-derived ids (consumers dedupe by candidate id), and verdicts carry their candidate's id,
  so the memory applies one verdict per candidate and counts a re-published one in
  ``clingate_dbpm_verdicts_duplicate_total`` (:mod:`processors.dbpm.ledger`, within its event-time
  horizon). One case stays open: a re-issued call that judges differently *so that its verdict
  updates another signature* (a QA FAIL with an error class updates the class pattern, a pass the
  question's) lands on another memory partition, whose ledger has not seen the candidate, and is
  applied there too. With greedy decoding a re-issued call repeats its answer; a transactional
  producer (``send_offsets_to_transaction``) would close this case as well;
* a handler returns its outputs as data: records to produce and dead letters (:class:`DecodeFailed`
  values, routed by :class:`streams.runtime.dlq.DeadLetterRouter`, which waits for the acknowledgement); a
  handler that raises (a bug) dead-letters its record with stage ``process`` instead of crash-looping,
  and a record with an output larger than its topic admits is dead-lettered with stage ``produce``
  (the broker would refuse the output on every retry);
* on revocation the revoked partitions' tasks are cancelled and their offsets stay uncommitted; the
  partition's new owner processes them again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from streams.runtime.dlq import (
    DeadLetterRouter,
    DecodeFailed,
    SourceRecord,
    oversized_output,
    processing_failed,
)
from streams.runtime.kafka_clients import produce_waiting
from streams.runtime.kafka_config import client_config, liveness_config

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


class OutputDeliveryError(RuntimeError):
    """An output was not acknowledged by the broker: the loop stops without committing its input.

    Restart the group member; the uncommitted records are processed and published again.
    """


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
        consumer: ``enable.auto.commit`` MUST be false; :meth:`run` subscribes it.
        producer: idempotent, ``acks=all`` (e.g. :func:`streams.worker.dbpm.producer_config`).
        router: dead-letter router on ``producer``.
        topics: the input topics.
        handle: the per-record handler.
        max_in_flight: unfinished records at once (>= 1).
        expected_schema: Avro name of the input model, for dead letters of handler failures.
        on_in_flight: called with the number of unfinished records after every step (a gauge).
        on_dead_letter: called with every dead letter the loop routes (a handler's or a handler
            failure's), right after it is handed to the router (to log and count it).
    """

    consumer: Consumer
    producer: Producer
    router: DeadLetterRouter
    topics: Sequence[str]
    handle: Handler
    max_in_flight: int
    expected_schema: str
    on_in_flight: Callable[[int], None] | None = None
    on_dead_letter: Callable[[DecodeFailed], None] | None = None
    queues: dict[tuple[str, int], deque[_Entry]] = field(default_factory=dict)
    waiting: deque[_Entry] = field(default_factory=deque)
    processed: int = 0
    _paused: bool = False

    def in_flight(self) -> list[asyncio.Task[Handled]]:
        """The unfinished records' tasks."""
        return [e.task for q in self.queues.values() for e in q if e.task is not None and not e.task.done()]

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        for key in revoked:
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

    def _produce(self, output: Output, errors: list[KafkaError]) -> None:
        def report(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                errors.append(error)

        produce_waiting(self.producer, output.topic, key=output.key, value=output.value,
                        headers=list(output.headers), on_delivery=report)  # fmt: skip

    async def _publish_ready(self) -> int:
        """Publish every finished head of queue in order, flush, commit; return partitions committed.

        The flush waits in a worker thread so the calls in flight keep being served meanwhile; nothing
        else produces during it (handlers return outputs, only this method produces them).
        """
        errors: list[KafkaError] = []
        commits: list[TopicPartition] = []
        for (topic, partition), queue in self.queues.items():
            last = None
            while queue and queue[0].done:
                entry = queue.popleft()
                for item in entry.outputs(self.expected_schema):
                    if isinstance(item, DecodeFailed):
                        self.router.send(item)
                        if self.on_dead_letter is not None:
                            self.on_dead_letter(item)
                    else:
                        self._produce(item, errors)
                self.processed += 1
                last = entry.record.offset
            if last is not None:
                commits.append(TopicPartition(topic, partition, last + 1))
        if not commits:
            return 0
        remaining = await asyncio.to_thread(self.producer.flush, 30)
        if errors or remaining:
            detail = ", ".join(e.str() for e in errors) or f"{remaining} outputs unacknowledged after 30 s"
            raise OutputDeliveryError(f"outputs not delivered ({detail}); input offsets not committed")
        # Asynchronous: the outputs are already acknowledged, so waiting for the commit's round trip
        # buys nothing; a commit lost in a crash only re-delivers records whose outputs are idempotent.
        self.consumer.commit(offsets=commits, asynchronous=True)
        return len(commits)

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
            OutputDeliveryError: an output was not acknowledged (nothing further is committed).
            DeadLetterDeliveryError: a dead letter was not acknowledged.
        """
        self.consumer.subscribe(list(self.topics), on_revoke=self._on_revoke)
        loop = asyncio.get_running_loop()
        publish_at = 0.0
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
                        await asyncio.sleep(IDLE_WAIT_S)
        finally:
            for queue in self.queues.values():
                for entry in queue:
                    if entry.task is not None:
                        entry.task.cancel()
