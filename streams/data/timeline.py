"""The demo's FHIR stream: generated patients whose records change over simulated weeks.

Each generated patient gets a baseline record in week 0 (Patient, conditions, a few ordinary
medications, and one of four NTI profiles: warfarin, digoxin, both or neither, with monitoring labs
that are either fresh or weeks old), then one update in most later weeks: a new monitoring lab
(therapeutic or supratherapeutic), a toxicity symptom (an Encounter), an interacting drug started, the
NTI drug started or stopped, or nothing (the labs only age). The NTI gate therefore moves patients
between NORMAL, ELEVATED and CRITICAL, and their traffic lights between GREEN, YELLOW and RED, as
event time advances; the staleness gate sees the labs age between updates. Seeded: the same seed
gives the same stream.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

START = datetime(2026, 2, 16, tzinfo=UTC)
"""Event time of week 0 (the golden cases' assessment instant, 2026-03-29, falls in the last week)."""

WEEKS = 6
"""Simulated weeks: the baseline and five weeks of changes."""

_ORDINARY = (
    "lisinopril 10 mg po daily",
    "atorvastatin 40 mg po daily",
    "metformin 500 mg po bid",
    "omeprazole 20 mg po daily",
    "furosemide 40 mg po daily",
    "carvedilol 12.5 mg po bid",
)
_NTI = {"warfarin": "warfarin 5 mg po daily", "digoxin": "digoxin 0.125 mg po daily"}
_INTERACTING = {"warfarin": "amiodarone 200 mg po daily", "digoxin": "amiodarone 200 mg po daily"}
_SYMPTOM = {"warfarin": "Epistaxis and bruising", "digoxin": "Nausea and yellow-tinted vision"}
_CONDITIONS = (
    "Atrial fibrillation",
    "Heart failure with reduced ejection fraction",
    "Essential hypertension",
)
_LOINC = "http://loinc.org"
_PROFILES = ((), ("warfarin",), ("digoxin",), ("warfarin", "digoxin"))


@dataclass(frozen=True)
class Update:
    """One patient's FHIR changes at one event time (becomes one ``FhirUpdate`` record).

    One update per patient-week, carrying a FHIR ``Bundle`` of that week's resources (as a FHIR
    subscription notification or a batch ETL would deliver them): the clinical agent parses bundles
    entry by entry (:func:`processors.clinical.fhir_input.parse_document`), and one record per patient
    and event time makes "the update that caused this assessment" unambiguous for latency. Stopping a
    drug re-sends the same ``MedicationStatement`` id with status ``stopped`` (an update of the
    resource, not a deletion).
    """

    patient_id: str
    ts: datetime
    bundle: dict[str, Any]

    def resource_json(self) -> str:
        """The bundle as the record's ``resource`` text."""
        return json.dumps(self.bundle, separators=(",", ":"))


def _lab(pid: str, rid: str, drug: str, when: datetime, high: bool, rng: random.Random) -> dict[str, Any]:
    if drug == "warfarin":
        code, display, unit = "6301-6", "INR in Platelet poor plasma by Coagulation assay", "{INR}"
        value = rng.uniform(3.4, 5.5) if high else rng.uniform(2.0, 2.9)
    else:
        code, display, unit = "10535-3", "Digoxin [Mass/volume] in Serum or Plasma", "ng/mL"
        value = rng.uniform(2.1, 3.0) if high else rng.uniform(0.6, 1.2)
    return {
        "resourceType": "Observation",
        "id": rid,
        "status": "final",
        "category": [
            {
                "coding": [
                    {
                        "system": "http://terminology.hl7.org/CodeSystem/observation-category",
                        "code": "laboratory",
                    }
                ]
            }
        ],
        "code": {"coding": [{"system": _LOINC, "code": code, "display": display}], "text": display},
        "subject": {"reference": f"Patient/{pid}"},
        "effectiveDateTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "valueQuantity": {
            "value": round(value, 2),
            "unit": unit,
            "system": "http://unitsofmeasure.org",
            "code": unit,
        },
    }


def _medication(pid: str, rid: str, text: str, status: str = "active") -> dict[str, Any]:
    return {
        "resourceType": "MedicationStatement",
        "id": rid,
        "status": status,
        "medicationCodeableConcept": {"text": text},
        "subject": {"reference": f"Patient/{pid}"},
    }


