"""The DBPM engine on Kafka: the memory agent's handler (wiring only, no DBPM logic) and what the gate shares.

The memory agent calls :class:`processors.dbpm.DBPMEngine` unchanged. Its per-partition logic is
:class:`MemoryHandler`, which decodes records, reads the partition's state, calls the engine and
returns the propagation records, dead letters and changelog group as data; the transactional table
loop (:mod:`streams.worker.tableloop`, wired in :mod:`streams.worker.memory`) batches, produces and
commits them. The gate (:mod:`streams.worker.gate`) uses this module's decoding, view and barrier
records. The design and the findings behind it are in ``docs/table-runtime.md``.

Hot paths build no model per record: a verdict, candidate, dispatch or propagation is turned into the
engine's type straight from its Avro datum wherever that gives what the model's path gives
(:func:`decode_datum`), and dispatches and propagations are written from datums
(:meth:`schemas.serde.Serde.write_datum`). Models stay where people and files give records (the CLI,
the console, JSON inputs) and for the records whose datums need a model's checks.

Topology::

    clingate.dbpm.verdicts     (key task|signature) --+
    clingate.dbpm.propagations (key task|signature   |--> memory agent (group <app>-memory, one writer
                                of the target)  <-----+    | per signature)
    clingate.dbpm.dispatches   (key task|signature   |    | learns a verdict of a decided candidate,
                                a verdict may update) -+    | sends its cross-task evidence keyed by
                                         ^                 | the target signature; applies evidence
                                         |                 | for its own signatures; one transaction
                                         |                 v per batch: outputs, changelog group
                                         |    <app>-dbpm-memory-changelog (compacted, N partitions)
                                         |                 | every gate process follows every partition
                                         |                 v (streams.worker.gate.MemoryFollower)
    clingate.dbpm.candidates (key patient id)   --> gate loop (group <app>-gate) reads the replicated view
                                                          |--> clingate.dbpm.dispatches (first, acked)
                                                          |--> clingate.dbpm.decisions (every decision)
                                                          '--> clingate.dbpm.to-verify (ALLOW, DOWNGRADE)

Consistency model.

* Ordered: the verdicts of one ``(task, signature)`` (one key, one partition, one writer: the memory
  agent owning that partition, ``concurrency=1``); the records a memory partition writes (one
  changelog partition, applied by readers in order, whole groups at a time:
  :mod:`streams.worker.tablestore`); the candidates of one patient (one key, one partition, one member of
  the gate group, decided in offset order); the propagation events one memory partition sends to
  another (one producer, their identities ``(origin offset, index)`` increase).
* One writer per signature, cross-task propagation included: the engine returns RE/QA -> NER
  evidence as events (:meth:`processors.dbpm.DBPMEngine.learn`); the agent sends them to
  ``clingate.dbpm.propagations`` keyed by the *target* ``task|signature`` (murmur2, the verdicts'
  partition count), so the partition owning the target applies them
  (:meth:`~processors.dbpm.DBPMEngine.propagate`) and evaluates the guards that read the target
  (whitelist, cap, severity zone) on its own state when the event arrives.
* Ordered by the barrier, for candidates that ask for it (header ``clingate-barrier``; the replay
  publisher sets it): before each run of candidates the publisher writes a tick to every memory
  partition, after every verdict before the run, naming the run (:func:`run_token`; a tick also
  moves the partition's clock, running the maintenance due by then), and each partition records the
  last run it applied. Such a gate waits until every partition, as its gate process's view has
  applied it from the changelog, applied its run's tick (:func:`barrier_reached`), so it sees every
  verdict published before it, those of its own event-time second included; after
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
* Crash (SIGKILL) at any point: a batch's propagations, dead letters, changelog group and input
  offsets commit in one Kafka transaction (:mod:`streams.worker.tableloop`), and the local store is
  written only after the commit; so a crash either loses the whole batch (it is applied again from
  the committed offsets, on the state the changelog holds) or none of it, and ``read_committed``
  readers (the gates' view, the target partitions of propagations) never see a batch twice. The
  input offsets each group records (:func:`streams.worker.tablestore.apply_batch`) and the
  propagation identities below skip what a crashed writer's successor reads again. The gate
  commits a batch's outputs with its progress in one transaction (:mod:`streams.worker.gate`): a
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
  each memory partition a verdict of that candidate can update (:func:`dispatch_keys`: the
  candidate's signature, and for QA also the class pattern of each error class), in the
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
  (:data:`REPLAYED_HEADER`) are applied as given (replay contract).

Keys. A verdict's key is ``task|signature`` of the record it updates (:func:`verdict_key`); every
producer of ``clingate.dbpm.verdicts`` MUST use it and Java's murmur2 partitioner (librdkafka:
``partitioner=murmur2_random``) so that the memory partition of a signature is the verdict
partition of that signature. A propagation's key is ``task|signature`` of its target
(:func:`propagation_key`), sent by the memory agent with murmur2 too (every clingate producer:
:func:`~streams.runtime.kafka_clients.producer_config`). A new consumer group of memory writers MUST
start both memory inputs (:data:`MEMORY_INPUTS`) at the same place, e.g. at their ends on a shared
broker: evidence from another application's verdicts would otherwise be applied (workers with cross-task
OFF apply no evidence at all).
"""

from __future__ import annotations

import logging
import math
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from heapq import merge
from typing import Any, TypeVar

