"""Assessment assembly and the pure patient-keyed stream processor.

* :func:`assess` ``(patient_state, as_of, review_inputs) -> ClinicalAssessment`` runs every gate.
* :func:`process_event` ``(state, event, now) -> (new_state, outputs)`` is what the patient-keyed stream
  calls for each event on the co-partitioned topics: a FHIR update (reduce, re-assess, emit only if the
  assessment changed), an adversarial review (store, re-assess, emit only if changed), a deliverable
  (emit an immutable SCDA audit, with the patient's current run through the output gates) or an
  output-gate event (a run's evidence, draft or audit: a gated draft or a route, and a re-assessment
  after a route). ``now`` is the event time and is the as-of instant of the assessment.
* A run's evidence bundle and each of its drafts are checked against the patient's must-retrieve
  sources as the NTI gate lists them at that event (ESC-002): the gated draft names the sources the
  evidence lacks, an :class:`~schemas.clinical.EvidenceRequest` asks the retrieval step for them (once
  per distinct gap, :func:`processors.drafts.run.check_evidence`), and the patient is re-assessed when
  the gap changed, since a gap keeps the light from GREEN.

"Changed" compares a SHA-256 digest of the assessment without its ``as_of`` field, so a replay of the
same events emits the same assessments and nothing more.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from processors.clinical.knowledge import ClinicalKnowledge, GateFlags
from processors.clinical.nti import MEDICATION_COUNT_THRESHOLD, evaluate_nti
from processors.clinical.phase0 import assess_staleness, medication_dependencies, patient_age
from processors.clinical.records import PatientState
from processors.clinical.safety_patterns import audit_deliverable
from processors.clinical.state import ChangeOutcome, PatientUpdate, reduce_update
from processors.clinical.traffic_light import ReviewInputs, compute_traffic_light
from processors.clinical.view import PatientView
from processors.drafts.citations import Evidence
from processors.drafts.inputs import DraftInputError, parse_audit
from processors.drafts.run import (
    DraftRun,
    apply_audit,
    apply_draft,
    apply_evidence,
    check_evidence,
    new_run,
    review_outcome,
    run_assertions,
)
from schemas.clinical import (
    AdversarialReview,
    AuditReport,
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidenceRequest,
    GatedDraft,
    Nti,
    RevisionRoute,
    SafetyAudit,
)


def format_as_of(as_of: datetime) -> str:
    """The contract's as-of rendering: UTC, seconds, ``Z``."""
    return as_of.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rules(flags: GateFlags) -> list[str]:
    rules = []
    if flags.tier_b_class_maps:
        rules.append("ESC-021-tier-b")
    if flags.esc032_staleness:
        rules.append("ESC-032")
    if flags.esc033_compound:
        rules.append(f"ESC-033({flags.esc033_min_class})")
    if flags.rule_a_enforced:
        rules.append("Rule A enforced")
    return rules


def assess_view(
    view: PatientView, as_of: datetime, review: ReviewInputs | None, flags: GateFlags
) -> ClinicalAssessment:
    """Run every gate over a prepared :class:`PatientView` (see :func:`assess`)."""
    if as_of.tzinfo is None:
        raise ValueError("as_of must be timezone-aware (time is data: pass the event time in UTC)")
    as_of = as_of.astimezone(UTC)  # calendar days and ages are UTC dates
    knowledge = view.knowledge
    maps = knowledge.maps(tier_b=flags.tier_b_class_maps)
    age = patient_age(view.birth_date, as_of)
    deps = medication_dependencies(view, knowledge, maps)
    staleness = assess_staleness(view, as_of, age, deps.all_parameters())
    nti = evaluate_nti(view, maps, deps)
    nti_parameters = {
        m.name: deps.primary.get(m.name, []) + deps.conditional.get(m.name, [])
        for m in maps
        if m.name in nti.drugs or m.name in nti.classes
    }
    light = compute_traffic_light(nti, staleness, review, flags, nti_parameters, deps.all_parameters())
    issues = sorted(
        {
            i
            for r in view.state.resources.values()
            for i in (f"{r.resource_type}/{r.id}: {x}" for x in r.issues)
        }
        | set(view.issues)
    )
    meds = [m.text for m in view.medications]
    return ClinicalAssessment(
        patient_id=view.state.patient_id,
        as_of=format_as_of(as_of),
        age=age,
        staleness=staleness,
        medications=meds,
        medication_count=len(meds),
        medication_count_flag=len(meds) >= MEDICATION_COUNT_THRESHOLD,
        med_dependencies=deps.primary,
        med_dependencies_conditional=deps.conditional,
        nti=nti,
        traffic_light=light,
        rules=_rules(flags),
        issues=issues,
    )