def _condition(pid: str, rid: str, text: str) -> dict[str, Any]:
    status = {
        "coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": "active"}]
    }
    return {
        "resourceType": "Condition",
        "id": rid,
        "code": {"text": text},
        "subject": {"reference": f"Patient/{pid}"},
        "clinicalStatus": status,
    }


def encounter(pid: str, rid: str, reason: str) -> dict[str, Any]:
    """A finished ambulatory Encounter of patient ``pid`` whose reason is ``reason`` (FHIR JSON)."""
    return {
        "resourceType": "Encounter",
        "id": rid,
        "status": "finished",
        "subject": {"reference": f"Patient/{pid}"},
        "class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode", "code": "AMB"},
        "reasonCode": [{"text": reason}],
    }


def _bundle(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "collection", "entry": [{"resource": r} for r in resources]}


_GIVEN = ("Ada", "Ben", "Carla", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Keiko")
_FAMILY = ("Smith", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Haddad")
"""Synthetic names, assigned by index (no draw from the generator's random stream, so the clinical
timeline is the same with or without them); family names repeat, so a search by one finds several."""


def _patient(index: int, rng: random.Random) -> list[Update]:
    pid = f"PT-DEMO-{index:04d}"
    offset = timedelta(hours=rng.randint(0, 6 * 24))
    on = set(_PROFILES[index % len(_PROFILES)])
    base_time = START + offset
    resources: list[dict[str, Any]] = [
        {
            "resourceType": "Patient",
            "id": pid,
            "name": [{"given": [_GIVEN[index % len(_GIVEN)]], "family": _FAMILY[index % len(_FAMILY)]}],
            "birthDate": f"{rng.randint(1935, 1985)}-0{rng.randint(1, 9)}-15",
        }
    ]
    for j, text in enumerate(rng.sample(_CONDITIONS, rng.randint(1, 2))):
        resources.append(_condition(pid, f"{pid}-c{j}", text))
    for j, text in enumerate(rng.sample(_ORDINARY, rng.randint(2, 4))):
        resources.append(_medication(pid, f"{pid}-m{j}", text))
    labs = 0
    for drug in sorted(on):
        resources.append(_medication(pid, f"{pid}-{drug}", _NTI[drug]))
        age = timedelta(days=rng.choice((1, 3, 20, 45, 90)))  # fresh or weeks old
        resources.append(_lab(pid, f"{pid}-o{labs}", drug, base_time - age, rng.random() < 0.15, rng))
        labs += 1
    updates = [Update(pid, base_time, _bundle(resources))]
    for week in range(1, WEEKS):
        when = base_time + timedelta(weeks=week)
        change = rng.choices(("lab", "symptom", "interaction", "toggle", "none"), (4, 1, 1, 2, 2))[0]
        drugs = sorted(on)
        week_resources: list[dict[str, Any]] = []
        if change == "toggle":
            drug = rng.choice(sorted(_NTI))
            status = "stopped" if drug in on else "active"
            on.symmetric_difference_update({drug})
            week_resources.append(_medication(pid, f"{pid}-{drug}", _NTI[drug], status))
        elif change == "lab" and drugs:
            drug = rng.choice(drugs)
            week_resources.append(_lab(pid, f"{pid}-o{labs}", drug, when, rng.random() < 0.3, rng))
            labs += 1
        elif change == "symptom" and drugs:
            week_resources.append(encounter(pid, f"{pid}-e{week}", _SYMPTOM[rng.choice(drugs)]))
        elif change == "interaction" and drugs:
            week_resources.append(_medication(pid, f"{pid}-ix", _INTERACTING[drugs[0]]))
        if week_resources:
            updates.append(Update(pid, when, _bundle(week_resources)))
    return updates


def fhir_timeline(patients: int, seed: int = 0) -> list[Update]:
    """The FHIR updates of ``patients`` generated patients over :data:`WEEKS` weeks, in event-time order.

    Week ``w`` of patient ``i`` is at ``START + w weeks + a per-patient offset`` (hours), so the stream
    interleaves patients.
    """
    rng = random.Random(seed)
    updates = [u for index in range(patients) for u in _patient(index, rng)]
    return sorted(updates, key=lambda u: (u.ts, u.patient_id))


def week_of(when: datetime) -> int:
    """The simulated week an event time falls in (0 = the baseline week)."""
    return max(0, (when - START) // timedelta(weeks=1))