from processors.dbpm import (
    DBPMConfig,
    DBPMEngine,
    GateEvent,
    PinEvent,
    Propagation,
    VerdictEvent,
    load_ontology,
    parse_event,
    parse_time,
)
from processors.dbpm.config import OPERATOR_PIN, PIN_LABELS, QA, SUCCESS
from processors.dbpm.events import check_task
from processors.dbpm.ontology import FILTER_ID_SUFFIX, misfiled_filter_verdict
from processors.dbpm.partitioned import merge_values
from processors.dbpm.signatures import signature, signature_payload
from processors.dbpm.update import effective_verdict
from schemas.base import AvroModel, iso_utc
from schemas.common import Stage
from schemas.dbpm import (
    PAYLOAD_BY_TASK,
    Candidate,
    Dispatch,
    Pin,
    PinAction,
    QaErrorClass,
    Verdict,
    VerdictLabel,
)
from schemas.dbpm import Propagation as PropagationRecord
from schemas.serde import SchemaDecodeError, Serde
from state.base import Store, Transaction
from streams.runtime.core import Output
from streams.runtime.dlq import DecodeFailed, SourceRecord, decode_record, processing_failed
from streams.runtime.logs import log_dead_letter
from streams.runtime.metrics import DbpmMetrics
from streams.runtime.settings import Settings
from streams.worker.tablestore import StagedPartition, TableBatch, table_changelog
from topics.catalog import DBPM_DISPATCHES, DBPM_PROPAGATIONS, DBPM_VERDICTS

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Per-partition memory record: the event time up to which the partition has applied verdicts.
WATERMARK_KEY = b"\xfe\xfewatermark"
#: Per-partition memory record: the fingerprint of the configuration of the writer of its last group
#: (:meth:`processors.dbpm.DBPMConfig.fingerprint`), which the gates compare with their own.
CONFIG_KEY = b"\xfe\xfeconfig"
#: Header of a watermark tick on ``clingate.dbpm.verdicts`` (value: ISO event time, record value empty).
TICK_HEADER = "clingate-watermark"
#: Header of a watermark tick naming the replay run it precedes (value: :func:`run_token`).
TICK_RUN_HEADER = "clingate-watermark-run"
#: Per-partition memory record: the :data:`TICK_RUN_HEADER` of the last tick the partition applied.
TICK_RUN_KEY = b"\xfe\xfetick-run"
#: Name of the memory table (its changelog topic is :func:`memory_changelog`).
MEMORY_TABLE = "dbpm-memory"


def memory_changelog(app_id: str) -> str:
    """The memory table's changelog topic of the workers of ``app_id``."""
    return table_changelog(app_id, MEMORY_TABLE)


#: Header of a candidate that asks its gate to wait for the memory (value: the :func:`run_token` of the
#: replay run it belongs to; any other value: wait until the memory reached the candidate's event time).
BARRIER_HEADER = "clingate-barrier"


_RUN_DIGITS = 12


def run_token(replay: str, run: int) -> bytes:
    """The token of run ``run`` of replay ``replay`` (no ``:`` in it): tokens of one replay sort as
    their runs do."""
    return f"{replay}:{run:0{_RUN_DIGITS}d}".encode()


def barrier_reached(partitions: Sequence[Store], ts: float, run: bytes) -> bool:
    """Whether a candidate at event time ``ts`` with barrier value ``run`` may be decided on
    ``partitions`` (every memory partition of a view).

    With a run token, every partition must have applied the tick of that run of its replay or a
    later one: the replay publishes a run's ticks after every verdict that precedes the run, so
    each partition has then applied exactly those verdicts, ties within one event-time second
    included (a watermark reached by an earlier verdict of the same second says nothing of the
    verdicts after it). With any other value (none, or not a token), every partition's watermark must
    have reached ``ts``.
    """
    replay, colon, number = run.rpartition(b":")
    if not (colon and len(number) == _RUN_DIGITS and number.isdigit()):
        return min_watermark(partitions) >= ts
    replay += colon
    for store in partitions:
        applied = store.get(TICK_RUN_KEY)
        if applied is None or not applied.startswith(replay) or applied < run:
            return False
    return True


_TIME = struct.Struct("<d")
_DAY_S = 86400.0

#: Header of a verdict that ``clingate replay --via-kafka`` published: a replay stream's verdicts are
#: applied as given (replay contract), so its candidate is not looked up among the dispatches.
REPLAYED_HEADER = "clingate-replayed"

#: The topics the memory agent consumes, co-partitioned: partition p of each feeds memory partition p.
MEMORY_INPUTS = (DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES)
#: Per-partition memory records (suffix: origin partition, 2 bytes big-endian): the identity
#: ``(origin offset, index)`` of the last propagation applied from that origin partition.
APPLIED_FROM_PREFIX = b"\xfe\xfepropagated-from\x00"
_ORIGIN_PARTITION = struct.Struct(">H")
_ORIGIN = struct.Struct("<qI")


def memory_key(task: str, sig: str) -> bytes:
    """The record key of everything a memory partition reads about one record: ``task|signature``
    (verdicts, propagations and dispatches of it share the key, so murmur2 sends them to one partition)."""
    return f"{task}|{sig}".encode()


