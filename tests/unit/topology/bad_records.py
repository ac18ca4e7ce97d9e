"""Bad records of every kind, each made from a good record of its topic: what the DLQ properties pipe.

A kind takes the good record, good values of other topics and a random generator (its free choices),
so a hypothesis strategy draws the generator's seed and an exhaustive test a fixed one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from processors.dbpm import BadEvent, parse_time
from schemas.serde import SINGLE_OBJECT_MAGIC
from streams.worker.keys import TICK_HEADER
from topics.catalog import (
    CLINICAL_DELIVERABLES,
    CLINICAL_REVIEWS,
    DBPM_PROPAGATIONS,
    DBPM_VERDICTS,
    FHIR_UPDATES,
)

KEY_CHECKED = (DBPM_VERDICTS, DBPM_PROPAGATIONS, FHIR_UPDATES, CLINICAL_REVIEWS, CLINICAL_DELIVERABLES)
"""Topics whose runtime dead-letters a record whose key is not the key of its content."""
TWO_MB = 2 * 1024 * 1024
GARBAGE_TICKS = (None, b"", b"\xffnot a time", b"yesterday", b"2026-13-45T99:99:99Z", b"2026-05-04T10:00:00")
"""``clingate-watermark`` header values that are not an ISO 8601 time with a zone."""


@dataclass(frozen=True)
class Piped:
    """One record to pipe."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


BadRecord = Callable[[Piped, Sequence[bytes], random.Random], Piped]
"""Makes a bad record of one kind from a good record of its topic and good values of other topics."""


def not_a_time(value: bytes | None) -> bool:
    """Whether a watermark header value is not a time the memory writer reads."""
    try:
        parse_time(value.decode())  # type: ignore[union-attr]
    except (AttributeError, UnicodeDecodeError, BadEvent):
        return True
    return False


def _random_bytes(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    return Piped(good.topic, good.key, rng.randbytes(rng.randrange(65)))


def _truncated(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    value = good.value or b""
    return Piped(good.topic, good.key, value[: rng.randrange(len(value))])


def _flipped_header(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    """A good record with one bit of its single-object header (marker and schema fingerprint) flipped.

    Only the header: a flipped bit in the body often still decodes, into another valid record.
    """
    flipped = bytearray(good.value or b"")
    bit = rng.randrange(len(SINGLE_OBJECT_MAGIC + bytes(8)) * 8)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return Piped(good.topic, good.key, bytes(flipped))


def _foreign(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    return Piped(good.topic, good.key, rng.choice(others))


def _tombstone(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    return Piped(good.topic, good.key, None)


def _wrong_key(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    return Piped(good.topic, (good.key or b"") + rng.randbytes(rng.randrange(1, 9)), good.value)


def _garbage_tick(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    garbage = rng.choice([*GARBAGE_TICKS, rng.randbytes(rng.randrange(25))])
    if not not_a_time(garbage):
        garbage = b"\xff" + (garbage or b"")
    return Piped(good.topic, good.key, rng.choice([b"", good.value]), ((TICK_HEADER, garbage),))


def _two_mb(good: Piped, others: Sequence[bytes], rng: random.Random) -> Piped:
    return Piped(good.topic, good.key, SINGLE_OBJECT_MAGIC + rng.randbytes(TWO_MB))


KINDS: dict[str, BadRecord] = {
    "random bytes": _random_bytes, "truncated": _truncated, "flipped header": _flipped_header,
    "another schema": _foreign, "tombstone": _tombstone, "wrong key": _wrong_key,
    "garbage watermark": _garbage_tick, "2 MB": _two_mb,
}  # fmt: skip


def applies(kind: str, topic: str) -> bool:
    """Whether ``kind`` is a bad record on ``topic`` (keys are checked on some topics, ticks are verdicts)."""
    return (kind != "wrong key" or topic in KEY_CHECKED) and (
        kind != "garbage watermark" or topic == DBPM_VERDICTS
    )
