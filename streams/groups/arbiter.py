"""The classification arbiter on Kafka: ``clingate arbiter worker``, a consumer group of its own.

Topology (topic names from :mod:`topics.catalog`):

* ``clingate.docs.classifications`` (ClassificationRequest) -> the arbiter -> ``clingate.docs.dispositions``
  (every document) and ``clingate.docs.review-packets`` (escalations, ``review_status`` pending);
* ``clingate.docs.reviews`` (Review) + the document's packet -> ``clingate.docs.ground-truth`` and the
  packet again, now ``reviewed``. The packet topic is compacted and keyed by document id, so its latest
  value per document is the review queue (``clingate arbiter reviews`` lists the pending ones);
* a record that does not decode into its topic's model, a review with no packet to close, or a request
  on which the arbiter raises (a bug; stage ``process``) goes to the topic's dead-letter topic
  (:mod:`streams.runtime.dlq`), in the transaction that commits the loop's progress past it.

Decision: the ordered loop, not a table loop. The arbiter keeps no table state: a document is decided
from its own record (the step machine of :mod:`processors.docs.arbiter`), and the only state a review
needs, its packet, is itself a compacted topic. What the arbiter does need is to keep many slow LLM
calls in flight without blocking the poll loop (one call at a time would cap the worker at one document
per call latency, and a member that stops polling is put out of its group), and to commit no progress
past a call still in flight. The worker runs the loop the LLM groups share,
:class:`streams.groups.ordered.OrderedLoop`: one task per document (at most
``CLINGATE_DOCS_MAX_IN_FLIGHT`` unfinished; beyond a buffer of waiting records it pauses its partitions
and keeps polling, so the group membership stays alive), and per partition outputs published strictly
in input order: a record's outputs are committed in one Kafka transaction with its partition's
progress, together with or after those of every earlier record of its partition. :class:`DocsWorker` is
the loop's handler and returns each record's outputs as data. Processing is at least once: after a
crash or a rebalance the documents whose outputs were not committed are decided again, which is safe
because the arbiter is deterministic (same request and judgements, same disposition) and the outputs are
keyed by document (dispositions and packets are compacted); a ``read_committed`` consumer reads each
committed output once. The worker is its own consumer group (``CLINGATE_DOCS_GROUP_ID``, default
``clingate-docs``) started by ``clingate arbiter worker``; ``clingate worker`` does not run it, and the
two scale independently.

Reviews are low volume and handled in the same loop: their records complete at once (no LLM), so they
are published and committed in order like the classifications. The packet of a review is looked up in
:class:`Packets`; the worker's are a :class:`PacketFollower`, which reads the compacted packet topic
(every partition, no group) and is caught up to the topic's end before a review whose packet it has
not seen is given up as a dead letter.
A packet this worker decides is remembered by the follower as soon as its document is decided (before
the loop publishes it): a review consumed right after finds it. Held in RAM: one packet per escalated
document, bounded by the compacted topic itself.

Counting (``clingate_docs_*``): a disposition when its document is decided, a dead letter once the
transaction that routes it committed (the ``on_dead_letter`` hook of
:class:`streams.runtime.core.BatchCore`); a document decided again after a crash is counted again, as
the at-least-once processing above implies.

Rebalance: on revocation, the documents in flight of the revoked partitions are cancelled and their
offsets stay uncommitted; the partition's new owner decides them again.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry

from processors.docs.arbiter import ArbiterConfig
from processors.docs.packet import ground_truth
from processors.docs.v3 import TrapRules
from schemas.base import AvroModel
from schemas.common import Stage
from schemas.docs import (
    ClassificationRequest,
    DocumentType,
    MixtureEntry,
    Review,
    ReviewDecision,
    ReviewPacket,
    ReviewStatus,
    Segment,
)
from schemas.serde import Serde
from streams.groups.arbiter_calls import LlmCall, arbitrate
from streams.groups.metrics import DocsMetrics
from streams.groups.ordered import Handled, OrderedLoop, consumer_config, transactional_producer
from streams.runtime.core import BatchCore, Output
from streams.runtime.dlq import PRODUCER_LIMITS, Rejected, SourceRecord, decode_record
from streams.runtime.kafka_clients import consume_batch, producer_config
from streams.runtime.kafka_config import client_config
from streams.runtime.logs import log_dead_letter
from streams.runtime.progress import ProgressLog
from topics.catalog import (
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
)

log = logging.getLogger(__name__)


def make_review(
    doc_id: str,
    reviewer: str,
    decision: ReviewDecision,
    *,
    corrected_type: DocumentType | None = None,
    corrected_segments: list[Segment] | None = None,
    corrected_mixture: list[MixtureEntry] | None = None,
    notes: str = "",
) -> Review:
    """An SME's decision on ``doc_id`` as ``clingate arbiter review`` and the console record it.

    Its event time is now: whoever records it (the command, the console's SME page) is the event's source,
    not a processor, and the time is in the event, so a replay of the reviews topic sees the same time.

    Raises:
        pydantic.ValidationError: a correction without ``corrected_type``.
    """
    return Review(
        doc_id=doc_id, ts=datetime.now(UTC), reviewer=reviewer, decision=decision,
        corrected_dominant_type=corrected_type, corrected_segments=corrected_segments,
        corrected_mixture=corrected_mixture, notes=notes,
    )  # fmt: skip


def pending(packets: Iterable[ReviewPacket]) -> list[ReviewPacket]:
    """The review queue: the packets of ``packets`` awaiting review, oldest event time first (then by id)."""
    waiting = [p for p in packets if p.review_status is ReviewStatus.PENDING]
    return sorted(waiting, key=lambda packet: (packet.ts, packet.doc_id))


class Packets(abc.ABC):
    """The latest review packet of every document, built from the packet topic's records.

    What a review needs and nothing else: the packet it closes. Where the records come from is the
    subclass's :meth:`catch_up` (:class:`PacketFollower` reads the compacted topic from Kafka; the
    topology test driver reads its in-memory topic). Packets that do not decode are skipped with a
    warning: they stay in the topic, and the worker that wrote them is the one to fix.

    Args:
        serde: the process's serde.
    """

    def __init__(self, serde: Serde) -> None:
        self._serde = serde
        self.packets: dict[str, ReviewPacket] = {}
        """Latest packet per document id."""

    def remember(self, packet: ReviewPacket) -> None:
        """Record a packet this process has just published (read-your-writes before it is read back)."""
        self.packets[packet.doc_id] = packet

    def apply(self, record: SourceRecord) -> None:
        """Take one record of the packet topic (offset order per partition) as its document's latest."""
        outcome = decode_record(self._serde, record, ReviewPacket)
        if isinstance(outcome, Rejected):
            # The reason may quote the packet's text: DEBUG only (streams.runtime.logs).
            ids = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
            log.warning("packet reader: skipping %s[%d]@%d (%s)", record.topic, record.partition,
                        record.offset, outcome.error_type, extra=ids)  # fmt: skip
            log.debug("packet reader: %s", outcome.reason, extra=ids)
            return
        self.packets[outcome.value.doc_id] = outcome.value

    @abc.abstractmethod
    def catch_up(self) -> None:
        """Read the packet records published so far that this reader has not read yet."""

    def find(self, doc_id: str) -> ReviewPacket | None:
        """The latest packet of ``doc_id``, caught up with the topic first if this reader has none yet."""
        packet = self.packets.get(doc_id)
        if packet is None:
            self.catch_up()
            packet = self.packets.get(doc_id)
        return packet

    def pending(self) -> list[ReviewPacket]:
        """Packets awaiting review, oldest event time first."""
        return pending(self.packets.values())


