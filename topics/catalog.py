"""Every Kafka topic clingate reads or writes, declared once.

Each topic is a :class:`TopicSpec`: name, what its key means, the Avro full name of its value
schema, partitions, replication, cleanup policy and retention. Dead-letter topics are never
declared: a topic clingate consumes (``consumed=True``) derives its ``<name>.dlq`` sibling
(:attr:`TopicSpec.dlq`), whose value is ``clingate.common.DeadLetter`` (the original bytes plus
headers naming the failure and the source topic/partition/offset, as in KIP-1034).

Scale is a parameter, not a per-topic constant: :func:`build_catalog` takes the partition count of
the data topics and the replication factor (``Settings.topic_partitions`` / ``topic_replication``:
6 and 1 locally, replication 3 on a cluster). :data:`CATALOG` is the default-scale catalog for
name look-ups; anything that creates topics builds the catalog from its settings.

Choices where the source left room (revisit with the pipeline owners):

- Consumed topics, hence the ones with a DLQ: narratives (generator group), candidates (DBPM
  gate), verdicts and propagations (DBPM learner), to-verify (verifier group), fhir.updates,
  clinical.reviews, clinical.deliverables, and the output gates' clinical.evidence, clinical.drafts and
  clinical.audit-reports (clinical gates), docs.classifications, docs.reviews and
  docs.ground-truth (arbiter), and the console's requests (the request runtime). The others are outputs
  for downstream systems, but the runs' query proposals, which only the console's pharmacist pages read,
  and the pharmacist's query decisions and evidence reviews, which the reasoning pipeline upstream reads.
- Partitions: every data topic gets the same count so that topics keyed by patient or document
  are co-partitioned (a join or a table lookup across them stays on one worker). DLQs get 1
  partition: they are low volume, and each dead letter carries its source partition and offset.
- Cleanup: latest-value topics keyed by an entity (assessments per patient, dispositions per
  document) are ``compact,delete``: the newest value per key survives compaction and nothing lives
  longer than the retention. Ground truth and review packets are ``compact`` only: a label is kept
  until replaced, and a packet until its reviewed version replaces the pending one (the packet topic
  is the review queue that ``clingate arbiter reviews`` reads).
  Everything else is an event log, ``delete``.
- Retention: event logs 7 days (enough to rebuild state by replay after an incident of a long weekend),
  evidence requests among them (the retrieval step answers a run within minutes, and the gap itself stays
  on the run's gated drafts and safety audits); verdicts and decisions 30 days, since DBPM memory is
  learnt from verdicts and decisions are the replay comparison target, the console's requests (a
  re-drive asked for is carried out within the dead letters' own 30 days) and the runs' query proposals
  (a proposal waits there for the pharmacist's Query Gate); safety audits, gated drafts, revision routes,
  the agent's proposals, the console's audit trail, its requests' outcomes and the pharmacist's query
  decisions and evidence reviews 365 days (audit trail); dead letters 30 days for an operator to inspect
  and re-drive; latest-value topics 30 days, i.e. an entity not updated in 30 days drops out (its last
  value is then in the downstream store).
- ``min.insync.replicas`` is 2 from replication 3 on (so ``acks=all`` survives one broker loss),
  else 1.
- Record size: every declared topic sets ``max.message.bytes`` to :data:`DATA_MAX_MESSAGE_BYTES`
  (8 MiB: a 5 MB narrative or document must pass; the broker default is ~1 MB). A dead letter is its
  source record plus reason and coordinates, so each ``.dlq`` topic's limit is derived from its
  source's plus :data:`DLQ_HEADROOM_BYTES`; otherwise the largest records a topic admits would be the
  ones that can never be dead-lettered. Producers and consumers must raise their own limits
  (``message.max.bytes``, ``fetch.message.max.bytes``) to match.
- Keys: verdicts are keyed ``task|signature`` of the memory record they update
  (``streams.worker.keys.verdict_key``), partitioned with Java's murmur2
  (``streams.runtime.kafka_clients.producer_config``),
  so each signature has one writer; everything about a patient is keyed by patient id.
- Cross-task propagation (DBPM §4.4) has its own topic, ``clingate.dbpm.propagations``, rather than a
  record kind on the verdicts topic: one value schema per topic (a schema registry's subject per
  topic stays meaningful, and verdict consumers never meet a record that is not a verdict). It is
  keyed ``task|signature`` of the *target*, like a verdict of that signature, and has the verdicts'
  partition count, so partition p of both topics feeds memory partition p; retention as verdicts
  (memory is learnt from both).
- The gate tells the memory which candidates it decided on ``clingate.dbpm.dispatches``, one record
  per memory partition a verdict of the candidate can update (keyed like that verdict, so partition
  p again feeds memory partition p): the memory's writer dead-letters a live verdict whose candidate
  no gate decided (``processors.dbpm.ledger``). Retention as verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Literal

CleanupPolicy = Literal["delete", "compact", "compact,delete"]

DAY_MS = 24 * 60 * 60 * 1000
DEFAULT_PARTITIONS = 6
DLQ_SUFFIX = ".dlq"
DLQ_PARTITIONS = 1
DLQ_RETENTION_MS = 30 * DAY_MS
DEAD_LETTER_SCHEMA = "clingate.common.DeadLetter"
#: ``max.message.bytes`` of every declared data topic.
DATA_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: What a dead-letter topic admits beyond its source topic (reason, coordinates, headers).
DLQ_HEADROOM_BYTES = 1024 * 1024
#: Kafka's broker-wide ``message.max.bytes`` default, the limit of a topic that sets none.
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588

# Topic names, for code that refers to a topic (one definition each, used in the registry below).
DBPM_NARRATIVES = "clingate.dbpm.narratives"
DBPM_CANDIDATES = "clingate.dbpm.candidates"
DBPM_VERDICTS = "clingate.dbpm.verdicts"
DBPM_PROPAGATIONS = "clingate.dbpm.propagations"
DBPM_DISPATCHES = "clingate.dbpm.dispatches"
DBPM_DECISIONS = "clingate.dbpm.decisions"
DBPM_TO_VERIFY = "clingate.dbpm.to-verify"
DBPM_VERIFIED = "clingate.dbpm.verified"
FHIR_UPDATES = "clingate.fhir.updates"
CLINICAL_REVIEWS = "clingate.clinical.reviews"
CLINICAL_DELIVERABLES = "clingate.clinical.deliverables"
CLINICAL_ASSESSMENTS = "clingate.clinical.assessments"
CLINICAL_SAFETY_AUDITS = "clingate.clinical.safety-audits"
CLINICAL_EVIDENCE = "clingate.clinical.evidence"
CLINICAL_DRAFTS = "clingate.clinical.drafts"
CLINICAL_AUDIT_REPORTS = "clingate.clinical.audit-reports"
CLINICAL_GATED_DRAFTS = "clingate.clinical.gated-drafts"
CLINICAL_REVISION_ROUTES = "clingate.clinical.revision-routes"
CLINICAL_EVIDENCE_REQUESTS = "clingate.clinical.evidence-requests"
CLINICAL_QUERY_PROPOSALS = "clingate.clinical.query-proposals"
CLINICAL_QUERY_DECISIONS = "clingate.clinical.query-decisions"
CLINICAL_EVIDENCE_REVIEWS = "clingate.clinical.evidence-reviews"
DOCS_CLASSIFICATIONS = "clingate.docs.classifications"
DOCS_DISPOSITIONS = "clingate.docs.dispositions"
DOCS_REVIEW_PACKETS = "clingate.docs.review-packets"
DOCS_REVIEWS = "clingate.docs.reviews"
DOCS_GROUND_TRUTH = "clingate.docs.ground-truth"
AGENT_REQUESTS = "clingate.agent.requests"
AGENT_RESPONSES = "clingate.agent.responses"
AGENT_TRACES = "clingate.agent.traces"
AGENT_PROPOSALS = "clingate.agent.proposals"
CONSOLE_AUDIT = "clingate.console.audit"
CONSOLE_REQUESTS = "clingate.console.requests"
CONSOLE_REQUEST_OUTCOMES = "clingate.console.request-outcomes"


def dlq_name(topic: str) -> str:
    """The dead-letter topic of ``topic``: the one place the suffix is applied."""
    return topic + DLQ_SUFFIX


def min_insync_replicas(replication: int) -> int:
    """``min.insync.replicas`` for a replication factor: 2 from 3 replicas on, else 1."""
    return 2 if replication >= 3 else 1


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its contract (key, value schema) and its broker configuration.

    Attributes:
        name: Topic name, ``clingate.<area>.<stream>``.
        key: What the record key is (e.g. ``patient_id``), for humans and reviewers.
        value_schema: Avro full name of the value schema.
        partitions: Partition count.
        replication: Replication factor.
        cleanup_policy: ``cleanup.policy``.
        retention_ms: ``retention.ms`` (-1 keeps records forever).
        consumed: clingate consumes the topic, so it has a dead-letter sibling.
        max_message_bytes: ``max.message.bytes``; None leaves the broker's default.
        extra: Further topic configs, as (name, value) pairs.
    """

    name: str
    key: str
    value_schema: str
    partitions: int = DEFAULT_PARTITIONS
    replication: int = 1
    cleanup_policy: CleanupPolicy = "delete"
    retention_ms: int = 7 * DAY_MS
    consumed: bool = False
    max_message_bytes: int | None = None
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def dlq(self) -> TopicSpec | None:
        """The dead-letter topic of a consumed topic; None for topics clingate only writes."""
        if not self.consumed:
            return None
        return TopicSpec(
            name=dlq_name(self.name),
            key="key of the failed record",
            value_schema=DEAD_LETTER_SCHEMA,
            partitions=DLQ_PARTITIONS,
            replication=self.replication,
            retention_ms=DLQ_RETENTION_MS,
            max_message_bytes=(self.max_message_bytes or BROKER_DEFAULT_MAX_MESSAGE_BYTES)
            + DLQ_HEADROOM_BYTES,
        )

    @property
    def configs(self) -> dict[str, str]:
        """The topic-level configs clingate sets (and checks on existing topics)."""
        return {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            "min.insync.replicas": str(min_insync_replicas(self.replication)),
            **({} if self.max_message_bytes is None else {"max.message.bytes": str(self.max_message_bytes)}),
            **dict(self.extra),
        }