def verdict_key(engine: DBPMEngine, event: VerdictEvent | PinEvent) -> bytes:
    """The record key of a verdict: ``task|signature`` of the memory record the verdict updates (a
    pin's: of the signature it pins).

    Mirrors :func:`processors.dbpm.update.apply_verdict`'s choice of signature: a failing QA
    verdict with an error class updates the class pattern, everything else the payload's signature.
    """
    if isinstance(event, PinEvent):
        return memory_key(event.task, event.signature)
    verdict = effective_verdict(engine.config, event.task, event.verdict)
    error_class = event.payload.get("error_class") if event.task == QA and verdict != SUCCESS else None
    return memory_key(event.task, signature(event.task, event.payload, error_class))  # type: ignore[arg-type]


def dispatch_keys(event: GateEvent) -> list[bytes]:
    """The keys of every verdict of a candidate the memory could learn, one per memory record it may
    update (:func:`verdict_key`): the candidate's signature, and for a QA candidate also the class
    pattern of each error class a failing verdict may carry."""
    keys = [memory_key(event.task, signature(event.task, event.payload))]
    if event.task == QA:
        keys += [memory_key(QA, signature(QA, event.payload, str(cls))) for cls in QaErrorClass]
    return list(dict.fromkeys(keys))


def dispatch_datum(event: GateEvent) -> dict[str, Any]:
    """The ``clingate.dbpm.dispatches`` datum of a decided candidate (``event.ts`` in its wire form, as
    every candidate decoded from a record has it: the datum is then the :class:`~schemas.dbpm.Dispatch`
    model's)."""
    return {
        "ts": event.ts,
        "task": event.task,
        "patient_id": event.patient_id,
        "candidate_id": event.candidate_id,
    }


def dispatch_outputs(serde: Serde, event: GateEvent) -> tuple[Output, ...]:
    """The ``clingate.dbpm.dispatches`` records of a decided candidate, one per :func:`dispatch_keys`."""
    value = serde.write_datum(dispatch_datum(event), Dispatch, topic=DBPM_DISPATCHES)
    return tuple(Output(DBPM_DISPATCHES, key, value) for key in dispatch_keys(event))


Dispatched = tuple[str, float]
"""A decoded ``clingate.dbpm.dispatches`` record: its candidate id and event time."""


def dispatched(datum: dict[str, Any]) -> Dispatched | None:
    """A dispatch datum (:meth:`schemas.serde.Serde.read_datum`) as :func:`decode_dispatch` gives it,
    without the model, or None where the model's check of the event time is needed
    (:func:`wire_time`)."""
    at = wire_time(datum["ts"])
    return None if at is None else (datum["candidate_id"], at)


def decode_dispatch(serde: Serde, record: SourceRecord) -> Dispatched | DecodeFailed:
    """A ``clingate.dbpm.dispatches`` record's candidate id and event time, or why it goes to the
    dead-letter topic (:func:`decode_datum`: from its datum where :func:`dispatched` takes it)."""

    def model() -> Dispatched | DecodeFailed:
        decoded = decode_record(serde, record, Dispatch)
        if isinstance(decoded, DecodeFailed):
            return decoded
        dispatch: Dispatch = decoded.value  # type: ignore[assignment]
        return dispatch.candidate_id, dispatch.ts.timestamp()

    return decode_datum(serde, record, Dispatch, dispatched, model)


def propagation_key(propagation: Propagation) -> bytes:
    """The record key of a propagation: ``task|signature`` of its *target*, as a verdict of that record.

    With the verdicts' partition count and murmur2, the target's memory partition consumes it.
    """
    return memory_key(propagation.task, propagation.signature)


def propagation_datum(
    propagation: Propagation, origin_partition: int, origin_offset: int, index: int
) -> dict[str, Any]:
    """The wire form of a propagation produced by the verdict at ``origin_offset`` of ``origin_partition``:
    the ``clingate.dbpm.propagations`` datum the memory writes, its event time in the form the model
    writes (:func:`schemas.base.iso_utc`, which reads back to the same instant in every year).

    Args:
        propagation: the engine's event.
        origin_partition: the memory (verdict) partition that applied the origin verdict.
        origin_offset: the origin verdict's offset in that partition.
        index: the event's position among the verdict's propagations.
    """
    return {
        "ts": iso_utc(datetime.fromtimestamp(propagation.time, UTC)),
        "task": propagation.task,
        "signature": propagation.signature,
        "weight": propagation.weight,
        "source": propagation.source,
        "origin_task": propagation.origin_task,
        "origin_signature": propagation.origin_signature,
        "patient_id": propagation.patient_id,
        "origin_partition": origin_partition,
        "origin_offset": origin_offset,
        "origin_index": index,
    }


def propagation_event(record: PropagationRecord) -> Propagation:
    """The engine's event of a decoded propagation record (inverse of :func:`propagation_datum`)."""
    return Propagation(
        record.task,
        record.signature,
        record.weight,
        record.source,
        record.ts.timestamp(),
        record.origin_task,
        record.origin_signature,
        record.patient_id,
    )


@dataclass(frozen=True, slots=True)
class Evidence:
    """A decoded ``clingate.dbpm.propagations`` record: the engine's event and the record's identity
    (:meth:`MemoryHandler.propagate` applies each identity once)."""

    event: Propagation
    origin_partition: int
    origin_offset: int
    origin_index: int


