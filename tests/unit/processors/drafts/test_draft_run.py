"""A run through the output gates (processors/drafts/run.py): order, restoration, Rule B, assertions."""

from __future__ import annotations

import pytest

from processors.drafts import Evidence
from processors.drafts.inputs import AuditFindings
from processors.drafts.run import (
    ReviewOutcome,
    RunEventRejected,
    apply_audit,
    apply_draft,
    apply_evidence,
    new_run,
    review_outcome,
    run_assertions,
)

EVIDENCE = [Evidence("warfarin label", "Bleeding is the major risk of warfarin therapy.")]
CITED = '[CRG: warfarin label — "Bleeding is the major risk of warfarin therapy."]'
PLAN = "## HOLD WARFARIN\n" + f"The plan. {CITED}\n" * 50


def test_a_run_gates_its_revisions_in_order_and_refuses_a_skipped_one() -> None:
    run = apply_evidence(new_run("run-1"), EVIDENCE)
    run, first = apply_draft(run, 0, PLAN)
    assert first.citations.verified == 50 and run.revision == 0
    with pytest.raises(RunEventRejected, match="draft revision 2 where revision 1 is next"):
        apply_draft(run, 2, PLAN)
    with pytest.raises(RunEventRejected, match="draft revision 1 where revision 0 is next"):
        apply_draft(new_run("run-2"), 1, PLAN)


def test_a_refusal_revision_restores_the_previous_gated_draft_from_the_run_state() -> None:
    run, first = apply_draft(apply_evidence(new_run("run-1"), EVIDENCE), 0, PLAN)
    run, refusal = apply_draft(run, 1, "I am unable to revise this care plan.")
    assert refusal.restored and refusal.draft == first.draft == run.draft
    assert [r.restored for r in run.revisions] == [False, True]
    assert [r.draft_length for r in run.revisions] == [len(first.draft), len(first.draft)]


def test_an_audit_must_be_of_the_last_gated_revision() -> None:
    with pytest.raises(RunEventRejected, match="no draft gated"):
        apply_audit(new_run("run-1"), 0, AuditFindings([], True))
    run, _ = apply_draft(new_run("run-1"), 0, PLAN)
    with pytest.raises(RunEventRejected, match="audit of revision 1, revision 0 gated last"):
        apply_audit(run, 1, AuditFindings([], True))


def test_the_route_feeds_rule_b() -> None:
    run, _ = apply_draft(new_run("run-1"), 0, PLAN)
    assert review_outcome(run) is None
    run, route = apply_audit(run, 0, AuditFindings(["Rule 4.3: parametric leakage"], True))
    assert route.route == "CLL_REVISION"
    assert review_outcome(run) == ReviewOutcome(0, "MODIFICATION_REQUIRED")
    for revision in (1, 2):
        run, _ = apply_draft(run, revision, PLAN)
        run, route = apply_audit(run, revision, AuditFindings(["Rule 4.3: parametric leakage"], True))
    assert route.route == "PROCEED" and route.overrides == ["revision_budget_exhausted"]
    assert review_outcome(run) == ReviewOutcome(2, "MODIFICATION_REQUIRED")


def test_a_clean_compliant_audit_approves() -> None:
    run, _ = apply_draft(new_run("run-1"), 0, PLAN)
    run, _ = apply_audit(run, 0, AuditFindings(["Rule 4.14: quote integrity"], True))
    assert review_outcome(run) == ReviewOutcome(0, "APPROVED")


def test_the_run_assertions_name_each_variable_and_its_status() -> None:
    run = apply_evidence(new_run("run-1"), EVIDENCE)
    run, _ = apply_draft(run, 0, PLAN + '[CRG: warfarin label — "Warfarin cures everything."]')
    assertions = {a.variable: a for a in run_assertions(run)}
    assert list(assertions) == [
        "draft_length", "revision_count", "evidence_count", "imperative_warnings", "fabricated_quotes",
        "wrong_attribution_rate", "citation_corrections_growth", "draft_restored",
    ]  # fmt: skip
    assert assertions["fabricated_quotes"].status == "FAIL" and assertions["fabricated_quotes"].value == 1
    assert assertions["draft_length"].status == "WARN", "a short draft is outside the comprehensive window"
    assert assertions["evidence_count"].status == "PASS" and assertions["revision_count"].status == "PASS"


def test_each_revision_records_its_activations_and_route() -> None:
    run, _ = apply_draft(apply_evidence(new_run("run-1"), EVIDENCE), 0, PLAN)
    run, _ = apply_audit(run, 0, AuditFindings(["Rule 4.3: parametric leakage", "Rule 4.6: x"], False, 900))
    (record,) = run.revisions
    assert (record.transforms, record.checked, record.verified) == (1, 50, 50)
    assert (record.route, record.blocking_count, record.hq_decision_count) == ("CLL_REVISION", 1, 1)
    assert (record.cds_compliant, record.audit_length) == (False, 900)
    assert run.routed() == record


def test_a_run_without_a_draft_has_no_assertions() -> None:
    with pytest.raises(ValueError, match="no gated draft"):
        run_assertions(new_run("run-1"))
