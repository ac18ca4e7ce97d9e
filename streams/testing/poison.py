"""``clingate bench poison``: bad records on every consumed topic, through every runtime as it runs.

The suite feeds every topic clingate consumes with good records and, interleaved with them, bad
records drawn by Hypothesis strategies, runs the product's own processes against a real broker and
checks four things:

1. **Every bad record is dead-lettered exactly once, with a reason.** The dead-letter topic of its
   source holds exactly one ``clingate.common.DeadLetter`` at the record's coordinates (topic,
   partition, offset), with its key, value and headers byte for byte (or, for a dead letter too large
   for its topic, the prefixes and a ``truncations`` entry whose size and SHA-256 are the original's)
   and the error type the runtime's first failing check gives: ``SchemaDecodeError`` for bytes that
   are not the topic's model, ``TombstoneError`` for a null value, ``KeyMismatch`` where the key
   decides state ownership (verdicts, propagations, the clinical inputs), ``BadWatermark`` for a
   verdict-topic record with a ``clingate-watermark`` header that is not an ISO time,
   ``OutputTooLarge`` / ``StateTooLarge`` for a valid record whose output or state would not fit.
2. **Every good record's outputs are present exactly as a run without the bad records produces
   them.** The reference is computed in process by the same pure code on the good records alone and
   compared record by record (key, value bytes, headers), keyed by the outputs' ids: the gate's
   decisions and to-verify copies (:class:`streams.worker.gate.Gate` on an in-process memory holding the good
   verdicts), the memory itself (the state rebuilt from the workers' changelog against the in-process
   engine's), the clinical assessments, safety audits, gated drafts, revision routes and evidence
   requests (:func:`processors.clinical.assess.process_event` per patient), the arbiter's dispositions,
   packets and ground truth (:func:`processors.docs.arbiter.run`,
   :func:`processors.docs.packet.ground_truth`), and the generator's candidates and the verifier's
   verdicts and verified candidates (their record handlers, :class:`streams.groups.generator.Generator` and
   :class:`streams.groups.verifier.Verifier`, calling the same deterministic test server). A missing, changed
   or repeated output fails, as does a good record on a dead-letter topic.
3. **No worker exit.** Every process is alive at the end (a loop that stops on an error stops its
   worker).
4. **No partition stalled.** Every consumer group committed the end of every partition of its inputs
   (committed offsets follow acknowledged outputs and dead letters in every runtime, so "committed"
   also means "done"). The lag is reported per topic.

The runtimes, each as the product runs it: ``clingate worker`` (the DBPM memory agent for verdicts and
propagations, the gate for candidates, the clinical agent for FHIR updates, reviews, deliverables and the
output gates' run records),
the request runtime ``clingate worker --role requests`` (the console's requests), ``clingate arbiter
worker`` (classifications and reviews, rules-only), ``clingate generator`` (narratives) and ``clingate
verifier`` (to-verify), the last two against ``clingate llm serve --backend test --hashed``, whose answers
are a function of the prompt. ``clingate.docs.ground-truth`` is declared
consumed (it has a dead-letter topic) but no runtime consumes it, so it is not fed.

Determinism by construction, so that the reference is exact and not a matter of timing:

* **DBPM**, propagation and maintenance off (as ``clingate bench chaos``): the good verdicts and
  propagations first, the verdicts followed by a ``clingate-watermark`` tick at the last candidate's
  event time on every verdict partition; once the workers committed both topics, the candidates,
  every good one with the ``clingate-barrier`` header (a garbage value: only its presence counts), so
  each is decided only when this gate's view of the memory has applied every partition up to its
  tick, i.e. the whole memory. The reference decides the candidates on the in-process memory holding
  the same verdicts.
* **Clinical**: the FHIR updates, then (after the workers committed them) the reviews, then some
  patients' runs through the output gates (their evidence, then their first drafts, then the audits of
  those), then the deliverables; the reference processes each patient's records in that order. A
  patient's records are one key, one partition, one writer: the order within a topic is the
  production order.
* **Docs**: the classifications, then (once committed, so every packet exists) the reviews of the
  escalated documents.
* **Requests**: requests whose check needs nothing read from Kafka (a re-drive reads its dead letter and
  the source record), so :func:`streams.requests.check.check` decides them here as the runtime does: a
  clinician's question and a pharmacist's query decision and evidence review, carried out to topics no
  runtime of the suite consumes, and requests the runtime refuses (a role that may not ask, a re-drive
  that names no dead letter); each gets its outcome, whose time is the runtime's clock.
* **LLM groups** last, after the gate's checks: the verifier is started only then, at the end of its
  input topics, so the verdicts it publishes for the gate's to-verify records cannot change a memory the
  gate's checks depend on. Narratives come before the to-verify records that name them.

Bad records (:func:`bad_record`, drawn reproducibly per topic by :func:`draw`): random bytes (with and
without the single-object marker), truncations and bit flips of valid records (bit flips the serde
would still accept are filtered out: they are other valid records, not bad ones), valid records of
other schemas and JSON renderings of valid records, oversized values up to the topic's limit (padded
valid records or random bytes; one shape with a 2 MiB key, whose dead letter needs cutting), every
clingate header with garbage values (on the verdict topic on a valid verdict, where the watermark
header alone makes it bad; elsewhere on a broken value, since those headers are ignored there), wrong
keys (on a valid value where the key is checked, else with a broken value) and tombstones. Any of them
may carry further garbage headers. Some good records carry garbage in the clingate headers their
topic ignores, which must change nothing.

Large valid records (:class:`Scale`, ``large``): good records of 2 MiB texts, over every client's and
broker's ~1 MB default, whose outputs and state must come like any other's; and valid records whose
output or state cannot fit (a candidate near the topic limit, whose decision holds it twice; a patient
whose third 3 MiB update would take the state past the table's changelog limit): bad, dead-lettered
with stage ``produce``, the reference deciding which by the same size rule as the runtimes
(:func:`fits`).

Wait for conditions, never for time: every phase ends when the consumer groups committed the end
offsets of what was fed; outputs are read up to the topics' ends after that.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import os
import random
import threading
import time
import uuid
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from hypothesis import HealthCheck, Phase, given
from hypothesis import seed as hypothesis_seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy

from processors.clinical.assess import RunEvent, process_event
from processors.clinical.knowledge import default_knowledge
from processors.dbpm import parse_time
from processors.dbpm.extraction import QA_TEMPLATES
from processors.docs.arbiter import ArbiterConfig, run
from processors.docs.packet import ground_truth
from processors.docs.v3 import load_trap_rules
from schemas.agent import AgentRequest
from schemas.base import AvroModel
from schemas.clinical import (
    AdversarialReview,
    AuditReport,
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidencePacket,
    EvidenceReview,
    EvidenceVerdict,
    QueryDecision,
    QueryVerdict,
    ReviewedPacket,
    SafetyAudit,
)
from schemas.common import DeadLetter, Stage
from schemas.console import ConsoleRequest, ConsoleRequestOutcome
from schemas.dbpm import (
    Candidate,
    Dispatch,
    GateAction,
    GateDecision,
    Narrative,
    NerPayload,
    QaPayload,
    RePayload,
    Verdict,
    VerdictLabel,
)
from schemas.dbpm import Propagation as PropagationRecord
from schemas.docs import (
    ClassificationOutput,
    ClassificationRequest,
    DocumentBundle,
    DocumentType,
    Review,
    ReviewDecision,
)
from schemas.fhir import FhirUpdate
from schemas.serde import SINGLE_OBJECT_MAGIC, SchemaDecodeError, Serde
from schemas.wire import make_serde
from state.memory import MemoryStore
from streams.data import DOCS, DOCS_EXAMPLES
from streams.data.timeline import encounter, fhir_timeline
from streams.groups.verifier import CONFIDENCE_HEADER, GATE_HEADER, VERDICT_HEADER
from streams.local.broker import free_port
from streams.local.process import SOURCE_ROOT, ProcessError, ProcessHandle, http_answers, python_module
from streams.replay.kafka import CommitWatcher, ReplayTimeout, commit_end_offsets, read_state
from streams.requests.check import Carried, Evidence, RequestAction, check, publication_request
from streams.requests.runtime import group_id, outcome_of
from streams.runtime.core import Output
from streams.runtime.dlq import HEADER_PREFIX, PRODUCER_LIMITS, SourceRecord, fits
from streams.runtime.kafka_clients import end_offsets, produce_waiting, producer_config, read_to_end, reader
from streams.runtime.kafka_config import admin_client, client_config
from streams.runtime.settings import Settings, get_settings
from streams.testing.dbpm_stream import StreamShape, generate_events
from streams.testing.llm_server import ServerProcess
from streams.testing.worker import COMPARISON_ENV, comparison_engine
from streams.worker import READY
from streams.worker.clinical import OUTPUT_TOPICS, Published, clinical_group, fhir_input, gate_flags
from streams.worker.dbpm import (
    BARRIER_HEADER,
    REPLAYED_HEADER,
    TICK_HEADER,
    candidate_of,
    contract_event,
    dbpm_engine,
    dispatch_outputs,
    memory_changelog,
    propagation_event,
    propagation_key,
    verdict_key,
)
from streams.worker.gate import Gate, gate_group
from streams.worker.memory import memory_group
from topics.admin import ensure_topics
from topics.catalog import (
    AGENT_REQUESTS,
    CLINICAL_ASSESSMENTS,
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_EVIDENCE_REQUESTS,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_QUERY_DECISIONS,
    CLINICAL_REVIEWS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_SAFETY_AUDITS,
    CONSOLE_REQUEST_OUTCOMES,
    CONSOLE_REQUESTS,
    DATA_MAX_MESSAGE_BYTES,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_DISPATCHES,
    DBPM_NARRATIVES,
    DBPM_PROPAGATIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
    FHIR_UPDATES,
    MAX_MESSAGE_BYTES,
    build_catalog,
    dlq_name,
)

T = TypeVar("T")

Headers = tuple[tuple[str, bytes | None], ...]
"""Kafka record headers as the suite produces and compares them: (name, value or None), in order."""

MIB = 1024 * 1024

CLINGATE_HEADERS: tuple[str, ...] = (
    TICK_HEADER,
    REPLAYED_HEADER,
    BARRIER_HEADER,
    GATE_HEADER,
    CONFIDENCE_HEADER,
    VERDICT_HEADER,
    *(
        HEADER_PREFIX + name
        for name in ("exception", "message", "topic", "partition", "offset", "stage", "reason", "truncated")
    ),
)
"""Every header name clingate reads or writes: the watermark tick, the replay mark of verdicts (which the
suite's good verdicts, naming no candidate, do not depend on) and the barrier (read), the verifier's
tags on verified candidates, and the dead letters' KIP-1034-style headers (a re-driven dead letter carries
them)."""

SEMANTIC_HEADERS: dict[str, str] = {DBPM_VERDICTS: TICK_HEADER, DBPM_CANDIDATES: BARRIER_HEADER}
"""The one header a topic's runtime reads; every other clingate header is ignored on that topic."""

