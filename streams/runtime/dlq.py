"""The decode step and the dead-letter route every consumer of clingate shares.

Nothing is silently dropped: a record that cannot become the model its topic carries goes, whole, to
the dead-letter topic of its source (``<source>.dlq``, named by :func:`topics.catalog.dlq_name`) with
the reason and its coordinates, and only then is its offset committed; processing continues with the
next record.

Two layers, so the step is the same in every consumer loop and in the topology test driver:

* :func:`decode_record` is pure: a client-neutral :class:`SourceRecord` (bytes and coordinates) in,
  :class:`Decoded` or :class:`Rejected` out, as data. Failures are values, not exceptions, so a
  caller cannot forget one and a loop cannot crash past an offset.
* :func:`dead_letter_record` (pure) builds the record to produce: topic, key, value, headers.
  :class:`DeadLetterRouter` produces it with a confluent-kafka producer and returns only once the
  broker has acknowledged it; the caller commits the source offset after that, never before
  (committing first would lose the record if the produce failed). A transactional loop produces the
  same record in the transaction of its batch.

The dead-letter record: key = the original key; value = a ``clingate.common.DeadLetter`` (original
value, key and headers byte for byte, the reason, the stage and the coordinates), encoded with the
process's serde; headers in the style of Kafka KIP-1034 (exception name, message, source topic,
partition and offset, here under the prefix ``__clingate.errors.``, plus ``stage`` and the serde's
``reason``) so that a tool that does not read Avro can triage.

A dead letter always fits its topic. The catalog gives every ``.dlq`` topic its source's limit plus
headroom, and every producer of dead letters admits :data:`topics.catalog.MAX_MESSAGE_BYTES`
(:data:`PRODUCER_LIMITS`). A dead letter that would still exceed its topic's ``max.message.bytes`` (a
huge key, counted twice: as the record key and in the value; headers; a source topic configured
larger than the catalog says) is cut: its largest byte fields, one at a time, keep their first
:data:`PREFIX_BYTES` bytes, each cut recorded as a ``Truncation`` (field, original size, SHA-256) and
the ``truncated`` header set, until it fits. It is never dropped and never retried for its size; the
original stays readable at its coordinates until the source topic's retention. The reason is capped
at :data:`REASON_MAX_CHARS` (validation errors may quote the input).

Choices: a tombstone (null value) on an event topic is a decode failure (events are never deleted by
key); a record without a Kafka timestamp gets the Unix epoch as its dead letter's event time, not the
wall clock, so a replay of the dead-letter topic is deterministic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, KafkaError, KafkaException, Message, Producer

from schemas.base import AvroModel
from schemas.common import DeadLetter, Header, Stage, Truncation
from schemas.serde import DecodeReason, SchemaDecodeError, Serde
from topics.catalog import MAX_MESSAGE_BYTES, dlq_name, max_message_bytes

M = TypeVar("M", bound=AvroModel)

HEADER_PREFIX = "__clingate.errors."
"""Prefix of the dead-letter headers (KIP-1034 style)."""

REASON_MAX_CHARS = 2000
"""Longest reason a dead letter carries (the rest is replaced by a count of the characters left out)."""

PREFIX_BYTES = 1024
"""Bytes a cut field of an oversized dead letter keeps."""

RECORD_OVERHEAD_BYTES = 1024
"""What a record costs beyond its key, value and headers on the wire (batch header, framing; rounded up)."""

PRODUCER_LIMITS: dict[str, object] = {"message.max.bytes": MAX_MESSAGE_BYTES}
"""librdkafka settings of every producer that sends dead letters (or records as large as the topics admit)."""

_VALIDATE_REASONS = frozenset({DecodeReason.INVALID, DecodeReason.WRONG_SCHEMA})
"""Reasons that mean the bytes were read but the content is not what the topic carries."""


class DeadLetterDeliveryError(Exception):
    """The dead letter was not acknowledged by the broker: do NOT commit the source offset; retry."""


@dataclass(frozen=True)
class SourceRecord:
    """A consumed record, independent of the client library that consumed it."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    """The record's Kafka timestamp; ``None`` when the broker reports none."""
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())

    def header(self, name: str) -> bytes | None:
        """The value of the record's first header called ``name`` (None: no such header, or a null value)."""
        return next((value for key, value in self.headers if key == name), None)

    @classmethod
    def from_message(cls, message: Message) -> SourceRecord:
        """The view of a confluent-kafka message (one that is not an error event)."""
        kind, timestamp = message.timestamp()
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        assert topic is not None and partition is not None and offset is not None  # data messages
        timestamp_ms = None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp
        headers = tuple(message.headers() or ())
        # Positional: a frozen dataclass built from keywords costs more, and this runs once per record.
        return cls(topic, partition, offset, timestamp_ms, message.key(), message.value(), headers)