def evidence(datum: dict[str, Any]) -> Evidence | None:
    """A propagation datum (:meth:`schemas.serde.Serde.read_datum`) as :func:`decode_propagation` gives
    it, without the model, or None where the model's checks are needed: an event time not in wire form
    (:func:`wire_time`) or a negative origin (Avro's ``int`` and ``long`` hold the models' upper bounds
    already)."""
    at = wire_time(datum["ts"])
    if at is None or min(datum["origin_partition"], datum["origin_offset"], datum["origin_index"]) < 0:
        return None
    return Evidence(
        Propagation(
            datum["task"], datum["signature"], datum["weight"], datum["source"], at, datum["origin_task"],
            datum["origin_signature"], datum["patient_id"],
        ),
        datum["origin_partition"], datum["origin_offset"], datum["origin_index"],
    )  # fmt: skip


def decode_propagation(serde: Serde, record: SourceRecord) -> Evidence | DecodeFailed:
    """A ``clingate.dbpm.propagations`` record's evidence, or why it goes to the dead-letter topic: one
    whose key is not its target's (:func:`propagation_key`) included (:func:`decode_datum`: from its
    datum where :func:`evidence` takes it)."""

    def fast(datum: dict[str, Any]) -> Evidence | None:
        found = evidence(datum)
        return found if found is not None and record.key == propagation_key(found.event) else None

    def model() -> Evidence | DecodeFailed:
        decoded = decode_event(serde, record, PropagationRecord, propagation_key)
        if isinstance(decoded, DecodeFailed):
            return decoded
        found, event = decoded
        return Evidence(event, found.origin_partition, found.origin_offset, found.origin_index)

    return decode_datum(serde, record, PropagationRecord, fast, model)


def pin_record(
    task: str, sig: str, action: PinAction, operator: str, reason: str, pin_id: str, ts: datetime
) -> Verdict:
    """The ``clingate.dbpm.verdicts`` record of an operator's pin of ``sig`` (or its removal) at ``ts``:
    source ``operator_pin``, a payload whose signature is ``sig``, the action's verdict label and no
    patient (``-``) (:mod:`processors.dbpm.pins`). Key it with :func:`verdict_key` like any verdict.

    Raises:
        ValueError: ``sig`` names no signature of ``task``, or ``reason`` is blank.
    """
    return Verdict(
        ts=ts, task=task, verdict=VerdictLabel(PIN_LABELS[action.value]), source=OPERATOR_PIN,  # type: ignore[arg-type]
        patient_id="-", payload=PAYLOAD_BY_TASK[task].model_validate(signature_payload(task, sig)),  # type: ignore[arg-type]
        pin=Pin(action=action, operator=operator, reason=reason, pin_id=pin_id),
    )  # fmt: skip


def dbpm_config(settings: Settings) -> DBPMConfig:
    """The engine configuration the ``CLINGATE_DBPM_*`` settings describe: the paper's deployed values
    (:class:`~processors.dbpm.DBPMConfig` defaults) with the flags, the QA signal source and fail-rate
    threshold, the maintenance grid and the retentions set.
    NER coverage off is an empty Eq. 9 bucket table: the QA gate then has no bucket to look up for any
    category and decides each by its fallback, which is what M1V7_ENABLE=0 leaves."""
    config = DBPMConfig(
        qa_fail_rate_threshold=settings.dbpm_qa_fail_threshold,
        qa_signal=settings.dbpm_qa_signal,
        maintenance_interval_s=settings.dbpm_maintenance_interval_s,
        whitelist_retention_s=settings.dbpm_whitelist_retention_days * _DAY_S,
        preempt_retention_s=settings.dbpm_preempt_retention_days * _DAY_S,
        patient_retention_s=settings.dbpm_patient_retention_days * _DAY_S,
    )
    if not settings.dbpm_ner_coverage:
        config = replace(config, qa_ner_buckets={})
    return config.with_flags(
        cross_task=settings.dbpm_cross_task,
        maintenance=settings.dbpm_maintenance,
        three_tier=settings.dbpm_three_tier,
        uncertainty=settings.dbpm_uncertainty,
        source_weights=settings.dbpm_source_weights,
        qa_hard_block=settings.dbpm_qa_hard_block,
        downgrade_first=settings.dbpm_downgrade_first,
        disabled=settings.dbpm_disable,
        ontology_filter=settings.dbpm_ontology_filter != "off",
        ontology_tag_only=settings.dbpm_ontology_filter == "tag-only",
    )


def dbpm_engine(settings: Settings) -> DBPMEngine:
    """The engine of every role of a worker configured by ``settings``: the memory's writers learn and
    maintain with it, the gates decide with it (:meth:`~processors.dbpm.DBPMEngine.decide`, which reads
    only). Its caps are shared out over the memory's partitions (``cap_partitions``), so the whole
    memory keeps the paper's caps. The one place a worker's engine is built."""
    config = replace(dbpm_config(settings), cap_partitions=settings.topic_partitions)
    return DBPMEngine(config, load_ontology())


def in_process_engine(settings: Settings) -> DBPMEngine:
    """The engine configured by ``settings`` over one whole memory (``clingate replay``, the demo's
    reference): a worker's (:func:`dbpm_engine`) but for the caps, which are whole, not shared out."""
    return DBPMEngine(dbpm_config(settings), load_ontology())