_DECLARED: tuple[TopicSpec, ...] = (
    TopicSpec(DBPM_NARRATIVES, "patient_id", "clingate.dbpm.Narrative", consumed=True),
    TopicSpec(DBPM_CANDIDATES, "patient_id", "clingate.dbpm.Candidate", consumed=True),
    TopicSpec(
        DBPM_VERDICTS, "task|signature (streams.worker.keys.verdict_key; murmur2 partitioner)",
        "clingate.dbpm.Verdict",
        retention_ms=30 * DAY_MS, consumed=True,
    ),
    TopicSpec(
        DBPM_PROPAGATIONS,
        "task|signature of the target (streams.worker.keys.propagation_key; murmur2 partitioner)",
        "clingate.dbpm.Propagation",
        retention_ms=30 * DAY_MS, consumed=True,
    ),
    TopicSpec(
        DBPM_DISPATCHES,
        "task|signature a verdict of the candidate updates (streams.worker.keys.dispatch_keys; murmur2)",
        "clingate.dbpm.Dispatch",
        retention_ms=30 * DAY_MS, consumed=True,
    ),
    TopicSpec(DBPM_DECISIONS, "patient_id", "clingate.dbpm.GateDecision", retention_ms=30 * DAY_MS),
    TopicSpec(DBPM_TO_VERIFY, "patient_id", "clingate.dbpm.GateDecision", consumed=True),
    TopicSpec(DBPM_VERIFIED, "patient_id", "clingate.dbpm.Candidate"),
    TopicSpec(FHIR_UPDATES, "patient_id", "clingate.fhir.FhirUpdate", consumed=True),
    TopicSpec(CLINICAL_REVIEWS, "patient_id", "clingate.clinical.AdversarialReview", consumed=True),
    TopicSpec(CLINICAL_DELIVERABLES, "patient_id", "clingate.clinical.Deliverable", consumed=True),
    TopicSpec(
        CLINICAL_ASSESSMENTS, "patient_id (latest assessment per patient)",
        "clingate.clinical.ClinicalAssessment", cleanup_policy="compact,delete", retention_ms=30 * DAY_MS,
    ),
    TopicSpec(
        CLINICAL_SAFETY_AUDITS, "patient_id", "clingate.clinical.SafetyAudit", retention_ms=365 * DAY_MS
    ),
    TopicSpec(CLINICAL_EVIDENCE, "patient_id", "clingate.clinical.EvidenceBundle", consumed=True),
    TopicSpec(CLINICAL_DRAFTS, "patient_id", "clingate.clinical.ClinicalDraft", consumed=True),
    TopicSpec(CLINICAL_AUDIT_REPORTS, "patient_id", "clingate.clinical.AuditReport", consumed=True),
    TopicSpec(CLINICAL_GATED_DRAFTS, "patient_id", "clingate.clinical.GatedDraft", retention_ms=365 * DAY_MS),
    TopicSpec(
        CLINICAL_REVISION_ROUTES, "patient_id", "clingate.clinical.RevisionRoute", retention_ms=365 * DAY_MS
    ),
    TopicSpec(CLINICAL_EVIDENCE_REQUESTS, "patient_id", "clingate.clinical.EvidenceRequest"),
    TopicSpec(
        CLINICAL_QUERY_PROPOSALS, "patient_id", "clingate.clinical.QueryProposal", retention_ms=30 * DAY_MS
    ),
    TopicSpec(
        CLINICAL_QUERY_DECISIONS, "patient_id", "clingate.clinical.QueryDecision", retention_ms=365 * DAY_MS
    ),
    TopicSpec(
        CLINICAL_EVIDENCE_REVIEWS, "patient_id", "clingate.clinical.EvidenceReview", retention_ms=365 * DAY_MS
    ),
    TopicSpec(DOCS_CLASSIFICATIONS, "document_id", "clingate.docs.ClassificationRequest", consumed=True),
    TopicSpec(
        DOCS_DISPOSITIONS, "document_id (latest disposition per document)", "clingate.docs.Disposition",
        cleanup_policy="compact,delete", retention_ms=30 * DAY_MS,
    ),
    TopicSpec(
        DOCS_REVIEW_PACKETS, "document_id (latest packet per document)", "clingate.docs.ReviewPacket",
        cleanup_policy="compact", retention_ms=-1,
    ),
    TopicSpec(DOCS_REVIEWS, "document_id", "clingate.docs.Review", consumed=True),
    TopicSpec(
        DOCS_GROUND_TRUTH, "document_id (latest label per document)", "clingate.docs.GroundTruth",
        cleanup_policy="compact", retention_ms=-1, consumed=True,
    ),
    TopicSpec(AGENT_REQUESTS, "conversation_id", "clingate.agent.AgentRequest", consumed=True),
    TopicSpec(AGENT_RESPONSES, "conversation_id", "clingate.agent.AgentResponse", retention_ms=30 * DAY_MS),
    TopicSpec(AGENT_TRACES, "conversation_id", "clingate.agent.AgentTrace", retention_ms=30 * DAY_MS),
    TopicSpec(AGENT_PROPOSALS, "patient_id", "clingate.agent.AgentProposal", retention_ms=365 * DAY_MS),
    TopicSpec(CONSOLE_AUDIT, "user", "clingate.console.ConsoleAction", retention_ms=365 * DAY_MS),
    TopicSpec(
        CONSOLE_REQUESTS, "target (what the request is about: streams.requests.check)",
        "clingate.console.ConsoleRequest", retention_ms=30 * DAY_MS, consumed=True,
    ),
    TopicSpec(
        CONSOLE_REQUEST_OUTCOMES, "target (as the request)", "clingate.console.ConsoleRequestOutcome",
        retention_ms=365 * DAY_MS,
    ),
)  # fmt: skip