@dataclass(frozen=True)
class Decoded(Generic[M]):
    """A record that decoded into the model its topic carries."""

    record: SourceRecord
    value: M


@dataclass(frozen=True)
class Rejected:
    """A record that goes, whole, to the dead-letter topic of its source, with everything its dead letter
    needs: one that did not decode or validate (:func:`decode_record`), one whose processing raised
    (:func:`processing_failed`) or one whose output its topic would refuse (:func:`oversized_output`)."""

    record: SourceRecord
    stage: Stage
    error_type: str
    reason: str
    decode_reason: DecodeReason | None
    """The serde's classification; ``None`` for failures outside the serde (a tombstone)."""
    expected_schema: str

    def dead_letter(self) -> DeadLetter:
        """The dead-letter event of this failure."""
        record = self.record
        return DeadLetter(
            ts=datetime.fromtimestamp((record.timestamp_ms or 0) / 1000, tz=UTC),
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            stage=self.stage,
            error_type=self.error_type,
            error=capped(self.reason),
            key=record.key,
            value=record.value,
            headers=tuple(Header(key=k, value=v) for k, v in record.headers),
            expected_schema=self.expected_schema,
        )

    def kafka_headers(self) -> list[tuple[str, bytes]]:
        """The KIP-1034-style headers of the dead-letter record."""
        values = {
            "exception": self.error_type,
            "message": capped(self.reason),
            "topic": self.record.topic,
            "partition": str(self.record.partition),
            "offset": str(self.record.offset),
            "stage": self.stage.value,
            "reason": self.decode_reason.value if self.decode_reason else "",
        }
        return [(HEADER_PREFIX + name, value.encode("utf-8")) for name, value in values.items()]


def processing_failed(record: SourceRecord, error: Exception, expected_schema: str) -> Rejected:
    """The failure of a record on which processing raised ``error`` (stage ``process``)."""
    return Rejected(record, Stage.PROCESS, type(error).__name__, str(error), None, expected_schema)


@dataclass(frozen=True)
class OutgoingRecord:
    """A record to produce, independent of the client library that produces it."""

    topic: str
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]

    @property
    def size(self) -> int:
        """Bytes of key, value and headers (what counts against ``max.message.bytes``, framing aside)."""
        return record_size(self.key, self.value, self.headers)


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """Bytes of a record's key, value and headers: what counts against ``max.message.bytes`` (no framing)."""
    return len(key or b"") + len(value or b"") + sum(len(k.encode()) + len(v or b"") for k, v in headers)


def fits(
    topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] = ()
) -> bool:
    """Whether a record fits ``topic``'s ``max.message.bytes`` (:func:`record_limit`)."""
    return record_size(key, value, headers) <= record_limit(max_message_bytes(topic))


def record_limit(max_message_bytes: int) -> int:
    """The largest record, as the producers count it, that a topic with ``max_message_bytes`` admits:
    :data:`RECORD_OVERHEAD_BYTES` of framing to spare."""
    return max_message_bytes - RECORD_OVERHEAD_BYTES


