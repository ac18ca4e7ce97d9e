"""The DBPM gate's per-candidate work, without Kafka: decode a candidate, decide it on a view of the
memory, encode its decision, its dispatches and the Filter's verdict.

:class:`Gate` is what every runtime of the gate runs per record: the gate loop
(:mod:`streams.worker.gateloop`, through :class:`~streams.worker.gatesteps.GateSteps`), the topology
test driver and the benchmarks. The memory it decides on is read only: the engine's transaction holds
only bookkeeping (the as-of clock) and is aborted.

Each live candidate decided is also sent as a dispatch record to every memory partition a verdict of
it can update (:func:`streams.worker.wire.dispatch_outputs`), in the transaction of its decision: a
``read_committed`` reader (the verifier, the memory) sees the dispatch no later than the to-verify
record, so the memory learns a live verdict only of a candidate it knows was decided
(:mod:`streams.worker.memory`, consistency model).

The Ontology-Violation Filter (paper §4.7, Eq. 6) runs here, on every relation candidate the gate
decides: a violating triple is published as a ``rule_based`` ``hard_fail`` verdict
(:func:`processors.dbpm.ontology.filter_verdict`) keyed for the memory like any verdict, counted per
violated (head type, tail type) in ``clingate_dbpm_ontology_violations_total``. Off with
``CLINGATE_DBPM_ONTOLOGY_FILTER=off`` (then the memory would ignore them anyway); with ``tag-only`` it
still runs and the engine turns the BLOCKs its evidence causes into DOWNGRADEs. A replayed candidate
(``clingate-barrier`` header) gets none: a replay stream carries the Filter's verdicts itself. Each
decision names the configuration that made it (``config``, :meth:`processors.dbpm.DBPMConfig.fingerprint`).

No model per candidate: a record is decoded from its Avro datum into the engine's event
(:func:`~streams.worker.wire.decode_candidate`), and its decision and dispatches are written from
datums (:func:`decision_datum`, :func:`~streams.worker.wire.event_fields`), the bytes the models
would give. A record whose datum needs a model's checks takes the model's path, and is decided or
dead-lettered exactly as there; the Filter's verdict, rare, is a model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from processors.dbpm import BLOCK, DBPMEngine, GateEvent, GateRuling
from processors.dbpm.config import QA
from processors.dbpm.coverage import Release
from processors.dbpm.ledger import seen_key
from processors.dbpm.memory import Memory
from processors.dbpm.ontology import filter_verdict, type_pair
from schemas.dbpm import Candidate, Coverage, GateDecision
from schemas.serde import Serde
from state.base import Store, Transaction
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord, oversized_output, processing_failed
from streams.runtime.logs import log_dead_letter
from streams.worker.keys import BARRIER_HEADER, verdict_key
from streams.worker.metrics import DbpmMetrics
from streams.worker.wire import (
    CandidateRecord,
    candidate_datum,
    contract_event,
    decode_candidate,
    dispatch_outputs,
    event_fields,
)
from topics.catalog import DBPM_DECISIONS, DBPM_TO_VERIFY, DBPM_VERDICTS

log = logging.getLogger(__name__)


def gate_group(app_id: str) -> str:
    """The consumer group of the gates of the workers of ``app_id``."""
    return f"{app_id}-gate"


def is_replayed(record: SourceRecord) -> bool:
    """A candidate published by ``clingate replay --via-kafka`` (it carries the barrier header)."""
    return any(k == BARRIER_HEADER for k, _ in record.headers)


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


Pending = tuple[SourceRecord, CandidateRecord]
"""A QA candidate the coverage join holds: its record, and the record decoded."""

Barrier = Callable[[float, bytes], bool]
"""Waits until the memory view reached a candidate's barrier (its event time and the value of its
:data:`~streams.worker.keys.BARRIER_HEADER`, :func:`~streams.worker.keys.barrier_reached`); True if it
gave up (the gate then decides on the view it has and says ``barrier_timeout``)."""


class Gate:
    """The gate's per-candidate work, without Kafka: decode, decide on a view, encode.

    :meth:`decode` and :meth:`judge` are the per-record work :class:`~streams.worker.gatesteps.GateSteps`
    does for the :class:`~streams.worker.gateloop.GateLoop` and the topology test driver
    (:mod:`streams.testing.driver`).

    Args:
        engine: the worker's engine (:func:`~streams.worker.engine.dbpm_engine`; the gate only decides with
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

    def decode(self, record: SourceRecord) -> CandidateRecord | Rejected:
        """The candidate of a ``clingate.dbpm.candidates`` record, or the failure
        (:func:`~streams.worker.wire.decode_candidate`: from its Avro datum where that is exact)."""
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
    ) -> DecidedCandidate | Rejected:
        """A decoded ``clingate.dbpm.candidates`` record's decision, or why it goes to the dead-letter
        topic (``coverage``: how the coverage join released it).

        A candidate with the :data:`~streams.worker.keys.BARRIER_HEADER` waits at ``barrier`` for its
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

    def dead_lettered(self, failed: Rejected) -> None:
        """Log and count a dead letter the runtime routed."""
        log_dead_letter(log, failed)
        if self._metrics is not None:
            self._metrics.dead_letters.labels(failed.record.topic).inc()


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
    return {
        **event_fields(candidate.event),
        "candidate": candidate_datum(candidate),
        **decision_fields(decision, waited_out, config, coverage),
    }


def with_ner_categories(candidate: CandidateRecord, categories: Sequence[str]) -> CandidateRecord:
    """A QA candidate with the patient's accepted NER categories stamped on its payload, as the
    coverage join has it decided."""
    payload = {**candidate.event.payload, "ner_categories": list(categories)}
    return replace(candidate, event=replace(candidate.event, payload=payload))
