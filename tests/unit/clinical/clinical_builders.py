"""FHIR builders and bundle helpers for the clinical gate tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from processors.clinical.fhir_input import parse_document
from processors.clinical.records import PatientState
from processors.clinical.state import PatientUpdate, reduce_update
from streams.data import CLINICAL

DATA = CLINICAL
AS_OF = datetime(2026, 3, 29, tzinfo=UTC)


def load_bundle(case: str) -> dict[str, Any]:
    return json.loads((DATA / f"{case}.json").read_text(encoding="utf-8"))


def state_from(document: dict[str, Any], patient: str | None = None, now: datetime = AS_OF) -> PatientState:
    parsed = parse_document(document, default_patient=patient)
    assert not parsed.invalid, parsed.invalid
    (pid,) = parsed.changes
    state, _ = reduce_update(None, PatientUpdate(patient_id=pid, changes=tuple(parsed.changes[pid])), now)
    return state


def mini_bundle(pid: str, resources: list[dict[str, Any]], birth: str = "1950-01-01") -> dict[str, Any]:
    """A small bundle: a Patient plus ``resources`` (each gets subject / id / status filled in)."""
    entries = [{"resource": {"resourceType": "Patient", "id": pid, "birthDate": birth}}]
    for i, res in enumerate(resources):
        r = {"id": f"r{i:03d}", **res}
        if r["resourceType"] != "Medication":
            r.setdefault("subject", {"reference": f"Patient/{pid}"})
        entries.append({"resource": r})
    return {"resourceType": "Bundle", "type": "collection", "entry": entries}


def med(text: str, status: str = "active") -> dict[str, Any]:
    return {
        "resourceType": "MedicationStatement",
        "status": status,
        "medicationCodeableConcept": {"text": text},
    }


def lab(
    code: str | None,
    display: str,
    value: float,
    unit: str | None,
    when: str = "2026-03-28T08:00:00Z",
    category: str = "laboratory",
) -> dict[str, Any]:
    coding = [{"system": "http://loinc.org", "code": code, "display": display}] if code else []
    quantity: dict[str, Any] = {"value": value}
    if unit is not None:
        quantity.update({"unit": unit, "system": "http://unitsofmeasure.org", "code": unit})
    return {
        "resourceType": "Observation",
        "status": "final",
        "category": [
            {
                "coding": [
                    {"system": "http://terminology.hl7.org/CodeSystem/observation-category", "code": category}
                ]
            }
        ],
        "code": {"coding": coding, "text": display},
        "effectiveDateTime": when,
        "valueQuantity": quantity,
    }


def condition(text: str, status: str = "active") -> dict[str, Any]:
    return {
        "resourceType": "Condition",
        "clinicalStatus": {
            "coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": status}]
        },
        "code": {"text": text},
    }


def encounter(reason: str) -> dict[str, Any]:
    return {
        "resourceType": "Encounter",
        "status": "finished",
        "class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode", "code": "AMB"},
        "reasonCode": [{"text": reason}],
    }
