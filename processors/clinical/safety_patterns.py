"""SCDA post-pipeline safety patterns: four HARD_FAIL checks on a pharmacist deliverable.

From Supplementary Table 2, "Post-Pipeline Validation" (keyword sets in ``data/safety_patterns.yaml``):

* ESC-012 ICH differential: anticoagulant AND neurological symptom AND fall-risk indicator in the FHIR
  data -> the deliverable must mention intracranial / ICH / subdural / hemorrhage.
* ESC-018 drug interaction assessment: >= 2 medications -> the deliverable must contain interaction
  terminology.
* ESC-023-A NTI/traffic consistency: NTI CRITICAL -> the traffic light must be RED.
* ESC-023-B bleeding risk coverage: supratherapeutic warfarin -> the deliverable must address bleeding.

Trigger keywords are read from the same clinical text as the NTI symptom stems (never medication
strings). Requirement terms written in capitals in the seed (ICH, DDI, INR) match as case-sensitive
whole words ("which" does not contain the acronym ICH); the others as case-insensitive substrings.
The record also carries the patient's current run through the output gates (its SCDA variable
assertions and each revision's gate activations and route) and the escape register's tracked items
T-001 to T-010 (:mod:`processors.drafts.tracking`), so the supplement's telemetry tables can be rebuilt
from the safety-audit topic. It is immutable (frozen) and identified by a SHA-256 digest of its inputs
(the assessment JSON, deliverable id and text, the run), so re-auditing the same inputs yields the same
record.
"""

from __future__ import annotations

import hashlib
import json
import re

from processors.clinical.knowledge import ClinicalKnowledge
from processors.clinical.view import PatientView
from processors.drafts.run import DraftRun, review_outcome, run_assertions
from processors.drafts.tracking import PatientSignals, tracked_items
from schemas.clinical import (
    ClinicalAssessment,
    Deliverable,
    PatternResult,
    RunAudit,
    SafetyAudit,
    TrackedItem,
)

#: Staleness classes that leave a monitoring dependency unusable (the register's T-008).
UNUSABLE = frozenset({"STALE", "PROFOUNDLY_STALE", "MISSING"})


def _found(text: str, terms: tuple[str, ...]) -> list[str]:
    hits = []
    lowered = text.lower()
    for term in terms:
        if term.isupper():
            if re.search(rf"\b{re.escape(term)}\b", text):
                hits.append(term)
        elif term.lower() in lowered:
            hits.append(term)
    return hits


def _requirement(
    pattern_id: str, esc: str, name: str, fired: bool, why: str, text: str, required: tuple[str, ...]
) -> PatternResult:
    if not fired:
        return PatternResult(
            pattern_id=pattern_id,
            esc_id=esc,
            name=name,
            fired=False,
            passed=True,
            detail=f"Trigger not met: {why}",
        )
    hits = _found(text, required)
    detail = f"Triggered ({why}); " + (
        f"requirement met: {', '.join(hits)}"
        if hits
        else f"HARD_FAIL: none of {list(required)} in deliverable"
    )
    return PatternResult(
        pattern_id=pattern_id, esc_id=esc, name=name, fired=True, passed=bool(hits), detail=detail
    )


def run_audit(run: DraftRun) -> RunAudit | None:
    """A run as its safety audit records it (None before its first gated draft)."""
    if run.revision is None:
        return None
    outcome = review_outcome(run)
    return RunAudit(
        run_id=run.run_id,
        revision_count=run.revision,
        audit_verdict=outcome.audit_verdict if outcome is not None else None,
        assertions=[vars(a) for a in run_assertions(run)],
        revisions=[r.model_dump(mode="json") for r in run.revisions],
        must_retrieve=list(run.must_retrieve),
        must_retrieve_missing=list(run.missing),
    )


def _tracked(assessment: ClinicalAssessment, run: DraftRun | None) -> list[TrackedItem]:
    light = assessment.traffic_light
    signals = PatientSignals(
        nti_severity=assessment.nti.severity,
        divergence=light.divergence,
        divergence_levels=light.divergence_levels,
        stale=any(o.class_ in UNUSABLE for o in assessment.staleness.observations),
    )
    return [TrackedItem.model_validate(vars(t)) for t in tracked_items(run, signals)]


