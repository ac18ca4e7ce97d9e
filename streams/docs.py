"""The classification arbiter on Kafka: ``clingate docs worker``, a consumer group of its own.

Topology (topic names from :mod:`topics.catalog`):

* ``clingate.docs.classifications`` (ClassificationRequest) -> the arbiter -> ``clingate.docs.dispositions``
  (every document) and ``clingate.docs.review-packets`` (escalations, ``review_status`` pending);
* ``clingate.docs.reviews`` (Review) + the document's packet -> ``clingate.docs.ground-truth`` and the
  packet again, now ``reviewed``. The packet topic is compacted and keyed by document id, so its latest
  value per document is the review queue (``clingate docs reviews`` lists the pending ones);
* a record that does not decode into its topic's model, a review with no packet to close, or a request
  on which the arbiter raises (a bug; stage ``process``) goes to the topic's dead-letter topic
  (:mod:`streams.dlq`) before its offset is committed.

Decision: a confluent-kafka consumer loop, not a Faust agent. The arbiter keeps no table state: a
document is decided from its own record (the step machine of :mod:`processors.docs.arbiter`), and the
only state a review needs, its packet, is itself a compacted topic. What the arbiter does need is to
keep many slow LLM calls in flight without blocking the poll loop (STYLE 10). In Faust that means
``concurrency > 1``, whose acks can commit past an event still in flight (docs/faust-runtime.md 1d,
faust-streaming#606), or ``concurrency = 1``, which serialises the calls. This loop instead starts one
task per document (at most ``CLINGATE_DOCS_MAX_IN_FLIGHT``; at the bound it pauses its partitions and
keeps polling, so the group membership stays alive), and per partition publishes outputs and commits
offsets strictly in input order: an offset is committed only once the outputs of it and of every
earlier record of its partition are acknowledged by the broker. Delivery is at least once: after a
crash or a rebalance the uncommitted documents are decided again, which is safe because the arbiter is
deterministic (same request and judgements, same disposition) and the outputs are keyed by document
(dispositions and packets are compacted; consumers dedupe by ``doc_id``). The worker is therefore its
own consumer group (``CLINGATE_DOCS_GROUP_ID``, default ``clingate-docs``) started by
``clingate docs worker``; ``clingate worker`` (Faust) does not run it, and the two scale independently.

Reviews are low volume and handled in the same loop: their records complete at once (no LLM), so they
are published and committed in order like the classifications. The packet of a review is looked up in
:class:`PacketFollower`, which reads the compacted packet topic (every partition, no group) and is
caught up to the topic's end before a review whose packet it has not seen is given up as a dead letter.
Memory: one packet per escalated document, bounded by the compacted topic itself.

Rebalance: on revocation, the documents in flight of the revoked partitions are cancelled and their
offsets stay uncommitted; the partition's new owner decides them again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from prometheus_client import CollectorRegistry

from processors.docs.arbiter import ArbiterConfig, Finished
from processors.docs.packet import ground_truth
from processors.docs.v3 import TrapRules
from schemas.base import AvroModel
from schemas.common import Stage
from schemas.docs import ClassificationRequest, Review, ReviewPacket, ReviewStatus
from schemas.serde import Serde
from streams.dlq import DeadLetterRouter, Decoded, DecodeFailed, SourceRecord, decode_record
from streams.docs_arbiter import LlmCall, arbitrate
from streams.kafka_config import client_config
from streams.logs import log_dead_letter
from streams.metrics import DocsMetrics
from topics.catalog import (
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
)

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.05
"""How long the loop waits for a document to finish when no record arrived."""


class DocsDeliveryError(RuntimeError):
    """An output was not acknowledged by the broker: the worker stops without committing its input.

    Restart the worker; the uncommitted documents are decided and published again.
    """


def producer_config(bootstrap: str) -> dict[str, object]:
    """Producer settings of the docs worker and CLI: idempotent, ``acks=all``, Java's partitioner.

    ``murmur2_random`` keeps a document on the same partition number in every docs topic, whichever
    client (Java, Faust, librdkafka) wrote it.
    """
    return client_config(
        bootstrap, partitioner="murmur2_random", acks="all", **{"enable.idempotence": True, "linger.ms": 5}
    )


class PacketFollower:
    """The latest review packet of every document, read from the compacted packet topic.

    Reads every partition from the beginning without a consumer group (nothing is committed), like a
    Kafka Streams global table. Packets that do not decode are skipped with a warning: they stay in
    the topic, and the worker that wrote them is the one to fix.
    """

    def __init__(self, bootstrap: str, serde: Serde, topic: str = DOCS_REVIEW_PACKETS) -> None:
        """Assign every partition of ``topic`` from its beginning.

        Args:
            bootstrap: Kafka bootstrap servers.
            serde: the process's serde.
            topic: the packet topic.
        """
        self._topic = topic
        self._serde = serde
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": f"clingate-packet-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            # Between catch-ups nobody polls: bound what librdkafka prefetches meanwhile (default 64 MiB).
            "queued.max.messages.kbytes": 8192,
        }))  # fmt: skip
        metadata = self._consumer.list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        self._partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
        self._consumer.assign(self._partitions)
        self._next: dict[int, int] = {}
        self.packets: dict[str, ReviewPacket] = {}
        """Latest packet per document id."""

    def remember(self, packet: ReviewPacket) -> None:
        """Record a packet this process has just published (read-your-writes before it is read back)."""
        self.packets[packet.doc_id] = packet

    def _ends(self, timeout_s: float) -> dict[int, int]:
        """The end offset of every non-empty partition, retried while a partition has no leader yet."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                ends = {}
                for tp in self._partitions:
                    low, high = self._consumer.get_watermark_offsets(
                        TopicPartition(self._topic, tp.partition), timeout=timeout_s, cached=False
                    )
                    if high > low:
                        ends[tp.partition] = high
                return ends
            except KafkaException:  # e.g. NOT_LEADER_FOR_PARTITION right after the topic was created
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)

    def catch_up(self, timeout_s: float = 30.0) -> None:
        """Read until every partition's end as of now (or ``timeout_s`` passes).

        Raises:
            KafkaException: the partitions' end offsets could not be read within ``timeout_s``.
        """
        ends = self._ends(timeout_s)
        deadline_polls = max(1, int(timeout_s / 0.2))
        for _ in range(deadline_polls):
            if all(self._next.get(p, 0) >= end for p, end in ends.items()):
                return
            for message in self._consumer.consume(num_messages=500, timeout=0.2):
                self._apply(message)

    def _apply(self, message: Message) -> None:
        if message.error() is not None:
            log.warning("packet reader: %s", message.error())
            return
        record = SourceRecord.from_message(message)
        self._next[record.partition] = record.offset + 1
        outcome = decode_record(self._serde, record, ReviewPacket)
        if isinstance(outcome, DecodeFailed):
            # The reason may quote the packet's text: DEBUG only (streams.logs).
            ids = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
            log.warning("packet reader: skipping %s[%d]@%d (%s)", record.topic, record.partition,
                        record.offset, outcome.error_type, extra=ids)  # fmt: skip
            log.debug("packet reader: %s", outcome.reason, extra=ids)
            return
        self.packets[outcome.value.doc_id] = outcome.value

    def pending(self) -> list[ReviewPacket]:
        """Packets awaiting review, oldest event time first."""
        waiting = [p for p in self.packets.values() if p.review_status is ReviewStatus.PENDING]
        return sorted(waiting, key=lambda packet: (packet.ts, packet.doc_id))

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