ONE_READ_FETCH_WAIT_MS = 20
"""The broker's fetch hold for a :class:`PacketFollower` made for one read."""


class PacketFollower(Packets):
    """:class:`Packets` read from the compacted packet topic on Kafka.

    Reads every partition from the beginning without a consumer group (nothing is committed), like a
    Kafka Streams global table.
    """

    def __init__(
        self,
        bootstrap: str,
        serde: Serde,
        topic: str = DOCS_REVIEW_PACKETS,
        group_prefix: str = "clingate-packet-reader-",
        fetch_wait_ms: int = 500,
    ) -> None:
        """Assign every partition of ``topic`` from its beginning.

        Args:
            bootstrap: Kafka bootstrap servers.
            serde: the process's serde.
            topic: the packet topic.
            group_prefix: the prefix of its throw-away group id (the ACL plan grants each principal its
                own prefix; it commits nothing).
            fetch_wait_ms: how long the broker holds a fetch of a caught-up partition. A follower made
                for one read (a page, a command) takes :data:`ONE_READ_FETCH_WAIT_MS`: its catch-up ends
                after a few fetches, each of which would otherwise be held this long; one that lives on
                keeps librdkafka's default, since its fetcher goes on fetching between catch-ups.
        """
        super().__init__(serde)
        self._topic = topic
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": f"{group_prefix}{uuid.uuid4().hex}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "fetch.wait.max.ms": fetch_wait_ms,
            # Between catch-ups nobody polls: bound what librdkafka prefetches meanwhile (default 64 MiB).
            "queued.max.messages.kbytes": 8192,
        }))  # fmt: skip
        metadata = self._consumer.list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        self._partitions = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
        self._consumer.assign(self._partitions)
        self._next: dict[int, int] = {}

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
            for message in consume_batch(self._consumer, 500, 0.2):
                if message.error() is not None:
                    log.warning("packet reader: %s", message.error())
                    continue
                record = SourceRecord.from_message(message)
                self._next[record.partition] = record.offset + 1
                self.apply(record)
            # A partition the docs worker wrote in transactions ends with a commit marker, which is never
            # a message: it is read once the consumer's position passed its end.
            for tp in self._consumer.position([TopicPartition(self._topic, p) for p in ends]):
                if tp.offset > self._next.get(tp.partition, 0):
                    self._next[tp.partition] = tp.offset

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


