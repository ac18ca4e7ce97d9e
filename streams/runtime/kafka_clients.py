"""The confluent-kafka clients clingate's tools make, the offsets they read, and the batch read every
consumer loop uses (:func:`consume_batch`), in one place.

The replay, the demo, the benchmarks and the test harness read topics from outside the workers: they
assign partitions themselves (joining no group), start at the current end of a topic or at an offset
they remember, and produce with idempotence. Every client is built from
:func:`~streams.runtime.kafka_config.client_config`, so it carries the process's security settings.
(:mod:`streams.runtime.kafka_config` itself does not import the client library, so that commands
which only read settings stay quick to start.)
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from streams.runtime.kafka_config import admin_client, client_config
from streams.runtime.settings import Settings
from topics.admin import ensure_topics
from topics.catalog import build_catalog

log = logging.getLogger(__name__)

CATCH_UP: Mapping[str, object] = {"queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10}
"""librdkafka settings of a consumer that reads a backlog as fast as it can take it: a table's restore,
the gate's memory view, a progress read, replay's read-back. Once its local queue holds
``queued.min.messages`` records (default 100,000, counted over every partition the consumer reads) or
``queued.max.messages.kbytes``, librdkafka postpones the next fetch by ``fetch.queue.backoff.ms``
(default one second); a reader that empties the queue in a fraction of that then waits out the rest,
once per queueful. Here the record threshold is ten times higher, so the queue's size bound (64 MiB by
default) usually comes first, and a full queue is looked at again after 10 ms (the figures:
docs/performance.md, "Runtime side by side")."""


def ensure_catalog(settings: Settings, bootstrap: str) -> None:
    """Create the catalog's missing topics at a process's start, unless ``CLINGATE_ENSURE_TOPICS`` is
    false: where a provisioning job owns the topics, a worker's principal holds no grant to create them
    and must not try (the attempt fails with an authorisation error)."""
    if settings.ensure_topics_on_start:
        catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
        ensure_topics(admin_client(bootstrap), catalog)


def reader(bootstrap: str, name: str, **overrides: object) -> Consumer:
    """A consumer that assigns its partitions itself and commits nothing.

    Its group id, ``clingate-<name>-<random>``, is its own: it never joins or disturbs a group.

    Args:
        bootstrap: Kafka bootstrap servers.
        name: what reads, for the group id (e.g. ``replay``, ``demo``).
        **overrides: further librdkafka settings (see :func:`client_config`).
    """
    group = f"clingate-{name}-{uuid.uuid4().hex[:8]}"
    return Consumer(client_config(bootstrap, **{"group.id": group, "enable.auto.commit": False, **overrides}))


def producer_config(bootstrap: str, **overrides: object) -> dict[str, object]:
    """librdkafka producer settings for every clingate client: idempotent, ``acks=all``, and Java's
    murmur2 partitioner (``murmur2_random``, :func:`topics.partitioner.partition_for`), so that "the
    partition of a key" means the same thing to every client: a verdict keyed by
    :func:`streams.worker.keys.verdict_key` lands on the memory partition of its signature, a candidate
    on its patient's. librdkafka's default (``consistent_random``, CRC32) would scatter them.

    Args:
        bootstrap: Kafka bootstrap servers.
        **overrides: Further librdkafka settings (batching, queue sizes); dots spelt as in
            librdkafka, passed through a dict (``**{"linger.ms": 20}``).
    """
    return client_config(
        bootstrap, partitioner="murmur2_random", **{"enable.idempotence": True, "acks": "all", **overrides}
    )


def produce_waiting(producer: Producer, topic: str, **kwargs: Any) -> None:
    """``producer.produce(topic, **kwargs)``; while librdkafka's local queue is full, serve delivery
    reports (which lets it send) and try again, instead of failing with ``BufferError``."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)


def produce_in_transaction(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes | None]], name: str
) -> None:
    """``records`` (key, value; None: a tombstone) on ``topic`` in one committed transaction of a producer
    of its own (transactional id ``clingate-<name>-<random>``), as the workers write: a
    ``read_committed`` reader sees all of them or none, and each partition written ends with a commit
    marker."""
    writer = Producer(
        {**producer_config(bootstrap), "transactional.id": f"clingate-{name}-{uuid.uuid4().hex}"}
    )
    writer.init_transactions()
    writer.begin_transaction()
    for key, value in records:
        produce_waiting(writer, topic, key=key, value=value)
    writer.commit_transaction()


def consume_batch(consumer: Consumer, limit: int, timeout_s: float) -> list[Message]:
    """The records (and events: partition EOF, errors) ``consumer`` has, at most ``limit``: waits up to
    ``timeout_s`` for the first, then takes only what is already fetched.

    librdkafka's batch read (``consume(num_messages, timeout)``) waits until the batch is full or the
    whole timeout has passed, so a loop on it holds every record of a quiet moment for the whole
    timeout; this returns as soon as the first record is there, and still hands a busy loop whole
    batches.
    """
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=limit - 1, timeout=0)] if limit > 1 else [first]


