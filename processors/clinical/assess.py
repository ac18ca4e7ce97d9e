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

Incrementally: an assessment is assembled from parts (:class:`AssessmentParts`: Phase 0.5 dependencies,
the NTI gate and what the medications alone show it, the latest results, age, staleness), each built on
facts of the patient view (:class:`~processors.clinical.view.PatientView`), and every part and fact
declares the resource types it reads and whether the assessment instant feeds it.
:func:`process_event_reusing` is :func:`process_event` given the parts of the patient's previous
assessment: the resource types whose records an event changed, and the instant if it moved, say which
parts are computed again; the others are taken over. Since a part is a function of what it declares
(and of the knowledge and flags, which the parts taken over share), the outputs and the state are the
ones :func:`process_event`, which computes every part, gives for the same event.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from functools import cached_property
from typing import ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict

from processors.clinical.knowledge import ClinicalKnowledge, GateFlags
from processors.clinical.nti import (
    MEDICATION_COUNT_THRESHOLD,
    MedicationFindings,
    evaluate_nti,
    medication_findings,
)
from processors.clinical.phase0 import (
    Dependencies,
    _Dated,
    _latest_per_code,
    assess_staleness,
    future_issues,
    medication_dependencies,
    patient_age,
)
from processors.clinical.records import PatientState
from processors.clinical.safety_patterns import audit_deliverable
from processors.clinical.state import ChangeOutcome, PatientUpdate, reduce_update
from processors.clinical.traffic_light import ReviewInputs, compute_traffic_light
from processors.clinical.view import (
    CONDITIONS,
    ENCOUNTERS,
    MEDICATIONS,
    OBSERVATIONS,
    PATIENT,
    PatientView,
    changed_types,
    take_over,
)
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
    Staleness,
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


AS_OF = "as-of"
"""What a part of an assessment may read besides resource types: the assessment instant."""


class AssessmentParts:
    """The parts one patient's assessment at one instant is assembled from, each computed at most once.

    Every cached part declares what it reads (:attr:`READS`): the resource types of the view's facts it
    reads, and :data:`AS_OF` where the assessment instant feeds it. A part is a function of those, of
    the knowledge and of the flags alone, so the parts of the patient's next assessment under the same
    knowledge and flags (:meth:`successor`) take over every part none of whose inputs changed and
    compute only the others: the assessment they give is the one computed anew. The traffic light (it
    reads the review besides) and the assembly are made for every assessment; they cost little once
    the parts are there.
    """

    READS: ClassVar[Mapping[str, frozenset[str]]] = {
        "dependencies": MEDICATIONS,
        "findings": MEDICATIONS,
        "nti": MEDICATIONS | OBSERVATIONS | CONDITIONS | ENCOUNTERS,
        "dated": OBSERVATIONS,
        "age": PATIENT | {AS_OF},
        "staleness": PATIENT | MEDICATIONS | OBSERVATIONS | {AS_OF},
        "future_issues": OBSERVATIONS | {AS_OF},
    }
    """What each part (a cached property) reads; what :meth:`successor` takes over."""

    def __init__(self, view: PatientView, as_of: datetime, flags: GateFlags) -> None:
        if as_of.tzinfo is None:
            raise ValueError("as_of must be timezone-aware (time is data: pass the event time in UTC)")
        self.view = view
        self.as_of = as_of.astimezone(UTC)  # calendar days and ages are UTC dates
        self.flags = flags
        self.maps = view.knowledge.maps(tier_b=flags.tier_b_class_maps)

    def successor(self, state: PatientState, as_of: datetime) -> AssessmentParts:
        """The parts of the assessment of ``state`` (a later state of this patient) at ``as_of``, under
        these parts' knowledge and flags: every part computed here whose inputs are the same there is
        taken over."""
        changed = changed_types(self.view.state, state)
        parts = AssessmentParts(self.view.successor(state, changed), as_of, self.flags)
        take_over(self, parts, self.READS, changed | {AS_OF} if parts.as_of != self.as_of else changed)
        return parts

    @cached_property
    def dependencies(self) -> Dependencies:
        """Phase 0.5: the monitoring parameters the current medications depend on."""
        return medication_dependencies(self.view, self.view.knowledge, self.maps)

    @cached_property
    def findings(self) -> tuple[MedicationFindings, ...]:
        """The NTI maps that apply, with what the medications alone show."""
        return medication_findings(self.view, self.maps)

    @cached_property
    def nti(self) -> Nti:
        """The NTI gate."""
        return evaluate_nti(self.view, self.findings, self.dependencies.warnings(self.view.readings))

    @cached_property
    def dated(self) -> list[_Dated]:
        """The latest dated observation of each code (what staleness classifies)."""
        return _latest_per_code(self.view)

    @cached_property
    def age(self) -> int | None:
        """Phase 0: the patient's age at the assessment instant."""
        return patient_age(self.view.birth_date, self.as_of)

    @cached_property
    def staleness(self) -> Staleness:
        """Phase 0: staleness of the latest observations and of the medications' dependencies."""
        return assess_staleness(
            self.view, self.dated, self.as_of, self.age, self.dependencies.all_parameters()
        )

    @cached_property
    def future_issues(self) -> tuple[str, ...]:
        """The issues of observations dated after the assessment instant."""
        return future_issues(self.dated, self.as_of)

    def assessment(self, review: ReviewInputs | None) -> ClinicalAssessment:
        """The assessment, with the traffic light for ``review`` (see :func:`assess`)."""
        nti, deps = self.nti, self.dependencies
        nti_parameters = {
            m.name: deps.primary.get(m.name, []) + deps.conditional.get(m.name, [])
            for m in self.maps
            if m.name in nti.drugs or m.name in nti.classes
        }
        light = compute_traffic_light(
            nti, self.staleness, review, self.flags, nti_parameters, deps.all_parameters()
        )
        meds = [m.text for m in self.view.medications]
        return ClinicalAssessment(
            patient_id=self.view.state.patient_id,
            as_of=format_as_of(self.as_of),
            age=self.age,
            staleness=self.staleness,
            medications=meds,
            medication_count=len(meds),
            medication_count_flag=len(meds) >= MEDICATION_COUNT_THRESHOLD,
            med_dependencies=deps.primary,
            med_dependencies_conditional=deps.conditional,
            nti=nti,
            traffic_light=light,
            rules=_rules(self.flags),
            issues=sorted(self.view.issues.union(self.future_issues)),
        )


