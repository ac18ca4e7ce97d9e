"""The agent's write tools as proposals: FHIR R4 resources in a draft state, never a write to an EHR.

``prescribe_medication``, ``add_allergy`` and ``save_clinical_note`` each become one FHIR resource that a
clinician confirms (or not) outside the agent:

* a prescription is a ``MedicationRequest`` with ``status: draft`` and ``intent: proposal``, and it first
  passes clingate's own clinical gates (:func:`prescription_proposal`);
* an allergy is an ``AllergyIntolerance`` with verification status ``unconfirmed`` (the resource has no
  ``status``; see :func:`allergy_proposal`);
* a note is a ``DocumentReference`` with ``docStatus: preliminary`` (:func:`note_proposal`).

Every resource is validated with the clinical edge's FHIR validator
(:func:`~processors.clinical.fhir_input.validate_resource`, R4 through the R4B models) before it leaves,
so a builder fault fails here instead of as a rejected write downstream. Times are the ``as_of`` the
runtime passes (the request's time), rendered like every clingate as-of: UTC, seconds, ``Z``. The same
state, arguments, proposal id and instant give an equal proposal.

A patient clingate holds no state for (the runtime passes ``state=None``): the allergy and the note are
proposed all the same (they need nothing from the state); the prescription is proposed with ``gates``
``None`` and a :attr:`Proposal.verdict` saying the gates did not run. Running them on an empty state
instead would assess a patient with no medications and no labs and answer GREEN, which is not a finding.
That is why the verdict is a field of the proposal and not a key of ``gates``: it exists whether or not the
gates ran, and where they ran it is made from ``gates`` alone, so ``gates`` keeps every fact it states.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from processors.agent.patients import gate_summary
from processors.agent.schemas import AddAllergyArgs, ClinicalNoteArgs, PrescribeMedicationArgs, ToolName
from processors.clinical.assess import assess, format_as_of
from processors.clinical.exceptions import FhirInvalid
from processors.clinical.fhir_input import parse_document, validate_resource
from processors.clinical.knowledge import ClinicalKnowledge, GateFlags
from processors.clinical.records import PatientState
from processors.clinical.state import PatientUpdate, reduce_update
from schemas.clinical import ClinicalAssessment

ALLERGY_VERIFICATION: Final = "http://terminology.hl7.org/CodeSystem/allergyintolerance-verification"
ALLERGY_CLINICAL: Final = "http://terminology.hl7.org/CodeSystem/allergyintolerance-clinical"


@dataclass(frozen=True, slots=True)
class Proposal:
    """One write tool's outcome: a draft FHIR resource for a clinician to confirm, never written.

    Attributes:
        proposal_id: the runtime's id for the proposal, also the resource's ``id`` (so it MUST be a FHIR
            id: letters, digits, ``-`` and ``.``, at most 64).
        patient_id: the patient the resource is about.
        tool: the write tool that proposed it.
        resource_type: the FHIR resource type.
        resource: the FHIR R4 resource (JSON).
        gates: for a prescription, the gates with and without the drug (:func:`prescription_proposal`);
            ``None`` for an allergy or a note, and for a prescription when the gates could not run.
        verdict: for a prescription, one sentence on what the gates found (or that they could not
            run); ``None`` for an allergy or a note.
    """

    proposal_id: str
    patient_id: str
    tool: ToolName
    resource_type: str
    resource: dict[str, Any]
    gates: dict[str, Any] | None = None
    verdict: str | None = None


def _proposal(
    tool: ToolName,
    resource: dict[str, Any],
    patient_id: str,
    gates: dict[str, Any] | None = None,
    verdict: str | None = None,
) -> Proposal:
    validate_resource(resource)
    return Proposal(resource["id"], patient_id, tool, resource["resourceType"], resource, gates, verdict)


def _same_patient(state: PatientState | None, patient_id: str) -> None:
    if state is not None and state.patient_id != patient_id:
        raise ValueError(f"the arguments name patient {patient_id!r}, the state is {state.patient_id!r}")


def _stamp(as_of: datetime) -> str:
    if as_of.tzinfo is None:
        raise ValueError("as_of must be timezone-aware (time is data: pass the request's time in UTC)")
    return format_as_of(as_of)


def prescription_proposal(
    state: PatientState | None,
    args: Mapping[str, Any],
    proposal_id: str,
    as_of: datetime,
    knowledge: ClinicalKnowledge,
    flags: GateFlags | None = None,
) -> Proposal:
    """``prescribe_medication``: a draft ``MedicationRequest``, and clingate's gates with it taken.

    The request, as a copy whose status is ``active``, goes through the clinical worker's own path
    (:func:`~processors.clinical.fhir_input.parse_document`, then
    :func:`~processors.clinical.state.reduce_update`), so the drug is read exactly as it would be once
    prescribed: the drug vocabulary (brand names), the NTI maps, the monitoring dependencies. The gates
    then run at ``as_of`` three times: on the patient's state as it is (``before``), on that state with the
    drug (``after``), and on the drug alone (what the maps make of it, whatever else the patient takes).
    Only the deterministic gates run (no adversarial review: production light = shadow light).

    ``gates`` is ``{"before", "after", "nti_drugs", "nti_drugs_added", "monitoring",
    "staleness_banner", "red_sources"}``: ``before`` / ``after`` are
    :func:`~processors.agent.patients.gate_summary`; ``nti_drugs`` the NTI drugs and classes the proposed
    drug is; ``nti_drugs_added`` those of them the patient was not already on; ``monitoring`` the Phase 0
    class of every parameter the proposed drug depends on (``MISSING`` when there is no result, so a
    missing INR is shown even where no gate escalates on it); ``staleness_banner`` the Phase 0 banner with
    the drug; ``red_sources`` the light's sources when the light with the drug is RED, else empty.

    Args:
        state: the patient's state in the clinical worker, ``None`` for a patient clingate does not hold.
        args: validated ``PrescribeMedicationArgs``.
        proposal_id: the proposal's id (a FHIR id).
        as_of: the request's time (timezone-aware).
        knowledge: the clinical knowledge the gates use.
        flags: the gate flags the clinical worker runs with (ESC-032 lets stale monitoring raise the light).

    Raises:
        ValueError: naive ``as_of``, arguments that do not validate, or a state of another patient.
        FhirInvalid: the resource does not validate (a ``proposal_id`` that is not a FHIR id).
    """
    rx = PrescribeMedicationArgs.model_validate(dict(args))
    _same_patient(state, rx.patient_id)
    resource: dict[str, Any] = {
        "resourceType": "MedicationRequest",
        "id": proposal_id,
        "status": "draft",
        "intent": "proposal",
        "medicationCodeableConcept": {"text": rx.medication_name},
        "subject": {"reference": f"Patient/{rx.patient_id}"},
        "authoredOn": _stamp(as_of),
        "dosageInstruction": [{"text": f"{rx.dosage} {rx.frequency}"}],
    }
    if rx.notes and rx.notes.strip():
        resource["note"] = [{"text": rx.notes.strip()}]
    if state is None:
        verdict = (
            f"clingate holds no clinical state for patient {rx.patient_id}, so its gates (NTI, traffic "
            f"light, Phase 0 staleness) could not run on {rx.medication_name}."
        )
        return _proposal("prescribe_medication", resource, rx.patient_id, None, verdict)
    parsed = parse_document({**resource, "status": "active"})
    if parsed.invalid:
        raise FhirInvalid(parsed.invalid[0].error, "MedicationRequest", proposal_id)
    update = PatientUpdate(patient_id=rx.patient_id, changes=tuple(parsed.changes[rx.patient_id]))
    taken, _ = reduce_update(state, update, as_of)
    alone, _ = reduce_update(None, update, as_of)
    gates = _gates(*(assess(s, as_of, None, knowledge, flags) for s in (state, taken, alone)))
    return _proposal(
        "prescribe_medication", resource, rx.patient_id, gates, _verdict(rx.medication_name, gates)
    )


def _dependencies(assessment: ClinicalAssessment) -> dict[str, list[str]]:
    deps = {drug: list(params) for drug, params in assessment.med_dependencies.items()}
    for drug, params in assessment.med_dependencies_conditional.items():
        deps.setdefault(drug, []).extend(params)
    return deps


def _gates(
    before: ClinicalAssessment, after: ClinicalAssessment, alone: ClinicalAssessment
) -> dict[str, Any]:
    """``gates`` from the assessments without the drug, with it, and of the drug alone (what the maps make
    of it whatever else the patient takes; its parameters are read off ``after``, where the conditional
    ones that depend on co-medication are known)."""
    was, now = gate_summary(before), gate_summary(after)
    together = _dependencies(after)
    parameters = sorted({p for drug in _dependencies(alone) for p in together.get(drug, [])})
    classes = {o.parameter: o for o in after.staleness.observations if o.parameter}
    return {
        "before": was,
        "after": now,
        "nti_drugs": gate_summary(alone)["nti_drugs"],
        "nti_drugs_added": [d for d in now["nti_drugs"] if d not in was["nti_drugs"]],
        "monitoring": [
            {
                "parameter": p,
                "class": classes[p].class_,
                "age_days": classes[p].age_days,
                "effective": classes[p].effective,
            }
            for p in parameters
            if p in classes
        ],
        "staleness_banner": after.staleness.banner,
        "red_sources": now["sources"] if now["traffic_light"] == "RED" else [],
    }


def _change(label: str, before: str, after: str) -> str:
    return f"{label} {after}" if before == after else f"{label} {after} (was {before})"


def _verdict(medication: str, gates: Mapping[str, Any]) -> str:
    """One sentence from ``gates``: what the drug is to the NTI maps, NTI severity, traffic light with
    its escalations (every source after the ladder's base), and the drug's monitoring data."""
    before, after, added = gates["before"], gates["after"], gates["nti_drugs_added"]
    drugs = ", ".join(d if d in added else f"{d} already active" for d in gates["nti_drugs"])
    subject = (
        f"{medication} is a narrow-therapeutic-index drug ({drugs})"
        if drugs
        else f"{medication} is not a narrow-therapeutic-index drug in clingate's maps"
    )
    light = _change("traffic light", before["traffic_light"], after["traffic_light"])
    if after["sources"][1:]:
        light += f" from {'; '.join(after['sources'][1:])}"
    monitoring = ", ".join(
        f"{m['parameter']} {m['class']}"
        + (f" ({m['age_days']} days old)" if m["age_days"] is not None else "")
        for m in gates["monitoring"]
    )
    data = f"monitoring {monitoring}" if monitoring else "no monitoring dependency in clingate's maps"
    return f"{subject}: {_change('NTI', before['nti_severity'], after['nti_severity'])}, {light}; {data}."


def allergy_proposal(
    state: PatientState | None, args: Mapping[str, Any], proposal_id: str, as_of: datetime
) -> Proposal:
    """``add_allergy``: an ``AllergyIntolerance`` awaiting confirmation.

    FHIR R4 AllergyIntolerance has no ``status`` element, so there is no ``draft`` to set: the draft
    notion is its ``verificationStatus`` ``unconfirmed`` (recorded, not yet verified by a clinician),
    together with the proposal itself (the resource reaches no EHR from here). ``clinicalStatus`` is
    ``active``: the reported reaction is what is being documented. No gates apply (``gates`` ``None``);
    ``state`` (``None`` for a patient clingate does not hold) only has to be the arguments' patient.

    Raises:
        ValueError: naive ``as_of``, arguments that do not validate, or a state of another patient.
        FhirInvalid: the resource does not validate.
    """
    allergy = AddAllergyArgs.model_validate(dict(args))
    _same_patient(state, allergy.patient_id)
    reaction: dict[str, Any] = {"manifestation": [{"text": allergy.reaction}]}
    if allergy.severity is not None:
        reaction["severity"] = allergy.severity
    resource = {
        "resourceType": "AllergyIntolerance",
        "id": proposal_id,
        "clinicalStatus": {"coding": [{"system": ALLERGY_CLINICAL, "code": "active"}]},
        "verificationStatus": {"coding": [{"system": ALLERGY_VERIFICATION, "code": "unconfirmed"}]},
        "code": {"text": allergy.substance},
        "patient": {"reference": f"Patient/{allergy.patient_id}"},
        "recordedDate": _stamp(as_of),
        "reaction": [reaction],
    }
    return _proposal("add_allergy", resource, allergy.patient_id)


def note_proposal(
    state: PatientState | None, args: Mapping[str, Any], proposal_id: str, as_of: datetime
) -> Proposal:
    """``save_clinical_note``: a ``DocumentReference`` holding the note as plain text.

    ``status`` ``current`` is the reference's own state (it is the one in use), and ``docStatus``
    ``preliminary`` is the draft notion of the document it points at. The text is the attachment's
    ``data`` (base64 of its UTF-8), ``contentType`` ``text/plain; charset=utf-8``. No gates apply;
    ``state`` (``None`` for a patient clingate does not hold) only has to be the arguments' patient.

    Raises:
        ValueError: naive ``as_of``, arguments that do not validate, or a state of another patient.
        FhirInvalid: the resource does not validate.
    """
    note = ClinicalNoteArgs.model_validate(dict(args))
    _same_patient(state, note.patient_id)
    resource = {
        "resourceType": "DocumentReference",
        "id": proposal_id,
        "status": "current",
        "docStatus": "preliminary",
        "type": {"text": note.note_type},
        "subject": {"reference": f"Patient/{note.patient_id}"},
        "date": _stamp(as_of),
        "content": [
            {
                "attachment": {
                    "contentType": "text/plain; charset=utf-8",
                    "data": base64.b64encode(note.note_text.encode("utf-8")).decode("ascii"),
                }
            }
        ],
    }
    return _proposal("save_clinical_note", resource, note.patient_id)