def assess(
    state: PatientState,
    as_of: datetime,
    review: ReviewInputs | None,
    knowledge: ClinicalKnowledge,
    flags: GateFlags | None = None,
) -> ClinicalAssessment:
    """Assess one patient.

    Args:
        state: the patient's resources (latest versions).
        as_of: assessment instant (timezone-aware); the event time in the stream.
        review: adversarial review / audit inputs, or ``None`` (production light = shadow light).
        knowledge: loaded clinical knowledge.
        flags: rules beyond the seed (all off by default).

    Returns:
        The assessment per the output contract.
    """
    return assess_view(PatientView(state, knowledge), as_of, review, flags or GateFlags())


def assessment_digest(assessment: ClinicalAssessment) -> str:
    """SHA-256 of the assessment without ``as_of`` (what "the assessment changed" compares)."""
    payload = assessment.model_dump(mode="json", exclude={"as_of"})
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def review_inputs(review: AdversarialReview | None) -> ReviewInputs | None:
    """The traffic-light inputs carried by an adversarial review event."""
    if review is None:
        return None
    return ReviewInputs(
        disposition=review.disposition,
        subcategory=review.subcategory,
        automation_bias_risk=review.automation_bias_risk,
        revision_count=review.revision_count,
        audit_verdict=review.audit_verdict,
    )


class ClinicalStreamState(BaseModel):
    """Per-patient state of the clinical stream (one table value per patient key)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    patient: PatientState
    review: AdversarialReview | None = None
    last_digest: str | None = None
    run: DraftRun | None = None
    """The patient's current run through the output gates (the last one started)."""


Output = ClinicalAssessment | SafetyAudit | GatedDraft | RevisionRoute | EvidenceRequest | ChangeOutcome
RunEvent = EvidenceBundle | ClinicalDraft | AuditReport
"""The output gates' inputs: a run's evidence, its drafts and the audits of its gated drafts."""


def stream_review(state: ClinicalStreamState) -> ReviewInputs | None:
    """The traffic light's review inputs: the adversarial review's, with the revision count and audit
    verdict of the current run's last route where there is one (Rule B follows the run itself) and the
    must-retrieve sources the run's evidence lacks (ESC-002)."""
    inputs = review_inputs(state.review)
    run = state.run
    outcome = review_outcome(run) if run is not None else None
    if outcome is not None:
        inputs = replace(inputs or ReviewInputs(), revision_count=outcome.revision_count,
                         audit_verdict=outcome.audit_verdict)  # fmt: skip
    if run is not None and run.missing:
        inputs = replace(inputs or ReviewInputs(), missing_evidence=run.missing)
    return inputs


def _evidence_request(event: RunEvent, run: DraftRun, nti: Nti, request: tuple[str, ...]) -> EvidenceRequest:
    """The request for the sources the run's evidence lacks, naming the maps that require them."""
    return EvidenceRequest(
        patient_id=event.patient_id,
        run_id=run.run_id,
        event_time=event.event_time,
        revision=event.revision if isinstance(event, ClinicalDraft) else run.revision,
        nti_severity=nti.severity,
        drugs=[d.drug for d in nti.per_drug if d.severity != "NORMAL"],
        must_retrieve=list(run.must_retrieve),
        missing=list(request),
    )


