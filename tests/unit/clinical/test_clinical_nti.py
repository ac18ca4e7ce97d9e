"""NTI gate: the seed's maps and algorithm, and every decision taken where the seed is ambiguous."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from clinical_builders import AS_OF, condition, encounter, lab, med, mini_bundle, state_from
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.clinical.assess import assess
from processors.clinical.knowledge import GateFlags, load_knowledge
from processors.clinical.vocabulary import DrugVocabulary

INR = ("6301-6", "INR in Platelet poor plasma by Coagulation assay")
DIGOXIN = ("10535-3", "Digoxin [Mass/volume] in Serum or Plasma")


def run(knowledge, resources, flags=None):
    return assess(state_from(mini_bundle("p", resources)), AS_OF, None, knowledge, flags).nti


def test_no_nti_drug_is_normal_and_silent(knowledge):
    nti = run(knowledge, [med("lisinopril 10 mg daily")])
    assert (nti.severity, nti.drugs, nti.must_retrieve) == ("NORMAL", [], [])


def test_nti_drug_without_findings_is_normal(knowledge):
    nti = run(knowledge, [med("digoxin 0.125 mg daily"), lab(*DIGOXIN, 1.0, "ng/mL")])
    assert nti.severity == "NORMAL" and nti.drugs == ["digoxin"] and nti.must_retrieve == []


def test_supratherapeutic_plus_symptom_is_critical_without_any_interaction(knowledge):
    # Section 4 algorithm and the PT-TEST-010 trace, not the summary tables' "all three incl. interaction".
    nti = run(knowledge, [med("digoxin 0.125 mg daily"), lab(*DIGOXIN, 2.1, "ng/mL"), encounter("nausea")])
    assert nti.interactions == []
    assert nti.severity == "CRITICAL"


@pytest.mark.parametrize(
    "extra",
    [
        [lab(*DIGOXIN, 2.0, "ng/mL")],
        [encounter("vomiting since yesterday")],
        [med("verapamil 80 mg tid")],
    ],
)
def test_any_one_finding_is_elevated(knowledge, extra):
    assert run(knowledge, [med("digoxin 0.125 mg daily"), *extra]).severity == "ELEVATED"


def test_digoxin_threshold_is_inclusive_and_warfarin_threshold_is_strict(knowledge):
    assert run(knowledge, [med("digoxin"), lab(*DIGOXIN, 2.0, "ng/mL")]).supratherapeutic
    assert not run(knowledge, [med("warfarin 5 mg"), lab(*INR, 3.0, "{INR}")]).supratherapeutic
    assert run(knowledge, [med("warfarin 5 mg"), lab(*INR, 3.01, "{INR}")]).supratherapeutic


def test_each_drug_is_evaluated_against_its_own_map_and_overall_is_the_maximum(knowledge):
    # Warfarin supratherapeutic (no bleeding text) + digoxin confusion symptom (level normal):
    # pooled flags would say CRITICAL; per drug both are ELEVATED.
    nti = run(
        knowledge,
        [
            med("warfarin 5 mg"),
            med("digoxin 0.125 mg"),
            lab(*INR, 4.5, "{INR}"),
            lab(*DIGOXIN, 0.9, "ng/mL"),
            encounter("new confusion"),
        ],
    )
    assert {d.drug: d.severity for d in nti.per_drug} == {"digoxin": "ELEVATED", "warfarin": "ELEVATED"}
    assert nti.severity == "ELEVATED"


def test_overall_severity_is_max_across_drugs(knowledge):
    nti = run(
        knowledge,
        [med("warfarin 5 mg"), med("digoxin 0.125 mg"), lab(*DIGOXIN, 2.4, "ng/mL"), encounter("nausea")],
    )
    assert {d.drug: d.severity for d in nti.per_drug} == {"digoxin": "CRITICAL", "warfarin": "NORMAL"}
    assert nti.severity == "CRITICAL"
    assert "warfarin_FDA_med_guide.pdf" not in nti.must_retrieve


@pytest.mark.parametrize(
    ("condition_text", "supra"),
    [
        ("Mechanical aortic valve replacement (St. Jude)", False),
        ("Bioprosthetic valve replacement", True),
        ("Bioprosthetic mitral valve; mechanical valve in aortic position", False),
        ("Atrial fibrillation", True),
    ],
)
def test_bioprosthetic_valve_is_not_a_mechanical_valve(knowledge, condition_text, supra):
    nti = run(knowledge, [med("warfarin 5 mg"), lab(*INR, 3.2, "{INR}"), condition(condition_text)])
    assert bool(nti.supratherapeutic) is supra
    if supra:
        assert nti.supratherapeutic[0].threshold == 3.0


def test_mechanical_valve_uses_the_3_5_threshold(knowledge):
    nti = run(
        knowledge, [med("warfarin 5 mg"), lab(*INR, 3.6, "{INR}"), condition("Mechanical mitral valve")]
    )
    assert nti.supratherapeutic[0].threshold == 3.5


def test_prothrombin_time_in_seconds_is_never_read_as_inr(knowledge):
    pt = lab("5902-2", "Prothrombin time (PT)", 14.8, "s")
    nti = run(knowledge, [med("warfarin 5 mg"), pt])
    assert nti.supratherapeutic == [] and nti.severity == "NORMAL"
    by_display = lab(None, "Prothrombin time", 16.0, "s")
    assert run(knowledge, [med("warfarin 5 mg"), by_display]).supratherapeutic == []


def test_inr_matched_by_display_text_when_no_loinc(knowledge):
    nti = run(knowledge, [med("warfarin 5 mg"), lab(None, "Prothrombin time INR", 4.0, None)])
    assert nti.supratherapeutic[0].value == 4.0


def test_symptom_stems_never_match_medication_strings(knowledge):
    nti = run(
        knowledge,
        [
            med("digoxin 0.125 mg daily"),
            med("ondansetron 4 mg prn nausea"),
            med("vitamin A for night vision halos"),
        ],
    )
    assert nti.symptoms == []
    assert nti.severity == "NORMAL"


def test_symptom_stems_match_condition_encounter_and_observation_text(knowledge):
    note = {**lab(None, "Clinical note", 0, None, category="exam"), "valueQuantity": None}
    note.pop("valueQuantity")
    note["valueString"] = "patient describes xanthopsia"
    nti = run(knowledge, [med("digoxin"), condition("Bradycardia"), encounter("Palpitations"), note])
    assert {s.stem for s in nti.symptoms} == {"bradycard", "palpitat", "xanthopsia"}


def test_resolved_conditions_do_not_count_as_symptoms(knowledge):
    assert run(knowledge, [med("digoxin"), condition("Nausea", status="resolved")]).symptoms == []


@pytest.mark.parametrize(
    ("brand", "generic"),
    [("Lanoxin 125 mcg daily", "digoxin"), ("Coumadin 5 mg", "warfarin"), ("Jantoven 2 mg", "warfarin")],
)
def test_brand_names_resolve_to_their_generic(knowledge, brand, generic):
    assert run(knowledge, [med(brand)]).drugs == [generic]


def test_brand_interacting_drug_resolves_too(knowledge):
    nti = run(knowledge, [med("Coumadin 5 mg"), med("Bactrim DS 1 tab bid")])
    assert [(i.category, i.with_) for i in nti.interactions] == [("cyp2c9_inhibitors", "sulfamethoxazole")]


def test_seed_substring_rule_still_applies_without_the_vocabulary(knowledge):
    from dataclasses import replace

    bare = replace(knowledge, vocabulary=DrugVocabulary.empty())
    assert run(bare, [med("DIGOXIN 0.125MG PO DAILY")]).drugs == ["digoxin"]
    assert run(bare, [med("Lanoxin 125 mcg")]).drugs == []


@pytest.mark.parametrize(
    ("value", "unit", "supra"),
    [(2.69, "nmol/L", True), (2.3, "nmol/L", False), (2100, "pg/mL", True), (2.1, "ug/L", True)],
)
def test_digoxin_units_are_normalised_before_the_threshold(knowledge, value, unit, supra):
    nti = run(knowledge, [med("digoxin"), lab(*DIGOXIN, value, unit)])
    assert bool(nti.supratherapeutic) is supra
    if supra:
        assert nti.supratherapeutic[0].unit == "ng/mL"
        assert nti.supratherapeutic[0].value == pytest.approx(2.1, abs=0.01)


def test_electrolyte_alerts_convert_units(knowledge):
    nti = run(
        knowledge,
        [
            med("digoxin"),
            lab("2823-3", "Potassium", 3.1, "mmol/L"),
            lab("2601-3", "Magnesium [Moles/volume] in Serum or Plasma", 0.6, "mmol/L"),
            lab("2000-8", "Calcium [Moles/volume] in Serum or Plasma", 2.8, "mmol/L"),
        ],
    )
    alerts = {a.parameter: round(a.value, 2) for a in nti.lab_alerts}
    assert alerts == {"potassium": 3.1, "magnesium": 1.46, "calcium": 11.22}


def test_creatinine_in_umol_per_litre_is_read_in_mg_per_dl(knowledge):
    state = state_from(
        mini_bundle(
            "p",
            [med("digoxin"), lab("14682-9", "Creatinine [Moles/volume] in Serum or Plasma", 159, "umol/L")],
        )
    )
    result = assess(state, AS_OF, None, knowledge)
    assert any(o.parameter == "creatinine" for o in result.staleness.observations if o.class_ != "MISSING")


def test_hfref_flags_digoxin_above_indication_target_without_raising_severity(knowledge):
    nti = run(knowledge, [med("digoxin"), lab(*DIGOXIN, 1.1, "ng/mL"), condition("Systolic heart failure")])
    assert [(f.flag, f.threshold) for f in nti.flags] == [("above_indication_target", 0.8)]
    assert nti.severity == "NORMAL"


def test_calcium_warning_needs_both_diuretic_classes_and_a_missing_calcium(knowledge):
    warning = "Dual diuretic therapy with opposing calcium effects"
    both = [med("digoxin"), med("furosemide 40 mg"), med("hydrochlorothiazide 25 mg")]
    assert run(knowledge, both).warnings[0].startswith(warning)
    assert run(knowledge, [*both, lab("17861-6", "Calcium", 9.5, "mg/dL")]).warnings == []
    assert run(knowledge, [med("digoxin"), med("furosemide 40 mg")]).warnings == []


BRIDGING = ("heparin", "enoxaparin", "dalteparin", "fondaparinux", "lovenox", "fragmin")
"""Supplementary Data 1 section 2a: the bridging indicators of warfarin's conditional monitoring."""
APTT = ("3173-2", "aPTT in Platelet poor plasma by Coagulation assay")