def oversized_output(
    record: SourceRecord,
    topic: str,
    key: bytes,
    value: bytes,
    headers: Sequence[tuple[str, bytes]],
    expected_schema: str,
) -> Rejected | None:
    """The dead letter of ``record`` (stage ``produce``, ``OutputTooLarge``) when its output to ``topic``
    does not :func:`fit <fits>` (the broker would refuse it on every retry); None when it does."""
    if fits(topic, key, value, headers):
        return None
    size, limit = record_size(key, value, headers), max_message_bytes(topic) - RECORD_OVERHEAD_BYTES
    reason = f"output of {size} bytes to {topic}, which admits {limit}"
    return Rejected(record, Stage.PRODUCE, "OutputTooLarge", reason, None, expected_schema)


def capped(reason: str) -> str:
    """``reason`` cut to :data:`REASON_MAX_CHARS` characters, saying how many were left out."""
    if len(reason) <= REASON_MAX_CHARS:
        return reason
    return f"{reason[:REASON_MAX_CHARS]}... ({len(reason) - REASON_MAX_CHARS} more characters)"


def dead_letter_record(serde: Serde, failed: Rejected, max_bytes: int | None = None) -> OutgoingRecord:
    """The dead-letter record of ``failed``: to ``<source>.dlq``, original key, DeadLetter value, headers.

    Args:
        serde: the process's serde.
        failed: the failure.
        max_bytes: ``max.message.bytes`` of the dead-letter topic; default: the catalog's
            (:func:`topics.catalog.max_message_bytes`). A record that would exceed it is cut to fit
            (module docstring).
    """
    topic = dlq_name(failed.record.topic)
    budget = (max_message_bytes(topic) if max_bytes is None else max_bytes) - RECORD_OVERHEAD_BYTES
    headers = failed.kafka_headers()

    def record(letter: DeadLetter) -> OutgoingRecord:
        flag = [(HEADER_PREFIX + "truncated", b"true")] if letter.truncations else []
        return OutgoingRecord(topic, letter.key, serde.encode(letter, topic=topic), headers + flag)

    letter = failed.dead_letter()
    out = record(letter)
    cuts = _cuts(letter)
    while out.size > budget and cuts:
        # Cut the largest fields that together save the excess (a key counts twice), then measure.
        excess = out.size - budget
        while cuts and excess > 0:
            name, size, saves = cuts.pop(0)
            letter = _cut(letter, name, size)
            excess -= saves
        out = record(letter)
    if out.size > budget and letter.headers:
        flat = b"".join(h.key.encode() + (h.value or b"") for h in letter.headers)
        out = record(_with_cut(letter, "headers", (), Truncation(field="headers", size=len(flat),
                                                                  sha256=_digest(flat))))  # fmt: skip
    return out  # still too large only for a budget below the coordinates: the producer reports it


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cuts(letter: DeadLetter) -> list[tuple[str, int, int]]:
    """``(field, size, bytes a cut saves)`` of every field longer than :data:`PREFIX_BYTES`, largest saving
    first (the key is in the record twice: as its key and in the dead letter)."""
    fields = [("key", len(letter.key or b""), 2), ("value", len(letter.value or b""), 1)]
    fields += [(f"headers[{i}].value", len(h.value or b""), 1) for i, h in enumerate(letter.headers)]
    cuts = [(name, size, (size - PREFIX_BYTES) * n) for name, size, n in fields if size > PREFIX_BYTES]
    return sorted(cuts, key=lambda cut: -cut[2])


def _cut(letter: DeadLetter, name: str, size: int) -> DeadLetter:
    """``letter`` with field ``name`` (see :func:`_cuts`) cut to its first :data:`PREFIX_BYTES` bytes."""
    if name in ("key", "value"):
        original: bytes = getattr(letter, name)
        return _with_cut(letter, name, original[:PREFIX_BYTES], Truncation(
            field=name, size=size, sha256=_digest(original)))  # fmt: skip
    index = int(name[len("headers[") : name.index("]")])
    header = letter.headers[index]
    assert header.value is not None
    headers = list(letter.headers)
    headers[index] = Header(key=header.key, value=header.value[:PREFIX_BYTES])
    return _with_cut(letter, "headers", tuple(headers), Truncation(
        field=name, size=size, sha256=_digest(header.value)))  # fmt: skip