CLINICAL_FEEDS = (
    FHIR_UPDATES, CLINICAL_REVIEWS, CLINICAL_EVIDENCE, CLINICAL_DRAFTS, CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
)  # fmt: skip
"""The clinical loop's inputs in the order the suite feeds them (each once the loop consumed the one
before)."""

KEY_CHECKED: frozenset[str] = frozenset({DBPM_VERDICTS, DBPM_PROPAGATIONS, *CLINICAL_FEEDS})
"""Topics whose runtime dead-letters a valid record whose key is not its content's (the key decides which
partition, hence which writer, owns the state it changes)."""

RUNTIMES: dict[str, str] = {
    DBPM_NARRATIVES: "generator",
    DBPM_CANDIDATES: "worker (gate)",
    DBPM_VERDICTS: "worker (memory)",
    DBPM_PROPAGATIONS: "worker (memory)",
    DBPM_DISPATCHES: "worker (memory)",
    DBPM_TO_VERIFY: "verifier",
    **dict.fromkeys(CLINICAL_FEEDS, "worker (clinical)"),
    DOCS_CLASSIFICATIONS: "docs worker",
    DOCS_REVIEWS: "docs worker",
    CONSOLE_REQUESTS: "worker (requests)",
}
"""Every consumed topic the suite feeds, and the runtime that consumes it."""

UNFED: dict[str, str] = {
    DOCS_GROUND_TRUTH: "declared consumed, but no runtime consumes it",
    AGENT_REQUESTS: "the agent worker answers with a model and tools; its dead letters (not the schema, a "
    "key that is not the conversation, an empty query) are tests/integration/test_agent_worker.py's",
}
"""Consumed topics the suite does not feed, and why."""

MODELS: dict[str, type[AvroModel]] = {
    DBPM_NARRATIVES: Narrative,
    DBPM_CANDIDATES: Candidate,
    DBPM_VERDICTS: Verdict,
    DBPM_PROPAGATIONS: PropagationRecord,
    DBPM_DISPATCHES: Dispatch,
    DBPM_TO_VERIFY: GateDecision,
    FHIR_UPDATES: FhirUpdate,
    CLINICAL_REVIEWS: AdversarialReview,
    CLINICAL_EVIDENCE: EvidenceBundle,
    CLINICAL_DRAFTS: ClinicalDraft,
    CLINICAL_AUDIT_REPORTS: AuditReport,
    CLINICAL_DELIVERABLES: Deliverable,
    DOCS_CLASSIFICATIONS: ClassificationRequest,
    DOCS_REVIEWS: Review,
    CONSOLE_REQUESTS: ConsoleRequest,
}
"""The model each fed topic carries."""


# ------------------------------------------------------------------------------------ the records


class Kind(StrEnum):
    """What makes a bad record bad."""

    RANDOM_BYTES = "random-bytes"
    TRUNCATION = "truncation"
    BIT_FLIP = "bit-flip"
    OTHER_SCHEMA = "other-schema"
    OVERSIZE = "oversize"
    GARBAGE_HEADERS = "garbage-headers"
    BAD_KEY = "bad-key"
    TOMBSTONE = "tombstone"
    TOO_LARGE = "too-large"
    """A valid record whose output or state would not fit its topic (dead-lettered, stage ``produce``)."""


DEFAULT_KINDS: tuple[Kind, ...] = tuple(k for k in Kind if k not in (Kind.OVERSIZE, Kind.TOO_LARGE))
"""The kinds drawn for the bulk of the bad records; oversized ones are drawn in a counted few, and valid
records too large for their outputs are built with the good ones (:class:`Scale`, ``large``)."""


@dataclass(frozen=True)
class Record:
    """One record the suite produces.

    Attributes:
        topic: where it goes.
        key: the record key (None: a null key).
        value: the record value (None: a tombstone).
        headers: the record headers.
        kind: what makes it bad; None for a good record.
        ident: a good record's id (its outputs are matched by it); empty for a bad one.
        control: a good record without outputs of its own (a watermark tick).
        partition: an explicit partition (ticks); None: the murmur2 partition of the key.
        error: the error type of a bad record's dead letter when it is not :func:`expected_error`'s
            (a record too large for its outputs).
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    kind: Kind | None = None
    ident: str = ""
    control: bool = False
    partition: int | None = None
    error: str = ""

    @property
    def size(self) -> int:
        """Bytes of key, value and headers."""
        return (
            len(self.key or b"")
            + len(self.value or b"")
            + sum(len(k) + len(v or b"") for k, v in self.headers)
        )


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
    """A bad record for ``samples.topic``, of one of ``kinds`` (module docstring, "Bad records").

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


def expected_error(record: Record) -> str:
    """The error type of the dead letter of bad ``record``: the first check of its runtime that fails."""
    if record.error:
        return record.error
    if record.topic == DBPM_VERDICTS and any(name == TICK_HEADER for name, _ in record.headers):
        return "BadWatermark"  # the memory agent reads the tick header before anything else
    if record.value is None:
        return "TombstoneError"
    if record.kind is Kind.BAD_KEY and record.topic in KEY_CHECKED:
        return "KeyMismatch"
    return "SchemaDecodeError"


def interleave(good: Sequence[Record], bad: Sequence[Record], rng: random.Random) -> list[Record]:
    """``good`` in its order with ``bad`` at random places between (the good records' order is kept)."""
    slots = set(rng.sample(range(len(good) + len(bad)), len(bad)))
    goods, bads = iter(good), iter(bad)
    return [next(bads) if i in slots else next(goods) for i in range(len(good) + len(bad))]


def topic_seed(seed: int, topic: str) -> int:
    """A per-topic seed derived from the run's."""
    return zlib.crc32(f"{seed}:{topic}".encode())


# ------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Scale:
    """How many records the suite feeds.

    Attributes:
        good: good records per topic, the LLM groups' topics excepted (at least one per arbiter example,
            :data:`streams.data.DOCS_EXAMPLES`); the docs reviews are one per escalated document.
        bad: bad records per topic, the oversized ones not counted.
        llm_good: good narratives, and good to-verify records (each costs LLM calls).
        oversized: oversized bad records in all, spread over the topics (:func:`oversize_plan`).
        large: valid records of :data:`LARGE` text per kind: good verdicts, propagations, candidates,
            FHIR updates, deliverables, classifications and reviews (their outputs must come, however
            large), and, as bad records, candidates near the topic limit (a decision holds the candidate
            and its signature, the entity twice: it cannot fit) and patients whose third 3 MiB FHIR update
            would take their state past the changelog's limit. Narratives and to-verify records are not
            made large: the LLM server refuses prompts over 1 MiB, a limit of the server, not of the
            runtime.
    """

    good: int = 12
    bad: int = 12
    llm_good: int = 6
    oversized: int = 6
    large: int = 1

    def __post_init__(self) -> None:
        if (
            self.good < len(DOCS_EXAMPLES)
            or self.llm_good < 1
            or min(self.bad, self.oversized, self.large) < 0
        ):
            raise ValueError(
                f"good >= {len(DOCS_EXAMPLES)} and llm_good >= 1 are needed (every topic needs a "
                "good record to break); bad, oversized and large >= 0"
            )


NEAR_LIMIT = DATA_MAX_MESSAGE_BYTES - 64 * 1024
"""An oversized value close to the 8 MiB topic limit (64 KiB left for the key, headers and framing)."""

LARGE = 2 * MIB
"""The text of a large valid record: above every client's and broker's 1 MB default, within the topics'
8 MiB (a verdict carries its entity twice, in its key and its value)."""