def test_warfarin_map_monitors_anti_xa_and_aptt_only_under_heparin_bridging(knowledge):
    [warfarin] = [m for m in knowledge.maps(tier_b=False) if m.name == "warfarin"]
    [bridging] = warfarin.conditional_monitoring
    assert (bridging.name, bridging.parameters, bridging.any_medication) == (
        "heparin_bridging", ("anti_xa", "aptt"), BRIDGING,
    )  # fmt: skip
    assert bridging.warning_if_missing is None
    assert "anti_xa" not in warfarin.primary_parameters and "aptt" not in warfarin.primary_parameters


@pytest.mark.parametrize("agent", [*BRIDGING, "Lovenox 40 mg subcut daily", "heparin 5000 units subcut q8h"])
def test_a_bridging_agent_adds_anti_xa_and_aptt_to_warfarins_monitoring(knowledge, agent):
    result = assess(state_from(mini_bundle("p", [med("warfarin 5 mg"), med(agent)])), AS_OF, None, knowledge)
    assert result.med_dependencies_conditional == {"warfarin": ["anti_xa", "aptt"]}
    missing = {o.parameter for o in result.staleness.observations if o.class_ == "MISSING"}
    assert {"anti_xa", "aptt"} <= missing
    assert result.nti.warnings == []