def seek_owned(consumer: Consumer, tp: TopicPartition) -> None:
    """Seek ``tp`` back (a batch to apply again), unless the consumer no longer owns its partition: a
    rebalance took it while the batch was out (a long broker outage) and the consumer has not yet
    served the revocation; the partition's next owner starts from what was committed."""
    try:
        consumer.seek(tp)
    except KafkaException as exc:
        log.info("%s[%d] not sought back, no longer owned: %s", tp.topic, tp.partition, exc)


Key = tuple[str, int]
"""A topic partition as ``(topic, partition)``."""


class GroupOffsets:
    """The offsets a loop commits to its consumer group, for lag and tools.

    A loop resumes from the progress (or changelog boundaries) it commits inside its transactions, so
    its group's offsets only have to catch up, never to be exact at every moment: each is committed
    asynchronously, and what the group refuses (a rebalance under way, no coordinator during an
    outage) is left to the next commit. The consumer MUST be built with :meth:`on_commit` as its
    ``on_commit`` setting: a refused commit is reported there, not raised, and without it an idle
    loop would believe the refused offset committed and never send it again.
    """

    def __init__(self) -> None:
        self.sent: dict[Key, int] = {}
        """The offset last sent per partition and not known to be refused."""

    def on_commit(self, error: KafkaError | None, offsets: list[TopicPartition]) -> None:
        """The consumer's commit callback: forget an offset the group refused, so that it is sent again."""
        for tp in offsets:
            key = (tp.topic, tp.partition)
            if (error is not None or tp.error is not None) and self.sent.get(key) == tp.offset:
                del self.sent[key]

    def commit(self, consumer: Consumer, offsets: Iterable[TopicPartition]) -> None:
        """Send the offsets that differ from what was sent last (asynchronously)."""
        fresh = [tp for tp in offsets if self.sent.get((tp.topic, tp.partition)) != tp.offset]
        if not fresh:
            return
        self.sent.update(((tp.topic, tp.partition), tp.offset) for tp in fresh)
        try:
            consumer.commit(offsets=fresh, asynchronous=True)
        except KafkaException as exc:
            for tp in fresh:
                self.sent.pop((tp.topic, tp.partition), None)
            log.info("group offsets not committed now: %s", exc)

    def idle(self, consumer: Consumer, resume: Mapping[Key, int]) -> list[TopicPartition]:
        """Commit where an idle loop stands: each assigned partition's position where it moved past what
        was sent (only transaction markers were read: a transactional input's end is its last marker's
        offset + 1), and a partition not sent since it was assigned at its position or its ``resume``
        (the previous owner's last commit may have been refused by the very rebalance that moved it, and
        a loop with nothing to read would otherwise never commit it). Returns the offsets sent."""
        targets = []
        for tp in consumer.position(consumer.assignment()):
            key = (tp.topic, tp.partition)
            sent = self.sent.get(key)
            offset = max(tp.offset, resume.get(key, -1))
            if offset >= 0 and (sent is None or offset > sent):
                targets.append(TopicPartition(tp.topic, tp.partition, offset))
        self.commit(consumer, targets)
        return targets

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions revoked: their next owner commits them."""
        for tp in partitions:
            self.sent.pop((tp.topic, tp.partition), None)

    def close(self, consumer: Consumer) -> None:
        """At a clean stop: make the last offsets durable before the consumer leaves its group (a broker
        that is down leaves them to lag, which shows it)."""
        if self.sent:
            with contextlib.suppress(KafkaException):
                consumer.commit(
                    offsets=[TopicPartition(t, p, o) for (t, p), o in self.sent.items()], asynchronous=False
                )


def positions(consumer: Consumer, read: Mapping[tuple[str, int], int]) -> list[TopicPartition]:
    """The offsets to commit for partitions read up to ``read[(topic, partition)]`` (the next offset):
    the consumer's position where it is further, past the transaction markers that follow the last
    record read. A transactional input's end is its last marker's offset + 1, so committing the last
    record's offset + 1 would never show the end consumed."""
    wanted = [TopicPartition(t, p) for t, p in read]
    return [
        TopicPartition(tp.topic, tp.partition, max(tp.offset, read[(tp.topic, tp.partition)]))
        for tp in consumer.position(wanted)
    ]