@dataclass
class DocsWorker:
    """The per-record handler the arbiter group's :class:`~streams.groups.ordered.OrderedLoop` runs.

    A classification request becomes a task (the arbiter, LLM calls included) whose outputs are its
    disposition and, on escalation, its review packet; a review completes at once with its ground truth
    and the packet again, now reviewed; an undecodable record, or a review with no packet to close,
    completes at once as a dead letter.

    Attributes:
        serde: the process's serde.
        packets: the latest packets (a :class:`PacketFollower` in production; used from the loop's
            event loop only, not thread-safe).
        trap_rules: V3's rule sets.
        call: the LLM call, or None for rules-only.
        metrics: dispositions and dead letters are counted here (the loop sets the in-flight gauge).
        decided: documents decided so far.
    """

    serde: Serde
    packets: Packets
    trap_rules: TrapRules
    call: LlmCall | None
    metrics: DocsMetrics
    decided: int = 0

    @property
    def config(self) -> ArbiterConfig:
        """The arbiter configuration: LLM phases on exactly when an LLM call is configured."""
        return ArbiterConfig(trap_rules=self.trap_rules, llm_enabled=self.call is not None)

    def __call__(self, record: SourceRecord) -> Handled | Awaitable[Handled]:
        """Decode a record; a classification is decided as a task, anything else returns at once."""
        expected: type[AvroModel] = ClassificationRequest if record.topic == DOCS_CLASSIFICATIONS else Review
        outcome = decode_record(self.serde, record, expected)
        if isinstance(outcome, Rejected):
            return [outcome]
        if isinstance(outcome.value, ClassificationRequest):
            return self._arbitrate(outcome.value)
        assert isinstance(outcome.value, Review)
        return self._review(record, outcome.value)

    def _output(self, topic: str, key: str, value: AvroModel) -> Output:
        return Output(topic, key.encode("utf-8"), self.serde.encode(value, topic=topic))

    async def _arbitrate(self, request: ClassificationRequest) -> Handled:
        finished = await arbitrate(request, self.config, self.call)
        disposition = finished.disposition
        outputs = [self._output(DOCS_DISPOSITIONS, disposition.doc_id, disposition)]
        if finished.packet is not None:
            outputs.append(self._output(DOCS_REVIEW_PACKETS, finished.packet.doc_id, finished.packet))
            # Read-your-writes for a review consumed before the packet is read back from its topic.
            self.packets.remember(finished.packet)
        self.metrics.decided(disposition)
        ids = {"document_id": disposition.doc_id, "decision": str(disposition.decision)}
        log.info("document %s: %s", disposition.doc_id, disposition.decision, extra=ids)
        self.decided += 1
        return outputs

    def _review(self, record: SourceRecord, review: Review) -> Handled:
        packet = self.packets.find(review.doc_id)
        try:
            if packet is None:
                raise LookupError(f"no review packet for document {review.doc_id}")
            reviewed, truth = ground_truth(packet, review)
        except (LookupError, ValueError) as error:
            name, reason = type(error).__name__, str(error)
            return [Rejected(record, Stage.PROCESS, name, reason, None, Review.avro_name)]
        self.packets.remember(reviewed)
        return [self._output(DOCS_GROUND_TRUTH, truth.doc_id, truth),
                self._output(DOCS_REVIEW_PACKETS, reviewed.doc_id, reviewed)]  # fmt: skip

    def dead_lettered(self, failed: Rejected) -> None:
        """Log and count a dead letter the loop routes (undecodable, no packet, or an arbiter bug)."""
        log_dead_letter(log, failed)
        self.metrics.dead_letters.labels(failed.record.topic).inc()