@dataclass
class _Entry:
    """One consumed record in its partition's queue, waiting for its turn to publish and commit."""

    record: SourceRecord
    failed: DecodeFailed | None = None
    review: Review | None = None
    task: asyncio.Task[Finished] | None = None

    @property
    def done(self) -> bool:
        return self.task is None or self.task.done()


@dataclass
class DocsWorker:
    """The docs consumer loop (see the module docstring for the design).

    Attributes:
        consumer: subscribed by :meth:`run`; ``enable.auto.commit`` MUST be false.
        producer: configured with :func:`producer_config`.
        serde: the process's serde.
        packets: the packet follower (shared with the loop only; not thread-safe).
        trap_rules: V3's rule sets.
        call: the LLM call, or None for rules-only.
        max_in_flight: documents decided at once.
        metrics: dispositions, documents in flight and dead letters are counted here.
    """

    consumer: Consumer
    producer: Producer
    serde: Serde
    packets: PacketFollower
    trap_rules: TrapRules
    call: LlmCall | None
    max_in_flight: int
    metrics: DocsMetrics
    queues: dict[tuple[str, int], deque[_Entry]] = field(default_factory=dict)
    decided: int = 0
    _paused: bool = False

    @property
    def config(self) -> ArbiterConfig:
        """The arbiter configuration: LLM phases on exactly when an LLM call is configured."""
        return ArbiterConfig(trap_rules=self.trap_rules, llm_enabled=self.call is not None)

    def _running(self) -> list[asyncio.Task[Finished]]:
        return [e.task for q in self.queues.values() for e in q if e.task is not None and not e.task.done()]

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            for entry in self.queues.pop((tp.topic, tp.partition), deque()):
                if entry.task is not None:
                    entry.task.cancel()

    def _accept(self, message: Message) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("docs worker: consumer error %s", error)
            return
        record = SourceRecord.from_message(message)
        entry = _Entry(record)
        expected: type[AvroModel] = ClassificationRequest if record.topic == DOCS_CLASSIFICATIONS else Review
        outcome = decode_record(self.serde, record, expected)
        if isinstance(outcome, DecodeFailed):
            entry.failed = outcome
        elif isinstance(outcome.value, ClassificationRequest):
            entry.task = asyncio.create_task(arbitrate(outcome.value, self.config, self.call))
        else:
            assert isinstance(outcome, Decoded) and isinstance(outcome.value, Review)
            entry.review = outcome.value
        self.queues.setdefault((record.topic, record.partition), deque()).append(entry)

    def _produce(self, topic: str, key: str, value: AvroModel, errors: list[KafkaError]) -> None:
        def report(error: KafkaError | None, _message: Message) -> None:
            if error is not None:
                errors.append(error)

        self.producer.produce(topic, key=key.encode("utf-8"), value=self.serde.encode(value, topic=topic),
                              on_delivery=report)  # fmt: skip

    def _review_outputs(self, entry: _Entry, router: DeadLetterRouter, errors: list[KafkaError]) -> None:
        review = entry.review
        assert review is not None
        packet = self.packets.packets.get(review.doc_id)
        if packet is None:
            self.packets.catch_up()
            packet = self.packets.packets.get(review.doc_id)
        try:
            if packet is None:
                raise LookupError(f"no review packet for document {review.doc_id}")
            reviewed, truth = ground_truth(packet, review)
        except (LookupError, ValueError) as error:
            self._dead_letter(router, DecodeFailed(
                entry.record, Stage.PROCESS, type(error).__name__, str(error), None, Review.avro_name
            ))  # fmt: skip
            return
        self._produce(DOCS_GROUND_TRUTH, truth.doc_id, truth, errors)
        self._produce(DOCS_REVIEW_PACKETS, reviewed.doc_id, reviewed, errors)
        self.packets.remember(reviewed)

    def _dead_letter(self, router: DeadLetterRouter, failed: DecodeFailed) -> None:
        log_dead_letter(log, failed)
        router.send(failed)
        self.metrics.dead_letters.labels(failed.record.topic).inc()

    @staticmethod
    def _task_error(entry: _Entry) -> BaseException | None:
        return None if entry.task is None else entry.task.exception()

    def _publish_ready(self, router: DeadLetterRouter) -> int:
        """Publish the outputs of every finished head of queue, flush, then commit; return records done."""
        errors: list[KafkaError] = []
        commits: list[TopicPartition] = []
        for (topic, partition), queue in self.queues.items():
            last = None
            while queue and queue[0].done:
                entry = queue.popleft()
                if entry.failed is not None:
                    self._dead_letter(router, entry.failed)
                elif entry.review is not None:
                    self._review_outputs(entry, router, errors)
                elif (error := self._task_error(entry)) is not None:
                    # A processor bug on this input: dead-letter it rather than crash-loop on it.
                    name, expected = type(error).__name__, ClassificationRequest.avro_name
                    failed = DecodeFailed(entry.record, Stage.PROCESS, name, str(error), None, expected)
                    self._dead_letter(router, failed)
                else:
                    assert entry.task is not None
                    finished = entry.task.result()
                    disposition = finished.disposition
                    self._produce(DOCS_DISPOSITIONS, disposition.doc_id, disposition, errors)
                    self.metrics.decided(disposition)
                    ids = {"document_id": disposition.doc_id, "decision": str(disposition.decision)}
                    log.info("document %s: %s", disposition.doc_id, disposition.decision, extra=ids)
                    if finished.packet is not None:
                        self._produce(DOCS_REVIEW_PACKETS, finished.packet.doc_id, finished.packet, errors)
                        self.packets.remember(finished.packet)
                    self.decided += 1
                last = entry.record.offset
            if last is not None:
                commits.append(TopicPartition(topic, partition, last + 1))
        if not commits:
            return 0
        remaining = self.producer.flush(30)
        if errors or remaining:
            detail = ", ".join(e.str() for e in errors) or f"{remaining} outputs unacknowledged after 30 s"
            raise DocsDeliveryError(f"docs outputs not delivered ({detail}); input offsets not committed")
        self.consumer.commit(offsets=commits, asynchronous=False)
        return len(commits)

    def _backpressure(self) -> None:
        full = len(self._running()) >= self.max_in_flight
        if full != self._paused:
            assignment = self.consumer.assignment()
            (self.consumer.pause if full else self.consumer.resume)(assignment)
            self._paused = full

    async def run(self, stop: asyncio.Event) -> None:
        """Consume, decide, publish and commit until ``stop`` is set.

        Raises:
            DocsDeliveryError: an output was not acknowledged (nothing further is committed).
            DeadLetterDeliveryError: a dead letter was not acknowledged.
        """
        router = DeadLetterRouter(self.producer, self.serde)
        self.consumer.subscribe([DOCS_CLASSIFICATIONS, DOCS_REVIEWS], on_revoke=self._on_revoke)
        try:
            while not stop.is_set():
                self._backpressure()
                running = len(self._running())
                self.metrics.in_flight.set(running)
                room = max(1, self.max_in_flight - running)
                for message in self.consumer.consume(num_messages=room, timeout=0):
                    self._accept(message)
                if self._publish_ready(router) == 0:
                    tasks = self._running()
                    if tasks:
                        await asyncio.wait(tasks, timeout=IDLE_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
                    else:
                        await asyncio.sleep(IDLE_WAIT_S)
        finally:
            for queue in self.queues.values():
                for entry in queue:
                    if entry.task is not None:
                        entry.task.cancel()


def consumer_config(bootstrap: str, group_id: str) -> dict[str, object]:
    """Consumer settings of the docs worker: manual, in-order commits; read committed outputs only."""
    return client_config(bootstrap, **{
        "group.id": group_id, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })  # fmt: skip


async def run_worker(
    bootstrap: str,
    serde: Serde,
    trap_rules: TrapRules,
    call: LlmCall | None,
    *,
    group_id: str,
    max_in_flight: int,
    stop: asyncio.Event,
    on_ready: Callable[[DocsWorker], None] | None = None,
    metrics: DocsMetrics | None = None,
) -> DocsWorker:
    """Run one docs worker until ``stop`` is set; return it (its counters) when it stopped.

    Args:
        bootstrap: Kafka bootstrap servers.
        serde: the process's serde.
        trap_rules: V3's rule sets.
        call: the LLM call, or None for rules-only.
        group_id: the consumer group.
        max_in_flight: documents decided at once.
        stop: set it to stop the worker after the current step (outputs published so far are committed).
        on_ready: called with the worker once it is built.
        metrics: the worker's metrics (their lag gauge hooks into the consumer); None: a private registry.
    """
    metrics = metrics or DocsMetrics(CollectorRegistry())
    consumer = Consumer({**consumer_config(bootstrap, group_id), **metrics.lag.client_config()})
    producer = Producer(producer_config(bootstrap))
    packets = PacketFollower(bootstrap, serde)
    worker = DocsWorker(consumer, producer, serde, packets, trap_rules, call, max_in_flight, metrics)
    if on_ready is not None:
        on_ready(worker)
    try:
        await worker.run(stop)
    finally:
        consumer.close()
        packets.close()
        producer.flush(30)
    return worker
