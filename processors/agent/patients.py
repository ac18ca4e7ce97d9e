"""The agent's read tools ``search_patient`` and ``get_patient_chart``, answered from clingate's own data.

Pure like the rest of the package: the runtime passes the data and the as-of instant in, these
functions return JSON (``ToolOutcome.result``), nothing here reads a store or the clock.

Where the data comes from, and why it is split:

* **Search runs over FHIR Patient resources**: the runtime passes, for every patient the clinical worker
  holds, the Patient resource :func:`patient_resource` rebuilds from the state's Patient record (its
  names, gender and birth date; the gates read the birth date only, ESC-009).
* **The chart is the gates' state** (conditions, medications, labs, vitals) plus the gates' own
  assessment (:func:`~processors.clinical.assess.assess_view`), so the agent's answer carries clingate's
  NTI severity, traffic light and Phase 0 staleness. Name and gender come from the Patient resource when
  the runtime passes it.
* **Labs and vitals are Phase 0's "latest result per test code"** (its ``_latest_per_code``, imported
  rather than defined twice), so every result the chart shows is one the staleness gate classed, and its
  class and age are the assessment's.
* **Allergies are not in the gates' state** (AllergyIntolerance is not a resource the gates read), so the
  chart says so in words (:data:`ALLERGIES_UNAVAILABLE`) instead of an empty list: ``format_result``
  renders an empty value as "none", and "Allergies: none" would read as "no known allergies".

Matching (search): case-insensitive whole words. A query matches a patient when every word of it is a
word of one of the patient's name parts (``given``, ``family`` or ``text`` of any of its names; a
hyphenated or multi-word part gives several words), or when the whole query is the patient's id
exactly. "smith" finds "John Smith" and "Mary Smith-Jones", never "Smithers".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from processors.clinical.assess import assess_view
from processors.clinical.knowledge import ClinicalKnowledge, GateFlags
from processors.clinical.phase0 import _latest_per_code  # the results Phase 0 classes (module docstring)
from processors.clinical.records import ConditionRecord, PatientRecord, PatientState
from processors.clinical.view import INACTIVE_CONDITION, REFUTED_CONDITION, PatientView
from schemas.clinical import ClinicalAssessment

MAX_MATCHES: Final = 10
"""Most patients one search lists; the rest are counted under ``omitted`` (the agent asks which one)."""
MAX_ITEMS: Final = 20
"""Most conditions, labs and vitals a chart lists (labs and vitals: the most recent); ``limits`` says
what was left out."""
MAX_MEDICATIONS: Final = 50
"""Most active medications a chart lists; higher than :data:`MAX_ITEMS` because a hidden medication can
be the interacting one."""

ALLERGIES_UNAVAILABLE: Final = (
    "not available: clingate's patient state does not hold allergies (AllergyIntolerance); "
    "check the EHR's allergy list"
)
CHART_SCOPE: Final = (
    f"Latest result per test code; at most {MAX_ITEMS} labs and {MAX_ITEMS} vitals, most recent first; "
    "current conditions only; observations other than laboratory and vital signs are not shown."
)

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
"""A word: letters and digits, with inner apostrophes (O'Brien is one word; Smith-Jones is two)."""


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def _names(patient: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [n for n in patient.get("name") or () if isinstance(n, Mapping)]


def display_name(patient: Mapping[str, Any]) -> str | None:
    """How a FHIR Patient is named to the clinician: its official name (else its first), ``text`` if
    the name has one, else the given names and the family name."""
    names = _names(patient)
    if not names:
        return None
    name = next((n for n in names if n.get("use") == "official"), names[0])
    if name.get("text"):
        return str(name["text"])
    parts = [
        *(str(g) for g in name.get("given") or ()),
        *([str(name["family"])] if name.get("family") else []),
    ]
    return " ".join(parts) or None


def _name_words(patient: Mapping[str, Any]) -> set[str]:
    words: set[str] = set()
    for name in _names(patient):
        for part in (*(name.get("given") or ()), name.get("family"), name.get("text")):
            if isinstance(part, str):
                words.update(_words(part))
    return words


def demographics(patient: Mapping[str, Any]) -> dict[str, Any]:
    """One search match: ``patient_id``, ``name``, ``birth_date``, ``gender`` of a FHIR Patient."""
    return {
        "patient_id": patient.get("id"),
        "name": display_name(patient),
        "birth_date": patient.get("birthDate"),
        "gender": patient.get("gender"),
    }


def patient_resource(state: PatientState) -> dict[str, Any]:
    """The FHIR Patient resource of ``state``'s Patient record (id, names as ``text``, gender, birth
    date); just the id when the state holds no Patient resource."""
    resource: dict[str, Any] = {"resourceType": "Patient", "id": state.patient_id}
    record = state.resources.get(f"Patient/{state.patient_id}")
    if isinstance(record, PatientRecord):
        if record.names:
            resource["name"] = [{"text": name} for name in record.names]
        if record.gender is not None:
            resource["gender"] = record.gender
        if record.birth_date is not None:
            resource["birthDate"] = record.birth_date
    return resource


def search_patients(patients: Iterable[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """``search_patient``: the patients whose name matches ``name`` (module docstring), or whose id is
    ``name`` exactly.

    Args:
        patients: FHIR Patient resources (JSON); resources without an id are skipped.
        name: the query, a name or a patient id.

    Returns:
        ``{"matches": [demographics...]}`` sorted by patient id, at most :data:`MAX_MATCHES`, with
        ``"omitted": n`` when more matched. No match gives ``{"matches": []}`` (the runtime reports
        ``not_found``); several matches are a result, the agent asks which patient was meant.
    """
    query = name.strip()
    wanted = set(_words(query))
    found = sorted(
        (
            demographics(p)
            for p in patients
            if isinstance(p.get("id"), str)
            and p["id"]
            and (p["id"] == query or (wanted and wanted <= _name_words(p)))
        ),
        key=lambda m: str(m["patient_id"]),
    )
    result: dict[str, Any] = {"matches": found[:MAX_MATCHES]}
    if len(found) > MAX_MATCHES:
        result["omitted"] = len(found) - MAX_MATCHES
    return result


def gate_summary(assessment: ClinicalAssessment) -> dict[str, Any]:
    """What clingate's gates say about a patient, as JSON: NTI severity and drugs, light and its sources."""
    return {
        "nti_severity": assessment.nti.severity,
        "nti_drugs": [*assessment.nti.drugs, *assessment.nti.classes],
        "traffic_light": assessment.traffic_light.light,
        "sources": list(assessment.traffic_light.sources),
    }


def _bounded(label: str, items: list[Any], limit: int, limits: list[str]) -> list[Any]:
    if len(items) > limit:
        limits.append(f"{label}: {limit} of {len(items)} shown")
    return items[:limit]


def patient_chart(
    state: PatientState,
    knowledge: ClinicalKnowledge,
    as_of: datetime,
    flags: GateFlags | None = None,
    patient: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``get_patient_chart``: the clinical summary of one patient with clingate's assessment.

    Args:
        state: the patient's state in the clinical worker.
        knowledge: the clinical knowledge the gates use.
        as_of: the assessment instant (timezone-aware), normally the request's time.
        flags: the gate flags the clinical worker runs with.
        patient: the patient's FHIR Patient resource, for name and gender (``None``: both ``None``).

    Returns:
        JSON: demographics, current conditions, active medications (with their dose text), allergies
        (:data:`ALLERGIES_UNAVAILABLE`), the latest lab and vital result per test code with its Phase 0
        staleness class, the ``assessment`` (:func:`gate_summary` plus staleness and its banner), and
        ``limits`` (:data:`CHART_SCOPE` and whatever the bounds left out).

    Raises:
        ValueError: ``as_of`` is naive.
    """
    view = PatientView(state, knowledge)
    assessment = assess_view(view, as_of, None, flags or GateFlags())
    staleness = {o.code: o for o in assessment.staleness.observations if o.class_ != "MISSING"}
    limits = [CHART_SCOPE]
    conditions = [
        {"text": r.texts[0] if r.texts else None, "clinical_status": r.clinical_status}
        for r in state.of_type("Condition")
        if isinstance(r, ConditionRecord)
        and r.clinical_status not in INACTIVE_CONDITION
        and r.verification_status not in REFUTED_CONDITION
    ]
    dated = sorted(_latest_per_code(view), key=lambda d: (-d.effective.timestamp(), d.code))

    def results(category: str) -> list[dict[str, Any]]:
        return [
            {
                "code": d.code,
                "display": d.display,
                "value": d.obs.value if d.obs.value is not None else d.obs.value_text,
                "unit": d.obs.unit,
                "effective": staleness[d.code].effective,
                "staleness": staleness[d.code].class_,
                "age_days": staleness[d.code].age_days,
            }
            for d in dated
            if category in d.obs.categories
        ]

    return {
        "patient_id": state.patient_id,
        "name": display_name(patient) if patient else None,
        "gender": patient.get("gender") if patient else None,
        "birth_date": view.birth_date,
        "age": assessment.age,
        "conditions": _bounded("conditions", conditions, MAX_ITEMS, limits),
        "medications": _bounded("medications", assessment.medications, MAX_MEDICATIONS, limits),
        "allergies": ALLERGIES_UNAVAILABLE,
        "labs": _bounded("labs", results("laboratory"), MAX_ITEMS, limits),
        "vitals": _bounded("vitals", results("vital-signs"), MAX_ITEMS, limits),
        "assessment": {
            "as_of": assessment.as_of,
            **gate_summary(assessment),
            "staleness": assessment.staleness.overall,
            "staleness_banner": assessment.staleness.banner,
        },
        "limits": limits,
    }
