"""The DBPM gate as a confluent-kafka consumer group.

The gate keeps no state of its own that must be written (its engine transaction is aborted): it reads
the memory's replicated view and decides. This loop consumes
candidates in batches (:func:`~streams.runtime.kafka_clients.consume_batch`), decides them with the
unchanged engine and commits a batch's outputs, dead letters and progress in one Kafka transaction.

Topology::

    <app>-dbpm-memory-changelog --(every partition, no group)--> MemoryFollower (RocksDB per partition)
                                                                      | MergedView: the whole memory
    clingate.dbpm.candidates --(group <app>-gate, batches)--> GateLoop -+-> clingate.dbpm.dispatches
                                                   one transaction      +-> clingate.dbpm.decisions
                                                   per batch            +-> clingate.dbpm.to-verify
                                                                        |   (ALLOW, DOWNGRADE)
                                                                        +-> clingate.dbpm.verdicts
                                                                        |   (the Filter's, on violations)
                                                                        +-> clingate.dbpm.candidates.dlq
                                                                        '-> <app>-gate-progress

Each live candidate decided is also sent as a dispatch record to every memory partition a verdict of
it can update (:func:`streams.worker.dbpm.dispatch_outputs`), in the transaction of its decision: a
``read_committed`` reader (the verifier, the memory) sees the dispatch no later than the to-verify
record, so the memory learns a live verdict only of a candidate it knows was decided
(:mod:`streams.worker.dbpm`, consistency model).

The Ontology-Violation Filter (paper §4.7, Eq. 6) runs here, on every relation candidate the gate
decides: a violating triple is published as a ``rule_based`` ``hard_fail`` verdict
(:func:`processors.dbpm.ontology.filter_verdict`) keyed for the memory like any verdict, counted per
violated (head type, tail type) in ``clingate_dbpm_ontology_violations_total``. Off with
``CLINGATE_DBPM_ONTOLOGY_FILTER=off`` (then the memory would ignore them anyway); with ``tag-only`` it
still runs and the engine turns the BLOCKs its evidence causes into DOWNGRADEs. A replayed candidate
(``clingate-barrier`` header) gets none: a replay stream carries the Filter's verdicts itself. Each
decision names the configuration that made it (``config``, :meth:`processors.dbpm.DBPMConfig.fingerprint`).

No model per candidate: a record is decoded from its Avro datum into the engine's event
(:func:`~streams.worker.dbpm.decode_candidate`), and its decision and dispatches are written from
datums (:func:`decision_datum`, :func:`~streams.worker.dbpm.dispatch_datum`), the bytes the models
would give. A record whose datum needs a model's checks takes the model's path, and is decided or
dead-lettered exactly as there; the Filter's verdict, rare, is a model.

State the gate reads.

* The memory: a replicated view of the memory table (the GlobalKTable pattern). The follower reads
  every partition of the memory changelog from the offset its local RocksDB store holds (one store
  per partition, ``<worker datadir>/gate-view/``), applying whole changelog groups only
  (:class:`streams.worker.tablestore.ChangelogFollower`, which writes data and changelog offset in one
  ``WriteBatch``): a restart reads only the changelog tail, and a group a SIGKILLed memory writer left
  unfinished is never visible.
* The patient-keyed gate state (accepted NER categories, difficulty counters) is part of the memory
  (the engine keeps it as per-partition partial counts that :class:`~streams.worker.dbpm.MergedView` sums,
  ``docs/table-runtime.md`` section 2 item 6), so it arrives through the same view. The gate itself
  writes nothing: its engine transaction holds only bookkeeping (the as-of clock) and is aborted. No
  gate-side table is needed, hence none is kept (a co-partitioned patient table would need a second
  writer per patient, the verdicts of one patient landing on many signature partitions).

Consistency model of the gate (the memory side is in :mod:`streams.worker.dbpm`).

* Ordered: the candidates of one patient (one key, one candidates partition, one member of the gate
  group, decided in offset order; their decisions are produced in that order with an idempotent
  producer, keyed by patient).
* Ordered by the barrier: a candidate with the ``clingate-barrier`` header (the replay publisher,
  :mod:`streams.replay.kafka`) is decided only when every memory partition's watermark, as applied
  by this process's follower, is at least its event time, or after ``barrier_timeout`` (then
  ``barrier_timeout`` is in the provenance). Live candidates never wait.
* May race: a gate and verdicts published after its candidate; a gate and a memory group still in
  flight to this follower (the view lags the memory writer by the changelog round trip).
* Delivery, exactly once as a ``read_committed`` consumer sees it: a batch's dispatches, decisions,
  to-verify records, Filter verdicts and dead letters are committed in one transaction with the
  gate's progress on each candidates partition it read (:mod:`streams.runtime.progress`: where reading
  resumes, how far it read, which QA candidates the coverage join still holds). A member that gets a
  partition (after a SIGKILL, a rebalance or a clean stop) starts where the last committed progress
  resumes and sends nothing for the candidates that progress covers: it reads them only to rebuild
  the coverage join (``clingate_dbpm_gate_redelivered_total``). A transaction that fails is aborted,
  and the loop rewinds to the last committed progress. The group's offsets follow the progress
  (committed after each transaction) for lag and tools; the progress decides where reading starts.
  Zombies are fenced as in the memory loop (:mod:`streams.worker.tableloop`): a restarted member's
  stable transactional id fences its predecessor's open transaction, and a member that lost its
  partitions learns it at its next ``consume``.
* Bad records (undecodable, or valid Avro that is not a DBPM event) go to
  ``clingate.dbpm.candidates.dlq`` in the batch's transaction; so does a candidate whose decision
  would not fit the decisions topic (stage ``produce``: a decision holds its candidate, so a candidate
  near the topic's limit cannot have one).
* Stopping never waits out a barrier: a candidate still at its barrier when the loop is stopped
  abandons its batch (no transaction is open yet: nothing of the batch is sent) and the group's next
  owner decides it. Deciding it as timed out would publish a ``barrier_timeout``
  decision a replay does not make; waiting held a SIGTERMed worker for a barrier timeout per
  candidate of the batch (its process was SIGKILLed after a minute).

Process layout (``clingate worker --role``, :mod:`streams.cli.worker`): ``all`` runs the memory loop,
this loop and the clinical loop in one process (each in a thread: librdkafka releases the GIL while
it polls and flushes); ``gate`` runs only this loop. Each gate process is a member of the
consumer group :func:`gate_group`; scale the gate by starting more of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    Message,
    TopicPartition,
)
from prometheus_client import Gauge

from processors.dbpm import BLOCK, DBPMConfig, DBPMEngine, GateEvent, GateRuling
from processors.dbpm.config import NER, QA
from processors.dbpm.coverage import CoverageJoin, NarrativeKey, Release
from processors.dbpm.ledger import dispatch_key, judged_candidate, seen_key
from processors.dbpm.memory import Memory
from processors.dbpm.ontology import filter_verdict, type_pair
from schemas.dbpm import Candidate, Coverage, GateDecision
from schemas.serde import Serde
from schemas.wire import make_serde
from state.base import Store, Transaction
from state.rocksdb import RocksDBStore
from streams.runtime.core import BATCH_MAX, Abandoned, BatchCore, Output, Step
from streams.runtime.dlq import (
    PRODUCER_LIMITS,
    DecodeFailed,
    SourceRecord,
    oversized_output,
    processing_failed,
)
from streams.runtime.kafka_clients import consume_batch, producer_config
from streams.runtime.kafka_config import client_config, liveness_config
from streams.runtime.logs import log_dead_letter
from streams.runtime.metrics import DbpmMetrics
from streams.runtime.progress import Progress, ProgressLog, advanced
from streams.runtime.settings import Settings
from streams.runtime.transactions import TransactionalProducer
from streams.worker.dbpm import (
    BARRIER_HEADER,
    CONFIG_KEY,
    CandidateRecord,
    MergedView,
    barrier_reached,
    candidate_datum,
    contract_event,
    decode_candidate,
    dispatch_outputs,
    memory_changelog,
    verdict_key,
    with_ner_categories,
)
from streams.worker.tableloop import transactional_id
from streams.worker.tablestore import BOUNDARY_KEY, ChangelogFollower
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_TO_VERIFY, DBPM_VERDICTS

log = logging.getLogger(__name__)


def gate_group(app_id: str) -> str:
    """The consumer group of the gates of the workers of ``app_id``."""
    return f"{app_id}-gate"


class JudgedTracker:
    """The candidates whose verdicts a replica of the memory applied, read off its changelog: a verdict
    is applied when the group that records it (its ledger key) is complete (its boundary read).

    Args:
        partitions: the memory's partitions.
    """

    def __init__(self, partitions: int) -> None:
        self.on = False
        """Follow the changelog (off: nothing is kept)."""
        self._judging: list[list[str]] = [[] for _ in range(partitions)]
        self._judged: list[str] = []

    def observe(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Take the next changelog record of ``partition``."""
        if not self.on:
            return
        judging = self._judging[partition]
        if key == BOUNDARY_KEY:  # the group is applied: its verdicts are in the view
            self._judged += judging
            judging.clear()
        elif value is not None and (candidate_id := judged_candidate(key)) is not None:
            judging.append(candidate_id)

    def take(self) -> list[str]:
        """The candidates judged since the last call."""
        judged, self._judged = self._judged, []
        return judged