async def run_worker(
    bootstrap: str,
    serde: Serde,
    trap_rules: TrapRules,
    call: LlmCall | None,
    *,
    group_id: str,
    max_in_flight: int,
    session_timeout_s: float,
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
        session_timeout_s: how long a silent member keeps its partitions
            (``CLINGATE_CONSUMER_SESSION_TIMEOUT_S``).
        stop: set it to stop the worker after the current step (outputs published so far are committed).
        on_ready: called with the worker once it is built.
        metrics: the worker's metrics (their lag gauge hooks into the consumer); None: a private registry.
    """
    metrics = metrics or DocsMetrics(CollectorRegistry())
    inputs = [DOCS_CLASSIFICATIONS, DOCS_REVIEWS]
    progress = ProgressLog(bootstrap, group_id, inputs)
    packets = PacketFollower(bootstrap, serde)
    worker = DocsWorker(serde, packets, trap_rules, call, metrics)
    core = BatchCore(
        group_id, {**consumer_config(bootstrap, group_id, session_timeout_s), **metrics.lag.client_config()},
        # murmur2 (every clingate producer's): a document is on the same partition number in every docs
        # topic, whichever client wrote it.
        transactional_producer(producer_config(bootstrap, **{"linger.ms": 5, **PRODUCER_LIMITS}), group_id),
        serde, metrics.loops,
        on_dead_letter=worker.dead_lettered,
    )  # fmt: skip
    loop = OrderedLoop(
        core, inputs, worker, max_in_flight, ClassificationRequest.avro_name, progress,
        on_in_flight=metrics.in_flight.set,
    )  # fmt: skip
    if on_ready is not None:
        on_ready(worker)
    try:
        await loop.run(stop)
    finally:
        packets.close()
        progress.close()
    return worker