@pytest.mark.parametrize(
    "medications",
    [[med("warfarin 5 mg")], [med("warfarin 5 mg"), med("heparin 5000 units", status="stopped")],
     [med("warfarin 5 mg"), med("apixaban 5 mg")], [med("enoxaparin 40 mg")]],
    ids=["warfarin alone", "heparin stopped", "another anticoagulant", "no warfarin"],
)  # fmt: skip
def test_without_warfarin_bridging_anti_xa_is_not_monitored(knowledge, medications):
    result = assess(state_from(mini_bundle("p", medications)), AS_OF, None, knowledge)
    assert result.med_dependencies_conditional == {}
    assert "anti_xa" not in {o.parameter for o in result.staleness.observations}


def test_bridging_labs_on_record_are_read_by_code_and_by_name(knowledge):
    resources = [
        med("warfarin 5 mg"), med("enoxaparin 80 mg bid"), lab(*APTT, 35, "s"),
        lab(None, "Anti-Xa (LMWH)", 0.6, "IU/mL"),
    ]  # fmt: skip
    result = assess(state_from(mini_bundle("p", resources)), AS_OF, None, knowledge)
    classes = {o.parameter: o.class_ for o in result.staleness.observations}
    assert (classes["aptt"], classes["anti_xa"]) == ("CURRENT", "CURRENT")


