"""The output gates through the topology driver: a run's drafts, evidence and audits on the clinical loop.

The clinical loop (:class:`~streams.worker.clinical.ClinicalHandler`) takes a run's evidence, drafts and
audit reports keyed by its patient, keeps the run in the patient's table value (read back from the
table for every record, as a restarted worker reads it), publishes a gated draft per draft and a route
per audit, and feeds the route to the traffic light's Rule B. Out-of-order and malformed records are
dead letters with their reason; the loop goes on. The gates' activations are counted as Prometheus
metrics as the records are published.
"""

from __future__ import annotations

import json

from schemas.clinical import (
    AuditReport,
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidencePacket,
    EvidenceRequest,
    GatedDraft,
    RevisionRoute,
    SafetyAudit,
)
from streams.runtime.settings import Settings
from streams.testing.driver import TopologyDriver
from tests.clinical_scenario import AS_OF, PATIENT, scenario
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_EVIDENCE_REQUESTS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_SAFETY_AUDITS,
    FHIR_UPDATES,
)

RUN = "run-1"
KEY = PATIENT.encode()
LABEL = "Digoxin toxicity is more likely with hypokalemia. Monitor serum potassium."
CITED = f'[CRG: digoxin label — "{LABEL}"]'
PLAN = "## HOLD DIGOXIN\n" + f"The care plan, in full. {CITED}\n" * 40
LEAKAGE = json.dumps(
    {"violations": ["Rule 4.3: parametric leakage in the dosing section"], "cds_compliant": True}
)


def _draft(revision: int, text: str) -> ClinicalDraft:
    return ClinicalDraft(patient_id=PATIENT, run_id=RUN, revision=revision, event_time=AS_OF, text=text)


def _audit(revision: int, report: str = LEAKAGE) -> AuditReport:
    return AuditReport(patient_id=PATIENT, run_id=RUN, revision=revision, event_time=AS_OF, report=report)


def test_a_run_is_gated_routed_and_escalated_by_rule_b_from_the_stream() -> None:
    """Scenario: PT-TEST-010's updates, then a run: evidence, draft 0 (a header to lint, verified
    citations), an audit that wants a revision, a refusal as revision 1 (restored from the table), its
    audit, draft 2 and its audit (the budget is exhausted: PROCEED, not approved).

    Then the pharmacist's deliverable.

    Published: three gated drafts and three routes; the restored draft is revision 0's gated text; the
    last assessment names Rule B's circuit breaker among its sources; the deliverable's safety audit
    carries the run (its assertions and each revision's activations) and the ten tracked items.
    """
    updates, _, _ = scenario()
    evidence = EvidenceBundle(patient_id=PATIENT, run_id=RUN, event_time=AS_OF,
                              packets=[EvidencePacket(source="digoxin label", text=LABEL)])  # fmt: skip
    events = [
        (CLINICAL_EVIDENCE, evidence),
        (CLINICAL_DRAFTS, _draft(0, PLAN)),
        (CLINICAL_AUDIT_REPORTS, _audit(0)),
        (CLINICAL_DRAFTS, _draft(1, "I cannot revise this plan.")),
        (CLINICAL_AUDIT_REPORTS, _audit(1)),
        (CLINICAL_DRAFTS, _draft(2, PLAN)),
        (CLINICAL_AUDIT_REPORTS, _audit(2)),
        (CLINICAL_DELIVERABLES, Deliverable(patient_id=PATIENT, deliverable_id="care-plan-1",
                                            event_time=AS_OF, text=PLAN)),
    ]  # fmt: skip
    with TopologyDriver(Settings()) as driver:
        for update in updates:
            driver.pipe(FHIR_UPDATES, KEY, update)
        before = len(driver.values(CLINICAL_ASSESSMENTS, ClinicalAssessment))
        for topic, event in events:
            driver.pipe(topic, KEY, event)
        gated = driver.values(CLINICAL_GATED_DRAFTS, GatedDraft)
        routes = driver.values(CLINICAL_REVISION_ROUTES, RevisionRoute)
        assessments = driver.values(CLINICAL_ASSESSMENTS, ClinicalAssessment)[before:]
        [audit] = driver.values(CLINICAL_SAFETY_AUDITS, SafetyAudit)
        dead = [d for topic in (CLINICAL_EVIDENCE, CLINICAL_DRAFTS, CLINICAL_AUDIT_REPORTS)
                for d in driver.dead_letters(topic)]  # fmt: skip
        metrics = driver.clinical_metrics
        counted = {
            "hold-header": metrics.draft_transforms.labels("hold-header")._value.get(),
            "verified": metrics.citations.labels("verified")._value.get(),
            "restorations": metrics.restorations._value.get(),
            "CLL_REVISION": metrics.routes.labels("CLL_REVISION")._value.get(),
            "PROCEED": metrics.routes.labels("PROCEED")._value.get(),
            "REVISION_REQUIRED": metrics.violations.labels("REVISION_REQUIRED")._value.get(),
            "budget": metrics.overrides.labels("revision_budget_exhausted")._value.get(),
            "restored WARN": metrics.assertions.labels("draft_restored", "WARN")._value.get(),
            "T-009 PASS": metrics.tracked.labels("T-009", "PASS")._value.get(),
        }

    assert dead == []
    assert [g.revision for g in gated] == [0, 1, 2]
    assert gated[0].lint.transforms[0].after == "DIGOXIN HOLD CONSIDERATION"
    assert gated[0].citations.verified == gated[0].citations.checked == 40
    assert gated[1].restored and gated[1].draft == gated[0].draft
    assert {a.variable: a.status for a in gated[1].assertions}["draft_restored"] == "WARN"
    assert [(r.route, r.overrides) for r in routes] == [
        ("CLL_REVISION", []), ("CLL_REVISION", []), ("PROCEED", ["revision_budget_exhausted"]),
    ]  # fmt: skip
    assert counted == {
        "hold-header": 1, "verified": 80, "restorations": 1, "CLL_REVISION": 2, "PROCEED": 1,
        "REVISION_REQUIRED": 3, "budget": 1, "restored WARN": 1, "T-009 PASS": 1,
    }, "the escape telemetry counts what the gated drafts and routes carry"  # fmt: skip
    assert assessments, "the route of revision 2 changes the light's sources"
    assert audit.run is not None and audit.run.run_id == RUN
    assert (audit.run.revision_count, audit.run.audit_verdict) == (2, "MODIFICATION_REQUIRED")
    assert [r.restored for r in audit.run.revisions] == [False, True, False]
    assert [r.route for r in audit.run.revisions] == ["CLL_REVISION", "CLL_REVISION", "PROCEED"]
    assert [t.item for t in audit.tracked] == [f"T-{n:03d}" for n in range(1, 11)]
    assert any(
        s.startswith("Rule B: circuit breaker (2 revisions") for s in assessments[-1].traffic_light.sources
    )