class MemoryFollower:
    """The gate's replicated view of the memory: every changelog partition, whole groups only.

    Args:
        bootstrap: Kafka bootstrap servers.
        app_id: the workers' application id (names the changelog).
        partitions: the number of memory partitions (= verdict topic partitions).
        directory: where the per-partition RocksDB stores live (the process MUST own it).
        cache_bytes: the bound of each store's read cache.
    """

    def __init__(
        self, bootstrap: str, app_id: str, partitions: int, directory: Path, cache_bytes: int
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.topic = memory_changelog(app_id)
        self._stores = [RocksDBStore(directory / f"{p}.db", cache_bytes) for p in range(partitions)]
        # The dispatch registry is the memory writer's alone: a view that only decides leaves it out.
        self._followers = [ChangelogFollower(store, skip=dispatch_key) for store in self._stores]
        self.view = MergedView(lambda: self._stores)
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": f"{gate_group(app_id)}-view",  # required by librdkafka; never joined (assign)
            "enable.auto.commit": False, "enable.partition.eof": False, "auto.offset.reset": "earliest",
        }))  # fmt: skip
        # Tail only: each partition resumes after the last group its store holds.
        self._consumer.assign([
            TopicPartition(self.topic, p, OFFSET_BEGINNING if (o := f.next_offset()) is None else o)
            for p, f in enumerate(self._followers)
        ])  # fmt: skip
        self.judged = JudgedTracker(partitions)
        """The candidates whose verdicts the view applied (followed with ``judged.on``: the coverage
        join's)."""

    def poll(self, timeout_s: float) -> int:
        """Apply the changelog records available within ``timeout_s``; returns how many were read."""
        messages = consume_batch(self._consumer, BATCH_MAX, timeout_s)
        batch: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
        for message in messages:
            error = message.error()
            if error is not None:  # e.g. the changelog does not exist yet: librdkafka retries
                log.debug("memory changelog: %s", error)
                continue
            partition, key, value = message.partition(), message.key(), message.value()
            batch.setdefault(partition, []).append((key, value, message.offset()))
            self.judged.observe(partition, key, value)
        for partition, records in batch.items():
            self._followers[partition].extend(records)
        return len(messages)

    def reached(self, ts: float, run: bytes) -> bool:
        """This view reached a candidate's barrier (:func:`~streams.worker.dbpm.barrier_reached`)."""
        return barrier_reached(self._stores, ts, run)

    def configs(self) -> dict[int, str]:
        """Per memory partition written yet, the configuration fingerprint of its last writer."""
        found = {p: store.get(CONFIG_KEY) for p, store in enumerate(self._stores)}
        return {p: raw.decode() for p, raw in found.items() if raw is not None}

    def close(self) -> None:
        """Close the changelog consumer and the stores."""
        self._consumer.close()
        for store in self._stores:
            store.close()


