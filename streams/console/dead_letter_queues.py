"""Where the operator's dead-letter pages read the ``.dlq`` topics, and how a re-drive reaches a source
topic.

:class:`KafkaDeadLetters` reads with ``read_committed`` readers of its own (a transactional stage writes
its dead letters in its batch's transaction: an aborted one is never shown):

* :meth:`~KafkaDeadLetters.queues` reads every dead-letter topic of the catalog from the beginning up to
  its end, counting its records and noting the newest one's time (the Kafka timestamp of the dead-letter
  record: when the stage wrote it). Dead letters are few; the pass still fetches every retained one
  (30 days), values included.
* :meth:`~KafkaDeadLetters.page` reads one partition's window of :data:`PAGE_OFFSETS` offsets ending
  before a given offset (the newest window by default), so a page costs a bounded read however long the
  topic is; a window may show fewer records than offsets (transaction markers and aborted records take
  offsets too).
* :meth:`~KafkaDeadLetters.letter` reads one record at its coordinates.

A record that is not a ``DeadLetter`` is shown as unreadable with the reason, never skipped silently.

:class:`KafkaRedriver` produces a re-driven record with an idempotent producer that admits the largest
record of any catalog topic, to the partition the record came from, and waits for its delivery report
(:func:`streams.console.delivery.deliver`): acknowledged, or given up by librdkafka after
:data:`~streams.console.delivery.ACK_TIMEOUT_S` (:class:`~streams.console.delivery.NotAcknowledged`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from aiohttp import web
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, Message

from schemas.common import DeadLetter
from schemas.serde import SchemaDecodeError, Serde
from streams.console.delivery import Outbox
from streams.console.pages import read_in_thread
from streams.console.records import READ_TIMEOUT_S
from streams.runtime.dlq import PRODUCER_LIMITS
from streams.runtime.kafka_clients import (
    partitions,
    producer_settings,
    read_to_end,
    reader,
    watermark_offsets,
)
from topics.catalog import CATALOG

log = logging.getLogger(__name__)

DEAD_LETTER_QUEUES: dict[str, str] = {spec.dlq.name: spec.name for spec in CATALOG if spec.dlq is not None}
"""Every dead-letter topic of the catalog and the source topic it is the dead-letter topic of."""

PAGE_OFFSETS = 50
"""Offsets of one partition a list page reads (module docstring)."""


@dataclass(frozen=True)
class Queue:
    """One dead-letter topic: how many records it holds and when the newest was written."""

    topic: str
    source: str
    records: int
    newest: datetime | None


@dataclass(frozen=True)
class Letter:
    """One record of a dead-letter topic: the dead letter, or why it could not be read."""

    topic: str
    partition: int
    offset: int
    written: datetime | None
    """When the stage wrote it (the record's Kafka timestamp; None: the broker reports none)."""
    letter: DeadLetter | None
    unreadable: str = ""
    """Why the value is not a ``DeadLetter`` (``letter`` None)."""

    @property
    def coordinates(self) -> str:
        """``<topic>[<partition>]@<offset>``: the record's name on the pages and on the audit trail."""
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True)
class LetterPage:
    """A window of one partition of a dead-letter topic, newest first."""

    topic: str
    partition: int
    partitions: tuple[int, ...]
    letters: tuple[Letter, ...]
    older: int | None
    """Where the next older window ends (None: this window starts at the partition's first offset)."""


class DeadLetterSource(Protocol):
    """What the dead-letter pages read."""

    async def queues(self) -> list[Queue]:
        """Every dead-letter topic of the catalog, in catalog order.

        Raises:
            Unavailable: a topic could not be read.
        """
        ...

    async def page(self, topic: str, partition: int, before: int | None) -> LetterPage:
        """The records of ``topic``'s ``partition`` in the window of offsets ending before ``before``
        (None: the newest window), newest first.

        Raises:
            Unavailable: the topic could not be read.
        """
        ...

    async def letter(self, topic: str, partition: int, offset: int) -> Letter | None:
        """The record at these coordinates (None: there is none).

        Raises:
            Unavailable: the topic could not be read.
        """
        ...


