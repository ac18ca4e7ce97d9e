"""The escape register's tracked items as a run's audit record states them (processors/drafts/tracking)."""

from __future__ import annotations

from processors.drafts import Evidence
from processors.drafts.inputs import AuditFindings
from processors.drafts.run import DraftRun, apply_audit, apply_draft, apply_evidence, new_run
from processors.drafts.tracking import PatientSignals, tracked_items

LABEL = "digoxin label"
SENTENCES = ["Digoxin toxicity is more likely with hypokalemia.", "Check potassium before each dose."]
RENAL = Evidence("renal guide", "Reduce the dose in renal failure.")
EVIDENCE = [Evidence(LABEL, " ".join(SENTENCES)), RENAL]
CALM = PatientSignals(nti_severity="ELEVATED", divergence="MATCH", divergence_levels=0, stale=False)


def _statuses(run: DraftRun | None, patient: PatientSignals = CALM) -> dict[str, str]:
    return {t.item: t.status for t in tracked_items(run, patient)}


def test_all_ten_items_in_order_and_unmeasured_without_a_run() -> None:
    statuses = _statuses(None)
    assert list(statuses) == [f"T-{n:03d}" for n in range(1, 11)]
    assert statuses["T-003"] == "CLOSED"
    assert {statuses[i] for i in ("T-001", "T-002", "T-004", "T-006", "T-007", "T-009", "T-010")} == {
        "NOT_MEASURED"
    }


def test_a_run_measures_length_corrections_revisions_and_attribution() -> None:
    quote = f'[CRG: {LABEL} — "{SENTENCES[0]}"]'
    wrong = f'[CRG: {LABEL} — "Reduce the dose in renal failure."]'
    run = apply_evidence(new_run("run-1"), EVIDENCE)
    run, _ = apply_draft(run, 0, f"Plan. {quote} {quote}")
    run, _ = apply_audit(run, 0, AuditFindings(["Rule 4.3: leakage"], True, 1200))
    statuses = _statuses(run)
    assert statuses["T-001"] == "WARN", "an audit report under 1,500 characters"
    assert statuses["T-002"] == "WARN", "a draft outside the comprehensive window"
    assert statuses["T-007"] == statuses["T-009"] == statuses["T-010"] == "PASS"
    paraphrase = f'[CRG: {LABEL} — "Digoxin toxicity is likely with hypokalemia."]'
    run, _ = apply_draft(run, 1, f"Plan, revised. {paraphrase} {wrong} {quote}")
    statuses = _statuses(run)
    assert statuses["T-007"] == "WARN", "revision 1 corrected more than revision 0"
    assert statuses["T-010"] == "ESCALATE", "one wrong attribution in three citations is above 10%"


def test_shadow_divergence_warns_and_non_nti_staleness_is_t008() -> None:
    stale = PatientSignals(nti_severity="NORMAL", divergence="SHADOW_HIGHER", divergence_levels=1, stale=True)
    statuses = _statuses(None, stale)
    assert statuses["T-005"] == statuses["T-008"] == "WARN"
    nti = PatientSignals(nti_severity="CRITICAL", divergence="SHADOW_HIGHER", divergence_levels=1, stale=True)
    assert _statuses(None, nti)["T-008"] == "PASS"