@dataclass(frozen=True)
class DecidedCandidate:
    """One decided candidate, ready to produce."""

    key: bytes
    value: bytes
    event: GateEvent
    decision: str
    violation: Output | None = None
    """The Ontology-Violation Filter's verdict on the candidate, when its triple violates."""
    dispatches: tuple[Output, ...] = ()
    """What tells the memory partitions its verdicts can reach that the candidate was decided; sent
    in the transaction of :meth:`outputs`, ahead of them: the candidate is known before it can be judged."""

    @property
    def task(self) -> str:
        """The candidate's task."""
        return self.event.task

    def outputs(self) -> list[Output]:
        """The records to produce: the decision, the same record to verify unless it is a BLOCK, and the
        Filter's verdict if there is one (a BLOCKed violation still reinforces its pattern)."""
        outputs = [Output(DBPM_DECISIONS, self.key, self.value)]
        if self.decision != BLOCK:
            outputs.append(Output(DBPM_TO_VERIFY, self.key, self.value))
        if self.violation is not None:
            outputs.append(self.violation)
        return outputs

    def violated_pair(self) -> tuple[str, str] | None:
        """The (head type, tail type) of the violating triple, for the per-pair counter."""
        if self.violation is None:
            return None
        payload = self.event.payload
        return type_pair(str(payload["head_type"]), str(payload["tail_type"]))


class ConfigWatch:
    """Reports memory partitions written by a process configured otherwise than this one.

    Every process of one app id must run one DBPM configuration: a memory writer and a gate that
    disagree (say, on the ontology filter or DOWNGRADE-first) would mix two rule sets silently. Each
    memory group records its writer's fingerprint (:data:`~streams.worker.dbpm.CONFIG_KEY`); the gate
    compares every partition's with its own, logs each new disagreement once (both fingerprints; ``clingate
    config --dbpm`` expands them) and shows how many partitions disagree on a gauge.

    Args:
        own: this process's configuration fingerprint.
        app_id: the workers' application id (named in the log line).
        gauge: where the number of disagreeing partitions is shown.
    """

    def __init__(self, own: str, app_id: str, gauge: Gauge) -> None:
        self.own = own
        self._app_id = app_id
        self._gauge = gauge
        self.mismatched: dict[int, str] = {}
        """Memory partition -> the other configuration's fingerprint, as last observed."""

    def observe(self, configs: Mapping[int, str]) -> None:
        """Take the fingerprints of the memory partitions' last writers."""
        others = {p: f for p, f in configs.items() if f != self.own}
        self._gauge.set(len(others))
        if others and others != self.mismatched:
            log.error(
                "memory partitions %s were written with DBPM configuration %s, this gate runs %s "
                "(clingate config --dbpm prints a process's flags): every process of app id %s must "
                "run one configuration", sorted(others), sorted(set(others.values())), self.own, self._app_id,
            )  # fmt: skip
        self.mismatched = others