def partitions(client: Consumer, topic: str, timeout_s: float = 30.0) -> list[int]:
    """The partition numbers of ``topic``, ascending, waiting out a topic created a moment ago (its
    metadata has an error and no partitions until the controller has placed them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = client.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is None and metadata.partitions:
            return sorted(metadata.partitions)
        if time.monotonic() > deadline:
            raise KafkaException(metadata.error)
        time.sleep(0.2)


def end_offset(client: Consumer, topic: str, partition: int, timeout_s: float = 30.0) -> int:
    """The end offset of a partition, waiting out a leader election (fresh topic, broker restart)."""
    return watermark_offsets(client, topic, partition, timeout_s)[1]


def watermark_offsets(
    client: Consumer, topic: str, partition: int, timeout_s: float = 30.0
) -> tuple[int, int]:
    """The first and the end offset of a partition, waiting out a leader election (fresh topic, broker
    restart)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return client.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        except KafkaException:
            # NOT_LEADER / LEADER_NOT_AVAILABLE while a partition gets its leader; librdkafka does
            # not mark them retriable here, so every error is retried until the deadline.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def latest_offsets(
    admin: AdminClient, partitions: Iterable[tuple[str, int]], level: IsolationLevel
) -> dict[Key, int]:
    """The end of each ``(topic, partition)`` as a reader at ``level`` has it: ``READ_COMMITTED``, the
    last stable offset (before the first record of a transaction not ended yet); ``READ_UNCOMMITTED``,
    the end of everything written, open transactions' records included."""
    asked = {TopicPartition(topic, partition): OffsetSpec.latest() for topic, partition in partitions}
    answers = admin.list_offsets(asked, isolation_level=level, request_timeout=30)
    return {(tp.topic, tp.partition): answer.result().offset for tp, answer in answers.items()}


def end_offsets(client: Consumer, topic: str) -> dict[int, int]:
    """The end offset of every partition of ``topic``."""
    return {p: end_offset(client, topic, p) for p in partitions(client, topic)}


def assign_at_ends(client: Consumer, topics: Iterable[str]) -> list[TopicPartition]:
    """Assign ``client`` every partition of ``topics`` at its current end (only what is published from
    now on is read); returns the assignment."""
    assignment = [
        TopicPartition(topic, p, end) for topic in topics for p, end in end_offsets(client, topic).items()
    ]
    client.assign(assignment)
    return assignment


READ_POLL_S = 0.1
"""How long :func:`read_to_end` waits for a record before it looks at the positions again: a partition
that ends with a transaction's commit marker is read once its position passed the marker, which no
record announces, so a longer wait is only added to the read."""


def read_to_end(
    client: Consumer,
    starts: Mapping[str, Mapping[int, int]],
    timeout_s: float | None = None,
    *,
    named_only: bool = False,
    reached: dict[tuple[str, int], int] | None = None,
    ends: Mapping[tuple[str, int], int] | None = None,
) -> Iterator[Message]:
    """The records of each topic of ``starts`` from its offsets (a partition not named: from its
    beginning, or not at all with ``named_only``; an offset retention has deleted: from the first one
    left) up to the end each partition has now, each partition's in order; ``client`` is assigned those
    partitions. A record at or past that end (the topic grew meanwhile) is not read.

    Args:
        client: a consumer of its own (:func:`reader`); closing it is the caller's.
        starts: per topic, the first offset to read per partition.
        timeout_s: longest time to read everything (None: no limit).
        named_only: read only the partitions ``starts`` names (one conversation's, one key's).
        reached: filled with each ``(topic, partition)``'s end as it is read to it (at once for one
            with nothing to read): where a later read of it goes on from. Not the offset after its last
            record: a transactional partition ends with a commit marker, which a read starting before
            it would wait for in vain. An end below the partition's start says the partition no longer
            reaches that start (the topic was deleted and created again).
        ends: the end to read a partition to, where given; else the end ``client``'s own query says
            (under ``read_committed``, the last stable offset). An end of everything written
            (:func:`latest_offsets` ``READ_UNCOMMITTED``) makes a ``read_committed`` read wait until
            each transaction open now has ended, and read what it committed.

    Raises:
        TimeoutError: ``timeout_s`` passed before every partition was read to its end.
    """
    todo: dict[tuple[str, int], int] = {}
    assignment = []
    for topic, start in starts.items():
        for p in start if named_only else partitions(client, topic):
            # From the first offset still in the log: a partition whose records retention deleted
            # (first == end) has nothing to wait for, and a start before it is never out of range.
            low, end = watermark_offsets(client, topic, p)
            end = end if ends is None else ends.get((topic, p), end)
            first = max(start.get(p, 0), low)
            if end > first:
                todo[(topic, p)] = end
                assignment.append(TopicPartition(topic, p, first))
            elif reached is not None:
                reached[(topic, p)] = end
    client.assign(assignment)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while todo:
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"could not read back {sorted(todo)[:3]} within {timeout_s:.0f} s")
        for message in consume_batch(client, 1000, READ_POLL_S):
            topic, p, offset = message.topic(), message.partition(), message.offset()
            if message.error() is not None or topic is None or p is None or offset is None:
                continue
            end = todo.get((topic, p), 0)
            if offset >= end:
                continue  # past the end this read is about
            yield message
            if offset + 1 >= end:
                _done(todo, (topic, p), reached)
        # A transactional topic ends with a commit marker, which is never a message: its partition is
        # read once the consumer's position passed the end.
        if todo:
            for tp in client.position([TopicPartition(t, p) for t, p in todo]):
                if tp.offset >= todo[(tp.topic, tp.partition)]:
                    _done(todo, (tp.topic, tp.partition), reached)


def _done(
    todo: dict[tuple[str, int], int], read: tuple[str, int], reached: dict[tuple[str, int], int] | None
) -> None:
    end = todo.pop(read)
    if reached is not None:
        reached[read] = end