def _with_cut(letter: DeadLetter, name: str, value: object, cut: Truncation) -> DeadLetter:
    """``letter`` with field ``name`` replaced by ``value`` and ``cut`` recorded."""
    return letter.model_copy(update={name: value, "truncations": (*letter.truncations, cut)})


def decode_record(serde: Serde, record: SourceRecord, expected: type[M]) -> Decoded[M] | Rejected:
    """Decode a consumed record into ``expected`` or say why not; pure, never raises for bad bytes.

    Args:
        serde: the process's serde.
        record: the consumed record.
        expected: the model the record's topic carries.
    """
    if record.value is None:
        return Rejected(
            record,
            Stage.DECODE,
            "TombstoneError",
            "null value (tombstone) on an event topic",
            None,
            expected.avro_name,
        )
    try:
        value = serde.decode(record.value, expected, topic=record.topic)
    except SchemaDecodeError as exc:
        stage = Stage.VALIDATE if exc.reason in _VALIDATE_REASONS else Stage.DECODE
        return Rejected(record, stage, type(exc).__name__, str(exc), exc.reason, expected.avro_name)
    return Decoded(record, value)


class DeadLetterRouter:
    """Produces dead letters with a confluent-kafka producer and waits for the broker's acknowledgement.

    The producer's ``message.max.bytes`` MUST admit the largest source record plus ~1 KiB (the dead
    letter carries the original value), as MUST the dead-letter topic's ``max.message.bytes``.
    """

    def __init__(self, producer: Producer, serde: Serde, *, timeout_s: float = 30.0) -> None:
        """Bind the router to a producer and a serde.

        Args:
            producer: a producer with ``acks=all`` and idempotence (the caller configures it).
            serde: the process's serde, used to encode the dead letters.
            timeout_s: how long to wait for the acknowledgement of one dead letter.
        """
        self._producer = producer
        self._serde = serde
        self._timeout_s = timeout_s

    def send(self, failed: Rejected) -> None:
        """Produce ``failed`` to the dead-letter topic of its source and wait until it is acknowledged.

        Raises:
            DeadLetterDeliveryError: not acknowledged in time or rejected; the source offset MUST NOT
                be committed.
        """
        out = dead_letter_record(self._serde, failed)
        reports: list[KafkaError | None] = []
        try:
            self._producer.produce(
                out.topic, key=out.key, value=out.value, headers=out.headers,
                on_delivery=lambda error, _message: reports.append(error),
            )  # fmt: skip
        except KafkaException as exc:  # refused before sending, e.g. over the producer's size limit
            reports.append(exc.args[0])
        except BufferError:
            reports.append(KafkaError(KafkaError._QUEUE_FULL))
        else:
            self._producer.flush(self._timeout_s)
        # Compared by identity: KafkaError's == against None leaves a TypeError pending in the C extension.
        if len(reports) == 1 and reports[0] is None:
            return
        error = reports[0] if reports else None
        if error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            detail = (
                f"the dead letter is {len(out.value)} bytes: raise max.message.bytes of {out.topic} "
                "and the producer's message.max.bytes above it"
            )
        else:
            detail = error.str() if error is not None else f"no acknowledgement within {self._timeout_s}s"
        record = failed.record
        raise DeadLetterDeliveryError(
            f"dead letter for {record.topic}[{record.partition}]@{record.offset} not written to {out.topic}: "
            f"{detail}; the source offset was not committed, retry the record"
        )

    def route(self, record: SourceRecord, expected: type[M]) -> M | None:
        """Decode ``record``; dead-letter it when it fails. The caller commits the offset after.

        Returns:
            The decoded model, or ``None`` when the record went to the dead-letter topic.

        Raises:
            DeadLetterDeliveryError: as :meth:`send`.
        """
        outcome = decode_record(self._serde, record, expected)
        if isinstance(outcome, Rejected):
            self.send(outcome)
            return None
        return outcome.value


def header_map(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, str]:
    """The dead-letter headers of a record as text, without the prefix (for triage tools and tests)."""
    return {
        name.removeprefix(HEADER_PREFIX): (value or b"").decode("utf-8", "replace")
        for name, value in headers
        if name.startswith(HEADER_PREFIX)
    }