Pending = tuple[SourceRecord, CandidateRecord]
"""A QA candidate the coverage join holds: its record, and the record decoded."""

Barrier = Callable[[float, bytes], bool]
"""Waits until the memory view reached a candidate's barrier (its event time and the value of its
:data:`~streams.worker.dbpm.BARRIER_HEADER`, :func:`~streams.worker.dbpm.barrier_reached`); True if it
gave up (the gate then decides on the view it has and says ``barrier_timeout``)."""


class Gate:
    """The gate's per-candidate work, without Kafka: decode, decide on a view, encode.

    :meth:`decode` and :meth:`judge` are the per-record work :class:`GateSteps` does for the
    :class:`GateLoop` and the topology test driver (:mod:`streams.testing.driver`).

    Args:
        engine: the worker's engine (:func:`~streams.worker.dbpm.dbpm_engine`; the gate only decides with
            it: the memory's writers maintain).
        serde: the process's serde.
        view: the memory (read only).
        metrics: where dead letters are counted (None: nowhere).
    """

    def __init__(
        self, engine: DBPMEngine, serde: Serde, view: Store, metrics: DbpmMetrics | None = None
    ) -> None:
        self.engine = engine
        self._serde = serde
        self._view = view
        self._metrics = metrics
        flags = engine.config.flags
        self._filter = flags.ontology_filter and not flags.disabled
        self._fingerprint = engine.config.fingerprint()

    def decode(self, record: SourceRecord) -> CandidateRecord | DecodeFailed:
        """The candidate of a ``clingate.dbpm.candidates`` record, or the failure
        (:func:`~streams.worker.dbpm.decode_candidate`: from its Avro datum where that is exact)."""
        return decode_candidate(self._serde, record)

    def decide(
        self,
        candidate: CandidateRecord,
        waited_out: bool = False,
        replayed: bool = False,
        coverage: Release[Pending] | None = None,
    ) -> DecidedCandidate:
        """Decide ``event`` on the view; the encoded decision record, keyed by patient, and the Filter's
        verdict on a violating relation unless the candidate is ``replayed`` (a replay stream carries
        the Filter's verdicts itself, replay contract).

        A live QA candidate released by the coverage join (``coverage``) is decided with the patient's
        accepted NER categories, as the memory holds them now, stamped on its payload; one decided
        without the join gets coverage ``off``. The decision is written from its datum
        (:func:`decision_datum`), the bytes its model would give.
        """
        txn = Transaction(self._view)  # the engine only reads; the transaction keeps the view untouched
        joined: tuple[Coverage, float] | None = None
        event = candidate.event
        if event.task == QA and not replayed:
            joined = (Coverage.OFF, 0.0) if coverage is None else (coverage.coverage, coverage.waited_s)
            if coverage is not None:
                categories = Memory(txn, self.engine.config).patient_categories(event.patient_id)
                candidate = with_ner_categories(candidate, categories)
                event = candidate.event
        decision = self.engine.decide(txn, event, event.time)
        txn.abort()
        datum = decision_datum(candidate, decision, waited_out, self._fingerprint, joined)
        value = self._serde.write_datum(datum, GateDecision, topic=DBPM_DECISIONS)
        violation = None
        if self._filter and not replayed and (verdict := filter_verdict(self.engine.ontology, event)):
            key = verdict_key(self.engine, contract_event(verdict))  # type: ignore[arg-type]
            violation = Output(DBPM_VERDICTS, key, self._serde.encode(verdict, topic=DBPM_VERDICTS))
        # A replay stream's verdicts are applied as given: nothing to look up for them.
        dispatches = () if replayed else dispatch_outputs(self._serde, event)
        return DecidedCandidate(
            event.patient_id.encode(), value, event, decision.decision, violation, dispatches
        )

    def was_judged(self, candidate_id: str) -> bool:
        """A verdict of ``candidate_id`` is in the view."""
        return self._view.get(seen_key(candidate_id)) is not None

    def judge(
        self,
        record: SourceRecord,
        candidate: CandidateRecord,
        barrier: Barrier,
        coverage: Release[Pending] | None = None,
    ) -> DecidedCandidate | DecodeFailed:
        """A decoded ``clingate.dbpm.candidates`` record's decision, or why it goes to the dead-letter
        topic (``coverage``: how the coverage join released it).

        A candidate with the :data:`~streams.worker.dbpm.BARRIER_HEADER` waits at ``barrier`` for its
        event time first. Never raises for a record (the engine raising on it is a dead letter of stage
        ``process``, a decision larger than its topic admits one of stage ``produce``); what ``barrier``
        raises propagates.
        """
        replayed = is_replayed(record)
        waited_out = replayed and barrier(candidate.event.time, record.header(BARRIER_HEADER) or b"")
        try:
            outcome = self.decide(candidate, waited_out, replayed, coverage)
        except Exception as exc:  # a poison record must not stop the partition: DLQ, nothing decided
            return processing_failed(record, exc, Candidate.avro_name)
        # A decision the broker would refuse on every retry (the batch rewound forever) is its input's DLQ.
        return (
            oversized_output(record, DBPM_DECISIONS, outcome.key, outcome.value, (), Candidate.avro_name)
            or outcome
        )

    def dead_lettered(self, failed: DecodeFailed) -> None:
        """Log and count a dead letter the runtime routed."""
        log_dead_letter(log, failed)
        if self._metrics is not None:
            self._metrics.dead_letters.labels(failed.record.topic).inc()


