"""Where the operator's dead-letter pages read the ``.dlq`` topics.

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

A re-drive is not produced here: the console's principal may not write a source topic, so it is a
request (:mod:`streams.console.requests`) the request runtime carries out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from aiohttp import web
from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, Message

from schemas.common import DeadLetter
from schemas.serde import SchemaDecodeError, Serde
from streams.console.pages import read_in_thread
from streams.console.records import READ_TIMEOUT_S
from streams.requests.check import DEAD_LETTER_QUEUES
from streams.runtime.kafka_clients import (
    partitions,
    read_to_end,
    reader,
    watermark_offsets,
)

log = logging.getLogger(__name__)


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


DEAD_LETTERS = web.AppKey("dead_letters", DeadLetterSource)
"""The application's source of dead letters."""
