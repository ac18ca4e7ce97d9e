"""The patient-keyed clinical stream: wiring only, the gates are :mod:`processors.clinical`.

Topology::

    clingate.fhir.updates          (FhirUpdate, key patient id) --.
    clingate.clinical.reviews      (AdversarialReview, key pid) --+--> clinical loop (group <app>-clinical)
    clingate.clinical.deliverables (Deliverable, key pid)       --'        | process_event(state, event, now)
                                                                          |--> clingate.clinical.assessments
                                                                          |     (only when it changed)
                                                                          |--> clingate.clinical.safety-audits
                                                                          v     (one per deliverable)
                             <app>-clinical-patients-changelog (compacted, N partitions)

Choices:

* **Handler and loop.** The per-record logic is :class:`ClinicalHandler`, which returns a batch's
  outputs, dead letters and changelog group as data; the runtime is the transactional table loop
  (:class:`streams.worker.tableloop.TableLoop`, as for the DBPM memory), built by
  :func:`build_clinical`.
* **One consumer group over the three co-partitioned topics** (:func:`clinical_group`, range
  assignment). A patient's state has exactly one writer (the member owning partition ``p`` of all
  three topics and of the changelog), and the records of one partition are applied in offset order.
* **State**: per partition a local RocksDB store, key = patient id bytes, value = the JSON of
  :class:`processors.clinical.assess.ClinicalStreamState`; every batch's writes are one changelog group
  (docs/runtime-reference.md, section 5). Within a batch a patient's state is decoded once, at the
  patient's first record, and encoded once, at the batch's end (:class:`BatchPatient`); each record of
  the patient is assessed on the parts of the patient's previous assessment that its changes do not feed
  (:func:`processors.clinical.assess.process_event_reusing`), so a batch publishes and stores exactly
  what its records applied one batch each would.
* **Exactly once**: a batch's assessments, audits, dead letters and changelog group are one Kafka
  transaction, so a ``read_committed`` consumer sees each assessment once, through crashes. The group
  also records, per input topic, the last input offset applied
  (:func:`streams.worker.tablestore.apply_batch`, for every table); a record re-delivered after a
  crash between the transaction and the offset commit is at or below it and is skipped, sending
  nothing.
* **Time**: ``now`` is the record's event time (``FhirUpdate.ts``, ``event_time`` of reviews and
  deliverables), never the wall clock; replaying the topics gives the same outputs.
* **Dead letters** (:mod:`streams.runtime.dlq`, in the batch's transaction):
  undecodable records;
  a record the processor raised on (stage ``process``; the patient's state is left as it was);
  a record whose key is not its ``patient_id`` (its state would live on the wrong partition); a FHIR
  update with invalid resources (error type ``FhirInvalid``, the validation errors as the reason). The
  valid resources of such an update are still applied: validation is per resource
  (:func:`processors.clinical.fhir_input.parse_document`), and a resource that names another patient
  than the key is one of the invalid ones. A record after which the patient's state would not fit the
  table's changelog (:data:`STATE_MAX_BYTES`; error type ``StateTooLarge``, stage ``produce``) is not
  applied: its outputs are not published and the state stays as it was.
* **Order across the three topics**: one patient's records of one topic are applied in their order;
  between topics there is none (the consumer interleaves the co-partitioned topics as it fetches
  them). A producer that needs a review assessed on a given state publishes the review after the
  updates' assessments are in.
* **Retention** (:class:`~streams.worker.clinical_retention.PatientRetention`): a patient's state is
  deleted once no record of the patient arrived for ``CLINGATE_CLINICAL_PATIENT_RETENTION_DAYS`` (365)
  days of event time.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from pydantic_core import to_json

from processors.clinical.assess import AssessmentParts, ClinicalStreamState, RunEvent, process_event_reusing
from processors.clinical.fhir_input import parse_document, prepare_validation
from processors.clinical.knowledge import ClinicalKnowledge, GateFlags, default_knowledge
from processors.clinical.records import FhirChange, ResourceUpsert
from processors.clinical.state import PatientUpdate
from schemas.base import AvroModel
from schemas.clinical import (
    AdversarialReview,
    AuditReport,
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidenceRequest,
    GatedDraft,
    RevisionRoute,
    SafetyAudit,
)
from schemas.common import Stage
from schemas.fhir import FhirUpdate
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.runtime.core import Output
from streams.runtime.dlq import (
    RECORD_OVERHEAD_BYTES,
    Rejected,
    SourceRecord,
    decode_record,
    processing_failed,
)
from streams.runtime.logs import log_dead_letter
from streams.runtime.metrics import LoopMetrics
from streams.runtime.settings import Settings
from streams.worker.clinical_retention import PatientRetention
from streams.worker.metrics import ClinicalMetrics
from streams.worker.tableloop import TableLoop, build_table_loop
from streams.worker.tablestore import StagedPartition, TableBatch, table_changelog
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_EVIDENCE_REQUESTS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_REVIEWS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_SAFETY_AUDITS,
    DATA_MAX_MESSAGE_BYTES,
    FHIR_UPDATES,
)

log = logging.getLogger(__name__)

#: Name of the clinical patient table (changelog :func:`patients_changelog`).
PATIENT_TABLE = "clinical-patients"

#: Input topics of the clinical agent and the model each carries.
INPUTS: dict[str, type[AvroModel]] = {
    FHIR_UPDATES: FhirUpdate,
    CLINICAL_REVIEWS: AdversarialReview,
    CLINICAL_DELIVERABLES: Deliverable,
    CLINICAL_EVIDENCE: EvidenceBundle,
    CLINICAL_DRAFTS: ClinicalDraft,
    CLINICAL_AUDIT_REPORTS: AuditReport,
}
ClinicalInput = PatientUpdate | AdversarialReview | Deliverable | RunEvent
Published = ClinicalAssessment | SafetyAudit | GatedDraft | RevisionRoute | EvidenceRequest
"""What the clinical loop publishes."""
#: The topic of each published record type.
OUTPUT_TOPICS: dict[type[AvroModel], str] = {
    ClinicalAssessment: CLINICAL_ASSESSMENTS,
    SafetyAudit: CLINICAL_SAFETY_AUDITS,
    GatedDraft: CLINICAL_GATED_DRAFTS,
    RevisionRoute: CLINICAL_REVISION_ROUTES,
    EvidenceRequest: CLINICAL_EVIDENCE_REQUESTS,
}
Change = tuple[bytes, list[Published]]
"""What one record publishes: its patient key and the outputs."""
#: The largest patient record (key and state) the table's changelog admits
#: (:func:`streams.worker.tableloop.changelog_spec`, which also counts the record's framing).
STATE_MAX_BYTES = DATA_MAX_MESSAGE_BYTES - RECORD_OVERHEAD_BYTES


def gate_flags(
    settings: Settings, *, tier_b: bool | None = None, esc032: bool | None = None, esc033: bool | None = None
) -> GateFlags:
    """The gate flags of this process: settings (environment), overridden by explicit command-line flags."""
    return GateFlags(
        tier_b_class_maps=settings.clinical_tier_b_class_maps if tier_b is None else tier_b,
        esc032_staleness=settings.clinical_esc032_staleness if esc032 is None else esc032,
        esc033_compound=settings.clinical_esc033_compound if esc033 is None else esc033,
        esc033_min_class=settings.clinical_esc033_min_class,
        rule_a_enforced=settings.clinical_rule_a_enforced,
    )


def _reference(change: FhirChange) -> str:
    target = change.record if isinstance(change, ResourceUpsert) else change
    return f"{target.resource_type}/{target.id}"


def fhir_input(update: FhirUpdate) -> tuple[PatientUpdate | None, list[str]]:
    """The validated changes of a FHIR update for its patient, and the errors of its invalid resources.

    Returns:
        ``(update or None when nothing applies, errors)``; every error names the resource it is about.
    """
    parsed = parse_document(json.loads(update.resource), default_patient=update.patient_id)
    errors = [f"{bad.resource_type}/{bad.resource_id}: {bad.error}" for bad in parsed.invalid]
    for patient, changes in sorted(parsed.changes.items()):
        if patient != update.patient_id:
            errors += [
                f"{_reference(c)}: of patient {patient} on patient {update.patient_id}'s record"
                for c in changes
            ]
    changes = tuple(parsed.changes.get(update.patient_id, ()))
    return (PatientUpdate(patient_id=update.patient_id, changes=changes) if changes else None), errors


def json_growth(old: BaseModel, new: BaseModel) -> int:
    """A bound above how many bytes longer ``new``'s JSON is than ``old``'s (two models of one type).

    Pydantic's compact JSON of a model is its fields' JSON joined, and a dict's its entries', so a field
    that is the same object in both adds nothing; a model field changed adds at most what its own
    changed fields add, a dict field what its entries replaced or added weigh (one removed weighs
    nothing; a value as it serialises alone, as the patient's records do), and any other field changed
    at most its JSON in ``new``."""
    grown = 0
    for name in type(new).model_fields:
        before, after = getattr(old, name), getattr(new, name)
        if before is after:
            continue
        if isinstance(before, BaseModel) and type(before) is type(after):
            grown += json_growth(before, after)
        elif isinstance(before, dict) and isinstance(after, dict):
            grown += sum(
                len(to_json(k)) + len(to_json(v)) + 2 for k, v in after.items() if before.get(k) is not v
            )
        else:
            grown += len(new.model_dump_json(include={name}).encode())
    return grown


@dataclass(slots=True)
class BatchPatient:
    """A patient's state as a batch leaves it so far: decoded at the patient's first record of the batch,
    written to the table at its end (:meth:`ClinicalHandler.apply`)."""

    state: ClinicalStreamState | None
    """None: the table holds no state for the patient."""
    size: int
    """The length of the state's JSON, or a bound above it (:meth:`size_after`)."""
    parts: AssessmentParts | None = None
    """The parts of the patient's last assessment, for the patient's next record to reuse."""
    changed: bool = False
    """Whether the state differs from the table's (it is written at the batch's end)."""

    @classmethod
    def read(cls, table: StagedPartition, key: bytes) -> BatchPatient:
        """The patient ``key`` as ``table`` holds it."""
        raw = table.get(key)
        return cls(None, 0) if raw is None else cls(ClinicalStreamState.model_validate_json(raw), len(raw))

    def size_after(self, state: ClinicalStreamState, limit: int) -> int:
        """The length of the JSON of ``state``, the patient's state after a record, or a bound above it
        within ``limit``: this state's size and what ``state`` holds that this one does not
        (:func:`json_growth`). Only where that bound exceeds ``limit`` is ``state`` encoded to tell."""
        if self.state is not None:
            bound = self.size + json_growth(self.state, state)
            if bound <= limit:
                return bound
        return len(state.model_dump_json().encode())


class ClinicalHandler:
    """The clinical agent's per-partition logic, bound to the knowledge, the flags and the serde.

    No Kafka, no clock: a batch of one partition's records (the three input topics, offset
    order) is applied against the patient table's partition, and :meth:`apply` returns the
    assessments and audits to produce, the dead letters and the changelog group (patient states and
    the per-topic offset markers) as data. The table loop (:func:`build_clinical`)
    and the topology test driver (:mod:`streams.testing.driver`) both run it. Made, it has the FHIR
    validators of every resource type it reads ready
    (:func:`~processors.clinical.fhir_input.prepare_validation`).

    Args:
        serde: the process's serde.
        knowledge: loaded clinical knowledge (immutable, shared).
        flags: gate flags of this process.
        metrics: where assessments, red sources, gate latency, dead letters and retention are counted.
        retention_days: how long a patient's state outlives the patient's last record (event time).
    """

    def __init__(
        self,
        serde: Serde,
        knowledge: ClinicalKnowledge,
        flags: GateFlags,
        metrics: ClinicalMetrics,
        retention_days: float,
    ) -> None:
        self._metrics = metrics
        self._serde = serde
        self._knowledge = knowledge
        self._flags = flags
        self._retention = PatientRetention(round(retention_days * 86_400_000), metrics)
        prepare_validation()  # before the worker says it is ready, not at its first patients

    def apply(self, staged: StagedPartition, records: Sequence[SourceRecord]) -> TableBatch:
        """Apply one batch of a partition's records, staging the changed patient states in ``staged``
        (re-delivered input the runtime skips before: :func:`~streams.worker.tablestore.apply_batch`).

        A patient's state is decoded at the patient's first record of the batch and encoded once, at the
        batch's end, for the changelog group; in between, each record of the patient is applied to the
        decoded state and assessed on the parts of the patient's previous assessment
        (:func:`~processors.clinical.assess.process_event_reusing`)."""
        outputs: list[Output] = []
        dead_letters: list[Rejected] = []
        lights: Counter[str] = Counter()
        patients: dict[bytes, BatchPatient] = {}
        for record in records:
            failures, change = self._step(staged, record, patients)
            dead_letters += failures
            if change is None:
                continue
            key, published = change
            outputs += [self._output(key, out) for out in published]
            lights.update(o.traffic_light.light for o in published if isinstance(o, ClinicalAssessment))
        for key, patient in patients.items():
            if patient.changed:
                assert patient.state is not None  # a changed state is one a record made
                staged.put(key, patient.state.model_dump_json().encode())
        if lights:
            summary = ", ".join(f"{light} {n}" for light, n in sorted(lights.items()))
            log.info("%d assessments (%s)", lights.total(), summary, extra={"partition": staged.partition})
        return TableBatch(outputs, dead_letters)

    def _step(
        self, table: StagedPartition, record: SourceRecord, patients: dict[bytes, BatchPatient]
    ) -> tuple[list[Rejected], Change | None]:
        """One record through retention and the gates: its dead letters, and its patient's key and outputs
        (None: nothing to publish). A patient whose state the record leaves in the table is seen at its
        event time. ``patients`` holds the batch's patients so far (:class:`BatchPatient`); a patient
        retention deletes leaves it.

        Never raises for a record: whatever it does to the processor is a dead letter of stage
        ``process``, the patient's state left as it was; so is a record after which the patient's state
        would not fit the table's changelog (stage ``produce``): the write would fail on every retry.
        """
        failures: list[Rejected] = []
        try:
            decoded = self._decode(record, failures)
            if decoded is None:
                return failures, None
            item, now = decoded
            now_ms = round(now.timestamp() * 1000)
            for expired in self._retention.advance(table, now_ms):
                patients.pop(expired, None)
            key = item.patient_id.encode()
            patient = patients.get(key) or BatchPatient.read(table, key)
            started = time.perf_counter()
            processed = process_event_reusing(
                patient.state, patient.parts, item, now, self._knowledge, self._flags
            )
        except Exception as exc:  # a poison record must not stop the partition: DLQ, state unchanged
            return [*failures, processing_failed(record, exc, INPUTS[record.topic].avro_name)], None
        self._metrics.gate_latency.observe(time.perf_counter() - started)
        patients[key] = patient
        published = [out for out in processed.outputs if isinstance(out, Published)]
        if processed.state == patient.state:
            patient.parts = processed.parts
            self._retention.seen(table, key, now_ms, new=False)
            return failures, (key, published)
        size = patient.size_after(processed.state, STATE_MAX_BYTES - len(key))
        if len(key) + size > STATE_MAX_BYTES:
            total, expected = len(key) + size, INPUTS[record.topic].avro_name
            reason = f"the patient's state would be {total} bytes; its table admits {STATE_MAX_BYTES}"
            failed = Rejected(record, Stage.PRODUCE, "StateTooLarge", reason, None, expected)
            return [*failures, failed], None
        self._retention.seen(table, key, now_ms, new=patient.state is None)
        patient.state, patient.parts, patient.size, patient.changed = (
            processed.state,
            processed.parts,
            size,
            True,
        )
        return failures, (key, published)

    def _output(self, key: bytes, out: Published) -> Output:
        """The record of an assessment (counted and logged), an audit, a gated draft, a route or an
        evidence request, keyed by patient."""
        name = OUTPUT_TOPICS[type(out)]
        if isinstance(out, GatedDraft):
            self._metrics.gated(out)
        elif isinstance(out, RevisionRoute):
            self._metrics.routed(out)
        elif isinstance(out, SafetyAudit):
            self._metrics.audited(out)
        elif isinstance(out, ClinicalAssessment):
            self._metrics.assessed(out)
            light = out.traffic_light.light
            log.debug(
                "assessment %s: %s",
                out.patient_id,
                light,
                extra={"patient_id": out.patient_id, "light": light},
            )
        return Output(name, key, self._serde.encode(out, topic=name))

    def _decode(
        self, record: SourceRecord, failures: list[Rejected]
    ) -> tuple[ClinicalInput, datetime] | None:
        """The processor's event and its event time, or None; appends the record's dead letters to
        ``failures`` (a FHIR update with some invalid resources has one and still applies the rest)."""
        expected = INPUTS[record.topic]
        result = decode_record(self._serde, record, expected)
        if isinstance(result, Rejected):
            failures.append(result)
            return None
        value = result.value
        if record.key != value.patient_id.encode():
            failures.append(Rejected(
                record, Stage.VALIDATE, "KeyMismatch",
                f"record key {record.key!r} is not the patient_id {value.patient_id!r}",
                None, expected.avro_name,
            ))  # fmt: skip
            return None
        if isinstance(value, FhirUpdate):
            update, errors = fhir_input(value)
            if errors:
                failures.append(Rejected(
                    record, Stage.VALIDATE, "FhirInvalid", "; ".join(errors), None, expected.avro_name
                ))  # fmt: skip
            return None if update is None else (update, value.ts)
        return value, value.event_time

    def dead_lettered(self, failed: Rejected) -> None:
        """Log and count a dead letter the runtime routes."""
        log_dead_letter(log, failed)
        self._metrics.dead_letters.labels(failed.record.topic).inc()


def clinical_group(app_id: str) -> str:
    """The consumer group of the clinical writers of the workers of ``app_id``."""
    return f"{app_id}-clinical"


def patients_changelog(app_id: str) -> str:
    """The patient table's changelog topic of the workers of ``app_id``."""
    return table_changelog(app_id, PATIENT_TABLE)


def build_clinical(
    settings: Settings, bootstrap: str, registry: CollectorRegistry, loops: LoopMetrics
) -> TableLoop:
    """The clinical loop of a worker (stores and transactional id under ``<worker datadir>/clinical``),
    its metrics on the worker's ``registry``, its traffic on the worker's ``loops``."""
    serde = make_serde(settings.schema_registry_url)
    clinical = ClinicalMetrics(registry)
    handler = ClinicalHandler(
        serde, default_knowledge(), gate_flags(settings), clinical, settings.clinical_patient_retention_days
    )
    app_id = settings.app_id
    return build_table_loop(
        settings, bootstrap, clinical_group(app_id), list(INPUTS), patients_changelog(app_id), handler, serde,
        "clinical", loops,
    )  # fmt: skip