def filler(size: int, rng: random.Random) -> str:
    """``size`` characters of clinical-looking text (seeded words)."""
    words = " ".join(rng.choice(_FINDINGS + _CONDITIONS + _DRUGS) for _ in range(64)) + " "
    return (words * (size // len(words) + 1))[:size]


OVERSIZE_TOPICS = (
    FHIR_UPDATES,
    DBPM_CANDIDATES,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DOCS_CLASSIFICATIONS,
    DBPM_VERDICTS,
    CLINICAL_REVIEWS,
    DBPM_PROPAGATIONS,
    DOCS_REVIEWS,
    CLINICAL_DELIVERABLES,
)
"""The order in which oversized records are spread over the topics: the clinical loop's input first, then the
gate's, then the ordered loops'."""


def oversize_plan(count: int) -> dict[str, list[OversizeShape]]:
    """Per topic, the shapes of its oversized records: the first near the topic limit, the second with a
    2 MiB key (its dead letter, which holds the key twice, must be cut to fit), the others 2 MiB values,
    every third of those with a 64 KiB header."""
    shapes = [OversizeShape(NEAR_LIMIT), OversizeShape(NEAR_LIMIT - 2 * MIB, key=2 * MIB)]
    shapes += [
        OversizeShape(2 * MIB, header=64 * 1024 if i % 3 == 2 else 0) for i in range(max(0, count - 2))
    ]
    plan: dict[str, list[OversizeShape]] = defaultdict(list)
    for i, shape in enumerate(shapes[:count]):
        plan[OVERSIZE_TOPICS[i % len(OVERSIZE_TOPICS)]].append(shape)
    return plan


OutputIdentity = tuple[str, bytes, bytes, tuple[tuple[str, bytes], ...]]
"""What an output record is compared by: topic, key, value, headers."""


@dataclass(frozen=True)
class Expected:
    """One output record a good record must produce.

    Attributes:
        topic: the output topic.
        key: its key.
        value: its value.
        headers: its headers.
        source: the input topic of the good record that produces it.
        ident: the id it is reported by (candidate, patient, document or audit id).
    """

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    source: str
    ident: str

    @property
    def identity(self) -> OutputIdentity:
        """What an output record is compared by (before :func:`unclocked`)."""
        return self.topic, self.key, self.value, self.headers


CLOCKED: dict[str, tuple[type[AvroModel], str]] = {
    DBPM_CANDIDATES: (Candidate, "ts"),
    DBPM_VERDICTS: (Verdict, "ts"),
    CONSOLE_REQUEST_OUTCOMES: (ConsoleRequestOutcome, "event_time"),
}
"""Outputs stamped with their producer's clock, and the field that holds it: the generator's candidates
(when it extracted them), the verifier's verdicts (when it judged them) and the request runtime's outcomes
(when it checked the request). Two runs never agree on those times."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def unclocked(identity: OutputIdentity, serde: Serde) -> OutputIdentity:
    """``identity`` with the producer's clock set aside (:data:`CLOCKED`): what a record is compared by.
    A value that does not decode is compared as it is."""
    topic, key, value, headers = identity
    if topic not in CLOCKED:
        return identity
    model, clock = CLOCKED[topic]
    try:
        decoded = serde.decode(value, model, topic=topic)
    except Exception:  # not one of the runtimes' records: compared byte for byte
        return identity
    return topic, key, serde.encode(decoded.model_copy(update={clock: _EPOCH}), topic=topic), headers


@dataclass
class Plan:
    """Everything the suite feeds and expects.

    Attributes:
        tag: prefix of every id of the run (keeps runs on one broker apart).
        feeds: per topic, the records in production order (good and bad interleaved).
        expected: the outputs of the good records (the LLM groups' are added by :func:`llm_reference`).
        memory: the in-process memory's state after the good verdicts and propagations.
        narratives: the good narratives.
        decisions: the good to-verify records.
    """

    tag: str
    feeds: dict[str, list[Record]]
    expected: list[Expected]
    memory: dict[str, object]
    narratives: list[Narrative]
    decisions: list[GateDecision]

    def prefix(self, family: str) -> str:
        """The id prefix of one family of records (``g-``: DBPM candidates and verdicts, ``n``: narratives,
        ``tv-``: to-verify candidates, ``pt-``: clinical patients, ``doc-``: documents, ``req-``: what the
        console's requests are about)."""
        return f"{self.tag}-{family}"


def _json_ts(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _noise(rng: random.Random, topic: str) -> Headers:
    """Garbage in the clingate headers ``topic`` ignores, on about one good record in four."""
    if rng.random() >= 0.25:
        return ()
    names = [n for n in CLINGATE_HEADERS if n != SEMANTIC_HEADERS.get(topic)]
    picked = rng.sample(names, rng.randint(1, 3))
    return tuple((name, None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 24))) for name in picked)


def too_large(record: Record, error: str) -> Record:
    """``record`` (valid) as a bad record of :attr:`Kind.TOO_LARGE` whose dead letter says ``error``."""
    return replace(record, kind=Kind.TOO_LARGE, ident="", error=error)


@dataclass
class _Family:
    """The good records of some topics and their outputs."""

    feeds: dict[str, list[Record]]
    """Per topic, the good records in their order, with the valid records too large for their outputs or
    state among them (:attr:`Kind.TOO_LARGE`, bad: whether one fits may depend on the records before)."""
    expected: list[Expected] = field(default_factory=list)


def _dbpm(
    tag: str, scale: Scale, rng: random.Random, serde: Serde, partitions: int
) -> tuple[_Family, dict[str, object]]:
    """The good verdicts, propagations and candidates (``scale.large`` of each with a :data:`LARGE`
    entity or signature), the watermark ticks, the decisions they produce and the memory they leave
    (propagation and maintenance off, as the workers run here); and candidates whose decision cannot fit
    the decisions topic."""
    good = scale.good
    shape = StreamShape(
        seed=rng.randrange(1 << 30),
        ner_per_patient=(2, 5),
        re_per_patient=(2, 5),
        qa_per_patient=(1, 3),
        ner_fail_rate=0.3,
        re_fail_rate=0.4,
        qa_fail_rate_covered=0.3,
        qa_fail_rate_uncovered=0.3,
    )
    verdicts: list[Verdict] = []
    candidates: list[Candidate] = []
    for event in generate_events(100 * good, shape):
        body = {k: v for k, v in event.items() if k != "kind"}
        body["patient_id"] = f"{tag}-g-{body['patient_id']}"
        if event["kind"] == "verdict" and len(verdicts) < good:
            verdicts.append(Verdict.model_validate(body))
        elif event["kind"] == "gate" and len(candidates) < good:
            candidates.append(
                Candidate.model_validate({**body, "candidate_id": f"{tag}-g-{body['candidate_id']}"})
            )
        if len(verdicts) >= good and len(candidates) >= good:
            break
    ts = verdicts[-1].ts
    for j in range(scale.large):
        entity = NerPayload(entity=filler(LARGE, rng), category="Diagnosis")
        verdicts.append(
            Verdict(
                ts=ts,
                task="ner",
                verdict=VerdictLabel.HARD_FAIL,
                source="verifier_mmed",
                patient_id=f"{tag}-g-large-{j}",
                payload=entity,
            )
        )
        candidates.append(
            Candidate(
                ts=candidates[-1].ts,
                task="ner",
                patient_id=f"{tag}-g-large-{j}",
                candidate_id=f"{tag}-g-large-{j}",
                payload=entity,
            )
        )
    for j in range(scale.large):  # a decision holds its candidate and its signature: twice the entity
        huge = NerPayload(entity=filler(NEAR_LIMIT - 1024, rng), category="Diagnosis")
        candidates.append(
            Candidate(
                ts=candidates[-1].ts,
                task="ner",
                patient_id=f"{tag}-g-huge-{j}",
                candidate_id=f"{tag}-g-huge-{j}",
                payload=huge,
            )
        )
    engine = comparison_engine()
    store = MemoryStore()
    family = _Family({DBPM_VERDICTS: [], DBPM_PROPAGATIONS: [], DBPM_CANDIDATES: []})
    keys = []
    for i, verdict in enumerate(verdicts):
        event = contract_event(verdict)
        keys.append(key := verdict_key(engine, event))  # type: ignore[arg-type]
        family.feeds[DBPM_VERDICTS].append(
            Record(
                DBPM_VERDICTS,
                key,
                serde.encode(verdict, topic=DBPM_VERDICTS),
                _noise(rng, DBPM_VERDICTS),
                ident=f"verdict-{i}",
            )
        )
        with store.transaction() as txn:
            engine.process(txn, event, event.time)
    for i in range(good + scale.large):
        # Evidence for the verdicts' own signatures (the large ones last); identities increase per origin
        # partition (1000+, which no memory partition of this run is).
        task, signature = keys[i if i >= good else i % good].decode().split("|", 1)
        record = PropagationRecord(
            ts=verdicts[-1].ts,
            task=task,
            signature=signature,
            weight=0.5,
            source="cross_task_re",
            origin_task="re",
            origin_signature="TREATMENT|TREATS|DIAGNOSIS",
            patient_id=f"{tag}-g-evidence",
            origin_partition=1000 + i % 3,
            origin_offset=i,
            origin_index=0,
        )
        event = propagation_event(record)
        family.feeds[DBPM_PROPAGATIONS].append(
            Record(
                DBPM_PROPAGATIONS,
                propagation_key(event),
                serde.encode(record, topic=DBPM_PROPAGATIONS),
                _noise(rng, DBPM_PROPAGATIONS),
                ident=f"propagation-{i}",
            )
        )
        with store.transaction() as txn:
            engine.propagate(txn, event)  # propagation off: applies nothing, here and in the workers
    gate = Gate(engine, serde, store)
    for candidate in candidates:
        out = gate.decide(candidate_of(candidate), replayed=True)
        # Every good candidate asks for the barrier (module docstring); the header's value is ignored.
        headers = ((BARRIER_HEADER, rng.randbytes(rng.randint(0, 8))), *_noise(rng, DBPM_CANDIDATES))
        record = Record(
            DBPM_CANDIDATES,
            out.key,
            serde.encode(candidate, topic=DBPM_CANDIDATES),
            headers,
            ident=candidate.candidate_id,
        )
        if not fits(DBPM_DECISIONS, out.key, out.value):
            family.feeds[DBPM_CANDIDATES].append(too_large(record, "OutputTooLarge"))
            continue
        family.feeds[DBPM_CANDIDATES].append(record)
        outputs = (DBPM_DECISIONS,) if out.decision == GateAction.BLOCK else (DBPM_DECISIONS, DBPM_TO_VERIFY)
        family.expected += [
            Expected(topic, out.key, out.value, (), DBPM_CANDIDATES, candidate.candidate_id)
            for topic in outputs
        ]
    family.feeds[DBPM_VERDICTS] += ticks(_json_ts(max(c.ts for c in candidates)), partitions)
    txn = store.transaction()
    try:
        memory = engine.snapshot(txn)
    finally:
        txn.abort()
    return family, memory


def ticks(at: str, partitions: int) -> list[Record]:
    """A watermark tick at event time ``at`` (ISO) on every verdict partition."""
    return [
        Record(
            DBPM_VERDICTS,
            None,
            b"",
            ((TICK_HEADER, at.encode()),),
            ident=f"tick-{p}",
            control=True,
            partition=p,
        )
        for p in range(partitions)
    ]


_REVIEWS: tuple[dict[str, Any], ...] = (
    {
        "disposition": "CONCUR",
        "automation_bias_risk": "LOW",
        "revision_count": 2,
        "audit_verdict": "APPROVED",
    },
    {
        "disposition": "DISSENT",
        "automation_bias_risk": "LOW",
        "revision_count": 1,
        "audit_verdict": "APPROVED",
    },
    {
        "disposition": "DISSENT",
        "subcategory": "DATAGAP",
        "automation_bias_risk": "LOW",
        "revision_count": 1,
        "audit_verdict": "APPROVED",
    },
    {
        "disposition": "CONCUR",
        "automation_bias_risk": "LOW",
        "revision_count": 2,
        "audit_verdict": "MODIFICATION_REQUIRED",
    },
)
_DELIVERABLES = (
    "Hold digoxin; repeat level and potassium in 24 h.",
    "Continue warfarin 5 mg daily; recheck INR in one week.",
    "Start amiodarone 200 mg daily with warfarin; no dose change.",
    "Stop furosemide; monitor creatinine and potassium.",
)


_LABEL = {
    "digoxin label": "Digoxin toxicity is more likely with hypokalemia. Check potassium before each dose.",
    "warfarin label": "Bleeding is the major risk of warfarin therapy. Amiodarone can raise the INR.",
}
"""The evidence packets of the suite's runs."""

_CITATIONS = (
    '[CRG: digoxin label — "Digoxin toxicity is more likely with hypokalemia."]',
    '[CRG: warfarin label — "Bleeding is the major risk of warfarin therapy. Amiodarone ... raise the INR."]',
    '[CRG: digoxin label — "Toxicity of digoxin is more likely with hypokalemia."]',
    '[CRG: digoxin label — "Amiodarone can raise the INR."]',
    '[CRG: warfarin label — "Warfarin is safe at any INR."]',
)
"""Citations of the suite's drafts: verified, ellipsis, paraphrase, wrong attribution, fabricated."""

_AUDITS = (
    {"violations": ["Rule 4.3: parametric leakage in the dosing section"], "cds_compliant": True},
    {"violations": ["[PARSER WARNING] no verdict line"], "cds_compliant": True},
    {"violations": ["Rule 4.14: quote integrity"], "cds_compliant": False},
    {"violations": ["Rule 4.3: ✅ PASS — No parametric leakage"], "cds_compliant": True},
    {"violations": [], "cds_compliant": True},
)
"""Audit reports of the suite's runs, one per router path."""


def _runs(tag: str, pids: list[str], when: datetime, rng: random.Random) -> list[RunEvent]:
    """A run of one revision (evidence, draft 0, its audit) per patient of ``pids`` (one run each: a
    patient's next run would replace the first before its audit), in feed order: every evidence bundle,
    then every draft, then every audit."""
    runs = []
    for i, pid in enumerate(pids):
        base = {"patient_id": pid, "run_id": f"{tag}-run-{i}", "event_time": when + timedelta(hours=i)}
        packets = [EvidencePacket(source=s, text=t) for s, t in _LABEL.items()]
        cited = " ".join(rng.sample(_CITATIONS, k=rng.randint(1, len(_CITATIONS))))
        text = f"## HOLD DIGOXIN\nDiscontinue digoxin for now. {cited}\nMonitor potassium."
        report = json.dumps(rng.choice(_AUDITS), ensure_ascii=False)
        runs.append((
            EvidenceBundle(**base, packets=packets),
            ClinicalDraft(**base, revision=0, text=text),
            AuditReport(**base, revision=0, report=report),
        ))  # fmt: skip
    return [event for stage in zip(*runs, strict=True) for event in stage]


def _encounter(pid: str, rid: str, when: datetime, text: str) -> FhirUpdate:
    """A FHIR update of one finished Encounter whose reason is ``text``."""
    resource = json.dumps(encounter(pid, rid, text))
    return FhirUpdate(ts=when, patient_id=pid, resource_type="Encounter", resource=resource)


def _clinical(tag: str, scale: Scale, rng: random.Random, serde: Serde) -> _Family:
    """The good FHIR updates, reviews, runs through the output gates and deliverables, and the
    assessments, gated drafts, routes and audits they produce, in the order the suite feeds them
    (:data:`CLINICAL_FEEDS`).

    With ``scale.large``: updates and deliverables of :data:`LARGE` text, and patients whose 3 MiB
    updates grow their state until it would not fit the patient table's changelog (the update that would
    is bad: the runtime must dead-letter it and keep the state it had).
    """
    good = scale.good
    patients = good // 2 + 1  # about half the patients' weeks have an update: enough updates
    updates = []
    for update in fhir_timeline(patients, rng.randrange(1 << 30))[:good]:
        text = update.resource_json().replace("PT-DEMO-", f"{tag}-pt-")
        pid = update.patient_id.replace("PT-DEMO-", f"{tag}-pt-")
        updates.append(FhirUpdate(ts=update.ts, patient_id=pid, resource_type="Bundle", resource=text))
    pids = sorted({u.patient_id for u in updates})
    last = max(u.ts for u in updates)
    for j in range(scale.large):
        updates.append(_encounter(f"{tag}-pt-large-{j}", "e0", last, filler(LARGE, rng)))
        heavy = f"{tag}-pt-heavy-{j}"
        updates += [
            _encounter(heavy, f"e{n}", last + timedelta(hours=n), filler(3 * MIB, rng)) for n in range(3)
        ]
    reviews = [
        AdversarialReview(
            patient_id=pids[i % len(pids)],
            review_id=f"{tag}-review-{i}",
            event_time=last + timedelta(hours=i + 1),
            **rng.choice(_REVIEWS),
        )
        for i in range(good)
    ]
    deliverables = [
        Deliverable(
            patient_id=pids[i % len(pids)],
            deliverable_id=f"{tag}-deliverable-{i}",
            event_time=last + timedelta(days=2, hours=i),
            text=filler(LARGE, rng) if i >= good else rng.choice(_DELIVERABLES),
        )
        for i in range(good + scale.large)
    ]
    knowledge, flags = default_knowledge(), gate_flags(Settings())
    states: dict[str, Any] = {}
    family = _Family({topic: [] for topic in CLINICAL_FEEDS})
    run_topics = {
        EvidenceBundle: CLINICAL_EVIDENCE,
        ClinicalDraft: CLINICAL_DRAFTS,
        AuditReport: CLINICAL_AUDIT_REPORTS,
    }
    runs = _runs(tag, pids[:good], last + timedelta(days=1), rng)
    inputs: list[tuple[str, FhirUpdate | AdversarialReview | RunEvent | Deliverable, str]] = [
        *((FHIR_UPDATES, u, f"{u.patient_id}@{_json_ts(u.ts)}") for u in updates),
        *((CLINICAL_REVIEWS, r, r.review_id) for r in reviews),
        *((run_topics[type(e)], e, f"{e.run_id}|{type(e).__name__}") for e in runs),
        *((CLINICAL_DELIVERABLES, d, d.deliverable_id) for d in deliverables),
    ]
    for topic, value, ident in inputs:
        event: Any
        if isinstance(value, FhirUpdate):
            event, errors = fhir_input(value)
            if event is None or errors:
                raise RuntimeError(f"a generated FHIR update is not valid: {errors}")
            now = value.ts
        else:
            event, now = value, value.event_time
        key = value.patient_id.encode()
        record = Record(topic, key, serde.encode(value, topic=topic), _noise(rng, topic), ident=ident)
        before = states.get(value.patient_id)
        state, outputs = process_event(before, event, now, knowledge, flags)
        if state != before and not fits(topic, key, state.model_dump_json().encode()):
            family.feeds[topic].append(too_large(record, "StateTooLarge"))
            continue
        states[value.patient_id] = state
        family.feeds[topic].append(record)
        for out in outputs:
            if isinstance(out, Published):
                name = OUTPUT_TOPICS[type(out)]
                family.expected.append(
                    Expected(name, key, serde.encode(out, topic=name), (), topic, _ident(out))
                )
    return family


def _ident(out: Published) -> str:
    """How the report names a clinical output."""
    if isinstance(out, ClinicalAssessment):
        return f"{out.patient_id}@{out.as_of}"
    if isinstance(out, SafetyAudit):
        return out.audit_id
    return f"{out.run_id}|{out.revision}|{type(out).__name__}"


def _docs(tag: str, scale: Scale, rng: random.Random, serde: Serde) -> _Family:
    """The good classification requests (the arbiter examples, in turn) and one review per escalated
    document, and the dispositions, packets and ground truth they produce (rules-only). With
    ``scale.large``, that many requests carry a :data:`LARGE` page text and that many reviews large notes;
    a record whose outputs would not fit their topics is bad (the loop must dead-letter it)."""
    config = ArbiterConfig(trap_rules=load_trap_rules(get_settings().docs_trap_rules), llm_enabled=False)
    examples = {
        case: (
            ClassificationOutput.model_validate_json((DOCS / f"{out}.json").read_bytes()),
            DocumentBundle.model_validate_json((DOCS / f"{bundle}.json").read_bytes()),
        )
        for case, (out, bundle) in DOCS_EXAMPLES.items()
    }
    cases = list(examples)
    family = _Family({DOCS_CLASSIFICATIONS: [], DOCS_REVIEWS: []})

    def add(topic: str, record: Record, outputs: list[tuple[str, AvroModel]]) -> bool:
        encoded = [(name, serde.encode(value, topic=name)) for name, value in outputs]
        if not all(fits(name, record.key or b"", value) for name, value in encoded):
            family.feeds[topic].append(too_large(record, "OutputTooLarge"))
            return False
        family.feeds[topic].append(record)
        family.expected += [Expected(n, record.key or b"", v, (), topic, record.ident) for n, v in encoded]
        return True

    packets = []
    for i in range(scale.good + scale.large):
        case = cases[i % len(cases)]
        output, bundle = examples[case]
        doc_id = f"{tag}-doc-{case}-{i:05d}"
        when = datetime.fromisoformat(bundle.processing_timestamp.replace("Z", "+00:00"))
        if i >= scale.good:  # a large document: its first page's text grows
            first = bundle.pages[0].model_copy(
                update={"text": bundle.pages[0].text + " " + filler(LARGE, rng)}
            )
            bundle = bundle.model_copy(update={"pages": [first, *bundle.pages[1:]]})
        request = ClassificationRequest(
            doc_id=doc_id, ts=when, classification=output, bundle=bundle.model_copy(update={"doc_id": doc_id})
        )
        value = serde.encode(request, topic=DOCS_CLASSIFICATIONS)
        record = Record(
            DOCS_CLASSIFICATIONS, doc_id.encode(), value, _noise(rng, DOCS_CLASSIFICATIONS), ident=doc_id
        )
        finished = run(request, config)
        outputs: list[tuple[str, AvroModel]] = [(DOCS_DISPOSITIONS, finished.disposition)]
        outputs += [(DOCS_REVIEW_PACKETS, finished.packet)] if finished.packet is not None else []
        if add(DOCS_CLASSIFICATIONS, record, outputs) and finished.packet is not None:
            packets.append(finished.packet)
    for i, packet in enumerate(packets):
        corrects = i % 2 == 1
        review = Review(
            doc_id=packet.doc_id,
            ts=packet.ts,
            reviewer=f"sme-{i % 3}",
            decision=ReviewDecision.CORRECTS if corrects else ReviewDecision.AGREES,
            corrected_dominant_type=DocumentType.OTHER if corrects else None,
            notes=filler(LARGE, rng) if i >= len(packets) - scale.large else "poison suite",
        )
        key = packet.doc_id.encode()
        record = Record(
            DOCS_REVIEWS, key, serde.encode(review, topic=DOCS_REVIEWS), _noise(rng, DOCS_REVIEWS)
        )
        reviewed, truth = ground_truth(packet, review)
        add(
            DOCS_REVIEWS,
            replace(record, ident=packet.doc_id),
            [(DOCS_GROUND_TRUTH, truth), (DOCS_REVIEW_PACKETS, reviewed)],
        )
    return family


def _requests(tag: str, scale: Scale, rng: random.Random, serde: Serde) -> _Family:
    """``scale.good`` console requests of the kinds the module docstring names, in turn, and their outputs:
    what :func:`~streams.requests.check.check` makes of each, with the runtime's outcome."""
    start = datetime(2026, 5, 4, 11, 0, tzinfo=UTC)
    family = _Family({CONSOLE_REQUESTS: []})
    for i in range(scale.good):
        at, about, request_id = start + timedelta(minutes=i), f"{tag}-req-{i:05d}", f"{tag}-req-action-{i}"
        queries = [f"{rng.choice(_DRUGS)} dosing in {rng.choice(_CONDITIONS)}" for _ in range(2)]
        request: ConsoleRequest
        match i % 4:
            case 0:
                question = AgentRequest(
                    conversation_id=about, request_id=about, event_time=at, query=queries[0]
                )
                role = "pharmacist" if i % 8 == 4 else "clinician"  # the former may not ask
                request = publication_request(
                    RequestAction.ASK, question, serde, request_id=request_id, user="dr", role=role, at=at
                )
            case 1:
                decision = QueryDecision(
                    patient_id=about, run_id="run-1", event_time=at, proposed_at=at, pharmacist="ph",
                    decision_id=request_id, decision=QueryVerdict.EDITED, proposed=queries[:1],
                    queries=queries, note="broader than the drugs",
                )  # fmt: skip
                request = publication_request(
                    RequestAction.QUERY_DECISION, decision, serde, request_id=request_id, user="ph",
                    role="pharmacist", at=at, note=decision.note,
                )  # fmt: skip
            case 2:
                review = EvidenceReview(
                    patient_id=about, run_id="run-1", event_time=at, bundle_time=at, pharmacist="ph",
                    review_id=request_id, decision=EvidenceVerdict.ACCEPTED,
                    packets=[ReviewedPacket(source=s, accepted=s != "warfarin label") for s in _LABEL],
                )  # fmt: skip
                request = publication_request(
                    RequestAction.EVIDENCE_REVIEW, review, serde, request_id=request_id, user="ph",
                    role="pharmacist", at=at,
                )  # fmt: skip
            case _:  # refused by the check: it names no dead letter
                request = ConsoleRequest(
                    request_id=request_id, event_time=at, user="op", role="operator",
                    action=RequestAction.REDRIVE, target=about, topic=FHIR_UPDATES, note="poison suite",
                )  # fmt: skip
        key = request.target.encode()
        record = Record(
            CONSOLE_REQUESTS, key, serde.encode(request, topic=CONSOLE_REQUESTS),
            _noise(rng, CONSOLE_REQUESTS), ident=request_id,
        )  # fmt: skip
        family.feeds[CONSOLE_REQUESTS].append(record)
        result = check(request, Evidence(), serde)
        outcome = serde.encode(outcome_of(request, result), topic=CONSOLE_REQUEST_OUTCOMES)
        family.expected.append(
            Expected(CONSOLE_REQUEST_OUTCOMES, key, outcome, (), CONSOLE_REQUESTS, request_id)
        )
        if isinstance(result, Carried):
            family.expected.append(
                Expected(result.topic, result.key or b"", result.value, (), CONSOLE_REQUESTS, request_id)
            )
    return family


_CONDITIONS = (
    "community-acquired pneumonia",
    "atrial fibrillation",
    "heart failure",
    "acute kidney injury",
    "septic shock",
    "pulmonary embolism",
    "type 2 diabetes",
)
_DRUGS = ("warfarin", "digoxin", "furosemide", "amiodarone", "metformin", "ceftriaxone", "heparin")
_FINDINGS = ("fever", "dyspnea", "bilateral crackles", "elevated troponin", "hypotension", "confusion")


def _llm(
    tag: str, count: int, rng: random.Random, serde: Serde
) -> tuple[_Family, list[Narrative], list[GateDecision]]:
    """The good narratives and to-verify records (each of the latter names a narrative's patient and event
    time, where the verifier finds the text) with the dispatches of the latter's candidates; their outputs
    come from :func:`llm_reference`."""
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    narratives = []
    for i in range(count):
        condition, drug, finding = rng.choice(_CONDITIONS), rng.choice(_DRUGS), rng.choice(_FINDINGS)
        text = (
            f"Patient admitted with {finding} and {condition}. Started on {drug}; follow-up showed "
            f"{rng.choice(_FINDINGS)}. Discharged home on day {rng.randint(2, 9)}."
        )
        narratives.append(Narrative(ts=start + timedelta(minutes=i), patient_id=f"{tag}-n{i:05d}", text=text))
    decisions = []
    for i in range(count):
        narrative = narratives[i]
        task = ("ner", "re", "qa")[i % 3]
        payload: NerPayload | RePayload | QaPayload
        if task == "ner":
            payload = NerPayload(entity=rng.choice(_CONDITIONS + _FINDINGS), category="Diagnosis")
        elif task == "re":
            payload = RePayload(
                head=rng.choice(_DRUGS),
                head_type="Treatment",
                relation="TREATS",
                tail=rng.choice(_CONDITIONS),
                tail_type="Diagnosis",
            )
        else:
            category = rng.choice(("diagnosis", "treatment", "symptoms"))
            payload = QaPayload(
                question=QA_TEMPLATES[category][0], answer=rng.choice(_CONDITIONS + _DRUGS), category=category
            )
        candidate = Candidate(
            ts=narrative.ts,
            task=task,
            patient_id=narrative.patient_id,
            candidate_id=f"{tag}-tv-{i:05d}",
            payload=payload,
        )
        downgrade = i % 4 == 3
        decisions.append(
            GateDecision(
                ts=candidate.ts,
                task=task,
                patient_id=candidate.patient_id,
                candidate_id=candidate.candidate_id,
                decision=GateAction.DOWNGRADE if downgrade else GateAction.ALLOW,
                rule="poison-suite",
                signature="poison",
                confidence_multiplier=0.7 if downgrade else 1.0,
                candidate=candidate,
            )
        )
    family = _Family(
        {
            DBPM_NARRATIVES: [
                Record(
                    DBPM_NARRATIVES,
                    n.patient_id.encode(),
                    serde.encode(n, topic=DBPM_NARRATIVES),
                    _noise(rng, DBPM_NARRATIVES),
                    ident=n.patient_id,
                )
                for n in narratives
            ],
            DBPM_TO_VERIFY: [
                Record(
                    DBPM_TO_VERIFY,
                    d.patient_id.encode(),
                    serde.encode(d, topic=DBPM_TO_VERIFY),
                    _noise(rng, DBPM_TO_VERIFY),
                    ident=d.candidate_id,
                )
                for d in decisions
            ],
            # What the gate sends before its to-verify records: the memory learns the verifier's verdicts
            # of these candidates only.
            DBPM_DISPATCHES: [
                Record(
                    DBPM_DISPATCHES,
                    out.key,
                    out.value,
                    _noise(rng, DBPM_DISPATCHES),
                    ident=f"{d.candidate_id}@{j}",
                )
                for d in decisions
                for j, out in enumerate(dispatch_outputs(serde, contract_event(d.candidate)))  # type: ignore[arg-type]
            ],
        }
    )
    return family, narratives, decisions


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


def build_plan(seed: int, scale: Scale, serde: Serde, partitions: int, tag: str | None = None) -> Plan:
    """The run's records and the outputs of its good records (the LLM groups' outputs excepted).

    Args:
        seed: seeds every choice: the good records (``random.Random``) and the bad ones (Hypothesis).
        scale: how many records.
        serde: the runtimes' serde.
        partitions: the verdict topic's partitions (one tick each).
        tag: the id prefix (default: from the seed and a random suffix, so runs never collide: the
            workers' application id, hence their changelogs, are named after it).

    The same seed and tag give the same records, byte for byte; another tag changes the ids, and with
    them the bytes the bad records are cut or flipped from, not their kinds, counts or places.
    """
    tag = tag or f"poison{seed}-{uuid.uuid4().hex[:6]}"
    rng = random.Random(seed)
    dbpm, memory = _dbpm(tag, scale, rng, serde, partitions)
    clinical = _clinical(tag, scale, rng, serde)
    docs = _docs(tag, scale, rng, serde)
    llm, narratives, decisions = _llm(tag, scale.llm_good, rng, serde)
    requests = _requests(tag, scale, rng, serde)
    good = {**dbpm.feeds, **clinical.feeds, **docs.feeds, **llm.feeds, **requests.feeds}
    pool = schema_pool(good, serde)
    oversized = oversize_plan(scale.oversized)
    feeds: dict[str, list[Record]] = {}
    for topic in RUNTIMES:
        samples = samples_for(topic, good[topic], pool, serde)
        bad = draw_balanced(samples, scale.bad, topic_seed(seed, topic))
        for i, shape in enumerate(oversized.get(topic, [])):
            bad += draw(bad_record(samples, (Kind.OVERSIZE,), (shape,)), 1, topic_seed(seed + i + 1, topic))
        controls = [r for r in good[topic] if r.control]  # the ticks stay after every verdict
        feeds[topic] = (
            interleave([r for r in good[topic] if not r.control], bad, random.Random(topic_seed(seed, topic)))
            + controls
        )
    expected = dbpm.expected + clinical.expected + docs.expected + requests.expected
    return Plan(tag, feeds, expected, memory, narratives, decisions)


async def llm_reference(
    settings: Settings, serde: Serde, narratives: Sequence[Narrative], decisions: Sequence[GateDecision]
) -> list[Expected]:
    """The generator's candidates and the verifier's verdicts and verified candidates for the good
    narratives and to-verify records: their record handlers, run here against the same test server.

    Raises:
        RuntimeError: an LLM call failed here (the server is deterministic: the comparison would be moot).
    """
    from processors.clinical.vocabulary import DrugVocabulary
    from streams.groups.generator import Generator
    from streams.groups.llm import MeteredLlm, new_metrics
    from streams.groups.verifier import Verifier
    from streams.llm import LlmClient

    texts = {(n.patient_id, n.ts): n.text for n in narratives}

    class Known:
        """The verifier's narrative source: the good narratives."""

        async def get(self, patient_id: str, ts: datetime) -> str | None:
            return texts.get((patient_id, ts))

    engine = dbpm_engine(settings)
    async with LlmClient.from_settings(settings) as client:
        generator = Generator(MeteredLlm(client, new_metrics(), "generator"), serde, DrugVocabulary.full())
        verifier = Verifier(MeteredLlm(client, new_metrics(), "verifier"), serde, engine, Known())

        async def handled(handler: Callable[[SourceRecord], Any], topic: str, model: AvroModel) -> list[Any]:
            outcome = handler(SourceRecord(topic, 0, 0, None, b"", serde.encode(model, topic=topic)))
            return list(await outcome if inspect.isawaitable(outcome) else outcome)

        made = await asyncio.gather(
            *(handled(generator, DBPM_NARRATIVES, n) for n in narratives),
            *(handled(verifier, DBPM_TO_VERIFY, d) for d in decisions),
        )
    sources = [DBPM_NARRATIVES] * len(narratives) + [DBPM_TO_VERIFY] * len(decisions)
    models: dict[str, type[Candidate] | type[Verdict]] = {
        DBPM_CANDIDATES: Candidate,
        DBPM_VERDICTS: Verdict,
        DBPM_VERIFIED: Candidate,
    }
    expected: list[Expected] = []
    for source, outputs in zip(sources, made, strict=True):
        for out in outputs:
            if not isinstance(out, Output):
                raise RuntimeError(f"the reference's LLM work failed: {out.error_type}: {out.reason}")
            model = serde.decode(out.value, models[out.topic], topic=out.topic)
            expected.append(
                Expected(out.topic, out.key, out.value, tuple(out.headers), source, model.candidate_id or "")
            )
    return expected


# ------------------------------------------------------------------------------- the processes


class Service:
    """A clingate subprocess with its log, stopped with SIGTERM (SIGKILL after 60 s).

    Args:
        name: what it is.
        args: the command line after ``python -m streams.cli``.
        env: its whole environment.
        log: file of its stdout and stderr.
    """

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._process = ProcessHandle(
            name, python_module("streams.cli", *args), env=env, cwd=SOURCE_ROOT, log=log, new_session=True
        ).start(append=True)

    @property
    def exit_code(self) -> int | None:
        """None while it runs."""
        return self._process.returncode

    def wait_for(self, marker: bytes, timeout_s: float = 180.0) -> None:
        """Wait until its log says ``marker``.

        Raises:
            RuntimeError: it exited first, or ``timeout_s`` passed.
        """
        try:
            self._process.wait_for_output(marker, timeout_s=timeout_s)
        except ProcessError as error:
            raise RuntimeError(f"{self.name} not ready (exit {self.exit_code}): see {self.log}") from error

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM) without waiting."""
        self._process.terminate()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 60 s."""
        self._process.stop(grace_s=60)


_LLM_VARIABLES = frozenset(
    {
        "CLINGATE_LLM_URL",
        "CLINGATE_GENERATOR_URL",
        "CLINGATE_VERIFIER_URL",
        "CLINGATE_LLM_MODEL",
        "CLINGATE_GENERATOR_MODEL",
        "CLINGATE_VERIFIER_MODEL",
    }
)


def environment(bootstrap: str, **settings: str) -> dict[str, str]:
    """A runtime's environment: this process's without any LLM server setting (the docs worker runs
    rules-only, as its reference), the broker, :data:`streams.testing.worker.COMPARISON_ENV` (propagation and
    maintenance off, a 6 s session timeout) and ``settings``."""
    base = {k: v for k, v in os.environ.items() if k not in _LLM_VARIABLES}
    return {**base, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, **COMPARISON_ENV, **settings}


# --------------------------------------------------------------------------------- feed and read


def produce(bootstrap: str, records: Sequence[Record]) -> list[tuple[int, int]]:
    """Produce ``records`` in order (murmur2 by key, or their explicit partition); their coordinates.

    Raises:
        RuntimeError: a record was not acknowledged.
    """
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 5, **PRODUCER_LIMITS}))
    coordinates: list[tuple[int, int] | None] = [None] * len(records)
    errors: list[str] = []

    def report(index: int) -> Callable[[KafkaError | None, Message], None]:
        def done(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                errors.append(f"{records[index].topic} record {index}: {error.str()}")
            else:
                coordinates[index] = (message.partition(), message.offset())  # type: ignore[assignment]

        return done

    for index, record in enumerate(records):
        extra = {} if record.partition is None else {"partition": record.partition}
        produce_waiting(producer, record.topic, key=record.key, value=record.value,
                        headers=list(record.headers), on_delivery=report(index), **extra)  # fmt: skip
        producer.poll(0)
    left = producer.flush(120)
    if errors or left or any(c is None for c in coordinates):
        raise RuntimeError(f"records not acknowledged: {errors[:3]} ({left} still queued)")
    return coordinates  # type: ignore[return-value]


@dataclass(frozen=True)
class Read:
    """One record read back."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def read_from(bootstrap: str, starts: dict[str, dict[int, int]], timeout_s: float = 300.0) -> list[Read]:
    """Every record of the topics of ``starts`` from those offsets to the topics' current ends.

    Raises:
        TimeoutError: not everything could be read within ``timeout_s``.
    """
    client = reader(bootstrap, "poison-reader", **{"fetch.message.max.bytes": MAX_MESSAGE_BYTES + MIB})
    try:
        out: list[Read] = []
        for m in read_to_end(client, starts, timeout_s):
            headers = tuple((k, v or b"") for k, v in m.headers() or ())
            out.append(Read(m.topic(), m.partition(), m.offset(), m.key(), m.value(), headers))
        return out
    finally:
        client.close()


# ------------------------------------------------------------------------------------ the report


@dataclass
class TopicReport:
    """The counts of one fed topic."""

    topic: str
    runtime: str
    good: int = 0
    control: int = 0
    """Good records without outputs of their own (watermark ticks)."""
    noisy: int = 0
    """Good records carrying garbage in the clingate headers their topic ignores."""
    outputs_expected: int = 0
    outputs_matched: int = 0
    outputs_missing: int = 0
    outputs_unexpected: int = 0
    """Output records that are neither expected nor a copy of an expected one."""
    duplicates: int = 0
    """Output records and dead letters beyond the first of each."""
    misordered: int = 0
    """Keys whose outputs came in another order than the reference's (entity-keyed outputs)."""
    bad: int = 0
    bad_kinds: Counter[str] = field(default_factory=Counter)
    dead_lettered: int = 0
    """Bad records with exactly one dead letter, and a right one (content and error type)."""
    dead_letters_missing: int = 0
    dead_letters_wrong: int = 0
    truncated: int = 0
    """Bad records whose dead letter was cut to fit (and describes the cut fields correctly)."""
    good_dead_lettered: int = 0
    lag: int = 0
    """Records of the topic its consumer group had not committed at the end."""
    state_equal: bool | None = None
    """The memory rebuilt from the workers' changelog equals the in-process engine's (DBPM memory inputs)."""
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every check of this topic holds."""
        return (
            self.outputs_matched == self.outputs_expected
            and not self.outputs_missing
            and not self.outputs_unexpected
            and not self.duplicates
            and not self.misordered
            and self.dead_lettered == self.bad
            and not self.dead_letters_missing
            and not self.dead_letters_wrong
            and not self.good_dead_lettered
            and not self.lag
            and self.state_equal is not False
        )


@dataclass
class PoisonReport:
    """The outcome of one run."""

    seed: int
    tag: str
    topics: dict[str, TopicReport]
    processes: dict[str, int | None]
    """Exit code of every process at the end of the run (None: still running, as it must be)."""
    pipeline_dead_letters: list[str]
    """Dead letters of records the runtimes produced in this run (a runtime refusing another's output)."""
    records: int
    megabytes: float
    feed_s: float
    wall_s: float
    stalled: list[str]

    @property
    def passed(self) -> bool:
        """Every check holds."""
        return (
            all(t.passed for t in self.topics.values())
            and all(c is None for c in self.processes.values())
            and not self.pipeline_dead_letters
            and not self.stalled
        )

    def render(self) -> str:
        """The counts per topic, the process checks and the verdict, as text."""
        header = (
            f"{'topic':<31} {'runtime':<17} {'good':>6} {'out exp':>7} {'matched':>7} {'miss':>4} "
            f"{'extra':>5} {'bad':>6} {'dlq ok':>6} {'wrong':>5} {'cut':>3} {'dup':>3} {'lag':>4}  memory"
        )
        lines = [
            f"poison run {self.tag} (seed {self.seed}): {self.records:,} records, {self.megabytes:,.1f} MB, "
            f"fed and settled in {self.feed_s:.1f} s; wall {self.wall_s:.1f} s",
            header,
            "-" * len(header),
        ]
        for t in self.topics.values():
            state = {None: "-", True: "equal", False: "DIFFERS"}[t.state_equal]
            wrong = t.dead_letters_wrong + t.dead_letters_missing + t.good_dead_lettered
            lines.append(
                f"{t.topic:<31} {t.runtime:<17} {t.good:>6} {t.outputs_expected:>7} {t.outputs_matched:>7} "
                f"{t.outputs_missing:>4} {t.outputs_unexpected + t.misordered:>5} {t.bad:>6} "
                f"{t.dead_lettered:>6} {wrong:>5} {t.truncated:>3} {t.duplicates:>3} {t.lag:>4}  {state}"
            )
        total: Counter[str] = Counter()
        for t in self.topics.values():
            total.update(t.bad_kinds)
        lines.append("bad records by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(total.items())))
        noisy = sum(t.noisy for t in self.topics.values())
        control = sum(t.control for t in self.topics.values())
        lines.append(
            f"good records with garbage in ignored clingate headers: {noisy}; watermark ticks: {control}"
        )
        lines += [f"not fed: {name} ({reason})" for name, reason in UNFED.items()]
        lines.append(
            "processes at the end: "
            + ", ".join(
                f"{n} {'running' if c is None else f'EXITED ({c})'}" for n, c in self.processes.items()
            )
        )
        lines.append(
            f"dead letters of the runtimes' own outputs: "
            f"{len(self.pipeline_dead_letters)}; stalled waits: {len(self.stalled)}"
        )
        lines += [f"  ! {problem}" for problem in [*self.stalled, *self.pipeline_dead_letters[:5]]]
        lines += [f"  ! {t.topic}: {problem}" for t in self.topics.values() for problem in t.problems[:5]]
        lines.append(f"RESULT: {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)


def check_letter(record: Record, letter: DeadLetter) -> str | None:
    """Why ``letter`` is not the right dead letter of bad ``record`` (None: it is).

    Right: the expected error type (:func:`expected_error`) with a reason; the key, value and headers
    byte for byte, or, for each field the ``truncations`` name, its prefix, with the original's size and
    SHA-256.
    """
    if not letter.error or not letter.error_type:
        return "no reason"
    if letter.error_type != (wanted := expected_error(record)):
        return f"error type {letter.error_type}, expected {wanted} ({letter.error[:160]!r})"
    original: dict[str, bytes | None] = {"key": record.key, "value": record.value}
    original |= {f"headers[{i}].value": v for i, (_, v) in enumerate(record.headers)}
    for cut in letter.truncations:
        data = original.get(cut.field) or b""
        if (cut.size, cut.sha256) != (len(data), hashlib.sha256(data).hexdigest()):
            return f"the truncation of {cut.field} does not describe the original"
    cuts = {cut.field for cut in letter.truncations}

    def same(name: str, got: bytes | None) -> bool:
        want = original[name]
        return got == want or (name in cuts and want is not None and got == want[: len(got or b"")])

    if not same("key", letter.key) or not same("value", letter.value):
        return "key or value differ from the original"
    if "headers" in cuts:
        return None
    if [h.key for h in letter.headers] != [name for name, _ in record.headers]:
        return "header names differ from the original"
    for i, header in enumerate(letter.headers):
        if not same(f"headers[{i}].value", header.value):
            return f"header {header.key!r}: {header.value!r:.60} instead of {record.headers[i][1]!r:.60}"
    return None


# ----------------------------------------------------------------------------------------- the run


class Stages:
    """The feeding phases, in threads, each ending when its consumer groups committed what it fed."""

    def __init__(
        self, bootstrap: str, plan: Plan, groups: dict[str, str], timeout_s: float, log: Callable[[str], None]
    ) -> None:
        self.bootstrap = bootstrap
        self.plan = plan
        self.groups = groups
        self.timeout_s = timeout_s
        self.log = log
        self.coordinates: dict[str, list[tuple[int, int]]] = {}
        self.stalled: list[str] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def feed(self, *topics: str) -> None:
        """Produce the records of ``topics`` (in this order), then wait until their groups committed them."""
        for topic in topics:
            coordinates = produce(self.bootstrap, self.plan.feeds[topic])
            with self._lock:
                self.coordinates[topic] = coordinates
        for topic in topics:
            self.wait(topic)
        self.log(f"  fed and committed: {', '.join(topics)}")

    def wait(self, topic: str, group: str | None = None) -> None:
        """Wait until the group consuming ``topic`` committed its end; a timeout is recorded as a stall."""
        group = group or self.groups[topic]
        try:
            with CommitWatcher(self.bootstrap, group) as watcher:
                watcher.wait(topic, self.timeout_s)
        except ReplayTimeout as stalled:
            with self._lock:
                self.stalled.append(str(stalled))

    def start(self, *phases: tuple[str, ...]) -> threading.Thread:
        """Feed ``phases`` one after the other in a thread (an error is re-raised by :meth:`join`)."""

        def body() -> None:
            try:
                for topics in phases:
                    self.feed(*topics)
            except BaseException as error:  # re-raised in the caller's thread
                self._errors.append(error)

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        return thread

    def join(self, *threads: threading.Thread) -> None:
        """Wait for ``threads``; re-raise the first error of any."""
        for thread in threads:
            thread.join()
        if self._errors:
            raise self._errors[0]


def run_poison(
    bootstrap: str,
    workdir: Path,
    *,
    scale: Scale,
    seed: int = 7,
    timeout_s: float = 120.0,
    log: Callable[[str], None] = print,
) -> PoisonReport:
    """Run the suite against ``bootstrap`` (module docstring) and return its report.

    Args:
        bootstrap: the broker; the runtimes are started here as subprocesses, on fresh groups.
        workdir: the worker's data directory and every process's log.
        scale: how many records.
        seed: seeds the good and the bad records.
        timeout_s: longest wait for one phase's commits (a longer wait is reported as a stall).
        log: progress lines.
    """
    started = time.monotonic()
    settings = get_settings()
    serde = make_serde(settings.schema_registry_url)
    ensure_topics(
        admin_client(bootstrap), build_catalog(settings.topic_partitions, settings.topic_replication)
    )
    plan = build_plan(seed, scale, serde, settings.topic_partitions)
    log(
        f"plan {plan.tag}: {sum(len(f) for f in plan.feeds.values()):,} records, drawn in "
        f"{time.monotonic() - started:.1f} s"
    )

    app_id = f"clingate-{plan.tag}"
    groups = dict.fromkeys(CLINICAL_FEEDS, clinical_group(app_id))
    groups |= dict.fromkeys((DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES), memory_group(app_id))
    groups |= {
        DBPM_CANDIDATES: gate_group(app_id),
        DBPM_NARRATIVES: f"{app_id}-generator",
        DBPM_TO_VERIFY: f"{app_id}-verifier",
        DOCS_CLASSIFICATIONS: f"{app_id}-docs",
        DOCS_REVIEWS: f"{app_id}-docs",
        CONSOLE_REQUESTS: group_id(app_id),
    }
    probe = reader(bootstrap, "poison-probe")
    try:
        starts = {t: end_offsets(probe, t) for t in (*OUTPUTS, *(dlq_name(t) for t in RUNTIMES))}
    finally:
        probe.close()
    for topic, group in groups.items():
        if topic != DBPM_TO_VERIFY:  # the verifier's group starts later (module docstring)
            commit_end_offsets(bootstrap, group, [topic])

    workdir.mkdir(parents=True, exist_ok=True)
    stages = Stages(bootstrap, plan, groups, timeout_s, log)
    services: dict[str, Service] = {}
    server = ServerProcess.start("test", args=["--hashed"])
    llm = {
        "CLINGATE_GENERATOR_URL": server.base_url,
        "CLINGATE_VERIFIER_URL": server.base_url,
        "CLINGATE_GENERATOR_MODEL": server.model,
        "CLINGATE_VERIFIER_MODEL": server.model,
    }
    web_port = free_port()
    try:
        services["worker"] = Service(
            "worker",
            [
                "worker",
                "-l",
                "info",
                "--web-port",
                str(web_port),
                "--datadir",
                str(workdir / app_id),
            ],
            environment(bootstrap, CLINGATE_APP_ID=app_id),
            workdir / "worker.log",
        )
        services["requests"] = Service(
            "requests",
            ["worker", "--role", "requests", "-l", "info", "--web-port", str(free_port()),
             "--datadir", str(workdir / f"{app_id}-requests")],
            environment(bootstrap, CLINGATE_APP_ID=app_id),
            workdir / "requests.log",
        )  # fmt: skip
        services["docs worker"] = Service(
            "docs worker",
            ["arbiter", "worker", "--metrics-port", "0"],
            environment(bootstrap, CLINGATE_DOCS_GROUP_ID=groups[DOCS_CLASSIFICATIONS]),
            workdir / "docs.log",
        )
        services["generator"] = Service(
            "generator",
            ["generator", "--metrics-port", "0"],
            environment(bootstrap, CLINGATE_GENERATOR_GROUP_ID=groups[DBPM_NARRATIVES], **llm),
            workdir / "generator.log",
        )
        # While they start: the LLM groups' reference, on the same server, with the same settings.
        llm_settings = Settings(**llm, CLINGATE_DBPM_CROSS_TASK=False, CLINGATE_DBPM_MAINTENANCE=False)  # type: ignore[arg-type]
        plan.expected += asyncio.run(llm_reference(llm_settings, serde, plan.narratives, plan.decisions))
        services["worker"].wait_for(READY)
        services["requests"].wait_for(READY)
        services["docs worker"].wait_for(b"rules-only")
        log(f"runtimes ready after {time.monotonic() - started:.1f} s (app {app_id})")

        feed_started = time.monotonic()
        dbpm = stages.start((DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES), (DBPM_CANDIDATES,))
        others = [
            stages.start(*((topic,) for topic in CLINICAL_FEEDS)),
            stages.start((DOCS_CLASSIFICATIONS,), (DOCS_REVIEWS,)),
            stages.start((CONSOLE_REQUESTS,)),
        ]
        stages.join(dbpm)
        # The memory the gate decided on, before the verifier's verdicts change it.
        memory = read_state(bootstrap, memory_changelog(app_id), comparison_engine(), None)
        commit_end_offsets(bootstrap, groups[DBPM_TO_VERIFY], [DBPM_TO_VERIFY, DBPM_DECISIONS])
        services["verifier"] = Service(
            "verifier",
            ["verifier", "--metrics-port", "0"],
            # The narratives are published before the to-verify records naming them; the wait only
            # covers a verifier reading a long narrative topic from its beginning on a shared broker.
            environment(
                bootstrap,
                CLINGATE_VERIFIER_GROUP_ID=groups[DBPM_TO_VERIFY],
                CLINGATE_VERIFIER_NARRATIVE_WAIT_S="60",
                **llm,
            ),
            workdir / "verifier.log",
        )
        stages.join(stages.start((DBPM_NARRATIVES, DBPM_TO_VERIFY)), *others)
        # The loop's own traffic settles in pipeline order: the generator's candidates through the gate,
        # the gate's to-verify records and decisions through the verifier, its verdicts into the memory.
        stages.wait(DBPM_CANDIDATES)
        stages.wait(DBPM_TO_VERIFY)
        stages.wait(DBPM_DECISIONS, groups[DBPM_TO_VERIFY])
        stages.wait(DBPM_VERDICTS)
        stages.wait(DBPM_PROPAGATIONS)
        feed_s = time.monotonic() - feed_started
        processes: dict[str, int | None] = {name: s.exit_code for name, s in services.items()}
        processes["llm test server"] = None if http_answers(f"{server.base_url}/models", 10.0) else -1
        lags = _lags(bootstrap, groups)
    finally:
        for service in services.values():
            service.terminate()
        for service in services.values():
            service.stop()
        server.stop()
    reads = read_from(bootstrap, starts)
    return _report(plan, stages, reads, memory, lags, processes, seed, feed_s, time.monotonic() - started)


OUTPUTS = (
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
    CLINICAL_ASSESSMENTS,
    CLINICAL_SAFETY_AUDITS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_EVIDENCE_REQUESTS,
    DOCS_DISPOSITIONS,
    DOCS_REVIEW_PACKETS,
    DOCS_GROUND_TRUTH,
    CONSOLE_REQUEST_OUTCOMES,
    AGENT_REQUESTS,
    CLINICAL_QUERY_DECISIONS,
    CLINICAL_EVIDENCE_REVIEWS,
)
"""The topics the runtimes write the good records' outputs to."""

ORDERED_OUTPUTS = frozenset(
    {
        DBPM_DECISIONS,
        CLINICAL_ASSESSMENTS,
        CLINICAL_SAFETY_AUDITS,
        CLINICAL_GATED_DRAFTS,
        CLINICAL_REVISION_ROUTES,
        CLINICAL_EVIDENCE_REQUESTS,
        DOCS_DISPOSITIONS,
        DOCS_REVIEW_PACKETS,
    }
)
"""Outputs keyed by the entity whose inputs are one key: their order per key is the reference's too."""

_OUTPUT_SOURCE = {
    DBPM_DECISIONS: DBPM_CANDIDATES,
    DBPM_TO_VERIFY: DBPM_CANDIDATES,
    DBPM_CANDIDATES: DBPM_NARRATIVES,
    DBPM_VERDICTS: DBPM_TO_VERIFY,
    DBPM_VERIFIED: DBPM_TO_VERIFY,
    CLINICAL_ASSESSMENTS: FHIR_UPDATES,
    CLINICAL_SAFETY_AUDITS: CLINICAL_DELIVERABLES,
    CLINICAL_GATED_DRAFTS: CLINICAL_DRAFTS,
    CLINICAL_REVISION_ROUTES: CLINICAL_AUDIT_REPORTS,
    CLINICAL_EVIDENCE_REQUESTS: CLINICAL_EVIDENCE,
    DOCS_DISPOSITIONS: DOCS_CLASSIFICATIONS,
    DOCS_REVIEW_PACKETS: DOCS_CLASSIFICATIONS,
    DOCS_GROUND_TRUTH: DOCS_REVIEWS,
    **dict.fromkeys(
        (CONSOLE_REQUEST_OUTCOMES, AGENT_REQUESTS, CLINICAL_QUERY_DECISIONS, CLINICAL_EVIDENCE_REVIEWS),
        CONSOLE_REQUESTS,
    ),
}
"""The input topic an unexpected output record is counted against."""


def _lags(bootstrap: str, groups: dict[str, str]) -> dict[str, int]:
    """Per fed topic, the records its group has not committed."""
    out: dict[str, int] = {}
    for topic, group in groups.items():
        client = Consumer(client_config(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
        try:
            ends = end_offsets(client, topic)
            committed = client.committed([TopicPartition(topic, p) for p in ends], timeout=30)
            out[topic] = sum(
                max(0, ends[tp.partition] - max(tp.offset, 0)) for tp in committed if ends[tp.partition] > 0
            )
        finally:
            client.close()
    return out


def _ours(plan: Plan, read: Read, serde: Serde) -> bool:
    """Whether an output record read back is one of the outputs the good records must produce."""
    key = (read.key or b"").decode("utf-8", "replace")
    if read.topic in (DBPM_DECISIONS, DBPM_TO_VERIFY):
        return key.startswith(plan.prefix("g-"))  # the gate's, for the fed candidates
    if read.topic == DBPM_CANDIDATES:
        return key.startswith(plan.prefix("n"))  # the generator's, for the fed narratives
    if read.topic in (DBPM_VERDICTS, DBPM_VERIFIED):  # the verifier's, for the fed to-verify records
        try:
            model = serde.decode(
                read.value or b"", Verdict if read.topic == DBPM_VERDICTS else Candidate, topic=read.topic
            )
        except SchemaDecodeError:
            return False
        return (model.candidate_id or "").startswith(plan.prefix("tv-"))
    if read.topic in (
        CLINICAL_ASSESSMENTS,
        CLINICAL_SAFETY_AUDITS,
        CLINICAL_GATED_DRAFTS,
        CLINICAL_REVISION_ROUTES,
        CLINICAL_EVIDENCE_REQUESTS,
    ):
        return key.startswith(plan.prefix("pt-"))
    if read.topic in (
        CONSOLE_REQUEST_OUTCOMES,
        AGENT_REQUESTS,
        CLINICAL_QUERY_DECISIONS,
        CLINICAL_EVIDENCE_REVIEWS,
    ):
        return key.startswith(plan.prefix("req-"))
    return key.startswith(plan.prefix("doc-"))


def _report(
    plan: Plan,
    stages: Stages,
    reads: list[Read],
    memory: dict[str, object],
    lags: dict[str, int],
    processes: dict[str, int | None],
    seed: int,
    feed_s: float,
    wall_s: float,
) -> PoisonReport:
    """Compare what was read back with the plan (module docstring, checks 1, 2 and 4)."""
    serde = make_serde(get_settings().schema_registry_url)
    topics = {topic: TopicReport(topic, runtime) for topic, runtime in RUNTIMES.items()}
    fed: dict[tuple[str, int, int], Record] = {}
    for topic, records in plan.feeds.items():
        t = topics[topic]
        for record, (partition, offset) in zip(records, stages.coordinates.get(topic, ()), strict=False):
            fed[(topic, partition, offset)] = record
            if record.kind is None:
                t.good += 1
                t.control += record.control
                t.noisy += any(name != SEMANTIC_HEADERS.get(topic) for name, _ in record.headers)
            else:
                t.bad += 1
                t.bad_kinds[record.kind.value] += 1
        t.lag = lags.get(topic, 0)
    expected = Counter(unclocked(e.identity, serde) for e in plan.expected)
    by_identity = {unclocked(e.identity, serde): e for e in plan.expected}
    for e in plan.expected:
        topics[e.source].outputs_expected += 1
    got: Counter[OutputIdentity] = Counter()
    sequences: dict[tuple[str, bytes], list[bytes]] = defaultdict(list)
    dlq_topics = {dlq_name(t) for t in RUNTIMES}
    letters: dict[tuple[str, int, int], list[DeadLetter]] = defaultdict(list)
    pipeline: list[str] = []
    tag = plan.tag.encode()
    for read in sorted(reads, key=lambda r: (r.topic, r.partition, r.offset)):
        if read.topic in dlq_topics:
            letter = serde.decode(read.value or b"", DeadLetter, topic=read.topic)
            coordinates = (letter.topic, letter.partition, letter.offset)
            if coordinates in fed:
                letters[coordinates].append(letter)
            elif tag in (letter.key or b"") or tag in (letter.value or b""):
                pipeline.append(
                    f"{letter.topic}[{letter.partition}]@{letter.offset}: {letter.error_type}: "
                    f"{letter.error[:160]}"
                )
        elif _ours(plan, read, serde):
            got[unclocked((read.topic, read.key or b"", read.value or b"", read.headers), serde)] += 1
            sequences[(read.topic, read.key or b"")].append(read.value or b"")
    for identity, count in got.items():
        wanted = expected.get(identity, 0)
        t = topics[by_identity[identity].source if wanted else _OUTPUT_SOURCE[identity[0]]]
        t.outputs_matched += min(count, wanted)
        if wanted and count > wanted:
            t.duplicates += count - wanted
            t.problems.append(f"{identity[0]} record of {by_identity[identity].ident} {count} times")
        elif not wanted:
            t.outputs_unexpected += count
            t.problems.append(f"unexpected {identity[0]} record, key {identity[1][:60]!r}")
    for identity, wanted in expected.items():
        if got.get(identity, 0) < wanted:
            e = by_identity[identity]
            topics[e.source].outputs_missing += wanted - got.get(identity, 0)
            topics[e.source].problems.append(f"missing {e.topic} record of {e.ident}")
    reference: dict[tuple[str, bytes], list[bytes]] = defaultdict(list)
    for e in plan.expected:
        if e.topic in ORDERED_OUTPUTS:
            reference[(e.topic, e.key)].append(e.value)
    for (topic, key), values in reference.items():
        if sequences.get((topic, key), []) != values and Counter(sequences.get((topic, key), [])) == Counter(
            values
        ):
            source = by_identity[(topic, key, values[0], ())].source
            topics[source].misordered += 1
            topics[source].problems.append(f"{topic} records of {key[:60]!r} in another order")
    for coordinates, record in fed.items():
        t = topics[record.topic]
        found = letters.get(coordinates, [])
        if record.kind is None:
            if found:
                t.good_dead_lettered += 1
                t.problems.append(
                    f"good record {record.ident} dead-lettered: {found[0].error_type}: {found[0].error[:160]}"
                )
            continue
        if not found:
            t.dead_letters_missing += 1
            t.problems.append(f"{record.kind} record at {coordinates[1:]} not dead-lettered")
            continue
        if len(found) > 1:
            t.duplicates += len(found) - 1
            t.problems.append(f"{record.kind} record at {coordinates[1:]} dead-lettered {len(found)} times")
        wrong = check_letter(record, found[0])
        if wrong is None:
            t.dead_lettered += 1
            t.truncated += bool(found[0].truncations)
        else:
            t.dead_letters_wrong += 1
            t.problems.append(f"{record.kind} record at {coordinates[1:]}: {wrong}")
    equal = memory == plan.memory
    for topic in (DBPM_VERDICTS, DBPM_PROPAGATIONS):
        topics[topic].state_equal = equal
    if not equal:
        topics[DBPM_VERDICTS].problems.append("the memory differs from the in-process engine's")
    return PoisonReport(
        seed=seed,
        tag=plan.tag,
        topics=topics,
        processes=processes,
        pipeline_dead_letters=pipeline,
        records=len(fed),
        megabytes=sum(r.size for r in fed.values()) / 1e6,
        feed_s=feed_s,
        wall_s=wall_s,
        stalled=stages.stalled,
    )


def poison_command(scale: Scale, seed: int, timeout: float, workdir: Path | None) -> None:
    """``clingate bench poison`` (registered in :mod:`streams.cli.bench`): run, print the counts, exit
    1 if a check fails."""
    import logging
    import tempfile

    import typer

    from streams.local.bootstrap import require_bootstrap

    bootstrap = require_bootstrap(get_settings())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the LLM server's readiness probe, at INFO
    with tempfile.TemporaryDirectory(prefix="clingate-poison-") as scratch:
        report = run_poison(
            bootstrap, workdir or Path(scratch), scale=scale, seed=seed, timeout_s=timeout, log=typer.echo
        )
    typer.echo(report.render())
    if not report.passed:
        raise typer.Exit(1)