def contract_event(model: Candidate | Verdict) -> GateEvent | VerdictEvent | PinEvent:
    """The engine's event for a decoded topic record (the replay contract's JSON object).

    A verdict is converted field by field: its model already holds what :func:`processors.dbpm.parse_event`
    checks but the task (strings, a known verdict, the payload of its task), and it is the memory
    agent's per-record path, where a JSON round trip is the largest cost of the conversion. The event
    is the one ``parse_event`` makes of the model's JSON. An operator's pin (source ``operator_pin``,
    rare) goes through ``parse_event``, which checks it.

    Raises:
        processors.dbpm.BadEvent: the record is valid Avro but not a valid DBPM event.
    """
    if isinstance(model, Verdict) and model.pin is None and model.source != OPERATOR_PIN:
        check_task(model.task)
        return VerdictEvent(
            iso_utc(model.ts), model.ts.timestamp(), model.task, model.verdict.value, model.source,
            model.patient_id, model.payload.model_dump(mode="json", exclude_none=True), model.candidate_id,
        )  # fmt: skip
    obj = model.model_dump(mode="json", exclude_none=True)
    obj["kind"] = "verdict" if isinstance(model, Verdict) else "gate"
    return parse_event(obj)


class MergedView(Store):
    """Read-only view of a partitioned memory as one memory (the gates' replicated view).

    Args:
        partitions: returns the partition stores to merge (called on every read, so partitions
            assigned later are seen).
    """

    def __init__(self, partitions: Callable[[], Sequence[Store]]) -> None:
        self._partitions = partitions

    def get(self, key: bytes) -> bytes | None:
        """``key``'s value across partitions (:func:`processors.dbpm.partitioned.merge_values`)."""
        values = [v for v in (db.get(key) for db in self._partitions()) if v is not None]
        return merge_values(key, values) if values else None

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Merged pairs in ``[start, end)``, ascending, one per key."""
        streams = [db.iter_range(start, end) for db in self._partitions()]
        group: list[bytes] = []
        current: bytes | None = None
        for key, value in merge(*streams, key=lambda kv: kv[0]):
            if key != current:
                if current is not None:
                    yield current, merge_values(current, group)
                current, group = key, []
            group.append(value)
        if current is not None:
            yield current, merge_values(current, group)

    def _apply(self, writes: dict[bytes, object]) -> None:
        # A gate's only writes are bookkeeping (the engine's as-of time); the view is never written.
        return


def decode_watermark(raw: bytes | None) -> float:
    """The event time of a partition's :data:`WATERMARK_KEY` record (``-inf``: none yet)."""
    return float("-inf") if raw is None else _TIME.unpack(raw)[0]


def min_watermark(partitions: Sequence[Store]) -> float:
    """The event time every memory partition has applied (``-inf`` if one has none): the barrier's level."""
    return min(decode_watermark(store.get(WATERMARK_KEY)) for store in partitions)


_CANONICAL_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(?!000000)\d{6})?Z")
"""An event time as :func:`schemas.base.iso_utc` writes it (microseconds only when non-zero)."""

_PAYLOAD_BRANCHES: dict[str, tuple[str, tuple[str, ...]]] = {
    task: (model.avro_name, tuple(model.model_fields)) for task, model in PAYLOAD_BY_TASK.items()
}
"""The full name and record fields of each gated task's payload branch."""

_PAYLOAD_FIELDS: dict[str, frozenset[str]] = {
    task: frozenset(fields) for task, (_, fields) in _PAYLOAD_BRANCHES.items()
}
"""The record fields of each gated task's payload (the union's branches have distinct field sets, so
they tell which branch a datum took)."""


def wire_time(ts: str) -> float | None:
    """The event time of ``ts`` when it is in the form :func:`schemas.base.iso_utc` writes and names an
    instant that exists, else None.

    The models parse such a time and write it back unchanged, so a datum holding it gives the model's
    event; a time in any other form is for the model to normalise or reject.
    """
    if not _CANONICAL_TS.fullmatch(ts):
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:  # a day or an hour that does not exist: the model says so
        return None


def decode_datum(
    serde: Serde,
    record: SourceRecord,
    expected: type[AvroModel],
    fast: Callable[[Any], T | None],
    model: Callable[[], T | DecodeFailed],
) -> T | DecodeFailed:
    """A consumed record in a hot path's own type, without a model per record where that is exact.

    ``fast`` turns the record's Avro datum (:meth:`schemas.serde.Serde.read_datum`) into the value, or
    says None where it cannot decide (a check only the model makes, a key to compare with the model's);
    ``model`` is the model's path, which accepts or dead-letters the record. Bytes that do not read, and
    every datum ``fast`` declines, take the model's path, so a record is accepted or dead-lettered, with
    the same stage, error and reason, as the model's path alone would; ``fast`` MUST give the value
    that path gives wherever it gives one (the fast paths' property test checks each on generated
    records of every writer schema).
    """
    if record.value is not None:
        try:
            datum = serde.read_datum(record.value, expected, topic=record.topic)
        except SchemaDecodeError:  # the model's path says why
            datum = None
        if datum is not None and (value := fast(datum)) is not None:
            return value
    return model()


