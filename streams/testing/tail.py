"""Reading back what a topic received: from the moment a :class:`Tail` is created on, or between
remembered offsets and the current end (:func:`read_between`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from confluent_kafka import Message

from streams.runtime.kafka_clients import assign_at_ends, end_offsets, read_to_end, reader
from topics.catalog import MAX_MESSAGE_BYTES


class Tail:
    """The records published to ``topic`` after construction, in the order each partition holds them.

    It joins no group (partitions assigned at their end offsets) and admits records as large as any
    catalog topic does.
    """

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self._consumer = reader(bootstrap, "tail", **{"fetch.message.max.bytes": MAX_MESSAGE_BYTES})
        assign_at_ends(self._consumer, [topic])
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


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of every partition of ``topic``."""
    client = reader(bootstrap, "probe")
    try:
        return end_offsets(client, topic)
    finally:
        client.close()


def read_between(bootstrap: str, topic: str, start: dict[int, int]) -> Iterator[bytes]:
    """Values of ``topic`` from ``start`` (per partition) to the current end."""
    client = reader(bootstrap, "read-between", **{"isolation.level": "read_committed"})
    try:
        for message in read_to_end(client, {topic: start}):
            yield message.value()
    finally:
        client.close()
