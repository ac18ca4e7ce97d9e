"""The DBPM memory writer: :class:`MemoryHandler` on a transactional table loop.

The memory writer calls :class:`processors.dbpm.DBPMEngine` unchanged. Its per-partition logic is
:class:`MemoryHandler`, which decodes records, reads the partition's state, calls the engine and
returns the propagation records and dead letters as data, its writes staged for the partition's
changelog group. The memory's writers form the consumer group :func:`memory_group` over the
co-partitioned inputs (:data:`~streams.worker.keys.MEMORY_INPUTS`); each member runs a
:class:`~streams.worker.tableloop.TableLoop` (:func:`build_memory`), which commits a batch's
propagations, dead letters and changelog group in one Kafka transaction, then its input offsets. The
changelog topic (:func:`~streams.worker.keys.memory_changelog`, one partition per memory partition) is
created when it is missing. The gate reads the memory through its replicated view
(:mod:`streams.worker.gateview`). The design is in ``docs/runtime-reference.md`` (sections 2 and 7),
what the loop guarantees in ``docs/table-runtime.md``.

Topology::

    clingate.dbpm.verdicts     (key task|signature) --+
    clingate.dbpm.propagations (key task|signature   |--> memory writer (group <app>-memory, one writer
                                of the target)  <-----+    | per signature)
    clingate.dbpm.dispatches   (key task|signature   |    | learns a verdict of a decided candidate,
                                a verdict may update) -+    | sends its cross-task evidence keyed by
                                         ^                 | the target signature; applies evidence
                                         |                 | for its own signatures; one transaction
                                         |                 v per batch: outputs, changelog group
                                         |    <app>-dbpm-memory-changelog (compacted, N partitions)
                                         |                 | every gate process follows every partition
                                         |                 v (streams.worker.gateview.MemoryFollower)
    clingate.dbpm.candidates (key patient id)   --> gate loop (group <app>-gate) reads the replicated view
                                                          |--> clingate.dbpm.dispatches (first)
                                                          |--> clingate.dbpm.decisions (every decision)
                                                          '--> clingate.dbpm.to-verify (ALLOW, DOWNGRADE)
                                                          (one transaction per batch)

Consistency model (the gate's side is in :mod:`streams.worker.gateloop`).

* Ordered: the verdicts of one ``(task, signature)`` (one key, one partition, one writer: the member
  of the memory writers' group that owns the partition, one batch at a time); the records a memory
  partition writes (one changelog partition, applied by readers in order, whole groups at a time:
  :mod:`streams.worker.tablestore`); the candidates of one patient (one key, one partition, one member
  of the gate group, decided in offset order); the propagation events one memory partition sends to
  another (one producer, their identities ``(origin offset, index)`` increase).
* One writer per signature, cross-task propagation included: the engine returns RE/QA -> NER
  evidence as events (:meth:`processors.dbpm.DBPMEngine.learn`); the writer sends them to
  ``clingate.dbpm.propagations`` keyed by the *target* ``task|signature`` (murmur2, the verdicts'
  partition count), so the partition owning the target applies them
  (:meth:`~processors.dbpm.DBPMEngine.propagate`) and evaluates the guards that read the target
  (whitelist, cap, severity zone) on its own state when the event arrives.
* Ordered by the barrier, for candidates that ask for it (header ``clingate-barrier``; the replay
  publisher sets it): before each run of candidates the publisher writes a tick to every memory
  partition, after every verdict before the run, naming the run
  (:func:`~streams.worker.keys.run_token`; a tick also moves the partition's clock, running the
  maintenance due by then), and each partition records the last run it applied. Such a gate waits
  until every partition, as its gate process's view has applied it from the changelog, applied its
  run's tick (:func:`~streams.worker.keys.barrier_reached`), so it sees every verdict published
  before it, those of its own event-time second included; after
  ``barrier_timeout`` it decides on the view it has and says so in the decision's provenance
  (``barrier_timeout``). Live candidates carry no such header and never wait: live verdict
  partitions have no ticks, so a barrier would cost every gate the full timeout. Propagated
  evidence does not hold the watermark back.
* May race: a gate and verdicts published *after* its candidate (a gate can see newer memory than
  the in-process engine would), and a gate and memory groups not yet read back from the changelog by
  its view. In a live pipeline those verdicts are concurrent with the gate; ``replay --via-kafka``
  restores the in-process order by publishing the next verdicts only after the decisions of the
  gates before them arrived. Propagated evidence arrives one hop after its verdict: a gate in
  between may see the target without it (the barrier does not wait for it), and the target
  partition may apply later verdicts of the target signature first, so the update order of that
  one NER pattern differs (Eq. 3 is not commutative; a success that arrived first whitelists the
  target and the guard then stops the evidence). Only NER patterns that are propagation targets,
  and NER gates on them, can differ from the in-process engine; the integration test measures it.
  With propagation off nothing differs.
* Aggregates (patient counters, QA category counts, populations) are per partition and summed by
  the view (:mod:`processors.dbpm.partitioned`); caps and pruning run per partition.
* Crash (SIGKILL) at any point: a batch's propagations, dead letters and changelog group commit in
  one Kafka transaction and its input offsets after it (:mod:`streams.worker.tableloop`), and the
  local store is written only after the commit; so a crash either loses the whole batch (it is read
  again from the committed offsets and applied on the state the changelog holds) or none of it, and
  ``read_committed`` readers (the gates' view, the target partitions of propagations) never see a
  batch twice. The input offsets each group records (:func:`streams.worker.tablestore.apply_batch`)
  skip the records read again after a crash between the transaction and the offset commit, and the
  propagation identities below skip the evidence a crashed writer's successor sends again. The gate
  commits a batch's outputs with its progress in one transaction (:mod:`streams.worker.gateloop`): a
  candidate its committed progress covers sends nothing when read again, and one whose batch was
  aborted is decided again on the view as it is *then*, its earlier outputs never visible to a
  ``read_committed`` reader.
* Duplicate verdicts from at-least-once producers (the verifier re-issues its in-flight calls after
  a crash; a candidate re-published by the generator is verified again): a verdict that names its
  candidate is a new record at a later offset, so the offset skip above does not see it. The engine
  applies at most one verdict per ``candidate_id`` per memory partition (its verdict ledger,
  :mod:`processors.dbpm.ledger`: two point lookups, written in the same transaction and so in the
  same changelog group as the update it guards, forgotten after ``verdict_dedupe_horizon_s`` of
  event time plus at most an hour, default 30 days, the verdict topic's retention); a duplicate
  changes nothing and is counted in ``clingate_dbpm_verdicts_duplicate_total``. In the engine, not
  here, so that the in-process replay of a recorded verdict topic gives the memory the workers
  hold. Verdicts without a ``candidate_id`` are applied as given. Not caught: a copy whose verdict
  updates another signature than the first (a QA FAIL with an error class vs. a pass), which
  another partition owns.
* Verdicts of unknown candidates: a live verdict that names a candidate must judge one a gate
  decided. For every candidate it decides (live, not replayed) the gate sends a dispatch record to
  each memory partition a verdict of that candidate can update
  (:func:`~streams.worker.keys.dispatch_keys`: the candidate's signature, and for QA also the class
  pattern of each error class), in the
  transaction of the decision and the to-verify record, ahead of them; so a ``read_committed``
  reader sees a candidate's dispatches no later than anything that can judge it. The memory records them
  (:meth:`processors.dbpm.DBPMEngine.dispatch`, kept for ``verdict_dedupe_horizon_s``). A verdict
  whose candidate is not recorded is deferred while this member has not read the partition's
  dispatches to their end (the verdict partition is read again from it, counted in
  ``clingate_dbpm_verdicts_deferred_total``), and dead-lettered as ``UnknownCandidate`` once it has:
  its memory would otherwise learn from outside the pipeline. The end is asked at most once per
  partition and batch: every verdict of a batch was read before the batch is applied, so once the
  dispatches are read to an end asked for during the batch, every dispatch written before any of
  its verdicts is read too, and a thousand verdicts of unknown candidates cost one question, not a
  thousand. Verdicts without a ``candidate_id`` and verdicts a replay published
  (:data:`~streams.worker.keys.REPLAYED_HEADER`) are applied as given (replay contract).
"""