class Catalog:
    """An ordered, name-indexed set of topic specs (declared topics first, then their DLQs)."""

    def __init__(self, specs: tuple[TopicSpec, ...]) -> None:
        """Index ``specs`` by name.

        Args:
            specs: The topics, names unique.

        Raises:
            ValueError: Two specs share a name.
        """
        self._by_name: Mapping[str, TopicSpec] = {spec.name: spec for spec in specs}
        if len(self._by_name) != len(specs):
            raise ValueError("topic names in a catalog must be unique")
        self.specs = specs

    def __iter__(self) -> Iterator[TopicSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> TopicSpec:
        """The spec of topic ``name``.

        Raises:
            KeyError: No such topic in the catalog (the message lists the known names).
        """
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"unknown topic {name!r}; the catalog has: {', '.join(self._by_name)}") from None

    @property
    def names(self) -> tuple[str, ...]:
        """All topic names, in catalog order."""
        return tuple(self._by_name)


def build_catalog(partitions: int = DEFAULT_PARTITIONS, replication: int = 1) -> Catalog:
    """The catalog at a given scale: every declared topic, then every derived DLQ.

    Args:
        partitions: Partition count of each data topic (DLQs keep :data:`DLQ_PARTITIONS`).
        replication: Replication factor of every topic.

    Returns:
        The catalog.
    """
    if partitions < 1 or replication < 1:
        raise ValueError("partitions and replication must be at least 1")
    declared = tuple(
        replace(
            spec, partitions=partitions, replication=replication, max_message_bytes=DATA_MAX_MESSAGE_BYTES
        )
        for spec in _DECLARED
    )
    dead_letters = tuple(spec.dlq for spec in declared if spec.dlq is not None)
    return Catalog(declared + dead_letters)


CATALOG = build_catalog()


def max_message_bytes(topic: str) -> int:
    """``max.message.bytes`` of ``topic``: the largest record (key, value and headers) it admits.

    The catalog's value for a catalog topic; for any other topic, that of a topic declared like the
    catalog's (:data:`DATA_MAX_MESSAGE_BYTES`, plus :data:`DLQ_HEADROOM_BYTES` for a dead-letter topic).
    """
    limit = CATALOG.get(topic).max_message_bytes if topic in CATALOG else None
    if limit is not None:
        return limit
    return DATA_MAX_MESSAGE_BYTES + (DLQ_HEADROOM_BYTES if topic.endswith(DLQ_SUFFIX) else 0)


#: The largest ``max.message.bytes`` of any catalog topic: what a producer of dead letters must admit.
MAX_MESSAGE_BYTES = max(spec.max_message_bytes or 0 for spec in CATALOG)
