"""What the poison suite feeds and expects: the fed topics and the runtimes consuming them, the kinds of
bad record, the records, the outputs a good record must produce, and the scale of a run.

The suite's other modules build on these; this module imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from schemas.base import AvroModel
from schemas.clinical import AdversarialReview, AuditReport, ClinicalDraft, Deliverable, EvidenceBundle
from schemas.console import ConsoleRequest
from schemas.dbpm import Candidate, Dispatch, GateDecision, Narrative, Verdict
from schemas.dbpm import Propagation as PropagationRecord
from schemas.docs import ClassificationRequest, Review
from schemas.fhir import FhirUpdate
from streams.data import DOCS_EXAMPLES
from streams.groups.verifier import CONFIDENCE_HEADER, GATE_HEADER, VERDICT_HEADER
from streams.runtime.dlq import HEADER_PREFIX
from streams.worker.keys import BARRIER_HEADER, REPLAYED_HEADER, TICK_HEADER
from topics.catalog import (
    AGENT_REQUESTS,
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_REVIEWS,
    CONSOLE_REQUESTS,
    DATA_MAX_MESSAGE_BYTES,
    DBPM_CANDIDATES,
    DBPM_DISPATCHES,
    DBPM_NARRATIVES,
    DBPM_PROPAGATIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEWS,
    FHIR_UPDATES,
)

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


def expected_error(record: Record) -> str:
    """The error type of the dead letter of bad ``record``: the first check of its runtime that fails."""
    if record.error:
        return record.error
    if record.topic == DBPM_VERDICTS and any(name == TICK_HEADER for name, _ in record.headers):
        return "BadWatermark"  # the memory writer reads the tick header before anything else
    if record.value is None:
        return "TombstoneError"
    if record.kind is Kind.BAD_KEY and record.topic in KEY_CHECKED:
        return "KeyMismatch"
    return "SchemaDecodeError"


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
        """What an output record is compared by (before :func:`~streams.testing.poison.report.unclocked`)."""
        return self.topic, self.key, self.value, self.headers


@dataclass(frozen=True)
class Scale:
    """How many records the suite feeds.

    Attributes:
        good: good records per topic, the LLM groups' topics excepted (at least one per arbiter example,
            :data:`streams.data.DOCS_EXAMPLES`); the docs reviews are one per escalated document.
        bad: bad records per topic, the oversized ones not counted.
        llm_good: good narratives, and good to-verify records (each costs LLM calls).
        oversized: oversized bad records in all, spread over the topics
            (:func:`~streams.testing.poison.plan.oversize_plan`).
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