from __future__ import annotations

import collections
import logging
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from processors.dbpm import DBPMEngine, PinEvent, Propagation, VerdictEvent, parse_time
from processors.dbpm.ontology import FILTER_ID_SUFFIX, misfiled_filter_verdict
from schemas.common import Stage
from schemas.dbpm import Propagation as PropagationRecord
from schemas.dbpm import Verdict
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord, processing_failed
from streams.runtime.logs import log_dead_letter
from streams.runtime.metrics import LoopMetrics
from streams.runtime.settings import Settings
from streams.worker.keys import (
    CONFIG_KEY,
    MEMORY_INPUTS,
    REPLAYED_HEADER,
    TICK_HEADER,
    TICK_RUN_HEADER,
    TICK_RUN_KEY,
    WATERMARK_KEY,
    applied_from_key,
    decode_watermark,
    encode_watermark,
    memory_changelog,
    propagation_key,
    verdict_key,
)
from streams.worker.metrics import DbpmMetrics
from streams.worker.tableloop import TableLoop, build_table_loop
from streams.worker.tablestore import StagedPartition, TableBatch
from streams.worker.wire import decode_dispatch, decode_propagation, decode_verdict, propagation_datum
from topics.catalog import DBPM_DISPATCHES, DBPM_PROPAGATIONS, DBPM_VERDICTS

