"""Golden cases PT-TEST-008 / -009 / -010 / -012: the seed's published gate outputs, field for field.

Sources (PharmMesh escape register supplement): Supplementary Table 2 (ages, NTI severities),
Supplementary Data 1 section 6 (key findings), Supplementary Note 3 (PT-TEST-010 trace), Supplementary
Table 3 Part C (production / shadow lights and divergence). The bundles in streams/data/clinical/ are
synthetic, built from the case descriptions.
"""

from __future__ import annotations

import pytest
from clinical_builders import DATA
from typer.testing import CliRunner

from processors.clinical.traffic_light import LIGHTS, ReviewInputs
from streams.cli.clinical import app
from streams.data import GOLDEN_REVIEWS

PUBLISHED = {
    # case: (age, NTI severity, NTI drugs, production light, shadow light, review inputs of the run);
    # the review inputs are package data (streams.data.GOLDEN_REVIEWS), shared with `clingate demo`.
    # Part C divergence: 008 "Match", 009 "Agent E +1 level", 010 "Match (Rule C)", 012 "Agent E sole signal".
    "PT-TEST-008": (
        86,
        "ELEVATED",
        ["digoxin", "warfarin"],
        "RED",
        "RED",
        ReviewInputs(**GOLDEN_REVIEWS["PT-TEST-008"]),
    ),
    "PT-TEST-009": (
        68,
        "ELEVATED",
        ["warfarin"],
        "RED",
        "YELLOW",
        ReviewInputs(**GOLDEN_REVIEWS["PT-TEST-009"]),
    ),
    "PT-TEST-010": (
        82,
        "CRITICAL",
        ["digoxin"],
        "RED",
        "RED",
        ReviewInputs(**GOLDEN_REVIEWS["PT-TEST-010"]),
    ),
    "PT-TEST-012": (
        62,
        "NORMAL",
        [],
        "RED",
        "GREEN",
        ReviewInputs(**GOLDEN_REVIEWS["PT-TEST-012"]),
    ),
}

PT010_BANNER = (
    "PHASE 0 DATA READINESS: STALE\n"
    "Labs dated 2026-03-03 | Vitals dated 2026-03-05 | System date: 2026-03-29 | "
    "Lab gap: 26 days | Vital gap: 24 days\n"
    "Patient Age: 82 (deterministic, computed from DOB)\n"
    "EXCEEDS 48-hour threshold. All lab-based recommendations are CONDITIONAL."
)


@pytest.mark.parametrize("case", sorted(PUBLISHED))
def test_golden_case_reproduces_published_age_severity_drugs_and_lights(assess_case, case):
    age, severity, drugs, light, shadow, review = PUBLISHED[case]
    result = assess_case(case, review)
    assert result.age == age
    assert result.nti.severity == severity
    assert result.nti.drugs == drugs
    assert (result.traffic_light.light, result.traffic_light.shadow) == (light, shadow)
    assert result.traffic_light.divergence_levels == LIGHTS.index(light) - LIGHTS.index(shadow)


def test_pt010_trace_phase0_fields(assess_case):
    result = assess_case("PT-TEST-010")
    assert result.staleness.overall == "STALE"
    assert result.staleness.banner == PT010_BANNER
    digoxin = next(o for o in result.staleness.observations if o.code == "10535-3")
    assert (digoxin.effective, digoxin.age_days, digoxin.class_) == ("2026-03-03T08:00:00Z", 26, "STALE")
    labs = [o for o in result.staleness.observations if o.class_ != "MISSING"]
    assert all(o.class_ == "STALE" for o in labs)
    assert [o.parameter for o in result.staleness.observations if o.class_ == "MISSING"] == ["calcium"]
    assert result.medication_count == 6 and result.medication_count_flag
    assert result.medications[0] == "digoxin 0.125 mg po daily"
    assert result.med_dependencies["digoxin"] == ["digoxin_level", "potassium", "magnesium", "creatinine"]
    assert result.med_dependencies_conditional == {"digoxin": ["calcium"]}