@dataclass(frozen=True, slots=True)
class GateBatch:
    """What :meth:`GateSteps.decide` made of a batch: its decisions, its dead letters and the partitions
    it read (their positions moved)."""

    decided: list[DecidedCandidate]
    failed: list[DecodeFailed]
    read: set[int]


class GateSteps:
    """The gate's logic on batches of candidates, without Kafka or a clock: the coverage join, the
    barrier, what a partition's committed progress already covers, and the progress a batch reaches.

    The gate loop (:class:`GateLoop`) and the topology test driver (:mod:`streams.testing.driver`) both
    run it; they differ in how they wait at a barrier and in their clock (``now``: the loop's monotonic
    clock, the driver's own), so a decision the driver makes is the one production makes on the same
    records, coverage join included.

    Args:
        gate: the per-candidate work.
        coverage_wait_s: see :attr:`streams.runtime.settings.Settings.dbpm_coverage_wait_s` (0: the
            coverage join is off).
        barrier: how a replayed candidate waits for the view (:data:`Barrier`).
        judged: the candidates whose verdicts the view applied since it was last asked
            (:class:`JudgedTracker`).
        metrics: where redeliveries, the join's traffic and decisions are counted.
    """

    def __init__(
        self,
        gate: Gate,
        coverage_wait_s: float,
        barrier: Barrier,
        judged: Callable[[], list[str]],
        metrics: DbpmMetrics,
    ) -> None:
        self.gate = gate
        self.join: CoverageJoin[Pending] | None = CoverageJoin(coverage_wait_s) if coverage_wait_s else None
        self._barrier = barrier
        self._judged = judged
        self._metrics = metrics
        self.progress: dict[int, Progress] = {}
        """Partition -> its last committed progress (the owned partitions)."""
        self.position: dict[int, int] = {}
        """Partition -> the next offset to decide."""

    def pending(self) -> bool:
        """The join holds candidates: a step without input may release some."""
        return self.join is not None and len(self.join) > 0

    def decide(self, records: Sequence[SourceRecord], now: float) -> GateBatch:
        """The decisions of a batch's candidates (QA candidates held by the coverage join yield nothing
        yet, candidates whose progress is committed only rebuild the join), then those of the held
        candidates the join releases at ``now``.

        Raises:
            Abandoned: the barrier gave up because the loop is stopping (:class:`GateLoop`).
        """
        decided: list[DecidedCandidate] = []
        failed: list[DecodeFailed] = []
        read: set[int] = set()
        redelivered = 0

        def add(out: DecidedCandidate | DecodeFailed | None) -> None:
            if out is not None:
                (failed if isinstance(out, DecodeFailed) else decided).append(out)

        for record in records:
            read.add(record.partition)
            self.position[record.partition] = record.offset + 1
            done = self.progress.get(record.partition)
            if done is not None and done.done(record.offset):
                redelivered += 1
                self._rebuild(record, now)
            else:
                add(self._take(record, now))
        if redelivered:
            self._metrics.gate_redelivered.inc(redelivered)
        if self.join is not None:
            for candidate_id in self._judged():
                self.join.settle(candidate_id)
            for release in self.join.due(now):
                add(self._judge_released(release))
            self._metrics.coverage_held.set(self.join.held())
        return GateBatch(decided, failed, read)

    def next_progress(self) -> dict[int, Progress]:
        """The progress of every owned partition that moved: resumed no later than the first candidate of
        a narrative the coverage join still has open, its held QA candidates named (:func:`advanced`)."""
        moved: dict[int, Progress] = {}
        join = self.join
        for partition, position in self.position.items():
            low = None if join is None else join.low_watermark(partition)
            held = () if join is None or low is None else join.held_offsets(partition)
            last = self.progress.get(partition)
            progress = advanced(last, position, low, held)
            if last != progress:
                moved[partition] = progress
        return moved

    def committed(self, progress: Mapping[int, Progress], decided: Sequence[DecidedCandidate]) -> None:
        """A batch's outputs and ``progress`` are committed: take the progress, count the decisions."""
        self.progress.update(progress)
        for (task, decision), count in Counter((out.task, out.decision) for out in decided).items():
            self._metrics.decisions.labels(task, decision).inc(count)
        for pair, count in Counter(out.violated_pair() for out in decided).items():
            if pair is not None:
                self._metrics.ontology_violations.labels(*pair).inc(count)
        for out in decided:
            gate = out.event
            self._metrics.selectivity.gate(gate.task, gate.patient_id, gate.payload, out.decision)

    def rewound(self, resume: Mapping[int, int]) -> None:
        """A batch was not committed: decide again from ``resume`` (per partition read) and forget the
        join's state (it rebuilds from what is read again)."""
        self.position.update(resume)
        self.drop(list(self.position))

    def drop(self, partitions: Iterable[int]) -> None:
        """Forget what the join holds of ``partitions`` (revoked, or read again)."""
        if self.join is not None:
            self.join.drop(partitions)

    def _judge_released(self, release: Release[Pending]) -> DecidedCandidate | DecodeFailed:
        """A QA candidate the coverage join released: counted by how its coverage was settled, decided."""
        record, candidate = release.record
        self._metrics.coverage_released.labels(release.coverage.value).inc()
        return self.gate.judge(record, candidate, self._barrier, release)

    def _take(self, record: SourceRecord, now: float) -> DecidedCandidate | DecodeFailed | None:
        """One candidate through the coverage join (when it is on) and the gate; None: held."""
        candidate = self.gate.decode(record)
        if isinstance(candidate, DecodeFailed):
            return candidate
        join = self.join
        event = candidate.event
        if join is None or candidate.document_time is None or is_replayed(record):
            return self.gate.judge(record, candidate, self._barrier)
        key = (event.patient_id, candidate.document_time)
        if event.task == QA:
            release = join.qa(key, record.partition, record.offset, (record, candidate), now)
            return None if release is None else self._judge_released(release)
        out = self.gate.judge(record, candidate, self._barrier)
        if event.task != NER or not isinstance(out, DecidedCandidate):
            join.other(key, record.partition, record.offset, now)
            return out
        self._joined_ner(key, record, event.candidate_id, out.decision != BLOCK, now)
        return out

    def _rebuild(self, record: SourceRecord, now: float) -> None:
        """A candidate whose decision is committed, read again: what it told the coverage join, told again
        (an NER candidate decided again on the view to know whether it is pending; QA candidates, whose
        release is committed, and dead letters tell nothing)."""
        join = self.join
        if join is None or is_replayed(record):
            return
        candidate = self.gate.decode(record)
        if isinstance(candidate, DecodeFailed):
            return
        event = candidate.event
        if candidate.document_time is None or event.task == QA:
            return
        key = (event.patient_id, candidate.document_time)
        if event.task != NER:
            join.other(key, record.partition, record.offset, now)
            return
        try:
            let_through = self.gate.decide(candidate).decision != BLOCK
        except Exception:  # dead-lettered when it was first read: it opens the narrative, nothing pending
            join.other(key, record.partition, record.offset, now)
            return
        self._joined_ner(key, record, event.candidate_id, let_through, now)

    def _joined_ner(
        self, key: NarrativeKey, record: SourceRecord, candidate_id: str, let_through: bool, now: float
    ) -> None:
        """Tell the join an NER candidate was decided (pending unless BLOCKed or judged already)."""
        join = self.join
        assert join is not None
        join.ner(key, record.partition, record.offset, candidate_id, let_through, now)
        if let_through and self.gate.was_judged(candidate_id):
            join.settle(candidate_id)  # read again after a restart: its verdict is applied