def _run_event(state: ClinicalStreamState, event: RunEvent, nti: Nti | None) -> tuple[DraftRun, list[Output]]:
    """One output-gate event through the patient's current run (an event of another run starts it
    anew: a new run's evidence or first draft replaces the old run; anything else of it is refused).
    ``nti`` is the patient's NTI gate output at an evidence bundle or a draft: its must-retrieve sources
    are what the run's evidence is checked against.

    Raises:
        RunEventRejected: a draft or audit out of order.
        DraftInputError: an audit report that is not the contract's.
    """
    current = state.run
    run = current if current is not None and current.run_id == event.run_id else new_run(event.run_id)
    base = {"patient_id": event.patient_id, "run_id": event.run_id, "event_time": event.event_time}
    if isinstance(event, EvidenceBundle | ClinicalDraft):
        assert nti is not None, "an evidence bundle or a draft is checked against the NTI gate's output"
        if isinstance(event, EvidenceBundle):
            packets = [Evidence(p.source, p.text) for p in event.packets]
            run, request = check_evidence(apply_evidence(run, packets), nti.must_retrieve)
            return run, [_evidence_request(event, run, nti, request)] if request else []
        run, result = apply_draft(run, event.revision, event.text)
        run, request = check_evidence(run, nti.must_retrieve)
        gated = GatedDraft.model_validate({
            **base, **result.contract(), "assertions": [vars(a) for a in run_assertions(run)],
            "must_retrieve": list(run.must_retrieve), "must_retrieve_missing": list(run.missing),
        })  # fmt: skip
        return run, [gated, *([_evidence_request(event, run, nti, request)] if request else [])]
    try:
        report = parse_audit(json.loads(event.report))
    except json.JSONDecodeError as error:
        raise DraftInputError(f"the audit report is not JSON: {error}") from error
    run, route = apply_audit(run, event.revision, report)
    return run, [RevisionRoute.model_validate({**base, "revision": event.revision, **route.contract()})]


def process_event(
    state: ClinicalStreamState | None,
    event: PatientUpdate | AdversarialReview | Deliverable | RunEvent,
    now: datetime,
    knowledge: ClinicalKnowledge,
    flags: GateFlags | None = None,
) -> tuple[ClinicalStreamState, list[Output]]:
    """The stream processor: one event in, the new state and the outputs to emit.

    Args:
        state: the patient's stream state, ``None`` for a new patient.
        event: a parsed FHIR update, an adversarial review, a deliverable, or an output-gate event (a
            run's evidence, draft or audit report), keyed by patient.
        now: event time.
        knowledge: loaded clinical knowledge.
        flags: rules beyond the seed.

    Returns:
        New state and outputs: change outcomes, an assessment when it changed, an audit per deliverable,
        a gated draft per draft, a route per audit report (whose Rule B inputs may change the light).

    Raises:
        RunEventRejected: a draft or audit of a run out of order (the worker dead-letters it).
        DraftInputError: an audit report that is not the output-gates contract's.
    """
    flags = flags or GateFlags()
    patient_id = event.patient_id
    current = state or ClinicalStreamState(patient=PatientState(patient_id=patient_id))
    outputs: list[Output] = []
    if isinstance(event, Deliverable):
        view = PatientView(current.patient, knowledge)
        assessment = assess_view(view, now, stream_review(current), flags)
        return current, [audit_deliverable(assessment, view, event, knowledge, current.run)]
    if isinstance(event, RunEvent):
        checked = not isinstance(event, AuditReport)
        nti = assess(current.patient, now, None, knowledge, flags).nti if checked else None
        gap = current.run.missing if current.run is not None else ()
        run, published = _run_event(current, event, nti)
        outputs.extend(published)
        current = current.model_copy(update={"run": run})
        if not isinstance(event, AuditReport) and run.missing == gap:
            return current, outputs  # only a route or a changed evidence gap changes the traffic light
    elif isinstance(event, PatientUpdate):
        patient, outcomes = reduce_update(current.patient, event, now)
        outputs.extend(outcomes)
        current = current.model_copy(update={"patient": patient})
    else:
        current = current.model_copy(update={"review": event})
    assessment = assess(current.patient, now, stream_review(current), knowledge, flags)
    digest = assessment_digest(assessment)
    if digest != current.last_digest:
        outputs.append(assessment)
        current = current.model_copy(update={"last_digest": digest})
    return current, outputs
