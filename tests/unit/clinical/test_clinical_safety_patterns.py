"""SCDA safety patterns: the four HARD_FAIL checks and the immutable audit record."""

from __future__ import annotations

import pytest
from clinical_builders import AS_OF, load_bundle, state_from
from pydantic import ValidationError

from processors.clinical.assess import assess_view
from processors.clinical.knowledge import GateFlags
from processors.clinical.safety_patterns import audit_deliverable
from processors.clinical.traffic_light import ReviewInputs
from processors.clinical.view import PatientView
from schemas.clinical import Deliverable, TrafficLight


def audit(knowledge, case, text, review=None, tamper_light=None):
    view = PatientView(state_from(load_bundle(case)), knowledge)
    assessment = assess_view(view, AS_OF, review, GateFlags())
    if tamper_light:
        assessment = assessment.model_copy(
            update={"traffic_light": TrafficLight(light=tamper_light, sources=[], shadow=tamper_light)}
        )
    return audit_deliverable(
        assessment,
        view,
        Deliverable(patient_id=case, deliverable_id="d1", event_time="2026-03-29T00:00:00Z", text=text),
        knowledge,
    )


GOOD_008 = (
    "Consider intracranial hemorrhage. Drug interaction: TMP-SMX may inhibit warfarin metabolism; "
    "INR 4.2, bleeding risk."
)


def test_pt008_triggers_ich_interaction_and_bleeding_patterns_and_passes_with_coverage(knowledge):
    result = audit(knowledge, "PT-TEST-008", GOOD_008)
    assert result.passed and result.hard_fail_count == 0
    assert result.patterns_fired == [
        "ich_differential",
        "drug_interaction_assessment",
        "bleeding_risk_coverage",
    ]
    assert result.patterns_skipped == ["nti_traffic_consistency"]


def test_missing_ich_differential_is_a_hard_fail(knowledge):
    result = audit(knowledge, "PT-TEST-008", "Drug interaction noted. Bleeding risk discussed.")
    failed = [p.pattern_id for p in result.patterns if not p.passed]
    assert failed == ["ich_differential"] and not result.passed


def test_acronyms_match_as_whole_words_only(knowledge):
    result = audit(
        knowledge, "PT-TEST-008", "The plan, which covers each drug interaction and bleeding, is attached."
    )
    assert not next(p for p in result.patterns if p.pattern_id == "ich_differential").passed
    result = audit(knowledge, "PT-TEST-008", "Rule out ICH. Drug interaction and bleeding reviewed.")
    assert next(p for p in result.patterns if p.pattern_id == "ich_differential").passed


def test_pt010_triggers_interaction_and_consistency_only(knowledge):
    result = audit(knowledge, "PT-TEST-010", "Concurrent use of carvedilol and digoxin reviewed.")
    assert result.patterns_fired == ["drug_interaction_assessment", "nti_traffic_consistency"]
    assert result.passed


def test_nti_critical_without_red_is_a_hard_fail(knowledge):
    result = audit(knowledge, "PT-TEST-010", "Concurrent use reviewed.", tamper_light="YELLOW")
    assert not result.passed
    assert [p.pattern_id for p in result.patterns if not p.passed] == ["nti_traffic_consistency"]


PUBLISHED_FIRED = {
    # Supplementary Table 2, Post-Pipeline Validation activation records.
    "PT-TEST-008": ["ich_differential", "drug_interaction_assessment", "bleeding_risk_coverage"],
    "PT-TEST-009": ["drug_interaction_assessment"],
    "PT-TEST-010": ["drug_interaction_assessment", "nti_traffic_consistency"],
    "PT-TEST-012": [],
}
COVERING = "Rule out intracranial hemorrhage. Drug interaction assessment done. Bleeding risk reviewed."


@pytest.mark.parametrize("case", sorted(PUBLISHED_FIRED))
def test_golden_cases_fire_the_published_patterns_and_pass(knowledge, case):
    result = audit(knowledge, case, COVERING)
    assert result.patterns_fired == PUBLISHED_FIRED[case]
    assert result.passed


def test_audit_record_is_immutable_and_deterministic(knowledge):
    first = audit(knowledge, "PT-TEST-008", GOOD_008, ReviewInputs(disposition="CONCUR"))
    second = audit(knowledge, "PT-TEST-008", GOOD_008, ReviewInputs(disposition="CONCUR"))
    assert first == second and first.audit_id == second.audit_id
    with pytest.raises(ValidationError):
        first.passed = False  # type: ignore[misc]
    other = audit(knowledge, "PT-TEST-008", GOOD_008 + " ")
    assert other.audit_id != first.audit_id