def test_pt010_trace_nti_fields(assess_case):
    nti = assess_case("PT-TEST-010").nti
    assert nti.severity == "CRITICAL"
    assert [s.model_dump(mode="json") for s in nti.supratherapeutic] == [
        {"drug": "digoxin", "parameter": "digoxin_level", "value": 2.1, "unit": "ng/mL", "threshold": 2.0}
    ]
    assert [(i.category, i.with_) for i in nti.interactions] == [
        ("moderate", "carvedilol"),
        ("electrolyte_depleter_thiazide", "chlorthalidone"),
        ("electrolyte_depleter_loop", "furosemide"),
    ]
    assert [(s.category, s.stem) for s in nti.symptoms] == [
        ("gi", "nausea"),
        ("visual", "yellow"),
        ("visual", "visual disturb"),
        ("visual", "halos"),
        ("neuropsychiatric", "confus"),
    ]
    assert nti.warnings == [
        "Dual diuretic therapy with opposing calcium effects — net calcium status uncertain. "
        "Calcium level recommended to assess digoxin toxicity risk."
    ]
    assert nti.must_retrieve[0] == "digoxin label med guides.pdf" and len(nti.must_retrieve) == 7
    assert {(p.parameter, p.priority) for p in nti.monitoring_priority} == {
        ("potassium", "CRITICAL"),
        ("magnesium", "CRITICAL"),
    }


def test_pt010_concur_is_still_red_via_rule_c(assess_case):
    light = assess_case(
        "PT-TEST-010",
        ReviewInputs(
            disposition="CONCUR", automation_bias_risk="LOW", revision_count=2, audit_verdict="APPROVED"
        ),
    ).traffic_light
    assert light.light == "RED"
    assert light.sources == ["Base: CAA CONCUR -> GREEN", "Rule C: NTI CRITICAL"]
    assert light.shadow == "RED" and light.divergence == "MATCH"


def test_pt010_unclassified_subcategory_is_a_second_independent_path_to_red(assess_case):
    light = assess_case(
        "PT-TEST-010", ReviewInputs(disposition="CONCUR", subcategory="UNCLASSIFIED_MANUAL_REVIEW")
    ).traffic_light
    assert light.sources[0] == "Base: CAA CONCUR -> GREEN"
    assert light.sources[1].startswith("Base: CAA subcategory UNCLASSIFIED_MANUAL_REVIEW")
    assert light.sources[2] == "Rule C: NTI CRITICAL"


def test_pt008_findings_match_the_activation_record(assess_case):
    result = assess_case("PT-TEST-008", PUBLISHED["PT-TEST-008"][5])
    nti = result.nti
    assert {(i.drug, i.with_) for i in nti.interactions} == {
        ("warfarin", "sulfamethoxazole"),
        ("digoxin", "carvedilol"),
        ("digoxin", "furosemide"),
        ("digoxin", "chlorthalidone"),
    }
    assert result.medication_count == 10 and result.medication_count_flag
    assert [s.drug for s in nti.supratherapeutic] == ["warfarin"]
    assert {d.drug: d.severity for d in nti.per_drug} == {"digoxin": "ELEVATED", "warfarin": "ELEVATED"}
    assert result.staleness.overall == "PROFOUNDLY_STALE"
    assert result.traffic_light.sources[-1].startswith("Rule B:")


def test_pt009_findings_match_the_activation_record(assess_case):
    result = assess_case("PT-TEST-009", PUBLISHED["PT-TEST-009"][5])
    assert [(i.category, i.with_) for i in result.nti.interactions] == [("cyp2c9_inhibitors", "amiodarone")]
    assert result.medication_count_flag
    inr = next(o for o in result.staleness.observations if o.parameter == "pt_inr")
    assert (inr.age_days, inr.class_) == (26, "STALE")
    assert result.traffic_light.shadow_sources == [
        "Base: deterministic inputs only -> GREEN",
        "Rule D: NTI ELEVATED",
    ]
    assert (result.traffic_light.divergence, result.traffic_light.divergence_levels) == (
        "PRODUCTION_HIGHER",
        1,
    )


def test_pt012_is_normal_and_agent_e_is_the_sole_signal(assess_case):
    result = assess_case("PT-TEST-012", PUBLISHED["PT-TEST-012"][5])
    assert result.nti.drugs == [] and result.nti.must_retrieve == []
    lab_days = {
        o.parameter: o.age_days
        for o in result.staleness.observations
        if o.parameter in ("potassium", "creatinine")
    }
    assert lab_days == {"potassium": 24, "creatinine": 24}
    assert result.traffic_light.sources == ["Base: CAA DISSENT/DATA_GAP -> RED"]
    assert result.traffic_light.notes == ["ESC-024: subcategory 'DATAGAP' canonicalised to DATA_GAP"]


@pytest.mark.parametrize("case", sorted(PUBLISHED))
def test_cli_output_is_byte_identical_across_runs(case):
    args = [
        "assess",
        "--in",
        str(DATA / f"{case}.json"),
        "--as-of",
        "2026-03-29T00:00:00Z",
        "--disposition",
        "CONCUR",
    ]
    first = CliRunner().invoke(app, args)
    second = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.stdout_bytes == second.stdout_bytes
