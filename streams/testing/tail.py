"""A reader of what is published to a topic from the moment the reader is created on."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Message, TopicPartition

from streams.replay.kafka import end_offset
from streams.runtime.kafka_config import client_config
from topics.catalog import MAX_MESSAGE_BYTES


class Tail:
    """The records published to ``topic`` after construction, in the order each partition holds them.

    It joins no group (partitions assigned at their end offsets) and admits records as large as any
    catalog topic does.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": f"tail-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
            "fetch.message.max.bytes": MAX_MESSAGE_BYTES,
        }))  # fmt: skip
        partitions = self._consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self._consumer.assign(
            [TopicPartition(topic, p, end_offset(self._consumer, topic, p)) for p in partitions]
        )
        self.records: list[Message] = []

    def until(self, count: int, timeout_s: float = 90.0) -> list[Message]:
        """Every record read so far, once there are at least ``count``.

        Raises:
            AssertionError: fewer than ``count`` within ``timeout_s`` (the message says how many).
        """
        deadline = time.monotonic() + timeout_s
        while len(self.records) < count:
            assert time.monotonic() < deadline, f"{self.topic}: {len(self.records)} of {count} records"
            message = self._consumer.poll(0.5)
            if message is not None and message.error() is None:
                self.records.append(message)
        return self.records

    def close(self) -> None:
        """Leave the topic."""
        self._consumer.close()