def verdict_event(datum: dict[str, Any]) -> VerdictEvent | None:
    """The engine's event of a current-schema verdict datum (:meth:`schemas.serde.Serde.read_datum`),
    built without the :class:`~schemas.dbpm.Verdict` model, or None where the model's checks are
    needed: a pin, a task outside the contract's, a payload branch other than the task's, a confidence
    outside [0, 1], a non-finite difficulty or an event time not in wire form (:func:`wire_time`).

    Where it returns an event, it is :func:`contract_event` of the model the datum validates into;
    where it returns None, the caller takes the model's path, which accepts or dead-letters the record
    with its own reason.
    """
    task, payload, confidence = datum["task"], datum["payload"], datum["confidence"]
    if (
        datum["pin"] is not None
        or datum["source"] == OPERATOR_PIN
        or _PAYLOAD_FIELDS.get(task) != payload.keys()
        or (confidence is not None and not 0.0 <= confidence <= 1.0)
    ):
        return None
    difficulty = payload.get("difficulty")
    if difficulty is not None and not math.isfinite(difficulty):
        return None
    at = wire_time(datum["ts"])
    if at is None:
        return None
    return VerdictEvent(
        datum["ts"], at, task, datum["verdict"], datum["source"], datum["patient_id"],
        {k: v for k, v in payload.items() if v is not None}, datum["candidate_id"],
    )  # fmt: skip


def decode_verdict(
    serde: Serde, record: SourceRecord, key: Callable[[Any], bytes]
) -> VerdictEvent | PinEvent | DecodeFailed:
    """The memory agent's per-record decode: :func:`decode_event`'s result for a verdict record, taken
    straight from its Avro datum (:func:`verdict_event`) where it can be (:func:`decode_datum`).

    A record the fast path does not take (a pin, bytes that fail, a key that is not ``key(event)``)
    goes through :func:`decode_event`, so it is accepted or dead-lettered exactly as there.
    """

    def fast(datum: dict[str, Any]) -> VerdictEvent | None:
        event = verdict_event(datum)
        return event if event is not None and record.key == key(event) else None

    def model() -> VerdictEvent | PinEvent | DecodeFailed:
        decoded = decode_event(serde, record, Verdict, key)
        return decoded if isinstance(decoded, DecodeFailed) else decoded[1]

    return decode_datum(serde, record, Verdict, fast, model)


@dataclass(frozen=True, slots=True)
class CandidateRecord:
    """A decoded ``clingate.dbpm.candidates`` record as the gate decides it and writes it into its
    decision (:func:`candidate_datum`), without the :class:`~schemas.dbpm.Candidate` model.

    Attributes:
        event: the engine's event; its ``ts`` is in wire form and its payload is the record's, fields
            that are null left out.
        document_ts: the event time of the narrative the candidate was extracted from, in wire form
            (None: from no narrative).
        document_time: ``document_ts`` in seconds since the epoch.
    """

    event: GateEvent
    document_ts: str | None = None
    document_time: float | None = None


def _narrated(event: GateEvent, document: datetime | None) -> CandidateRecord:
    if document is None:
        return CandidateRecord(event)
    return CandidateRecord(event, iso_utc(document), document.timestamp())


def candidate_of(model: Candidate) -> CandidateRecord:
    """The gate's record of a candidate model (where people and files give candidates).

    Raises:
        processors.dbpm.BadEvent: the model is not a valid DBPM candidate (:func:`contract_event`).
    """
    return _narrated(contract_event(model), model.document_ts)  # type: ignore[arg-type]


def candidate_record(datum: dict[str, Any]) -> CandidateRecord | None:
    """A current-schema candidate datum (:meth:`schemas.serde.Serde.read_datum`) as
    :func:`decode_candidate` gives it, without the model, or None where the model's checks are needed: a
    task outside the contract's, a payload branch other than the task's, a difficulty outside [0, 1]
    (which :func:`processors.dbpm.parse_event` refuses) or an event time not in wire form
    (:func:`wire_time`)."""
    task, payload = datum["task"], datum["payload"]
    if _PAYLOAD_FIELDS.get(task) != payload.keys():
        return None
    difficulty = payload.get("difficulty")
    if difficulty is not None and not 0.0 <= difficulty <= 1.0:  # NaN included
        return None
    at, document_ts = wire_time(datum["ts"]), datum["document_ts"]
    document_time = None if document_ts is None else wire_time(document_ts)
    if at is None or (document_ts is not None and document_time is None):
        return None
    event = GateEvent(
        datum["ts"], at, task, datum["patient_id"], datum["candidate_id"],
        {k: v for k, v in payload.items() if v is not None},
    )  # fmt: skip
    return CandidateRecord(event, document_ts, document_time)


def decode_candidate(serde: Serde, record: SourceRecord) -> CandidateRecord | DecodeFailed:
    """A ``clingate.dbpm.candidates`` record as the gate decides it, or why it goes to the dead-letter
    topic (:func:`decode_datum`: from its datum where :func:`candidate_record` takes it, else as
    :func:`decode_event` decodes it)."""

    def model() -> CandidateRecord | DecodeFailed:
        decoded = decode_event(serde, record, Candidate)
        if isinstance(decoded, DecodeFailed):
            return decoded
        candidate, event = decoded
        return _narrated(event, candidate.document_ts)

    return decode_datum(serde, record, Candidate, candidate_record, model)


def with_ner_categories(candidate: CandidateRecord, categories: Sequence[str]) -> CandidateRecord:
    """A QA candidate with the patient's accepted NER categories stamped on its payload, as the
    coverage join has it decided."""
    payload = {**candidate.event.payload, "ner_categories": list(categories)}
    return replace(candidate, event=replace(candidate.event, payload=payload))