log = logging.getLogger(__name__)

_ORIGIN = struct.Struct("<qI")
"""The value of a partition's :func:`~streams.worker.keys.applied_from_key` record: the identity
``(origin offset, index)`` of the last propagation applied from that origin partition."""
_DAY_S = 86400.0


def memory_group(app_id: str) -> str:
    """The consumer group of the memory writers of the workers of ``app_id``."""
    return f"{app_id}-memory"


@dataclass(frozen=True, slots=True)
class Applied:
    """A ``clingate.dbpm.verdicts`` record the memory took: the event time it moves the partition's
    watermark to (a tick's, a pin's or a verdict's), and the propagation events to send (a new
    verdict's cross-task evidence; none for a tick, a pin or a duplicate verdict)."""

    at: float
    propagations: Sequence[Propagation] = ()


@dataclass(frozen=True, slots=True)
class Deferred:
    """A live verdict whose candidate's dispatch this member has not read yet: nothing applied; the
    verdict and the verdicts after it are read again."""


Learnt = Applied | Deferred | Rejected
"""What :meth:`MemoryHandler.learn` made of a ``clingate.dbpm.verdicts`` record (a
:class:`~streams.runtime.dlq.Rejected`: why it goes to the dead-letter topic, the memory unchanged)."""


def _always(_partition: int) -> bool:
    return True


