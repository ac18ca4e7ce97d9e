"""Paired ablation measurements: regimes, Table 10, paired deltas, the arm recorder."""

from __future__ import annotations

import pytest

from processors.dbpm import DBPMConfig, parse_event
from processors.dbpm.ablation import ArmRecorder, ablation_report, paired_deltas, regime, tag_confusion
from processors.dbpm.events import GateEvent, VerdictEvent
from processors.dbpm.measurement import TagCounts

#: Table 8 of the paper: category -> (n_PASS, n_FAIL, coverage, P(t|P), P(t|F), NER bucket, regime).
TABLE_8 = {
    "diagnosis": (4764, 105, 0.957, 0.043, 0.733, True, "selective"),
    "risk_factor": (564, 448, 0.537, 0.463, 1.000, True, "selective"),
    "outcome_clinicalstatus": (3191, 448, 0.044, 0.956, 1.000, True, "categorical"),
    "outcome_disposition": (2235, 419, 0.017, 0.983, 1.000, True, "categorical"),
    "outcome_mortality": (697, 351, None, 0.149, 0.000, False, "fallback"),
    "adverse_event": (2517, 443, None, 0.113, 0.000, False, "fallback"),
    "history": (1971, 433, 0.428, 0.000, 0.000, True, "no tagging"),
    "observation": (2979, 416, 0.013, 0.000, 0.000, True, "no tagging"),
    "symptoms": (3944, 303, 0.968, 0.000, 0.000, True, "saturated"),
    "treatment": (4143, 260, 0.977, 0.000, 0.000, True, "saturated"),
    "tests": (4130, 242, 0.948, 0.000, 0.000, True, "saturated"),
}


@pytest.mark.parametrize("category", sorted(TABLE_8))
def test_the_regime_rules_reproduce_table_8(category: str) -> None:
    n_pass, n_fail, coverage, p_pass, p_fail, bucket, expected = TABLE_8[category]
    counts = TagCounts(round(p_fail * n_fail), n_fail, round(p_pass * n_pass), n_pass)
    assert regime(counts, bucket, coverage) == expected


def test_regimes_outside_table_8() -> None:
    assert regime(TagCounts(0, 0, 3, 10), True, 0.5) == "undefined"
    assert regime(TagCounts(5, 10, 0, 10), True, 0.5) == "selective"  # infinite lift
    assert regime(TagCounts(1, 10, 8, 10), True, 0.5) == "anti-selective"
    assert regime(TagCounts(0, 10, 2, 100), True, 0.97) == "saturated"  # zero lift, saturated coverage


def test_table_10_on_the_papers_counts() -> None:
    table = tag_confusion(TagCounts(1392, 3868, 6101, 31135))
    fail, passed, total = table["rows"]["FAIL"], table["rows"]["PASS"], table["rows"]["total"]
    assert (fail["tagged"], fail["not_tagged"], round(fail["tagged_pct"], 1)) == (1392, 2476, 36.0)
    assert (passed["tagged"], passed["not_tagged"], round(passed["tagged_pct"], 1)) == (6101, 25034, 19.6)
    assert fail["tagged_pct"] + fail["not_tagged_pct"] == pytest.approx(100.0)
    assert (total["tagged"], total["not_tagged"], total["total"]) == (7493, 27510, 35003)
    lift = table["lift"]
    assert [round(lift[k], 2) for k in ("value", "ci_low", "ci_high")] == [1.84, 1.75, 1.93]


def _events(answer_fails: bool, covered: bool, index: int) -> tuple[GateEvent, VerdictEvent]:
    payload = {"question": "q?", "answer": f"a{index}", "category": "risk_factor"}
    ner = ["Risk_Factor"] if covered else ["Diagnosis"]
    gate = parse_event({
        "kind": "gate", "ts": "2026-05-04T00:00:00Z", "task": "qa", "patient_id": f"p{index}",
        "candidate_id": f"c{index}", "payload": {**payload, "ner_categories": ner},
    })  # fmt: skip
    verdict = parse_event({
        "kind": "verdict", "ts": "2026-05-04T00:00:01Z", "task": "qa", "patient_id": f"p{index}",
        "verdict": "hard_fail" if answer_fails else "success", "source": "verifier_mmed", "payload": payload,
    })  # fmt: skip
    assert isinstance(gate, GateEvent) and isinstance(verdict, VerdictEvent)
    return gate, verdict


def _arm(name: str, decisions: list[str], config: DBPMConfig | None = None) -> ArmRecorder:
    recorder = ArmRecorder(name, config or DBPMConfig())
    for index, decision in enumerate(decisions):
        gate, verdict = _events(index % 2 == 0, index % 3 == 0, index)
        recorder.gate(gate, decision, "rule")
        recorder.verdict(verdict)
    return recorder


def test_the_recorder_pairs_decisions_with_verdicts_and_counts_coverage_on_pass_pairs() -> None:
    result = _arm("full", ["DOWNGRADE", "ALLOW", "BLOCK", "ALLOW", "DOWNGRADE", "ALLOW"]).result()
    counts = result.selectivity.cell("qa", "risk_factor")
    assert counts == TagCounts(fail_tagged=3, fail_total=3, pass_tagged=0, pass_total=3)
    coverage = result.coverage.cell("qa", "risk_factor")  # covered: indexes 0 and 3 (3 is PASS)
    assert (coverage.pass_tagged, coverage.pass_total) == (1, 3)
    assert result.decision_counts() == {"qa": {"ALLOW": 3, "DOWNGRADE": 2, "BLOCK": 1}}


def test_paired_deltas_count_pairs_kept_and_every_changed_decision() -> None:
    reference = _arm("full", ["BLOCK", "DOWNGRADE", "ALLOW", "BLOCK"]).result()
    arm = _arm("off", ["ALLOW", "ALLOW", "ALLOW", "BLOCK"]).result()
    qa = paired_deltas(reference, arm)["tasks"]["qa"]
    assert (qa["reference_pairs"], qa["arm_pairs"], qa["delta"], qa["delta_pct"], qa["changed"]) == (
        2, 3, 1, 50.0, 2,
    )  # fmt: skip
    moves = {(m["reference"], m["arm"]): m["count"] for m in qa["transitions"]}
    assert moves == {
        ("ALLOW", "ALLOW"): 1, ("DOWNGRADE", "ALLOW"): 1, ("BLOCK", "ALLOW"): 1, ("BLOCK", "BLOCK"): 1,
    }  # fmt: skip


def test_arms_over_different_streams_are_not_paired() -> None:
    reference = _arm("full", ["ALLOW", "ALLOW"]).result()
    shorter = _arm("off", ["ALLOW"]).result()
    with pytest.raises(ValueError, match="different streams"):
        paired_deltas(reference, shorter)
    with pytest.raises(ValueError, match="no arm named"):
        ablation_report([reference], reference="nothing")


def test_the_report_flags_a_category_without_bucket_as_fallback_in_that_arm() -> None:
    no_buckets = DBPMConfig(qa_ner_buckets={})
    report = ablation_report([
        _arm("full", ["DOWNGRADE", "ALLOW"] * 3).result(),
        _arm("no_coverage", ["ALLOW"] * 6, no_buckets).result(),
    ])  # fmt: skip
    regimes = {arm["name"]: arm["qa_categories"][0]["regime"] for arm in report["arms"]}
    assert regimes == {"full": "selective", "no_coverage": "fallback"}
    assert report["arms"][0]["verifier_calls_saved"]["total"] == 0
    assert report["paired"][0]["tasks"]["qa"]["changed"] == 3