class GateLoop:
    """The gate consumer: candidates in; dispatches, decisions, to-verify records, the Filter's verdicts,
    dead letters and the gate's progress out, one step per batch on a
    :class:`~streams.runtime.core.BatchCore`, decided by :class:`GateSteps`.

    Args:
        bootstrap: Kafka bootstrap servers.
        app_id: the workers' application id (:func:`gate_group`, the memory changelog, the progress topic).
        engine: the worker's engine (the gate only decides with it).
        serde: the process's serde.
        follower: the memory view (the loop owns it and closes it when it stops).
        directory: where the loop keeps its transactional id (the process MUST own it).
        barrier_timeout_s: see :attr:`streams.runtime.settings.Settings.dbpm_barrier_timeout_s`.
        session_timeout_s: the group's session timeout.
        metrics: where decisions, latencies, lag and dead letters are counted.
        coverage_wait_s: see :attr:`streams.runtime.settings.Settings.dbpm_coverage_wait_s` (0: the
            coverage join is off).
    """

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        engine: DBPMEngine,
        serde: Serde,
        follower: MemoryFollower,
        directory: Path,
        barrier_timeout_s: float,
        session_timeout_s: float,
        metrics: DbpmMetrics,
        coverage_wait_s: float = 0.0,
    ) -> None:
        gate = Gate(engine, serde, follower.view, metrics)
        self._follower = follower
        follower.judged.on = bool(coverage_wait_s)
        self._steps = GateSteps(gate, coverage_wait_s, self._barrier, follower.judged.take, metrics)
        self._barrier_timeout_s = barrier_timeout_s
        self._metrics = metrics
        group = gate_group(app_id)
        self._progress_log = ProgressLog(bootstrap, group, [DBPM_CANDIDATES])
        # Decisions leave in batches: 2 ms linger is enough to fill them, the commit sends at once. It
        # admits decisions as large as the decisions topic does (librdkafka's own limit is ~1 MB: a
        # 2 MB candidate's decision raised in produce() and stopped the gate).
        self.core = BatchCore(
            "gate",
            client_config(bootstrap, **{
                "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "enable.partition.eof": False,
                **liveness_config(session_timeout_s),
            }),
            TransactionalProducer(producer_config(bootstrap, **{
                "transactional.id": transactional_id(directory, group),
                "linger.ms": 2, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                **PRODUCER_LIMITS,
            }), group),
            serde, metrics.loops, on_dead_letter=gate.dead_lettered,
        )  # fmt: skip
        self._config_watch = ConfigWatch(engine.config.fingerprint(), app_id, metrics.config_mismatch)
        self._stop = threading.Event()  # run()'s, once it runs
        self.core.subscribe([DBPM_CANDIDATES], self.assigned, self.revoked)

    @property
    def view(self) -> MergedView:
        """The replicated memory view the gate decides on."""
        return self._follower.view

    @property
    def config(self) -> DBPMConfig:
        """The configuration the gate decides with (:func:`~streams.worker.dbpm.dbpm_engine`'s)."""
        return self._steps.gate.engine.config

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, high watermark - committed offset) of the assigned candidate partitions."""
        return self.core.lag()

    def run(self, stop: threading.Event) -> None:
        """Decide batches until ``stop`` is set; then leave the group and close the clients."""
        self._stop = stop
        self.core.run(stop, self)

    def prepare(self) -> None:
        """Follow the memory changelog after the read: the batch is decided on the freshest view."""
        if self._follower.poll(0):
            self.check_config()

    def check_config(self) -> None:
        """Compare the memory writers' configurations with this gate's (:class:`ConfigWatch`)."""
        self._config_watch.observe(self._follower.configs())

    def step(self, messages: list[Message]) -> Step | None:
        """Decide one batch and what the coverage join releases: the outputs, dead letters and progress
        of one step (never resuming past a candidate the join may need read again); None when there is
        nothing to read or release.

        Raises:
            Abandoned: the loop was stopped while a candidate waited at its barrier (module docstring).
        """
        steps = self._steps
        if not messages and not steps.pending():
            return None
        started = time.perf_counter()
        try:
            batch = steps.decide([SourceRecord.from_message(m) for m in messages], time.monotonic())
        except Abandoned:
            log.info("stopping at a barrier: %d candidates left to the group's next owner", len(messages))
            raise
        if batch.read:  # past the transaction markers after the batch's last records (a generator's commits)
            read = {(DBPM_CANDIDATES, p): steps.position[p] for p in batch.read}
            steps.position.update((tp.partition, tp.offset) for tp in self.core.positions(read))
        progress = steps.next_progress()
        decided = batch.decided
        # Dispatches go first: a ``read_committed`` reader sees none of the batch before the commit, and
        # then the dispatch of every candidate the batch sends to be verified.
        outputs = [o for d in decided for o in d.dispatches] + [o for d in decided for o in d.outputs()]

        def done(_tracked: Mapping[int, int]) -> None:
            steps.committed(progress, decided)
            elapsed = time.perf_counter() - started
            for _ in decided:
                self._metrics.gate_latency.observe(elapsed)

        return Step(
            batch.failed, outputs,
            [self._progress_log.record(DBPM_CANDIDATES, p, moved) for p, moved in progress.items()],
            [TopicPartition(DBPM_CANDIDATES, p, moved.resume) for p, moved in progress.items()],
            done=done, aborted=self._rewound,
        )  # fmt: skip

    def _rewound(self) -> None:
        """After an aborted step (the core sought every partition back to its last commit): decide again
        from there."""
        core = self.core
        steps = self._steps
        steps.rewound({
            p: core.resume.get((DBPM_CANDIDATES, p), core.started.get((DBPM_CANDIDATES, p), 0))
            for p in steps.position
        })  # fmt: skip

    def assigned(self, partitions: list[TopicPartition]) -> Mapping[tuple[str, int], int]:
        """Start each assigned partition where its last committed progress resumes.

        The group's offsets are not taken as the progress's resume: the previous owner's last
        asynchronous commit may have been refused by the very rebalance that moved the partition, and
        a gate with nothing left to decide would then never commit them (lag and replay barriers read
        them). Unknown until this gate commits, they are committed once it is idle."""
        found = self._progress_log.assigned(partitions)
        self._steps.progress.update((partition, done) for (_, partition), done in found.items())
        return {key: done.resume for key, done in found.items()}

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """Forget the revoked partitions' progress and the join's state on them."""
        for tp in partitions:
            self._steps.progress.pop(tp.partition, None)
            self._steps.position.pop(tp.partition, None)
        self._steps.drop(tp.partition for tp in partitions)

    def close(self) -> None:
        """Close the progress reader and the memory view."""
        self._progress_log.close()
        self._follower.close()

    def _barrier(self, ts: float, run: bytes) -> bool:
        """Follow the changelog until the view reached the barrier (:func:`barrier_reached`); True if
        timed out (counted).

        Raises:
            Abandoned: the loop was stopped meanwhile (module docstring, "Stopping").
        """
        if self._follower.reached(ts, run):
            return False
        deadline = time.monotonic() + self._barrier_timeout_s
        with self._metrics.barrier_waiting.track_inprogress():
            while not self._follower.reached(ts, run):
                if self._stop.is_set():
                    raise Abandoned
                if time.monotonic() >= deadline:
                    self._metrics.barrier_timeouts.inc()
                    return True
                self._follower.poll(0.001)
        return False


def is_replayed(record: SourceRecord) -> bool:
    """A candidate published by ``clingate replay --via-kafka`` (it carries the barrier header)."""
    return any(k == BARRIER_HEADER for k, _ in record.headers)


def decision_fields(
    decision: GateRuling, waited_out: bool, config: str, coverage: tuple[Coverage, float] | None
) -> dict[str, Any]:
    """The fields of the ``clingate.dbpm.decisions`` record of ``decision`` that do not repeat its
    candidate, as its datum holds them (:func:`decision_record`, :func:`decision_datum`)."""
    return {
        "decision": decision.decision,
        "rule": decision.rule,
        "signature": decision.signature,
        "severity": decision.severity,
        "confidence_multiplier": decision.multiplier,
        "provenance": [*decision.sources, *decision.policy, *(("barrier_timeout",) if waited_out else ())],
        "config": config,
        "coverage": None if coverage is None else coverage[0].value,
        "coverage_wait_s": None if coverage is None else round(coverage[1], 6),
    }


def decision_record(
    candidate: Candidate,
    decision: GateRuling,
    waited_out: bool,
    config: str,
    coverage: tuple[Coverage, float] | None = None,
) -> GateDecision:
    """The ``clingate.dbpm.decisions`` record of ``decision`` on ``candidate`` by the engine whose
    configuration has the fingerprint ``config``; ``coverage``: how a live QA candidate's NER coverage
    was settled, and how long it waited for it."""
    return GateDecision.model_validate({
        "ts": candidate.ts, "task": candidate.task, "patient_id": candidate.patient_id,
        "candidate_id": candidate.candidate_id, "candidate": candidate,
        **decision_fields(decision, waited_out, config, coverage),
    })  # fmt: skip


def decision_datum(
    candidate: CandidateRecord,
    decision: GateRuling,
    waited_out: bool,
    config: str,
    coverage: tuple[Coverage, float] | None = None,
) -> dict[str, Any]:
    """The datum of :func:`decision_record` built from the gate's record of the candidate instead of
    its model, for :meth:`schemas.serde.Serde.write_datum`: the same bytes, without a model per
    decision."""
    event = candidate.event
    return {
        "ts": event.ts,
        "task": event.task,
        "patient_id": event.patient_id,
        "candidate_id": event.candidate_id,
        "candidate": candidate_datum(candidate),
        **decision_fields(decision, waited_out, config, coverage),
    }


def build_gate(settings: Settings, bootstrap: str, metrics: DbpmMetrics) -> GateLoop:
    """The gate loop of a worker, its memory view (``<worker datadir>/gate-view``) and its transactional
    id (``<worker datadir>/gate``), from settings."""
    from streams.worker.dbpm import dbpm_engine

    engine = dbpm_engine(settings)
    follower = MemoryFollower(
        bootstrap, settings.app_id, settings.topic_partitions, settings.worker_dir / "gate-view",
        settings.store_cache_bytes,
    )  # fmt: skip
    return GateLoop(
        bootstrap, settings.app_id, engine, make_serde(settings.schema_registry_url), follower,
        settings.worker_dir / "gate", settings.dbpm_barrier_timeout_s, settings.consumer_session_timeout_s,
        metrics, settings.dbpm_coverage_wait_s,
    )  # fmt: skip