@pytest.mark.parametrize(("bridged", "light"), [(True, "RED"), (False, "YELLOW")])
def test_esc033_counts_a_bridging_lab_as_warfarin_monitoring_only_under_bridging(knowledge, bridged, light):
    stale_aptt = lab(*APTT, 35, "s", when="2025-12-01T08:00:00Z")
    resources = [med("warfarin 5 mg"), lab(*INR, 4.5, "{INR}"), stale_aptt]
    if bridged:
        resources.append(med("heparin 5000 units subcut q8h"))
    flags = GateFlags(esc033_compound=True)
    result = assess(state_from(mini_bundle("p", resources)), AS_OF, None, knowledge, flags)
    assert result.nti.severity == "ELEVATED"
    assert result.traffic_light.light == light
    compound = [s for s in result.traffic_light.sources if s.startswith("ESC-033")]
    assert compound == (
        ["ESC-033: NTI ELEVATED + PROFOUNDLY_STALE monitoring (warfarin:aptt)"] if bridged else []
    )


def test_electrolyte_depleter_escalates_potassium_and_magnesium_monitoring(knowledge):
    nti = run(knowledge, [med("digoxin"), med("bumetanide 1 mg")])
    assert [(p.parameter, p.priority) for p in nti.monitoring_priority] == [
        ("potassium", "CRITICAL"),
        ("magnesium", "CRITICAL"),
    ]


def test_atorvastatin_above_40_mg_with_amiodarone_is_flagged(knowledge):
    nti = run(knowledge, [med("warfarin 5 mg"), med("amiodarone 200 mg"), med("atorvastatin 80 mg daily")])
    assert [(d.current_mg, d.exceeded) for d in nti.dose_limits] == [(80.0, True)]


def test_medication_count_flag_at_five_distinct_medications(knowledge):
    four = [med(f"drug{i} 1 mg") for i in range(4)]
    assert not assess(state_from(mini_bundle("p", four)), AS_OF, None, knowledge).medication_count_flag
    five = [*four, med("drug4 1 mg"), med("drug4 1 mg")]
    result = assess(state_from(mini_bundle("p", five)), AS_OF, None, knowledge)
    assert result.medication_count == 5 and result.medication_count_flag


def test_stopped_medications_are_not_current(knowledge):
    assert run(knowledge, [med("digoxin", status="stopped")]).drugs == []