def assessment_parts(
    previous: AssessmentParts | None,
    state: PatientState,
    as_of: datetime,
    knowledge: ClinicalKnowledge,
    flags: GateFlags,
) -> AssessmentParts:
    """The parts of the assessment of ``state`` at ``as_of``: the successor of ``previous`` where it
    holds parts of an assessment of the same patient under the same knowledge and flags, else new."""
    if (
        previous is not None
        and previous.view.knowledge is knowledge
        and previous.flags == flags
        and previous.view.state.patient_id == state.patient_id
    ):
        return previous.successor(state, as_of)
    return AssessmentParts(PatientView(state, knowledge), as_of, flags)


def assess_view(
    view: PatientView, as_of: datetime, review: ReviewInputs | None, flags: GateFlags
) -> ClinicalAssessment:
    """Run every gate over a prepared :class:`PatientView` (see :func:`assess`)."""
    return AssessmentParts(view, as_of, flags).assessment(review)


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


_DIGESTED_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)
"""The JSON an assessment's digest hashes: ``json.dumps(payload, sort_keys=True, separators=(",", ":"))``
byte for byte; a model's dump holds no cycle, so the encoder need not track the containers it is in."""


def assessment_digest(assessment: ClinicalAssessment) -> str:
    """SHA-256 of the assessment without ``as_of`` (what "the assessment changed" compares)."""
    payload = assessment.model_dump(mode="json", exclude={"as_of"})
    return hashlib.sha256(_DIGESTED_JSON.encode(payload).encode()).hexdigest()


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
    processed = process_event_reusing(state, None, event, now, knowledge, flags)
    return processed.state, processed.outputs


class Processed(NamedTuple):
    """What one event does to a patient (:func:`process_event_reusing`)."""

    state: ClinicalStreamState
    outputs: list[Output]
    parts: AssessmentParts | None
    """The parts of the last assessment the event needed (None: it needed none), for the next event."""


def process_event_reusing(
    state: ClinicalStreamState | None,
    parts: AssessmentParts | None,
    event: PatientUpdate | AdversarialReview | Deliverable | RunEvent,
    now: datetime,
    knowledge: ClinicalKnowledge,
    flags: GateFlags | None = None,
) -> Processed:
    """:func:`process_event`, assessing incrementally: the parts of the assessment ``parts`` holds (the
    patient's previous one, or None) are taken over where the event changed none of their inputs
    (:meth:`AssessmentParts.successor`), so the outputs and the state are :func:`process_event`'s."""
    flags = flags or GateFlags()
    patient_id = event.patient_id
    current = state or ClinicalStreamState(patient=PatientState(patient_id=patient_id))
    outputs: list[Output] = []
    if isinstance(event, Deliverable):
        parts = assessment_parts(parts, current.patient, now, knowledge, flags)
        assessment = parts.assessment(stream_review(current))
        audit = audit_deliverable(assessment, parts.view, event, knowledge, current.run)
        return Processed(current, [audit], parts)
    if isinstance(event, RunEvent):
        nti = None
        if not isinstance(event, AuditReport):
            parts = assessment_parts(parts, current.patient, now, knowledge, flags)
            nti = parts.nti
        gap = current.run.missing if current.run is not None else ()
        run, published = _run_event(current, event, nti)
        outputs.extend(published)
        current = current.model_copy(update={"run": run})
        if not isinstance(event, AuditReport) and run.missing == gap:
            return Processed(current, outputs, parts)  # only a route or a changed gap changes the light
    elif isinstance(event, PatientUpdate):
        patient, outcomes = reduce_update(current.patient, event, now)
        outputs.extend(outcomes)
        current = current.model_copy(update={"patient": patient})
    else:
        current = current.model_copy(update={"review": event})
    parts = assessment_parts(parts, current.patient, now, knowledge, flags)
    assessment = parts.assessment(stream_review(current))
    digest = assessment_digest(assessment)
    if digest != current.last_digest:
        outputs.append(assessment)
        current = current.model_copy(update={"last_digest": digest})
    return Processed(current, outputs, parts)
