"""The clinical agent's FHIR edge (:func:`streams.worker.clinical.fhir_input`): applied or dead-lettered."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from processors.clinical.records import ResourceDelete
from schemas.fhir import FhirUpdate
from streams.worker.clinical import fhir_input

TS = datetime(2026, 3, 29, tzinfo=UTC)


def _update(document: dict[str, Any], patient: str = "p1") -> FhirUpdate:
    return FhirUpdate(
        ts=TS, patient_id=patient, resource_type=document["resourceType"], resource=json.dumps(document)
    )


def _observation(rid: str, patient: str = "p1", status: str = "final") -> dict[str, Any]:
    return {
        "resourceType": "Observation",
        "id": rid,
        "status": status,
        "code": {"text": "Heart rate"},
        "subject": {"reference": f"Patient/{patient}"},
        "effectiveDateTime": "2026-03-28T08:00:00Z",
        "valueQuantity": {"value": 60, "unit": "/min"},
    }


def _bundle(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "transaction", "entry": list(entries)}


def test_an_invalid_resource_is_reported_and_its_valid_siblings_are_applied():
    update, errors = fhir_input(
        _update(_bundle({"resource": _observation("ok")}, {"resource": _observation("bad", status="nope")}))
    )
    assert update is not None and [c.record.id for c in update.changes] == ["ok"]  # type: ignore[union-attr]
    assert len(errors) == 1 and errors[0].startswith("Observation/bad: ")


def test_a_resource_of_another_patient_is_never_applied_to_the_records_patient():
    update, errors = fhir_input(_update(_observation("x", patient="p2"), patient="p1"))
    assert update is None
    assert errors == ["Observation/x: of patient p2 on patient p1's record"]


def test_a_resource_without_a_subject_belongs_to_the_records_patient():
    document = _observation("y")
    del document["subject"]
    update, errors = fhir_input(_update(document))
    assert errors == [] and update is not None and update.patient_id == "p1"


def test_a_delete_entry_becomes_a_delete_of_the_records_patient():
    update, errors = fhir_input(_update(_bundle({"request": {"method": "DELETE", "url": "Observation/z"}})))
    assert errors == [] and update is not None
    assert update.changes == (ResourceDelete(resource_type="Observation", id="z"),)


def test_an_update_with_nothing_the_gates_read_applies_nothing_and_reports_nothing():
    update, errors = fhir_input(_update({"resourceType": "Practitioner", "id": "dr"}))
    assert update is None and errors == []