class Redriver(Protocol):
    """Where a re-driven record goes."""

    async def redrive(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        """Produce the record to ``topic``'s ``partition``; returns once Kafka acknowledged it.

        Raises:
            NotAcknowledged: it was not acknowledged.
        """
        ...


def _written(message: Message) -> datetime | None:
    kind, ms = message.timestamp()
    return None if kind == TIMESTAMP_NOT_AVAILABLE else datetime.fromtimestamp(ms / 1000, tz=UTC)


class KafkaDeadLetters:
    """The dead-letter topics, read on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._bootstrap = bootstrap
        self._serde = serde

    async def queues(self) -> list[Queue]:
        return await read_in_thread("the dead-letter topics", self._queues)

    async def page(self, topic: str, partition: int, before: int | None) -> LetterPage:
        return await read_in_thread(topic, self._page, topic, partition, before)

    async def letter(self, topic: str, partition: int, offset: int) -> Letter | None:
        return await read_in_thread(topic, self._letter, topic, partition, offset)

    def _consumer(self) -> Consumer:
        return reader(self._bootstrap, "console-dead-letters", **{"isolation.level": "read_committed"})

    def _queues(self) -> list[Queue]:
        counts = dict.fromkeys(DEAD_LETTER_QUEUES, 0)
        newest: dict[str, datetime] = {}
        consumer = self._consumer()
        try:
            for message in read_to_end(consumer, {topic: {} for topic in DEAD_LETTER_QUEUES}, READ_TIMEOUT_S):
                topic = message.topic()
                assert topic is not None  # a record, not an event
                counts[topic] += 1
                written = _written(message)
                if written is not None and (topic not in newest or written > newest[topic]):
                    newest[topic] = written
        finally:
            consumer.close()
        return [
            Queue(topic, source, counts[topic], newest.get(topic))
            for topic, source in DEAD_LETTER_QUEUES.items()
        ]

    def _page(self, topic: str, partition: int, before: int | None) -> LetterPage:
        consumer = self._consumer()
        try:
            numbers = tuple(partitions(consumer, topic, READ_TIMEOUT_S))
            if partition not in numbers:
                return LetterPage(topic, partition, numbers, (), None)
            first, end = watermark_offsets(consumer, topic, partition, READ_TIMEOUT_S)
            end = end if before is None else max(first, min(before, end))
            start = max(first, end - PAGE_OFFSETS)
            letters = self._read(consumer, topic, partition, start, end)
        finally:
            consumer.close()
        return LetterPage(
            topic, partition, numbers, tuple(reversed(letters)), start if start > first else None
        )

    def _letter(self, topic: str, partition: int, offset: int) -> Letter | None:
        consumer = self._consumer()
        try:
            if partition not in partitions(consumer, topic, READ_TIMEOUT_S):
                return None
            first, end = watermark_offsets(consumer, topic, partition, READ_TIMEOUT_S)
            if not first <= offset < end:
                return None
            found = self._read(consumer, topic, partition, offset, offset + 1)
        finally:
            consumer.close()
        return found[0] if found else None

    def _read(self, consumer: Consumer, topic: str, partition: int, start: int, end: int) -> list[Letter]:
        """The records of offsets ``start`` to ``end`` (excluded) of one partition."""
        letters = []
        for message in read_to_end(consumer, {topic: {partition: start}}, READ_TIMEOUT_S, named_only=True):
            offset = message.offset()
            assert offset is not None  # a record, not an event
            if offset >= end:
                break
            letters.append(self._decoded(topic, partition, offset, message))
        return letters

    def _decoded(self, topic: str, partition: int, offset: int, message: Message) -> Letter:
        value = message.value()
        if value is None:
            return Letter(topic, partition, offset, _written(message), None, "a null value (tombstone)")
        try:
            letter = self._serde.decode(value, DeadLetter, topic=topic)
        except SchemaDecodeError as exc:
            log.warning("console: unreadable dead letter at %s[%s]@%s: %s", topic, partition, offset, exc)
            return Letter(topic, partition, offset, _written(message), None, str(exc))
        return Letter(topic, partition, offset, _written(message), letter)


class KafkaRedriver:
    """Re-driven records through one idempotent producer, each awaited until acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self._outbox = Outbox(producer_settings(bootstrap, **PRODUCER_LIMITS), "re-driven records")

    async def redrive(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        """Produce the record and wait for its delivery report (module docstring)."""
        await self._outbox.send(topic, partition=partition, key=key, value=value, headers=list(headers))

    def close(self) -> None:
        """Wait for the records still in flight (:meth:`Outbox.close`)."""
        self._outbox.close()


DEAD_LETTERS = web.AppKey("dead_letters", DeadLetterSource)
"""The application's source of dead letters."""
REDRIVER = web.AppKey("redriver", Redriver)
"""Where the application re-drives dead letters."""