def test_out_of_order_and_malformed_run_records_are_dead_letters_with_their_reason() -> None:
    with TopologyDriver(Settings()) as driver:
        driver.pipe(CLINICAL_DRAFTS, KEY, _draft(1, PLAN))  # no revision 0
        driver.pipe(CLINICAL_DRAFTS, KEY, _draft(0, PLAN))
        driver.pipe(CLINICAL_AUDIT_REPORTS, KEY, _audit(0, "Verdict: MODIFICATION_REQUIRED"))
        driver.pipe(CLINICAL_AUDIT_REPORTS, KEY, _audit(0))
        drafts, audits = driver.dead_letters(CLINICAL_DRAFTS), driver.dead_letters(CLINICAL_AUDIT_REPORTS)
        routes = driver.values(CLINICAL_REVISION_ROUTES, RevisionRoute)

    [skipped] = drafts
    assert "draft revision 1 where revision 0 is next" in skipped.headers["message"]
    [not_json] = audits
    assert "not JSON" in not_json.headers["message"]
    assert [r.route for r in routes] == ["CLL_REVISION"], "the loop went on"


def test_missing_must_retrieve_sources_are_requested_on_their_topic_and_named_on_the_gated_draft() -> None:
    """PT-TEST-010 is digoxin CRITICAL: its seven must-retrieve sources are checked against the run's
    evidence, which has none of them under their exact names; the loop publishes one evidence request
    (keyed by patient) and names the seven on the gated draft."""
    updates, _, _ = scenario()
    evidence = EvidenceBundle(patient_id=PATIENT, run_id=RUN, event_time=AS_OF,
                              packets=[EvidencePacket(source="digoxin label", text=LABEL)])  # fmt: skip
    with TopologyDriver(Settings()) as driver:
        for update in updates:
            driver.pipe(FHIR_UPDATES, KEY, update)
        driver.pipe(CLINICAL_EVIDENCE, KEY, evidence)
        driver.pipe(CLINICAL_DRAFTS, KEY, _draft(0, PLAN))
        [request] = driver.values(CLINICAL_EVIDENCE_REQUESTS, EvidenceRequest)
        [gated] = driver.values(CLINICAL_GATED_DRAFTS, GatedDraft)
        light = driver.values(CLINICAL_ASSESSMENTS, ClinicalAssessment)[-1].traffic_light
    assert (request.patient_id, request.run_id, request.nti_severity) == (PATIENT, RUN, "CRITICAL")
    assert request.missing == request.must_retrieve and len(request.missing) == 7
    assert gated.must_retrieve_missing == request.missing
    assert "ESC-002: the run's evidence lacks 7 must-retrieve sources" in light.sources
