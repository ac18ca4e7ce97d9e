"""Clinical inputs the worker tests and the topology tests share, and the pure processor's outputs for them.

:func:`scenario` is PT-TEST-010 arriving as FHIR updates over nine simulated days (a late older
version, a delete, an invalid resource); what the agent's outputs must equal is
:func:`streams.testing.clinical_reference.pure_outputs` over them.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from schemas.clinical import AdversarialReview, ClinicalAssessment
from schemas.fhir import FhirUpdate
from streams.data import CLINICAL
from streams.runtime.settings import Settings
from streams.testing.clinical_reference import pure_outputs

PATIENT = "PT-TEST-010"
BUNDLE = CLINICAL / f"{PATIENT}.json"
AS_OF = "2026-03-29T00:00:00Z"


def at(day: int, hour: int = 8) -> datetime:
    """An instant of March 2026, UTC."""
    return datetime(2026, 3, day, hour, tzinfo=UTC)


def _resources() -> dict[str, dict[str, Any]]:
    document = json.loads(BUNDLE.read_text(encoding="utf-8"))
    return {
        f"{e['resource']['resourceType']}/{e['resource']['id']}": e["resource"] for e in document["entry"]
    }


def fhir_bundle(*resources: dict[str, Any], deletes: tuple[str, ...] = ()) -> dict[str, Any]:
    """A FHIR Bundle of ``resources``, a transaction deleting ``deletes`` when given."""
    entries: list[dict[str, Any]] = [{"resource": r} for r in resources]
    entries += [{"request": {"method": "DELETE", "url": url}} for url in deletes]
    return {
        "resourceType": "Bundle",
        "type": "collection" if not deletes else "transaction",
        "entry": entries,
    }


def scenario() -> tuple[list[FhirUpdate], dict[str, dict[str, Any]], str]:
    """The FHIR updates of the simulated days, the final resource set, and the invalid resource's id.

    Day 20: the patient, the medications and an amiodarone statement deleted later (as one bundle).
    Day 22-24: one laboratory result a day, then the heart rate and the conditions. The digoxin level
    arrives as version 2 (2.1 ng/mL); its older version 1 (0.8 ng/mL) arrives late, at the event time
    of the update before it, and must change nothing (no assessment). Day 26: the amiodarone
    statement is deleted; an Observation with a status outside its required value set goes to the
    DLQ. Day 27: the encounter (symptom text).
    """
    res = _resources()
    amiodarone = copy.deepcopy(res["MedicationStatement/pt-test-010-med-05"])
    amiodarone.update(
        id="pt-test-010-med-99", medicationCodeableConcept={"text": "amiodarone 200 mg po daily"}
    )
    digoxin_v2 = copy.deepcopy(res["Observation/pt010-obs-dig"])
    digoxin_v2["meta"] = {"versionId": "2"}
    digoxin_v1 = copy.deepcopy(res["Observation/pt010-obs-dig"])
    digoxin_v1["valueQuantity"] = {**digoxin_v1["valueQuantity"], "value": 0.8}
    invalid = copy.deepcopy(res["Observation/pt010-obs-hr"])
    invalid.update(id="pt010-obs-invalid", status="not-a-status")
    meds = [r for k, r in res.items() if k.startswith("MedicationStatement/")]
    docs: list[tuple[datetime, dict[str, Any]]] = [
        (at(20), fhir_bundle(res[f"Patient/{PATIENT}"], *meds, amiodarone)),
        (at(22), digoxin_v2),
        (at(22, 9), res["Observation/pt010-obs-k"]),
        (at(23), res["Observation/pt010-obs-mg"]),
        (at(23, 9), fhir_bundle(res["Observation/pt010-obs-cr"], res["Observation/pt010-obs-egfr"])),
        (at(24), fhir_bundle(res["Observation/pt010-obs-hr"], res["Condition/pt010-cond-01"],
                        res["Condition/pt010-cond-02"])),
        (at(24), digoxin_v1),  # same instant as the day-24 update: nothing changes
        (at(26), fhir_bundle(deletes=("MedicationStatement/pt-test-010-med-99",))),
        (at(26, 9), invalid),
        (at(27), res["Encounter/pt010-enc-01"]),
    ]  # fmt: skip
    updates = [
        FhirUpdate(ts=ts, patient_id=PATIENT, resource_type=doc["resourceType"], resource=json.dumps(doc))
        for ts, doc in docs
    ]
    final = dict(res)
    final["Observation/pt010-obs-dig"] = digoxin_v2
    return updates, final, invalid["id"]


def concur_review() -> AdversarialReview:
    """The CONCUR review of PT-TEST-010 at :data:`AS_OF`."""
    return AdversarialReview(
        patient_id=PATIENT,
        review_id="review-1",
        event_time=AS_OF,
        disposition="CONCUR",
        automation_bias_risk="LOW",
    )


def expected_assessments(updates: list[FhirUpdate], last: AdversarialReview) -> list[dict[str, Any]]:
    """The assessments the pure stream processor emits for ``updates`` then ``last``, as JSON."""
    return [
        o.model_dump(mode="json")
        for o in pure_outputs([*updates, last], Settings())
        if isinstance(o, ClinicalAssessment)
    ]
