"""Traffic light: canonicalisation, base mapping, Rules A-D, monotonicity, shadow, divergence, ESC-032/033."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.clinical.knowledge import GateFlags
from processors.clinical.traffic_light import (
    LIGHTS,
    ReviewInputs,
    canonical_subcategory,
    compute_traffic_light,
)
from schemas.clinical import DrugSeverity, Nti, Staleness, StalenessObservation


def nti(severity: str = "NORMAL", drug: str = "warfarin") -> Nti:
    per = [DrugSeverity(drug=drug, kind="drug", severity=severity)] if severity != "NORMAL" else []
    return Nti(
        severity=severity,
        drugs=[drug] if per else [],
        per_drug=per,
        supratherapeutic=[],
        interactions=[],
        symptoms=[],
        warnings=[],
        must_retrieve=[],
    )


def staleness(**classes: str) -> Staleness:
    obs = [
        StalenessObservation(code=p, display=p, effective=None, age_days=None, parameter=p, **{"class": c})
        for p, c in classes.items()
    ]
    return Staleness(overall="CURRENT", banner="", observations=obs)


NO_FLAGS = GateFlags()


def light(review=None, severity="NORMAL", flags=NO_FLAGS, stale=None, deps=frozenset(), nti_params=None):
    return compute_traffic_light(
        nti(severity), stale or staleness(), review, flags, nti_params or {}, set(deps)
    )


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("DATAGAP", "DATA_GAP"),
        ("data gap", "DATA_GAP"),
        ("JudgmentCall", "JUDGMENT_CALL"),
        ("SAFETYSTOP", "SAFETY_STOP"),
        ("safety_stop", "SAFETY_STOP"),
        ("weird", "UNCLASSIFIED_MANUAL_REVIEW"),
        ("", None),
        (None, None),
    ],
)
def test_subcategory_canonicalisation(raw, canonical):
    assert canonical_subcategory(raw) == canonical


@pytest.mark.parametrize(
    ("disposition", "subcategory", "expected"),
    [
        ("CONCUR", None, "GREEN"),
        ("DISSENT", "JUDGMENT_CALL", "YELLOW"),
        ("DISSENT", "DATA_GAP", "RED"),
        ("DISSENT", "SAFETY_STOP", "RED"),
        ("DISSENT", None, "RED"),
        ("CAPACITY_LIMIT", None, "RED"),
        ("capacity limit", None, "RED"),
        ("SHRUG", None, "RED"),
        ("JUDGMENT_CALL", None, "YELLOW"),
        ("DataGap", None, "RED"),
        ("CONCUR", "gibberish", "RED"),
    ],
)
def test_base_mapping(disposition, subcategory, expected):
    assert light(ReviewInputs(disposition=disposition, subcategory=subcategory)).light == expected


def test_concur_with_safety_stop_clears_the_subcategory():
    result = light(ReviewInputs(disposition="CONCUR", subcategory="SAFETYSTOP"))
    assert result.light == "GREEN"
    assert any("ESC-030" in n for n in result.notes)


def test_rule_a_is_shadow_mode_by_default_and_applies_when_enforced():
    review = ReviewInputs(disposition="DISSENT", subcategory="JUDGMENT_CALL", automation_bias_risk="HIGH")
    shadow_mode = light(review)
    assert shadow_mode.light == "YELLOW"
    assert shadow_mode.shadow_mode[0].startswith("Rule A:")
    enforced = light(review, flags=GateFlags(rule_a_enforced=True))
    assert enforced.light == "RED" and enforced.sources[-1].startswith("Rule A:")


def test_rule_b_fires_at_two_revisions_unless_approved():
    assert light(ReviewInputs(revision_count=2, audit_verdict="MODIFICATION_REQUIRED")).light == "RED"
    assert light(ReviewInputs(revision_count=2)).light == "RED"
    assert light(ReviewInputs(revision_count=2, audit_verdict="approved")).light == "GREEN"
    assert light(ReviewInputs(revision_count=1)).light == "GREEN"


def test_rule_c_forces_red_and_is_recorded_even_when_already_red():
    result = light(ReviewInputs(disposition="DISSENT"), severity="CRITICAL")
    assert result.sources == ["Base: CAA DISSENT -> RED", "Rule C: NTI CRITICAL"]


def test_rule_d_raises_green_to_yellow_only():
    assert light(ReviewInputs(disposition="CONCUR"), severity="ELEVATED").sources == [
        "Base: CAA CONCUR -> GREEN",
        "Rule D: NTI ELEVATED",
    ]
    red = light(ReviewInputs(disposition="DISSENT"), severity="ELEVATED")
    assert red.light == "RED" and red.sources == ["Base: CAA DISSENT -> RED"]


def test_without_disposition_production_equals_shadow():
    result = light(ReviewInputs(revision_count=3), severity="ELEVATED")
    assert (result.light, result.sources) == (result.shadow, result.shadow_sources)


REVIEWS = st.builds(
    ReviewInputs,
    disposition=st.sampled_from([None, "CONCUR", "DISSENT", "CAPACITY_LIMIT", "???"]),
    subcategory=st.sampled_from([None, "DATAGAP", "JUDGMENT_CALL", "SAFETY_STOP", "odd"]),
    automation_bias_risk=st.sampled_from([None, "LOW", "HIGH"]),
    revision_count=st.sampled_from([None, 0, 1, 2, 3]),
    audit_verdict=st.sampled_from([None, "APPROVED", "MODIFICATION_REQUIRED"]),
)
SEVERITIES = st.sampled_from(["NORMAL", "ELEVATED", "CRITICAL"])


@given(REVIEWS, SEVERITIES, SEVERITIES)
def test_light_is_monotonic_in_nti_severity(review, a, b):
    lo, hi = sorted((a, b), key=["NORMAL", "ELEVATED", "CRITICAL"].index)
    assert LIGHTS.index(light(review, hi).light) >= LIGHTS.index(light(review, lo).light)
    assert LIGHTS.index(light(review, hi).shadow) >= LIGHTS.index(light(review, lo).shadow)


@given(REVIEWS, SEVERITIES)
def test_production_never_below_the_deterministic_floor(review, severity):
    result = light(review, severity)
    floor = {"NORMAL": "GREEN", "ELEVATED": "YELLOW", "CRITICAL": "RED"}[severity]
    assert LIGHTS.index(result.light) >= LIGHTS.index(floor)
    assert result.divergence_levels == LIGHTS.index(result.light) - LIGHTS.index(result.shadow)


@given(REVIEWS, REVIEWS, SEVERITIES)
def test_shadow_ignores_the_adversarial_reviewer(a, b, severity):
    same_pipeline = ReviewInputs(
        b.disposition, b.subcategory, b.automation_bias_risk, a.revision_count, a.audit_verdict
    )
    assert light(a, severity).shadow_sources == light(same_pipeline, severity).shadow_sources


@given(REVIEWS, SEVERITIES)
def test_every_source_names_its_rule(review, severity):
    result = light(review, severity, GateFlags(esc032_staleness=True, esc033_compound=True))
    prefixes = ("Base:", "Rule A:", "Rule B:", "Rule C:", "Rule D:", "ESC-032:", "ESC-033:")
    assert all(s.startswith(prefixes) for s in result.sources + result.shadow_sources)


def test_esc032_escalates_on_stale_monitoring_dependencies_only_when_flagged():
    stale = staleness(potassium="STALE", creatinine="CURRENT")
    assert light(stale=stale, deps={"potassium", "creatinine"}).shadow == "GREEN"
    flagged = light(stale=stale, deps={"potassium", "creatinine"}, flags=GateFlags(esc032_staleness=True))
    assert flagged.shadow == "YELLOW" and flagged.shadow_sources[-1].startswith("ESC-032:")
    very = light(
        stale=staleness(potassium="PROFOUNDLY_STALE"),
        deps={"potassium"},
        flags=GateFlags(esc032_staleness=True),
    )
    assert very.shadow == "RED"


def test_esc033_compound_rule_and_its_staleness_floor():
    stale = staleness(pt_inr="STALE")
    flags = GateFlags(esc033_compound=True)
    # As proposed (PROFOUNDLY_STALE) it does not fire on PT-TEST-009's 26-day (STALE) INR gap...
    assert (
        light(severity="ELEVATED", stale=stale, flags=flags, nti_params={"warfarin": ["pt_inr"]}).shadow
        == "YELLOW"
    )
    # ...it does with the floor lowered to STALE, and always on a PROFOUNDLY_STALE monitoring parameter.
    lowered = GateFlags(esc033_compound=True, esc033_min_class="STALE")
    assert (
        light(severity="ELEVATED", stale=stale, flags=lowered, nti_params={"warfarin": ["pt_inr"]}).shadow
        == "RED"
    )
    very = staleness(pt_inr="PROFOUNDLY_STALE")
    assert (
        light(severity="ELEVATED", stale=very, flags=flags, nti_params={"warfarin": ["pt_inr"]}).shadow
        == "RED"
    )


def test_esc033_on_golden_pt009_closes_the_published_divergence_only_with_the_stale_floor(assess_case):
    review = ReviewInputs("DISSENT", None, "LOW", 1, "APPROVED")
    assert (
        assess_case("PT-TEST-009", review, GateFlags(esc033_compound=True)).traffic_light.shadow == "YELLOW"
    )
    result = assess_case("PT-TEST-009", review, GateFlags(esc033_compound=True, esc033_min_class="STALE"))
    assert (result.traffic_light.shadow, result.traffic_light.divergence) == ("RED", "MATCH")


def test_esc032_on_golden_pt012_gives_a_deterministic_signal(assess_case):
    review = ReviewInputs("DISSENT", "DATAGAP", "LOW", 1, "APPROVED")
    result = assess_case("PT-TEST-012", review, GateFlags(esc032_staleness=True))
    assert result.traffic_light.shadow == "YELLOW"
    assert result.rules == ["ESC-032"]
