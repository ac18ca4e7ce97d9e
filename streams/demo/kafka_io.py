"""The demo's own records: produced with their delivery awaited, and read back at their coordinates."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from streams.demo.errors import DemoError
from streams.runtime.kafka_clients import consume_batch, end_offsets, producer_config, reader
from topics.catalog import Catalog

Coordinate = tuple[str, int, int]
"""``(topic, partition, offset)`` of a record."""


def demo_producer(bootstrap: str) -> Producer:
    """The producer of the demo's probes and classifications (idempotent, 5 ms batches)."""
    return Producer(producer_config(bootstrap, **{"linger.ms": 5}))


def demo_reader(bootstrap: str) -> Consumer:
    """A consumer that reads records back at offsets it assigns."""
    return reader(bootstrap, "demo", **{"auto.offset.reset": "earliest"})


def produce_all(
    producer: Producer, records: Sequence[tuple[str, bytes | None, bytes]]
) -> list[tuple[int, int]]:
    """Produce ``(topic, key, value)`` records, wait for their delivery (one flush); their
    ``(partition, offset)`` in order."""
    delivered: list[tuple[KafkaError | None, Message] | None] = [None] * len(records)

    def report(index: int) -> Callable[[KafkaError | None, Message], None]:
        return lambda err, msg: delivered.__setitem__(index, (err, msg))

    for index, (topic, key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=report(index))
    producer.flush(30)
    coordinates: list[tuple[int, int]] = []
    for (topic, _, _), outcome in zip(records, delivered, strict=True):
        if outcome is None or outcome[0] is not None:
            raise DemoError(f"delivery to {topic} failed: {outcome[0] if outcome else 'timeout'}")
        coordinates.append((outcome[1].partition(), outcome[1].offset()))
    return coordinates


def produce_one(producer: Producer, topic: str, key: bytes | None, value: bytes) -> tuple[int, int]:
    """Produce one record and wait for its delivery; returns ``(partition, offset)``."""
    return produce_all(producer, [(topic, key, value)])[0]


def read_all(consumer: Consumer, coordinates: Sequence[Coordinate]) -> list[Message]:
    """The records at ``coordinates``, in order, fetched together (one assignment: a fresh assignment
    costs up to a second before its first fetch, so one per record added up)."""
    first: dict[tuple[str, int], int] = {}
    for topic, partition, offset in coordinates:  # one assignment per partition, from its lowest offset
        first[(topic, partition)] = min(offset, first.get((topic, partition), offset))
    consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in first.items()])
    wanted = set(coordinates)
    found: dict[Coordinate, Message] = {}
    deadline = time.monotonic() + 30
    while len(found) < len(wanted) and time.monotonic() < deadline:
        for message in consume_batch(consumer, 100, 0.2):
            coordinate: Coordinate = (message.topic(), message.partition(), message.offset())
            if not message.error() and coordinate in wanted:
                found[coordinate] = message
    missing = [c for c in coordinates if c not in found]
    if missing:
        topic, partition, offset = missing[0]
        raise DemoError(f"record {topic}/{partition}@{offset} not readable within 30 s")
    return [found[c] for c in coordinates]


def read_at(consumer: Consumer, topic: str, partition: int, offset: int) -> Message:
    """The record at ``topic/partition/offset``."""
    return read_all(consumer, [(topic, partition, offset)])[0]


def ends(consumer: Consumer, topics: Sequence[str]) -> dict[str, int]:
    """Sum of the end offsets of each topic's partitions (a partition still electing its leader just
    after creation is waited out for 30 s by :func:`streams.runtime.kafka_clients.end_offset`)."""
    try:
        return {topic: sum(end_offsets(consumer, topic).values()) for topic in topics}
    except KafkaException as error:
        raise DemoError(f"end offsets of {list(topics)} unavailable for 30 s: {error}") from error


def dlq_counts(bootstrap: str, catalog: Catalog) -> dict[str, int]:
    """Records on every dead-letter topic of the catalog (their end offsets)."""
    consumer = demo_reader(bootstrap)
    try:
        return ends(consumer, [s.name for s in catalog if s.name.endswith(".dlq")])
    finally:
        consumer.close()