LITHIUM = """
# Lithium from the Supplementary Data 1 section 5 extension template (hypothetical there), with real
# drug names under the template's interaction categories.
name: lithium
match: [lithium]
parameters:
  lithium_level:
    {display_name: Lithium serum level, loinc: ["14334-7"], display: [lithium], unit: mmol/L, valence: 1}
  tsh: {display_name: TSH, loinc: ["3016-3"], display: [thyrotropin, tsh], unit: mIU/L}
lab_monitoring:
  lithium_level: {purpose: Therapeutic and toxicity monitoring, primary: true}
  creatinine: {purpose: Renal function, primary: true}
  tsh: {purpose: Thyroid monitoring, primary: false}
therapeutic_ranges:
  standard: {min: 0.6, max: 1.2, unit: mEq/L}
  toxicity_threshold: {min: 1.5, unit: mEq/L}
interactions:
  increase_lithium: [ibuprofen, naproxen, lisinopril, hydrochlorothiazide]
symptom_keywords:
  neurotoxicity: [tremor, ataxia, slurred, seizur]
  gi_toxicity: [nausea, vomit, diarrhea]
corpus_sources: [lithium_FDA_label.pdf]
"""


def test_adding_lithium_is_a_data_only_change(knowledge, tmp_path: Path):
    maps = tmp_path / "drug_maps"
    shutil.copytree(
        Path(__file__).resolve().parents[3] / "processors" / "clinical" / "data" / "drug_maps", maps
    )
    (maps / "lithium.yaml").write_text(LITHIUM, encoding="utf-8")
    with_lithium = load_knowledge([maps], vocabulary=knowledge.vocabulary)
    resources = [
        med("lithium carbonate 300 mg bid"),
        med("ibuprofen 400 mg prn"),
        lab("14334-7", "Lithium", 1.6, "meq/L"),
        encounter("coarse tremor"),
    ]
    nti = run(with_lithium, resources)
    assert nti.drugs == ["lithium"] and nti.severity == "CRITICAL"
    assert nti.supratherapeutic[0].threshold == 1.5
    assert nti.must_retrieve == ["lithium_FDA_label.pdf"]
    assert run(knowledge, resources).drugs == []


def test_tier_b_class_maps_apply_only_behind_their_flag(knowledge):
    resources = [med("OxyContin 10 mg q12h"), med("Xanax 0.5 mg tid"), encounter("somnolence")]
    assert run(knowledge, resources).classes == []
    nti = run(knowledge, resources, GateFlags(tier_b_class_maps=True))
    assert nti.classes == ["benzodiazepine", "opioid"]
    assert nti.drugs == []
    assert nti.severity == "ELEVATED"
    assert {(i.drug, i.category) for i in nti.interactions} >= {
        ("opioid", "benzodiazepines"),
        ("benzodiazepine", "opioids"),
    }


def test_class_maps_never_reach_critical(knowledge):
    nti = run(
        knowledge,
        [med("morphine 10 mg q4h"), encounter("respiratory depression, pinpoint pupils")],
        GateFlags(tier_b_class_maps=True),
    )
    assert nti.severity == "ELEVATED"


def test_dosage_instructions_are_never_read_as_medications(knowledge):
    dosage = [{"text": "daily; do not take with antacids or verapamil"}]
    statement = {**med("digoxin 0.125 mg"), "dosage": dosage}
    nti = run(knowledge, [statement])
    assert nti.interactions == []
    result = assess(state_from(mini_bundle("p", [statement])), AS_OF, None, knowledge)
    assert result.medications == ["digoxin 0.125 mg daily; do not take with antacids or verapamil"]


@settings(max_examples=40, deadline=None)
@given(
    level=st.one_of(st.none(), st.floats(min_value=0.1, max_value=4.0)),
    symptom=st.booleans(),
    interactor=st.booleans(),
)
def test_digoxin_severity_follows_the_section_4_algorithm(knowledge, level, symptom, interactor):
    resources = [med("digoxin 0.125 mg daily")]
    if level is not None:
        resources.append(lab(*DIGOXIN, round(level, 2), "ng/mL"))
    if symptom:
        resources.append(encounter("anorexia"))
    if interactor:
        resources.append(med("verapamil 80 mg tid"))
    supra = level is not None and round(level, 2) >= 2.0
    expected = "CRITICAL" if supra and symptom else "ELEVATED" if supra or symptom or interactor else "NORMAL"
    assert run(knowledge, resources).severity == expected
