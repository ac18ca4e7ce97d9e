"""The Hypothesis strategies of the poison suite's bad records, and their seeded draws.

:func:`bad_record` gives, for one topic, records its runtime must dead-letter (the kinds of
:class:`~streams.testing.poison.records.Kind`; :mod:`streams.testing.poison`, "Bad records"); :func:`draw`
and :func:`draw_balanced` take a fixed number of them, the same ones for the same seed, so that a run can
be repeated byte for byte; :func:`interleave` places them among the good records.
"""

from __future__ import annotations

import contextlib
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from hypothesis import HealthCheck, Phase, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy

from processors.dbpm import parse_time
from schemas.common import DeadLetter, Stage
from schemas.serde import SINGLE_OBJECT_MAGIC, SchemaDecodeError, Serde
from streams.testing.poison.records import (
    CLINGATE_HEADERS,
    DEFAULT_KINDS,
    KEY_CHECKED,
    MIB,
    MODELS,
    Headers,
    Kind,
    Record,
)
from topics.catalog import DBPM_CANDIDATES, DBPM_VERDICTS

T = TypeVar("T")


@dataclass(frozen=True)
class OversizeShape:
    """The sizes of an oversized bad record: its value, and optionally a large key or header."""

    value: int
    key: int = 0
    header: int = 0


@dataclass(frozen=True)
class TopicSamples:
    """What the strategies know about a topic: valid records to break and the values of other schemas.

    Attributes:
        topic: the topic.
        valid: ``(key, value)`` of valid records of the topic, each with its right key.
        others: values that are not the topic's model: valid records of other schemas, and JSON
            renderings of the topic's own records.
        rejects: whether the serde refuses a value for this topic (the first check of every runtime).
    """

    topic: str
    valid: tuple[tuple[bytes, bytes], ...]
    others: tuple[bytes, ...]
    rejects: Callable[[bytes], bool]

    @property
    def key_checked(self) -> bool:
        """Whether the topic's runtime dead-letters a valid record under a wrong key."""
        return self.topic in KEY_CHECKED


def samples_for(topic: str, good: Sequence[Record], pool: dict[str, bytes], serde: Serde) -> TopicSamples:
    """The :class:`TopicSamples` of ``topic``, from its good records and one value of every schema.

    Args:
        topic: a fed topic.
        good: its good records (the first 50 with a key and a value are the ones broken).
        pool: one encoded value per model name (:func:`schema_pool`).
        serde: the serde the runtimes use.
    """
    model = MODELS[topic]
    valid = tuple(
        (r.key, r.value)
        for r in good
        if r.kind is None and not r.control and r.key is not None and r.value and len(r.value) < 64 * 1024
    )[:50]
    renderings = tuple(serde.decode(v, model, topic=topic).model_dump_json().encode() for _, v in valid[:3])

    def rejects(value: bytes) -> bool:
        try:
            serde.decode(value, model, topic=topic)
        except SchemaDecodeError:
            return True
        return False

    others = tuple(v for name, v in sorted(pool.items()) if name != model.avro_name) + renderings
    return TopicSamples(topic, valid, others, rejects)


def _not_a_time(value: bytes | None) -> bool:
    """Whether ``value``, as a ``clingate-watermark`` header, is not a tick (it must be garbage)."""
    if value is None:
        return True
    try:
        parse_time(value.decode())
    except (ValueError, UnicodeDecodeError):
        return True
    return False


def garbage(max_size: int = 48) -> SearchStrategy[bytes | None]:
    """A garbage header value: null, random bytes or text; never an ISO time (a valid tick)."""
    return st.one_of(
        st.none(), st.binary(max_size=max_size), st.text(max_size=max_size).map(str.encode)
    ).filter(_not_a_time)


def _named(values: tuple[bytes | None, ...]) -> Headers:
    return tuple(zip(CLINGATE_HEADERS, values, strict=True))


def garbage_headers(every: bool = False) -> SearchStrategy[Headers]:
    """Headers with garbage values: every clingate header once, then maybe a repeated one (``every``), or
    a few of them and of other names, duplicates possible."""
    if every:
        values = st.tuples(*(garbage() for _ in CLINGATE_HEADERS)).map(_named)
        extra = st.lists(st.tuples(st.sampled_from(CLINGATE_HEADERS), garbage()), max_size=2).map(tuple)
        return st.tuples(values, extra).map(lambda parts: parts[0] + parts[1])
    names = st.sampled_from((*CLINGATE_HEADERS, "x-poison", "content-type", ""))
    return st.lists(st.tuples(names, garbage()), min_size=1, max_size=4).map(tuple)


