"""Reading a topic for a page: the committed records of one topic, decoded, at the moment the page asks.

What holds: :func:`read_records` reads each partition of the topic from its beginning (or from the
offsets it is given) up to the end it has when called, with a ``read_committed`` reader of its own (no
group is joined, nothing is committed), each partition's records in order; a record that cannot be
decoded as the topic's model is skipped, counted in :attr:`TopicRecords.unreadable` and logged with its
coordinates, never shown half-read. A reader looking for one value (``containing``: a candidate id, a
signature) decodes only the records whose raw value contains its bytes: a string field of an Avro record
is its UTF-8 bytes verbatim, so a record whose field has that value is never passed over, and the others
are not decoded (nor counted if undecodable); a tombstone (a null value) is kept as ``None`` so that a
compacted topic's reader can drop the key's earlier records.

A page source follows its topic with a :class:`TopicFollower`, which keeps what it has read: its first
read is the whole topic, each later one only what was committed since, from the ends the last one
reached (:attr:`TopicRecords.next_offsets`: past a transaction's commit marker, so a caught-up
transactional partition costs no wait), so that a page load costs the new records only. A tombstone
drops its key's earlier records, as compaction would; records that compaction or retention later remove
from the topic otherwise stay kept until the console restarts. A topic deleted and created again (a
partition that ends before where the last read ended) is read whole again and what was kept of it
dropped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from confluent_kafka import Message

from schemas.base import AvroModel
from schemas.serde import SchemaDecodeError, Serde
from streams.runtime.kafka_clients import read_to_end, reader

log = logging.getLogger(__name__)

M = TypeVar("M", bound=AvroModel)

READ_TIMEOUT_S = 30.0
"""Longest a page waits for a topic to be read to its end."""


@dataclass(frozen=True)
class TopicRecords(Generic[M]):
    """A topic's records now: ``(key, value)`` in each partition's order, ``None`` for a tombstone."""

    records: tuple[tuple[str | None, M | None], ...]
    unreadable: int = 0
    """Records skipped because they could not be decoded."""
    next_offsets: dict[int, int] = field(default_factory=dict)
    """Per partition, the end it was read to: where a later read starts."""

    def values(self) -> list[M]:
        """The decoded records, tombstones left out."""
        return [value for _key, value in self.records if value is not None]


def read_records(
    bootstrap: str,
    serde: Serde,
    topic: str,
    model: type[M],
    starts: Mapping[int, int] | None = None,
    containing: bytes | None = None,
) -> TopicRecords[M]:
    """Every committed record of ``topic`` now, decoded as ``model``, from ``starts`` (per partition, the
    first offset to read; a partition not named from its beginning); with ``containing``, only those whose
    raw value contains it, tombstones left out (module docstring).

    Raises:
        KafkaException, TimeoutError: the topic could not be read within :data:`READ_TIMEOUT_S`.
    """
    consumer = reader(bootstrap, "console", **{"isolation.level": "read_committed"})
    records: list[tuple[str | None, M | None]] = []
    unreadable = 0
    reached: dict[tuple[str, int], int] = {}
    try:
        for message in read_to_end(consumer, {topic: starts or {}}, READ_TIMEOUT_S, reached=reached):
            raw_key = message.key()
            key = raw_key.decode("utf-8", "replace") if raw_key is not None else None
            value = message.value()
            if containing is not None and (value is None or containing not in value):
                continue
            if value is None:
                records.append((key, None))
            elif (record := decoded(serde, message, model)) is None:
                unreadable += 1
            else:
                records.append((key, record))
    finally:
        consumer.close()
    return TopicRecords(tuple(records), unreadable, {p: end for (_topic, p), end in reached.items()})


class TopicFollower(Generic[M]):
    """``topic`` followed for a page source, keeping what it read (module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        serde: Serde,
        topic: str,
        model: type[M],
        keep: Callable[[M], bool] = lambda _: True,
    ) -> None:
        """Follow ``topic``, decoding its records as ``model`` and keeping those ``keep`` accepts."""
        self._bootstrap = bootstrap
        self._serde = serde
        self._topic = topic
        self._model = model
        self._keep = keep
        self._lock = threading.Lock()
        self._next: dict[int, int] = {}
        self._kept: list[tuple[str | None, M]] = []
        self._unreadable = 0

    def read(self) -> TopicRecords[M]:
        """What is kept once the records committed since the last read are added: each partition's in
        order, a tombstone's key's earlier records dropped (as compaction drops them), the undecodable
        ones counted since the first read (or since the topic was created again).

        Raises:
            KafkaException, TimeoutError: the topic could not be read (:func:`read_records`); what was
                kept stays as it was.
        """
        with self._lock:  # one read at a time, each from where the last one ended
            new = read_records(self._bootstrap, self._serde, self._topic, self._model, self._next)
            if any(end < self._next.get(p, 0) for p, end in new.next_offsets.items()):
                new = read_records(self._bootstrap, self._serde, self._topic, self._model)
                self._next.clear()
                self._kept.clear()
                self._unreadable = 0
            for key, value in new.records:
                if value is None:
                    self._kept = [(k, v) for k, v in self._kept if k != key]
                elif self._keep(value):
                    self._kept.append((key, value))
            self._unreadable += new.unreadable
            self._next.update(new.next_offsets)
            return TopicRecords(tuple(self._kept), self._unreadable, dict(self._next))


def decoded(serde: Serde, message: Message, model: type[M]) -> M | None:
    """The value of ``message`` (not a tombstone) decoded as ``model``; None when it cannot be, logged with
    the record's coordinates: a page skips it rather than show it half-read."""
    topic = message.topic()
    try:
        return serde.decode(message.value(), model, topic=topic)  # type: ignore[arg-type]
    except SchemaDecodeError as exc:
        log.warning("console: skipped a record at %s[%s]@%s: %s", topic, message.partition(),
                    message.offset(), exc)  # fmt: skip
        return None