def candidate_datum(candidate: CandidateRecord) -> dict[str, Any]:
    """The ``clingate.dbpm.Candidate`` datum of ``candidate``, in the form
    :meth:`schemas.serde.Serde.write_datum` takes: the :class:`~schemas.dbpm.Candidate` model's datum,
    field for field (the null payload fields the event leaves out written back as null)."""
    event = candidate.event
    name, fields = _PAYLOAD_BRANCHES[event.task]
    payload = event.payload
    return {
        "ts": event.ts,
        "task": event.task,
        "patient_id": event.patient_id,
        "candidate_id": event.candidate_id,
        "document_ts": candidate.document_ts,
        "payload": (name, {field: payload.get(field) for field in fields}),
    }


def decode_event(
    serde: Serde,
    record: SourceRecord,
    expected: type[Candidate] | type[Verdict] | type[PropagationRecord],
    key: Callable[[Any], bytes] | None = None,
) -> tuple[Any, Any] | DecodeFailed:
    """``(model, engine event)`` of a consumed DBPM record, or why it goes to the dead-letter topic.

    Valid Avro that is not a valid DBPM event (:class:`processors.dbpm.BadEvent`) fails at the
    ``validate`` stage, and so does a record whose key is not ``key(engine event)`` when ``key`` is
    given (the key decides the partition, hence the writer, of the state the record changes).
    """
    result = decode_record(serde, record, expected)
    if isinstance(result, DecodeFailed):
        return result
    try:
        model = result.value
        event = propagation_event(model) if isinstance(model, PropagationRecord) else contract_event(model)
    except Exception as exc:  # BadEvent (or anything else the conversion raises): not a DBPM event
        return DecodeFailed(record, Stage.VALIDATE, type(exc).__name__, str(exc), None, expected.avro_name)
    if key is not None and record.key != (wanted := key(event)):
        reason = f"record key {record.key!r} is not {wanted!r}, the key of its content"
        return DecodeFailed(record, Stage.VALIDATE, "KeyMismatch", reason, None, expected.avro_name)
    return model, event


def _always(_partition: int) -> bool:
    return True


