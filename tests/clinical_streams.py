"""Generated patient streams for the clinical properties (Hypothesis strategies).

A stream is the records the clinical loop reads for a few patients, in their order: each patient's chart
(a bundle of resources), then FHIR updates (a bundle of one to three resources or deletes), adversarial
reviews, deliverables and the records of a run through the output gates (evidence, drafts, audit
reports). The resources draw on the vocabulary of ``clingate bench clinical`` (the NTI drugs and their
interactors, laboratory results and vital signs in mixed units, conditions and encounter reasons with
symptom text) and vary what the gates read: statuses that drop a medication, an observation or a
condition, new versions and late older ones, deletes (the Patient's too), results without a unit, dated
after the event, dates with an annotation the edge strips (an issue), medications named through a
Medication resource. Event times come from a small pool, so a record's time often repeats the one
before, or moves on, or goes back; one of them lies past the patient table's retention.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from processors.clinical.knowledge import default_knowledge
from schemas.base import AvroModel
from schemas.clinical import (
    AdversarialReview,
    AuditReport,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidencePacket,
)
from schemas.fhir import FhirUpdate
from streams.bench.clinical import CONDITIONS, LABS, MEDICATIONS, REASONS
from streams.worker.clinical import ClinicalInput, fhir_input

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TIMES = (
    T0,
    T0 + timedelta(hours=30),
    T0 + timedelta(days=9),
    T0 + timedelta(days=45),
    T0 + timedelta(days=400),
)
"""The event times a record may take: a day apart, a week, a month, and past a year's retention."""
IDS = ("1", "2", "3", "4")
"""Resource ids: few, so that updates replace and delete what earlier ones stored."""
DRUGS = MEDICATIONS[:4] + MEDICATIONS
"""Medication texts, the NTI drugs and their first interactor twice as likely as the others."""
SYMPTOMS = ("nausea", "blurred vision", "epistaxis")
"""Symptoms a Condition names (the NTI maps' stems)."""
NOTES = ("bleeding gums", "bradycardia", "no complaints")
"""What a result's note or text value says."""
SOURCES = tuple(dict.fromkeys(s for m in default_knowledge().drug_maps for s in m.corpus_sources))
"""The must-retrieve sources of the drug maps: what a run's evidence may hold."""