class MemoryHandler:
    """The memory writer's per-partition logic: dispatches, verdicts and propagations in; staged writes,
    propagations and dead letters out.

    No Kafka, no clock: a batch of one memory partition's records (dispatches, verdicts
    and propagations, offset order) is applied to a :class:`~streams.worker.tablestore.StagedPartition`,
    and :meth:`apply` returns what the runtime must do, as data
    (:class:`~streams.worker.tablestore.TableBatch`): the propagation records to produce, the dead
    letters, and where to read the verdicts again if one was deferred; the staged writes become the
    batch's changelog group (:func:`~streams.worker.tablestore.apply_batch` closes it). The table loop
    (:class:`streams.worker.tableloop.TableLoop`) and the topology test driver
    (:mod:`streams.testing.driver`) both run it.

    Args:
        engine: the memory engine (maintenance as configured).
        serde: the process's serde.
        metrics: where verdicts, propagations and dead letters are counted.
    """

    def __init__(self, engine: DBPMEngine, serde: Serde, metrics: DbpmMetrics) -> None:
        self._engine = engine
        self._serde = serde
        self._metrics = metrics
        self._fingerprint = engine.config.fingerprint().encode()
        self._key = partial(verdict_key, engine)
        """The key a verdict record must have (:func:`~streams.worker.keys.verdict_key`)."""
        self._sent = metrics.propagations.labels("sent")
        """The propagations sent, counted once per batch (every output of a batch is a propagation)."""
        self.dispatches_read: Callable[[int], bool] = _always
        """Whether this process has read a memory partition's dispatches to their end (set by the
        runtime; a verdict whose candidate is unknown until then is dead-lettered). The topology
        driver delivers every record in order, so there they always are."""
        self._applied: list[VerdictEvent] = []
        """The verdicts learnt in the batch being applied (counted once, at its end)."""
        self._propagated: collections.Counter[str] = collections.Counter()
        """The propagations received in the batch being applied, by outcome (``applied``, ``stopped``,
        ``duplicate``; counted once, at its end)."""
        self._read_to_end: set[int] = set()
        """The partitions whose dispatches :attr:`dispatches_read` said were read to their end during
        the batch being applied (asked at most once per partition and batch: module docstring)."""

    def apply(self, staged: StagedPartition, records: Sequence[SourceRecord]) -> TableBatch:
        """Apply one batch of a partition's dispatches, verdicts and propagations, staged in ``staged``.

        The batch's dispatches are recorded first (a verdict's candidate may be dispatched later in
        the same batch). A live verdict whose candidate is not dispatched while
        :attr:`dispatches_read` says the partition's dispatches are not read to their end is
        deferred: it and the verdicts after it are left out and the batch says to read them again
        (``reread``). A propagation applied before is skipped by its identity (:meth:`propagate`);
        re-delivered input the runtime skips before (:func:`~streams.worker.tablestore.apply_batch`).
        The partition records its watermark, the latest event time of a tick, pin or verdict applied,
        and, when it changed, the writer's configuration fingerprint
        (:data:`~streams.worker.keys.CONFIG_KEY`).
        """
        partition = staged.partition
        self._read_to_end.discard(partition)
        self._applied.clear()
        self._propagated.clear()
        watermark = decode_watermark(staged.get(WATERMARK_KEY))
        reread = None
        outputs: list[Output] = []
        dead_letters: list[Rejected] = []
        for record in records:
            if record.topic == DBPM_DISPATCHES and (failed := self.register(staged, record)) is not None:
                dead_letters.append(failed)
        for record in records:
            if record.topic == DBPM_PROPAGATIONS:
                if (failed := self.propagate(staged, record)) is not None:
                    dead_letters.append(failed)
                continue
            if record.topic != DBPM_VERDICTS or reread is not None:
                continue
            match self.learn(staged, record, partition):
                case Applied(at, propagations):
                    watermark = max(watermark, at)
                    outputs += [
                        self._propagation_output(propagation, partition, record.offset, index)
                        for index, propagation in enumerate(propagations)
                    ]
                case Deferred():
                    reread = record.offset
                case Rejected() as failed:
                    dead_letters.append(failed)
        self._metrics.verdicts_applied(self._applied)
        for outcome, count in self._propagated.items():
            self._metrics.propagations.labels(outcome).inc(count)
        if outputs:
            self._sent.inc(len(outputs))
        if staged.writes:
            staged.put(WATERMARK_KEY, encode_watermark(watermark))
            if staged.get(CONFIG_KEY) != self._fingerprint:
                staged.put(CONFIG_KEY, self._fingerprint)
        return TableBatch(outputs, dead_letters, None if reread is None else (DBPM_VERDICTS, reread))

    def register(self, writer: StagedPartition, record: SourceRecord) -> Rejected | None:
        """Record a ``clingate.dbpm.dispatches`` record's candidate as decided, or say why the record
        goes to the dead-letter topic.

        The dispatch is timed by its record's timestamp, when the gate sent it (the candidate's own
        event time if the record has none): the horizon bounds how long a verifier may take, and a
        backfill of old candidates decided among live ones must not expire on arrival.
        """
        decoded = decode_dispatch(self._serde, record)
        if isinstance(decoded, Rejected):
            return decoded
        candidate_id, at = decoded
        sent = record.timestamp_ms / 1000 if record.timestamp_ms else at
        with writer.atomic():
            self._engine.dispatch(writer, candidate_id, sent)
        return None

    def _propagation_output(
        self, propagation: Propagation, partition: int, offset: int, index: int
    ) -> Output:
        """The record of one propagation, keyed by its target."""
        datum = propagation_datum(propagation, partition, offset, index)
        value = self._serde.write_datum(datum, PropagationRecord, topic=DBPM_PROPAGATIONS)
        return Output(DBPM_PROPAGATIONS, propagation_key(propagation), value)

    def propagate(self, writer: StagedPartition, record: SourceRecord) -> Rejected | None:
        """One ``clingate.dbpm.propagations`` record applied to ``writer``, or why it goes to the
        dead-letter topic (the memory unchanged by it).

        Applied unless its identity was applied before. Each origin partition's events reach a target
        partition in the order of their identity ``(origin offset, index)`` (one producer per origin
        partition, one in-flight batch per partition), and a copy re-sent after an origin crash
        repeats identities already seen with the same content (an event depends on its verdict and
        the configuration only); so the last identity applied per origin partition is the whole
        deduplication state. After a rebalance the old and the new owner of an origin partition may
        both have sent a range: each sends it contiguously and in order, so every identity is applied
        once, by whichever copy is first.
        """
        try:
            decoded = decode_propagation(self._serde, record)
            if isinstance(decoded, Rejected):
                return decoded
            mark = applied_from_key(decoded.origin_partition)
            identity = _ORIGIN.pack(decoded.origin_offset, decoded.origin_index)
            last = writer.get(mark)
            if last is not None and _ORIGIN.unpack(last) >= _ORIGIN.unpack(identity):
                self._propagated["duplicate"] += 1
                return None
            with writer.atomic():
                _, applied = self._engine.propagate(writer, decoded.event)
        except Exception as exc:  # a poison record must not stop the partition: DLQ, memory unchanged
            return processing_failed(record, exc, PropagationRecord.avro_name)
        writer.put(mark, identity)
        self._propagated["applied" if applied else "stopped"] += 1
        return None

    def learn(self, writer: StagedPartition, record: SourceRecord, partition: int) -> Learnt:
        """One ``clingate.dbpm.verdicts`` record applied to ``writer``: :class:`Applied` for a watermark
        tick (the memory's clock moved to its event time, :meth:`processors.dbpm.DBPMEngine.advance`),
        an operator's pin (recorded, :meth:`processors.dbpm.DBPMEngine.pin`) or a verdict (learnt, with
        its propagations), :class:`Deferred` if the verdict must wait for its candidate's dispatch
        (nothing applied), or why the record goes to the dead-letter topic.

        Every failure is a value (the memory unchanged by the record): a bad tick header, a record
        that does not decode or whose key is not the :func:`~streams.worker.keys.verdict_key` of its
        verdict (it would be learnt by a partition that does not own its signature), a verdict under
        the Filter's id that is not the Filter's
        (:func:`processors.dbpm.ontology.misfiled_filter_verdict`), a live verdict of a candidate no
        gate decided (:meth:`unknown_candidate`), or an engine error.
        """
        if any(name == TICK_HEADER for name, _ in record.headers):
            tick = record.header(TICK_HEADER)
            try:
                at = parse_time(tick.decode())  # type: ignore[union-attr]
            except (ValueError, AttributeError) as exc:  # BadEvent, UnicodeDecodeError; a null header
                reason = f"{TICK_HEADER} header {tick!r} is not an ISO 8601 time with a zone: {exc}"
                return Rejected(record, Stage.DECODE, "BadWatermark", reason, None, Verdict.avro_name)
            with writer.atomic():
                self._engine.advance(writer, at)
            if run := record.header(TICK_RUN_HEADER):
                writer.put(TICK_RUN_KEY, run)
            return Applied(at)
        try:
            verdict = decode_verdict(self._serde, record, self._key)
            if isinstance(verdict, Rejected):
                return verdict
            if isinstance(verdict, PinEvent):
                with writer.atomic():
                    self._engine.pin(writer, verdict)
                log.info("memory: %s %s|%s pinned by %s (%s): %s", verdict.action, verdict.task,
                         verdict.signature, verdict.operator, verdict.pin_id, verdict.reason)  # fmt: skip
                return Applied(verdict.time)
            if (reason := misfiled_filter_verdict(verdict)) is not None:
                return Rejected(
                    record, Stage.VALIDATE, "MisfiledFilterVerdict", reason, None, Verdict.avro_name
                )
            unknown = self.unknown_candidate(writer, record, verdict)
            if unknown is None:
                with writer.atomic():
                    _, propagations = self._engine.learn(writer, verdict, verdict.time)
        except Exception as exc:  # a poison record must not stop the partition: DLQ, memory unchanged
            return processing_failed(record, exc, Verdict.avro_name)
        if unknown is not None:  # asked outside the guard: a broker that cannot answer is no poison
            if partition not in self._read_to_end:
                if not self.dispatches_read(partition):
                    self._metrics.verdicts_deferred.labels(verdict.task).inc()
                    return Deferred()
                self._read_to_end.add(partition)
            return Rejected(record, Stage.VALIDATE, "UnknownCandidate", unknown, None, Verdict.avro_name)
        if propagations is None:
            self._metrics.verdicts_duplicate.labels(verdict.task).inc()
            return Applied(verdict.time)
        self._applied.append(verdict)
        return Applied(verdict.time, propagations)

    def unknown_candidate(
        self, writer: StagedPartition, record: SourceRecord, verdict: VerdictEvent
    ) -> str | None:
        """Why ``verdict`` names a candidate no gate decided, or None.

        Checked for a live verdict that names its candidate: one of the Ontology-Violation Filter's
        names the candidate it judges (``<candidate_id>:ontology``); a verdict without a candidate id
        and one a replay published (:data:`~streams.worker.keys.REPLAYED_HEADER`) are applied as given,
        as the replay contract says.
        """
        candidate_id = verdict.candidate_id
        if candidate_id is None or any(name == REPLAYED_HEADER for name, _ in record.headers):
            return None
        judged = candidate_id.removesuffix(FILTER_ID_SUFFIX)
        if self._engine.knows(writer, judged):
            return None
        days = self._engine.config.verdict_dedupe_horizon_s / _DAY_S
        return (
            f"verdict of candidate {judged!r}, which no gate decided in the last {days:g} days: no "
            f"{DBPM_DISPATCHES} record of it reached this memory partition; a verdict must judge "
            f"a candidate the gate decided (its memory would otherwise learn from outside the pipeline)"
        )

    def dead_lettered(self, failed: Rejected) -> None:
        """Log and count a dead letter the runtime routes."""
        log_dead_letter(log, failed)
        self._metrics.dead_letters.labels(failed.record.topic).inc()


def build_memory(
    settings: Settings, bootstrap: str, metrics: DbpmMetrics, loops: LoopMetrics, engine: DBPMEngine
) -> TableLoop:
    """The memory writer of a worker (stores and transactional id under ``<worker datadir>/memory``);
    ``engine`` is the worker's (:func:`~streams.worker.engine.dbpm_engine`), ``loops`` the process's
    loop metrics."""
    serde = make_serde(settings.schema_registry_url)
    handler = MemoryHandler(engine, serde, metrics)
    loop = build_table_loop(
        settings, bootstrap, memory_group(settings.app_id), MEMORY_INPUTS, memory_changelog(settings.app_id),
        handler, serde, "memory", loops,
    )  # fmt: skip
    handler.dispatches_read = partial(loop.read_to_end, DBPM_DISPATCHES)
    return loop
