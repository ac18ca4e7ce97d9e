"""The audit router (processors/drafts/router.py): buckets, the PASS filter and the overrides in order.

Cases from the PharmMesh supplement's post-audit gate table (ESC-025, ESC-027, ESC-028, ESC-030) and the
PT-TEST-010 execution trace.
"""

from __future__ import annotations

import pytest
import yaml

from processors.drafts import route_audit
from processors.drafts.rules import RulesError, gate_rules, parse_rules


def _buckets(violations: list[str], **kwargs: object) -> list[str]:
    return [v.bucket for v in route_audit(violations, kwargs.get("cds", True), 0).violations]  # type: ignore[arg-type]


def test_parser_warning_only_violations_proceed() -> None:
    result = route_audit(["[PARSER WARNING] output truncated", "[RAW VIOLATION TEXT] Rule 4.3 ..."], True, 0)
    assert result.route == "PROCEED" and result.overrides == ["parser_warning_filter"]
    assert {v.classified_by for v in result.violations} == {"parser_warning"}
    assert result.contract()["blocking_count"] == 0


def test_no_parametric_leakage_in_a_pass_finding_is_not_a_violation() -> None:
    result = route_audit(["Rule 4.3: ✅ PASS — No parametric leakage detected"], True, 0)
    [finding] = result.violations
    assert (finding.bucket, finding.classified_by, finding.rule) == ("PASS_FINDING", "pass_filter", "4.3")
    assert result.route == "PROCEED" and result.overrides == ["zero_violations"]


def test_a_strong_fail_keeps_the_violation() -> None:
    result = route_audit(["Rule 4.3: Verdict: FAIL despite ✅ PASS elsewhere — parametric leakage"], True, 0)
    assert result.route == "CLL_REVISION" and result.violations[0].bucket == "REVISION_REQUIRED"


def test_a_narrative_pass_is_filtered() -> None:
    assert _buckets(["Quote integrity: All CRG citations confirmed."]) == ["PASS_FINDING"]


def test_rule_numbers_route_as_the_supplement_classifies_them() -> None:
    violations = [
        "Rule 4.1: AHA HF citation not verified in cited chunk", "Rule 4.14: mid-quote ellipsis",
        "Rule 4.9: imperative language in care plan sections", "Rule 4.3: number not traced to CRG source",
        "Rule 4.2: numeric value citation gap", "Rule 4.4: monitoring parameter not addressed",
        "Rule 4.13: other",
    ]  # fmt: skip
    result = route_audit(violations, True, 0)
    assert [v.bucket for v in result.violations] == [
        "REVISION_REQUIRED", "LOG_ONLY", "REVISION_REQUIRED", "REVISION_REQUIRED", "LOG_ONLY",
        "REVISION_REQUIRED", "HQ_DECISION",
    ]  # fmt: skip
    record = result.contract()
    counts = [record[k] for k in ("route", "blocking_count", "log_only_count", "hq_decision_count")]
    assert counts == ["CLL_REVISION", 4, 2, 1]
    assert {v["classified_by"] for v in record["violations"]} == {"rule_number"}


def test_without_a_known_rule_number_keywords_classify() -> None:
    result = route_audit(
        ["Parametric leakage in the dosing section", "Paraphrased quote", "Odd layout"], True, 0
    )
    assert [(v.bucket, v.classified_by, v.rule) for v in result.violations] == [
        ("REVISION_REQUIRED", "keyword", None),
        ("LOG_ONLY", "keyword", None),
        ("HQ_DECISION", "keyword", None),
    ]
    assert route_audit(["Rule 9.9: regulatory tone"], True, 0).violations[0].rule == "9.9"


def test_log_only_and_hq_decision_never_block() -> None:
    assert route_audit(["Rule 4.14: quote integrity", "Rule 4.6: judgement call"], True, 0).route == "PROCEED"


def test_the_cds_backstop_forces_a_revision_while_the_budget_remains() -> None:
    result = route_audit(["Rule 4.14: quote integrity"], False, 1)
    assert result.route == "CLL_REVISION" and result.overrides == ["cds_backstop"]
    assert route_audit(["Rule 4.14: quote integrity"], False, 2).overrides == []


def test_the_revision_budget_proceeds_at_two_revisions() -> None:
    result = route_audit(["Rule 4.3: parametric leakage"], True, 2)
    assert result.route == "PROCEED" and result.overrides == ["revision_budget_exhausted"]


def test_overrides_fire_in_the_contract_order() -> None:
    result = route_audit(["Rule 4.3: ✅ PASS — No parametric leakage"], False, 1)
    assert result.overrides == ["zero_violations", "cds_backstop"] and result.route == "CLL_REVISION"


def test_an_empty_compliant_audit_proceeds_with_no_override() -> None:
    assert route_audit([], True, 0).contract() == {
        "route": "PROCEED", "blocking_count": 0, "log_only_count": 0, "hq_decision_count": 0,
        "violations": [], "overrides": [],
    }  # fmt: skip


@pytest.mark.parametrize("revision", [0, 1])
def test_the_cds_backstop_applies_to_a_non_compliant_audit_that_lists_no_violation(revision: int) -> None:
    assert route_audit([], False, revision).contract() == {
        "route": "CLL_REVISION", "blocking_count": 0, "log_only_count": 0, "hq_decision_count": 0,
        "violations": [], "overrides": ["cds_backstop"],
    }  # fmt: skip


def test_a_non_compliant_audit_that_lists_no_violation_proceeds_at_the_revision_budget() -> None:
    result = route_audit([], False, 2)
    assert (result.route, result.overrides) == ("PROCEED", [])


def test_the_cds_backstop_follows_the_parser_warning_filter() -> None:
    result = route_audit(["[PARSER WARNING] output truncated"], False, 0)
    assert (result.route, result.overrides) == ("CLL_REVISION", ["parser_warning_filter", "cds_backstop"])


def test_the_data_file_keeps_its_invariants() -> None:
    rules = gate_rules()
    assert len(rules.lint.headers) + 1 == 8
    assert (len(rules.lint.imperative_verbs), len(rules.lint.monitoring_verbs)) == (13, 12)
    from importlib import resources

    data = yaml.safe_load(resources.files("processors.drafts").joinpath("data", "gates.yaml").read_text())
    data["lint"]["monitoring_verbs"] = [*data["lint"]["monitoring_verbs"][:-1], "hold"]
    with pytest.raises(RulesError, match="both imperative and monitoring"):
        parse_rules(data)