def _instant(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


@st.composite
def _meta(draw: st.DrawFn) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if version := draw(st.none() | st.integers(1, 3)):
        meta["versionId"] = str(version)
    if draw(st.booleans()):
        meta["lastUpdated"] = _instant(T0 + timedelta(hours=draw(st.integers(0, 24 * 60))))
    return {"meta": meta} if meta else {}


def _coded(text: str) -> dict[str, Any]:
    return {"text": text}


@st.composite
def _medication(draw: st.DrawFn, patient: str) -> dict[str, Any]:
    kind = draw(st.sampled_from(["MedicationStatement", "MedicationRequest", "Medication"]))
    resource: dict[str, Any] = {"resourceType": kind, "id": draw(st.sampled_from(IDS))}
    if kind == "Medication":
        return {**resource, "code": _coded(draw(st.sampled_from(DRUGS)))}
    statuses = ["active", "on-hold", "completed", "stopped"] + (
        ["intended"] if kind == "MedicationStatement" else []
    )
    resource["status"] = draw(st.sampled_from(statuses))
    resource["subject"] = {"reference": f"Patient/{patient}"}
    if draw(st.integers(0, 4)) == 0:
        resource["medicationReference"] = {"reference": f"Medication/{draw(st.sampled_from(IDS))}"}
    else:
        resource["medicationCodeableConcept"] = _coded(draw(st.sampled_from(DRUGS)))
    if kind == "MedicationRequest":
        resource["intent"] = "order"
    return resource


@st.composite
def _observation(draw: st.DrawFn, patient: str) -> dict[str, Any]:
    code, display, (low, high), unit, category = draw(st.sampled_from(LABS))
    resource: dict[str, Any] = {
        "resourceType": "Observation",
        "id": draw(st.sampled_from(IDS)),
        "status": draw(st.sampled_from(["final", "final", "amended", "entered-in-error"])),
        "subject": {"reference": f"Patient/{patient}"},
        "code": {
            "coding": [{"system": "http://loinc.org", "code": code, "display": display}],
            "text": display,
        },
    }
    system = "http://terminology.hl7.org/CodeSystem/observation-category"
    chosen = draw(st.sampled_from([category, category, "survey"]))
    resource["category"] = [{"coding": [{"system": system, "code": chosen}]}]
    if draw(st.integers(0, 5)):
        effective = _instant(T0 + timedelta(hours=draw(st.integers(-24 * 60, 24 * 50))))
        resource["effectiveDateTime"] = effective + draw(st.sampled_from(["", "", "", " [STALE 26d]"]))
    if draw(st.integers(0, 5)):
        value = round(draw(st.floats(low, high)), 2)
        quantity = {"value": value, "unit": unit, "system": "http://unitsofmeasure.org", "code": unit}
        resource["valueQuantity"] = quantity if draw(st.integers(0, 5)) else {"value": value}
    else:
        resource["valueString"] = draw(st.sampled_from(NOTES))
    if draw(st.integers(0, 3)) == 0:
        resource["note"] = [{"text": draw(st.sampled_from(NOTES))}]
    return resource


@st.composite
def _condition(draw: st.DrawFn, patient: str) -> dict[str, Any]:
    system = "http://terminology.hl7.org/CodeSystem/condition-clinical"
    return {
        "resourceType": "Condition",
        "id": draw(st.sampled_from(IDS)),
        "subject": {"reference": f"Patient/{patient}"},
        "code": _coded(draw(st.sampled_from(CONDITIONS + SYMPTOMS))),
        "clinicalStatus": {
            "coding": [{"system": system, "code": draw(st.sampled_from(["active", "resolved"]))}]
        },
    }


@st.composite
def _encounter(draw: st.DrawFn, patient: str) -> dict[str, Any]:
    return {
        "resourceType": "Encounter",
        "id": draw(st.sampled_from(IDS)),
        "status": "finished",
        "subject": {"reference": f"Patient/{patient}"},
        "class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode", "code": "AMB"},
        "reasonCode": [_coded(draw(st.sampled_from(REASONS)))],
    }


def _patient(patient: str) -> st.SearchStrategy[dict[str, Any]]:
    births = st.sampled_from(["1940-02-29", "1951-03-01", "1962-07-15 (approx.)", "2000-12-31"])
    return births.map(lambda born: {"resourceType": "Patient", "id": patient, "birthDate": born})


@st.composite
def _resource(draw: st.DrawFn, patient: str) -> dict[str, Any]:
    kinds = [_medication, _medication, _observation, _observation, _condition, _encounter]
    strategy = _patient(patient) if draw(st.integers(0, 7)) == 0 else draw(st.sampled_from(kinds))(patient)
    return {**draw(strategy), **draw(_meta())}


@st.composite
def _entry(draw: st.DrawFn, patient: str) -> dict[str, Any]:
    if draw(st.integers(0, 7)) == 0:
        kind = draw(
            st.sampled_from(["MedicationStatement", "Observation", "Condition", "Encounter", "Patient"])
        )
        target = patient if kind == "Patient" else draw(st.sampled_from(IDS))
        return {"request": {"method": "DELETE", "url": f"{kind}/{target}"}}
    return {"resource": draw(_resource(patient))}


def _update(now: datetime, patient: str, entries: list[dict[str, Any]]) -> FhirUpdate:
    bundle = {"resourceType": "Bundle", "type": "transaction", "entry": entries}
    return FhirUpdate(ts=now, patient_id=patient, resource_type="Bundle", resource=json.dumps(bundle))