def audit_deliverable(
    assessment: ClinicalAssessment,
    view: PatientView,
    deliverable: Deliverable,
    knowledge: ClinicalKnowledge,
    run: DraftRun | None = None,
) -> SafetyAudit:
    """Run the four SCDA patterns for one deliverable.

    Args:
        assessment: the patient's current assessment (NTI severity, traffic light, medications).
        view: the patient view the assessment was computed from (clinical text for triggers).
        deliverable: the deliverable text event.
        knowledge: keyword sets.
        run: the patient's current run through the output gates, if any.

    Returns:
        The immutable audit record.
    """
    sp = knowledge.safety_patterns
    text = deliverable.text
    clinical = view.clinical_text

    anticoag = [a for a in sp.terms("ich_differential", "anticoagulants") if view.has_medication(a)]
    neuro = _found(clinical, sp.terms("ich_differential", "neuro_terms"))
    falls = _found(clinical, sp.terms("ich_differential", "fall_terms"))
    ich = sp.raw["ich_differential"]
    results = [
        _requirement(
            "ich_differential",
            ich["esc_id"],
            ich["name"],
            bool(anticoag and neuro and falls),
            f"anticoagulant {anticoag or 'none'}, neuro {neuro or 'none'}, fall {falls or 'none'}",
            text,
            sp.terms("ich_differential", "required_terms"),
        )
    ]
    ddi = sp.raw["drug_interaction_assessment"]
    count = len(assessment.medications)
    results.append(
        _requirement(
            "drug_interaction_assessment",
            ddi["esc_id"],
            ddi["name"],
            count >= int(ddi["min_medications"]),
            f"{count} medications",
            text,
            sp.terms("drug_interaction_assessment", "required_terms"),
        )
    )
    cons = sp.raw["nti_traffic_consistency"]
    critical = assessment.nti.severity == "CRITICAL"
    light = assessment.traffic_light.light
    results.append(
        PatternResult(
            pattern_id="nti_traffic_consistency",
            esc_id=cons["esc_id"],
            name=cons["name"],
            fired=critical,
            passed=not critical or light == "RED",
            detail=(
                f"NTI CRITICAL -> traffic {light}" + ("" if light == "RED" else " HARD_FAIL: must be RED")
            )
            if critical
            else f"Trigger not met: NTI {assessment.nti.severity}",
        )
    )
    bleed = sp.raw["bleeding_risk_coverage"]
    supra = [s for s in assessment.nti.supratherapeutic if s.drug == bleed["drug"]]
    results.append(
        _requirement(
            "bleeding_risk_coverage",
            bleed["esc_id"],
            bleed["name"],
            bool(supra),
            f"supratherapeutic {bleed['drug']}" if supra else f"no supratherapeutic {bleed['drug']}",
            text,
            sp.terms("bleeding_risk_coverage", "required_terms"),
        )
    )
    assessment_json = json.dumps(assessment.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(assessment_json.encode()).hexdigest()
    recorded = run_audit(run) if run is not None else None
    inputs: list[object] = [digest, deliverable.deliverable_id, text]
    if recorded is not None:
        inputs.append(recorded.model_dump(mode="json"))
    audit_id = hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    fails = sum(1 for r in results if not r.passed)
    return SafetyAudit(
        audit_id=audit_id,
        patient_id=assessment.patient_id,
        deliverable_id=deliverable.deliverable_id,
        as_of=assessment.as_of,
        passed=fails == 0,
        hard_fail_count=fails,
        patterns=results,
        patterns_fired=[r.pattern_id for r in results if r.fired],
        patterns_skipped=[r.pattern_id for r in results if not r.fired],
        nti_severity=assessment.nti.severity,
        traffic_light=light,
        assessment_digest=digest,
        run=recorded,
        tracked=_tracked(assessment, run),
    )