class MemoryHandler:
    """The memory agent's per-partition logic: verdicts and propagations in, changelog group and outputs out.

    No Kafka, no clock: a batch of one memory partition's records (dispatches, verdicts
    and propagations, offset order) is applied to a :class:`~streams.worker.tablestore.StagedPartition`,
    and :meth:`apply` returns what the runtime must do, as data
    (:class:`~streams.worker.tablestore.TableBatch`): the propagation records to produce, the dead
    letters, and the changelog group closed by the last verdict offset it covers. The table loop
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
        self.dispatches_read: Callable[[int], bool] = _always
        """Whether this process has read a memory partition's dispatches to their end (set by the
        runtime; a verdict whose candidate is unknown until then is dead-lettered). The topology
        driver delivers every record in order, so there they always are."""
        self._applied: list[VerdictEvent] = []
        """The verdicts learnt in the batch being applied (counted once, at its end)."""
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
        The partition records its watermark, the latest verdict or tick event time applied, and, when
        it changed, the writer's configuration fingerprint (:data:`CONFIG_KEY`).
        """
        partition = staged.partition
        self._read_to_end.discard(partition)
        self._applied.clear()
        watermark = decode_watermark(staged.get(WATERMARK_KEY))
        reread = None
        outputs: list[Output] = []
        dead_letters: list[DecodeFailed] = []
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
            result = self.learn(staged, record, partition)
            if result is None:
                reread = record.offset
            elif isinstance(result, DecodeFailed):
                dead_letters.append(result)
            elif isinstance(result, float):
                watermark = max(watermark, result)
            else:
                verdict, propagations = result
                watermark = max(watermark, verdict.time)
                outputs += [
                    self._propagation_output(propagation, partition, record.offset, index)
                    for index, propagation in enumerate(propagations)
                ]
        self._metrics.verdicts_applied(self._applied)
        if staged.writes:
            staged.put(WATERMARK_KEY, _TIME.pack(watermark))
            if staged.get(CONFIG_KEY) != self._fingerprint:
                staged.put(CONFIG_KEY, self._fingerprint)
        return TableBatch(outputs, dead_letters, None if reread is None else (DBPM_VERDICTS, reread))

    def register(self, writer: StagedPartition, record: SourceRecord) -> DecodeFailed | None:
        """Record a ``clingate.dbpm.dispatches`` record's candidate as decided, or say why the record
        goes to the dead-letter topic.

        The dispatch is timed by its record's timestamp, when the gate sent it (the candidate's own
        event time if the record has none): the horizon bounds how long a verifier may take, and a
        backfill of old candidates decided among live ones must not expire on arrival.
        """
        decoded = decode_dispatch(self._serde, record)
        if isinstance(decoded, DecodeFailed):
            return decoded
        candidate_id, at = decoded
        sent = record.timestamp_ms / 1000 if record.timestamp_ms else at
        with Transaction(writer) as txn:
            self._engine.dispatch(txn, candidate_id, sent)
        return None

    def _propagation_output(
        self, propagation: Propagation, partition: int, offset: int, index: int
    ) -> Output:
        """The record of one propagation, keyed by its target."""
        datum = propagation_datum(propagation, partition, offset, index)
        value = self._serde.write_datum(datum, PropagationRecord, topic=DBPM_PROPAGATIONS)
        self._metrics.propagations.labels("sent").inc()
        return Output(DBPM_PROPAGATIONS, propagation_key(propagation), value)

    def propagate(self, writer: StagedPartition, record: SourceRecord) -> DecodeFailed | None:
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
            if isinstance(decoded, DecodeFailed):
                return decoded
            mark = APPLIED_FROM_PREFIX + _ORIGIN_PARTITION.pack(decoded.origin_partition)
            identity = _ORIGIN.pack(decoded.origin_offset, decoded.origin_index)
            last = writer.get(mark)
            if last is not None and _ORIGIN.unpack(last) >= _ORIGIN.unpack(identity):
                self._metrics.propagations.labels("duplicate").inc()
                return None
            with Transaction(writer) as txn:
                _, applied = self._engine.propagate(txn, decoded.event)
        except Exception as exc:  # a poison record must not stop the partition: DLQ, memory unchanged
            return processing_failed(record, exc, PropagationRecord.avro_name)
        writer.put(mark, identity)
        self._metrics.propagations.labels("applied" if applied else "stopped").inc()
        return None

    def learn(
        self, writer: StagedPartition, record: SourceRecord, partition: int
    ) -> DecodeFailed | float | tuple[VerdictEvent, list[Propagation]] | None:
        """One ``clingate.dbpm.verdicts`` record applied to ``writer``: a watermark tick's event time
        (the memory's clock moved to it, :meth:`processors.dbpm.DBPMEngine.advance`) or an operator's
        pin's (the pin recorded, :meth:`processors.dbpm.DBPMEngine.pin`), the verdict and
        its propagations, None if the verdict must wait for its candidate's dispatch (nothing
        applied), or why the record goes to the dead-letter topic.

        Every failure is a value (the memory unchanged by the record): a bad tick header, a record
        that does not decode or whose key is not the :func:`verdict_key` of its verdict (it would
        be learnt by a partition that does not own its signature), a verdict under the Filter's id
        that is not the Filter's (:func:`processors.dbpm.ontology.misfiled_filter_verdict`), a live
        verdict of a candidate no gate decided (:meth:`unknown_candidate`), or an engine error.
        """
        if any(name == TICK_HEADER for name, _ in record.headers):
            tick = record.header(TICK_HEADER)
            try:
                at = parse_time(tick.decode())  # type: ignore[union-attr]
            except (ValueError, AttributeError) as exc:  # BadEvent, UnicodeDecodeError; a null header
                reason = f"{TICK_HEADER} header {tick!r} is not an ISO 8601 time with a zone: {exc}"
                return DecodeFailed(record, Stage.DECODE, "BadWatermark", reason, None, Verdict.avro_name)
            with Transaction(writer) as txn:
                self._engine.advance(txn, at)
            if run := record.header(TICK_RUN_HEADER):
                writer.put(TICK_RUN_KEY, run)
            return at
        try:
            verdict = decode_verdict(self._serde, record, lambda event: verdict_key(self._engine, event))
            if isinstance(verdict, DecodeFailed):
                return verdict
            if isinstance(verdict, PinEvent):
                with Transaction(writer) as txn:
                    self._engine.pin(txn, verdict)
                log.info("memory: %s %s|%s pinned by %s (%s): %s", verdict.action, verdict.task,
                         verdict.signature, verdict.operator, verdict.pin_id, verdict.reason)  # fmt: skip
                return verdict.time
            if (reason := misfiled_filter_verdict(verdict)) is not None:
                return DecodeFailed(
                    record, Stage.VALIDATE, "MisfiledFilterVerdict", reason, None, Verdict.avro_name
                )
            unknown = self.unknown_candidate(writer, record, verdict)
            if unknown is None:
                with Transaction(writer) as txn:
                    _, propagations = self._engine.learn(txn, verdict, verdict.time)
        except Exception as exc:  # a poison record must not stop the partition: DLQ, memory unchanged
            return processing_failed(record, exc, Verdict.avro_name)
        if unknown is not None:  # asked outside the guard: a broker that cannot answer is no poison
            if partition not in self._read_to_end:
                if not self.dispatches_read(partition):
                    self._metrics.verdicts_deferred.labels(verdict.task).inc()
                    return None
                self._read_to_end.add(partition)
            return DecodeFailed(record, Stage.VALIDATE, "UnknownCandidate", unknown, None, Verdict.avro_name)
        if propagations is None:
            self._metrics.verdicts_duplicate.labels(verdict.task).inc()
            return verdict, []
        self._applied.append(verdict)
        return verdict, propagations

    def unknown_candidate(
        self, writer: StagedPartition, record: SourceRecord, verdict: VerdictEvent
    ) -> str | None:
        """Why ``verdict`` names a candidate no gate decided, or None.

        Checked for a live verdict that names its candidate: one of the Ontology-Violation Filter's
        names the candidate it judges (``<candidate_id>:ontology``); a verdict without a candidate id
        and one a replay published (:data:`REPLAYED_HEADER`) are applied as given, as the replay
        contract says.
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

    def dead_lettered(self, failed: DecodeFailed) -> None:
        """Log and count a dead letter the runtime routes."""
        log_dead_letter(log, failed)
        self._metrics.dead_letters.labels(failed.record.topic).inc()