@st.composite
def _chart(draw: st.DrawFn, patient: str) -> FhirUpdate:
    """A patient's first update: the Patient and a chart of resources at once."""
    resources = draw(st.lists(_resource(patient), min_size=4, max_size=16))
    first = {**draw(_patient(patient)), **draw(_meta())}
    if draw(st.integers(0, 3)):  # mostly a patient on an NTI drug, whom every gate has something to say of
        resources.append({
            "resourceType": "MedicationStatement", "id": draw(st.sampled_from(IDS)), "status": "active",
            "subject": {"reference": f"Patient/{patient}"},
            "medicationCodeableConcept": _coded(draw(st.sampled_from(MEDICATIONS[:3]))),
        })  # fmt: skip
    return _update(draw(st.sampled_from(TIMES)), patient, [{"resource": r} for r in (first, *resources)])


@st.composite
def _record(draw: st.DrawFn, patients: tuple[str, ...]) -> AvroModel:
    patient = draw(st.sampled_from(patients))
    now = draw(st.sampled_from((T0, T0, T0, *TIMES)))  # mostly one time, so that parts carry over
    run = draw(st.sampled_from(["run-1", "run-2"]))
    kind = draw(st.sampled_from(["fhir"] * 8 + ["review", "deliverable", "evidence", "draft", "audit"]))
    if kind == "fhir":
        size = draw(st.sampled_from([1, 1, 1, 2, 3]))  # mostly one type changed at a time
        return _update(now, patient, draw(st.lists(_entry(patient), min_size=size, max_size=size)))
    if kind == "review":
        return AdversarialReview(
            patient_id=patient,
            review_id=f"review-{draw(st.integers(0, 9))}",
            event_time=now,
            disposition=draw(st.sampled_from([None, "CONCUR", "DISSENT", "JUDGMENT_CALL", "???"])),
            subcategory=draw(st.sampled_from([None, "DATAGAP", "JUDGMENT_CALL", "odd"])),
            automation_bias_risk=draw(st.sampled_from([None, "LOW", "HIGH"])),
            revision_count=draw(st.sampled_from([None, 0, 2])),
            audit_verdict=draw(st.sampled_from([None, "APPROVED", "MODIFICATION_REQUIRED"])),
        )
    if kind == "deliverable":
        text = draw(st.sampled_from(["DDI reviewed; INR and bleeding risk addressed.", "Continue therapy."]))
        return Deliverable(
            patient_id=patient, deliverable_id=f"d-{draw(st.integers(0, 9))}", event_time=now, text=text
        )
    if kind == "evidence":
        sources = draw(st.lists(st.sampled_from(SOURCES), max_size=4, unique=True))
        packets = [EvidencePacket(source=s, text=f"Text of {s}.") for s in sources]
        return EvidenceBundle(patient_id=patient, run_id=run, event_time=now, packets=packets)
    revision = draw(st.integers(0, 2))
    if kind == "draft":
        text = "# Plan\n\nHold digoxin; the pharmacist reviews the level and potassium.\n"
        return ClinicalDraft(patient_id=patient, run_id=run, revision=revision, event_time=now, text=text)
    report = {
        "violations": draw(st.lists(st.just("Rule 4.3: parametric leakage"), max_size=1)),
        "cds_compliant": True,
    }
    return AuditReport(
        patient_id=patient, run_id=run, revision=revision, event_time=now, report=json.dumps(report)
    )


@st.composite
def patient_streams(
    draw: st.DrawFn, patients: tuple[str, ...] = ("pt-1",), max_size: int = 40
) -> list[AvroModel]:
    """Streams of the clinical loop's input records for ``patients`` (module docstring), in order: each
    patient's chart first, then records of the patients interleaved."""
    charts: list[AvroModel] = [draw(_chart(patient)) for patient in patients]
    return charts + draw(st.lists(_record(patients), min_size=max_size // 4, max_size=max_size))


def processor_event(record: AvroModel) -> tuple[ClinicalInput | None, datetime]:
    """What the clinical loop hands the processor for ``record`` (None: a FHIR update with nothing valid to
    apply), and its event time."""
    if isinstance(record, FhirUpdate):
        return fhir_input(record)[0], record.ts
    assert isinstance(record, AdversarialReview | Deliverable | EvidenceBundle | ClinicalDraft | AuditReport)
    return record, record.event_time