_EVERY_HEADER = garbage_headers(every=True)
_SOME_HEADERS = st.one_of(st.just(()), garbage_headers())
_POSITION = st.integers(0, (1 << 31) - 1)
"""Where to cut or flip, taken modulo the value's length (strategies stay fixed: a strategy built per
example, as ``flatmap`` does, cost Hypothesis ~10x the example itself)."""


def _cut(kv: tuple[bytes, bytes], position: int) -> tuple[bytes, bytes]:
    """``(key, value)`` with the value cut short (never valid again: every prefix misses fields)."""
    key, value = kv
    return key, value[: position % len(value)]


def _flip(value: bytes, position: int) -> bytes:
    """``value`` with one bit flipped."""
    bit = position % (len(value) * 8)
    return value[: bit // 8] + bytes([value[bit // 8] ^ (1 << bit % 8)]) + value[bit // 8 + 1 :]


def _oversize(samples: TopicSamples, shapes: Sequence[OversizeShape]) -> SearchStrategy[Record]:
    def build(args: tuple[OversizeShape, str, random.Random, tuple[bytes, bytes]]) -> Record:
        shape, content, rnd, (key, valid) = args
        value = rnd.randbytes(shape.value)
        if content == "padded" and shape.value > len(valid):
            value = valid + value[len(valid) :]  # the valid record, then bytes the serde must refuse
        headers: Headers = (("x-poison-large", rnd.randbytes(shape.header)),) if shape.header else ()
        key = rnd.randbytes(shape.key) if shape.key else key
        return Record(samples.topic, key, value, headers, Kind.OVERSIZE)

    return st.tuples(
        st.sampled_from(tuple(shapes)),
        st.sampled_from(("random", "padded")),
        st.randoms(use_true_random=True),
        st.sampled_from(samples.valid),
    ).map(build)


def bad_record(
    samples: TopicSamples,
    kinds: Sequence[Kind] = DEFAULT_KINDS,
    shapes: Sequence[OversizeShape] = (OversizeShape(2 * MIB),),
) -> SearchStrategy[Record]:
    """A bad record for ``samples.topic``, of one of ``kinds`` (:mod:`streams.testing.poison`, "Bad records").

    Every record it gives is bad for the topic's runtime: its value is refused by the serde (the first
    check of every runtime), or it is a tombstone, or it carries a valid value under a wrong key on a
    key-checked topic, or a garbage ``clingate-watermark`` header on the verdict topic.

    Args:
        samples: the topic's valid records and foreign values.
        kinds: the kinds to draw from (not :attr:`Kind.TOO_LARGE`: those records are built, not drawn).
        shapes: the sizes an :attr:`Kind.OVERSIZE` record may take (each at most the topic's limit).
    """
    topic = samples.topic
    valid = st.sampled_from(samples.valid)
    keys = st.sampled_from(tuple(k for k, _ in samples.valid))
    broken = st.tuples(valid, _POSITION).map(lambda p: _cut(*p))

    def record(
        kind: Kind,
        key: SearchStrategy[bytes | None],
        value: SearchStrategy[bytes | None],
        headers: SearchStrategy[Headers] = _SOME_HEADERS,
    ) -> SearchStrategy[Record]:
        return st.builds(lambda k, v, h: Record(topic, k, v, h, kind), key, value, headers)

    def refused(values: SearchStrategy[bytes]) -> SearchStrategy[bytes]:
        return values.filter(samples.rejects)

    wrong_keys = st.one_of(st.none(), st.just(b""), st.binary(min_size=1, max_size=48), keys)
    # A wrong key: on a key-checked topic under a valid value, elsewhere under a broken one.
    bad_key = st.tuples(valid if samples.key_checked else broken, wrong_keys, _SOME_HEADERS).filter(
        lambda p: p[1] != p[0][0]
    )
    # Every clingate header: on the verdict topic on a valid verdict (the watermark header alone makes it
    # bad); elsewhere those headers are ignored (or, the barrier, only delay), so the value is broken too.
    every_header = st.tuples(valid if topic == DBPM_VERDICTS else broken, _EVERY_HEADER)
    strategies: dict[Kind, SearchStrategy[Record]] = {
        Kind.RANDOM_BYTES: record(
            Kind.RANDOM_BYTES,
            keys,
            refused(
                st.one_of(
                    st.binary(max_size=256),
                    st.binary(max_size=256).map(lambda b: SINGLE_OBJECT_MAGIC + b),
                )
            ),
        ),
        Kind.TRUNCATION: record(Kind.TRUNCATION, keys, refused(broken.map(lambda kv: kv[1]))),
        Kind.BIT_FLIP: record(
            Kind.BIT_FLIP, keys, refused(st.tuples(valid, _POSITION).map(lambda p: _flip(p[0][1], p[1])))
        ),
        Kind.OTHER_SCHEMA: record(Kind.OTHER_SCHEMA, keys, refused(st.sampled_from(samples.others))),
        Kind.OVERSIZE: _oversize(samples, shapes),
        Kind.GARBAGE_HEADERS: every_header.map(
            lambda p: Record(topic, p[0][0], p[0][1], p[1], Kind.GARBAGE_HEADERS)
        ),
        Kind.BAD_KEY: bad_key.map(lambda p: Record(topic, p[1], p[0][1], p[2], Kind.BAD_KEY)),
        Kind.TOMBSTONE: record(Kind.TOMBSTONE, st.one_of(st.none(), keys), st.none()),
    }
    return st.one_of(*(strategies[kind] for kind in kinds))


def draw(strategy: SearchStrategy[T], count: int, seed: int, batch: int = 8) -> list[T]:
    """``count`` values of ``strategy``, the same ones for the same ``seed``.

    Hypothesis's generate phase, seeded, without a database, up to ``batch`` values per example (an
    example costs Hypothesis ~3 ms whatever it draws). Its first examples are its simplest (empty byte
    strings, the first alternative); the rest vary.
    """
    out: list[T] = []
    attempt = 0
    while len(out) < count:

        @hypothesis_settings(
            database=None,
            max_examples=-(-(count - len(out)) // batch),
            phases=[Phase.generate],
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )
        @hypothesis_seed(seed * 1_000_003 + attempt)
        @given(st.data())
        def collect(data: st.DataObject) -> None:
            # Always a whole batch: what an example draws must not depend on state outside it.
            values = data.draw(st.lists(strategy, min_size=batch, max_size=batch))
            out.extend(values[: count - len(out)])

        with contextlib.suppress(Unsatisfiable):  # every example was filtered out: try further seeds
            collect()
        attempt += 1
        if attempt > 50:
            raise RuntimeError(f"drew {len(out)} of {count} values in 50 attempts")
    return out


def draw_balanced(
    samples: TopicSamples, count: int, seed: int, kinds: Sequence[Kind] = DEFAULT_KINDS
) -> list[Record]:
    """``count`` bad records of ``samples.topic``, as many of each kind as the count allows (the first
    kinds one more), the same for the same seed: every kind is fed once ``count >= len(kinds)``."""
    out: list[Record] = []
    for index, kind in enumerate(kinds):
        share = count // len(kinds) + (index < count % len(kinds))
        if share:
            out += draw(bad_record(samples, (kind,)), share, seed * 31 + index)
    return out


def interleave(good: Sequence[Record], bad: Sequence[Record], rng: random.Random) -> list[Record]:
    """``good`` in its order with ``bad`` at random places between (the good records' order is kept)."""
    slots = set(rng.sample(range(len(good) + len(bad)), len(bad)))
    goods, bads = iter(good), iter(bad)
    return [next(bads) if i in slots else next(goods) for i in range(len(good) + len(bad))]


def topic_seed(seed: int, topic: str) -> int:
    """A per-topic seed derived from the run's."""
    return zlib.crc32(f"{seed}:{topic}".encode())


def schema_pool(feeds: dict[str, list[Record]], serde: Serde) -> dict[str, bytes]:
    """One encoded value of every fed model, and of a dead letter: the suite's "other schemas"."""
    pool = {
        MODELS[topic].avro_name: next(
            r.value for r in records if r.value and r.kind is None and not r.control
        )
        for topic, records in feeds.items()
        if records
    }
    letter = DeadLetter(
        ts=datetime(2026, 5, 4, tzinfo=UTC),
        topic=DBPM_CANDIDATES,
        partition=0,
        offset=7,
        stage=Stage.DECODE,
        error_type="SchemaDecodeError",
        error="bad_magic",
        value=b"x",
    )
    pool[DeadLetter.avro_name] = serde.encode(letter)
    return pool
