"""The drug facts behind ``check_drug_safety`` and ``check_drug_interactions`` (``processors.agent.drugs``).

The packaged ``data/drug_safety.yaml`` is checked for shape (every fact sourced, one sentence, names
unique), for the drugs the spec's examples and §15 tests name and the golden and generated patients'
medications, and against clingate's NTI maps (warfarin's INR threshold, the maps' interaction groups).
Malformed files are written to ``tmp_path``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from processors.agent.drugs import (
    CLASS_MAP_SOURCE,
    NTI_MAP_SOURCE,
    DrugData,
    default_drug_data,
    drug_interactions,
    drug_safety,
    load_drug_data,
)
from processors.agent.entities import drug_mentions
from processors.agent.tools import format_result
from processors.clinical.knowledge import ClinicalKnowledge, default_knowledge

SPEC_DRUGS = (
    "dofetilide",
    "aspirin",
    "ibuprofen",
    "metformin",
    "amoxicillin",
    "amiodarone",
    "warfarin",
    "digoxin",
)
"""Drugs the spec's walkthroughs and §15 tests name."""

PATIENT_DRUGS = (
    "lisinopril", "furosemide", "chlorthalidone", "hydrochlorothiazide", "potassium chloride", "carvedilol",
    "metoprolol", "atorvastatin", "simvastatin", "sulfamethoxazole-trimethoprim", "fluconazole",
    "clarithromycin", "gabapentin", "diphenhydramine", "apixaban", "spironolactone", "verapamil",
    "omeprazole",
)  # fmt: skip
"""Medications of clingate's golden and generated patients."""


@pytest.fixture(scope="module")
def data() -> DrugData:
    return default_drug_data()


@pytest.fixture(scope="module")
def knowledge() -> ClinicalKnowledge:
    return default_knowledge()


def _all_facts(data: DrugData):
    for facts in data.drugs.values():
        for kind in ("boxed_warnings", "contraindications", "major_alerts"):
            for fact in getattr(facts, kind):
                yield facts.name, kind, fact


# ── the data file ──


def test_the_packaged_data_loads_with_every_required_drug(data: DrugData):
    assert set(SPEC_DRUGS + PATIENT_DRUGS) <= set(data.drugs)
    assert len(data.interactions) >= 40
    assert {i.severity for i in data.interactions} == {"major", "moderate", "minor"}


def test_every_fact_names_an_fda_source_and_is_one_sentence(data: DrugData):
    for name, kind, fact in _all_facts(data):
        assert fact.source.startswith("FDA "), (name, kind, fact)
        assert fact.text.endswith(".") and not re.search(r"\.\s+[A-Z]", fact.text), (name, kind, fact)
    for i in data.interactions:
        assert i.source.startswith("FDA label: "), i
        for text in (i.mechanism, i.significance):
            assert text.endswith(".") and not re.search(r"\.\s+[A-Z]", text), i


def test_names_are_generics_and_aliases_each_owned_by_one_drug(data: DrugData):
    names = data.names()
    assert {"warfarin", "coumadin", "jantoven", "lanoxin", "tikosyn", "cotrimoxazole", "bactrim"} <= names
    assert len(names) == sum(len(f.names) for f in data.drugs.values())
    assert all(n == n.lower().strip() for n in names)


def test_the_names_are_the_agents_drug_dictionary(data: DrugData):
    text = "Check interactions between Coumadin, amiodarone and Bactrim DS for this patient"
    assert drug_mentions(text, data.names()) == ("coumadin", "amiodarone", "bactrim ds")


def test_the_boxed_warnings_the_spec_relies_on(data: DrugData):
    dofetilide = " ".join(f.text for f in data.drugs["dofetilide"].boxed_warnings)
    assert "3 days" in dofetilide and "creatinine clearance" in dofetilide and "ECG" in dofetilide
    assert "bleeding" in data.drugs["warfarin"].boxed_warnings[0].text
    assert any("lactic acidosis" in f.text for f in data.drugs["metformin"].boxed_warnings)
    amiodarone = " ".join(f.text for f in data.drugs["amiodarone"].boxed_warnings)
    assert "pulmonary" in amiodarone and "hepatotoxicity" in amiodarone and "arrhythmias" in amiodarone
    ibuprofen = " ".join(f.text for f in data.drugs["ibuprofen"].boxed_warnings)
    assert "cardiovascular thrombotic" in ibuprofen and "gastrointestinal bleeding" in ibuprofen
    for none in ("amoxicillin", "digoxin", "aspirin"):
        assert data.drugs[none].boxed_warnings == ()
    assert "penicillins" in data.drugs["amoxicillin"].contraindications[0].text
    assert any("Reye's syndrome" in f.text for f in data.drugs["aspirin"].major_alerts)


def test_nti_is_set_exactly_for_the_drugs_with_a_clingate_nti_map(
    data: DrugData, knowledge: ClinicalKnowledge
):
    assert {f.name for f in data.drugs.values() if f.nti} == {m.name for m in knowledge.drug_maps}


# ── resolving names ──


@pytest.mark.parametrize("name", SPEC_DRUGS + PATIENT_DRUGS)
def test_every_required_drug_resolves_to_itself(data: DrugData, name: str):
    assert data.resolve(name) == name


@pytest.mark.parametrize(
    ("name", "generic"),
    [
        ("Coumadin", "warfarin"),
        ("jantoven", "warfarin"),
        ("Lanoxin", "digoxin"),
        ("TIKOSYN", "dofetilide"),
        ("cotrimoxazole", "sulfamethoxazole-trimethoprim"),
        ("Bactrim DS", "sulfamethoxazole-trimethoprim"),
        ("  Warfarin   Sodium ", "warfarin"),
        ("warfarin 5 mg tablet", "warfarin"),
        ("Metoprolol Succinate ER 50 mg", "metoprolol"),
        ("Toprol-XL 25 mg", "metoprolol"),
        ("KCl 20 mEq", "potassium chloride"),
        ("aspirin 81 mg, enteric coated", "aspirin"),
        ("amiodarone(200 mg)", "amiodarone"),
    ],
)
def test_aliases_and_dose_suffixes_resolve(data: DrugData, name: str, generic: str):
    assert data.resolve(name) == generic


@pytest.mark.parametrize(
    "name", ["unobtainium", "", "warfarinx", "lisinopril-hydrochlorothiazide", "aspirin/dipyridamole"]
)
def test_unknown_names_and_combinations_do_not_resolve(
    data: DrugData, knowledge: ClinicalKnowledge, name: str
):
    assert data.resolve(name) is None
    assert drug_safety(name, data, knowledge) is None


# ── check_drug_safety ──


def test_drug_safety_of_dofetilide_carries_its_boxed_warning(data: DrugData, knowledge: ClinicalKnowledge):
    result = drug_safety("Tikosyn", data, knowledge)
    assert result is not None
    assert result["drug"] == "dofetilide"
    assert result["boxed_warnings"] == [f.as_dict() for f in data.drugs["dofetilide"].boxed_warnings]
    assert result["narrow_therapeutic_index"] is False and result["monitoring"] == []
    assert list(result) == [
        "drug", "boxed_warnings", "contraindications", "major_alerts", "narrow_therapeutic_index",
        "monitoring",
    ]  # fmt: skip
    assert format_result("check_drug_safety", result).startswith("[Drug Safety Report]\nDrug: dofetilide")


def test_warfarin_safety_carries_the_nti_monitoring_and_its_threshold(
    data: DrugData, knowledge: ClinicalKnowledge
):
    result = drug_safety("coumadin 5 mg", data, knowledge)
    assert result is not None and result["narrow_therapeutic_index"] is True
    [inr] = result["monitoring"]
    assert inr["parameter"] == "pt_inr" and inr["name"] == "PT/INR"
    assert inr["toxicity_threshold"].startswith("above 3.0 INR")
    assert "mechanical valve: above 3.5 INR" in inr["toxicity_threshold"]
    assert inr["source"] == NTI_MAP_SOURCE


def test_digoxin_safety_lists_each_primary_parameter_with_threshold_or_alert(
    data: DrugData, knowledge: ClinicalKnowledge
):
    result = drug_safety("digoxin", data, knowledge)
    assert result is not None
    by_parameter = {m["parameter"]: m for m in result["monitoring"]}
    assert list(by_parameter) == ["digoxin_level", "potassium", "magnesium", "creatinine"]
    assert by_parameter["digoxin_level"]["toxicity_threshold"] == "at or above 2.0 ng/mL"
    assert by_parameter["potassium"]["alert"] == "below 3.5 mEq/L (critical low)"
    assert "toxicity_threshold" not in by_parameter["potassium"] and "alert" not in by_parameter["creatinine"]


# ── check_drug_interactions ──


def test_warfarin_and_amiodarone_have_a_table_entry_then_a_map_entry(
    data: DrugData, knowledge: ClinicalKnowledge
):
    result = drug_interactions(["Warfarin", "amiodarone"], data, knowledge)
    assert result["drugs"] == ["warfarin", "amiodarone"] and result["unknown"] == []
    table, nti_map = result["interactions"]
    assert table["drugs"] == nti_map["drugs"] == ["amiodarone", "warfarin"]
    assert table["source"].startswith("FDA label: amiodarone") and table["severity"] == "major"
    assert nti_map["source"] == NTI_MAP_SOURCE and nti_map["severity"] == "major"
    assert "cyp2c9 inhibitors" in nti_map["mechanism"] and "INCREASE" in nti_map["mechanism"]
    assert nti_map["significance"].startswith(
        "Effect: ~30% increase (highly variable); dose adjustment: Reduce warfarin 30-50%; note: "
    )


def test_map_entries_match_listed_drugs_through_aliases_and_keep_the_maps_moderate_group(
    data: DrugData, knowledge: ClinicalKnowledge
):
    # The warfarin map lists "cotrimoxazole"/"sulfamethoxazole"; it has no detail for it, so the
    # significance falls back on the map's primary monitoring.
    smx = drug_interactions(["warfarin", "bactrim"], data, knowledge)["interactions"]
    assert [e["source"] for e in smx] == [smx[0]["source"], NTI_MAP_SOURCE]
    assert smx[1]["significance"] == "Monitor PT/INR while the two are combined."
    carvedilol = drug_interactions(["digoxin", "coreg"], data, knowledge)["interactions"]
    assert [(e["severity"], e["source"] == NTI_MAP_SOURCE) for e in carvedilol] == [
        ("moderate", False),
        ("moderate", True),
    ]


def test_the_spec_three_drug_check_finds_every_pair(data: DrugData, knowledge: ClinicalKnowledge):
    result = drug_interactions(["warfarin", "aspirin", "ibuprofen"], data, knowledge)
    pairs = [tuple(e["drugs"]) for e in result["interactions"]]
    assert pairs == [("aspirin", "ibuprofen"), ("aspirin", "warfarin"), ("ibuprofen", "warfarin")]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("dofetilide", "verapamil"),
        ("dofetilide", "hydrochlorothiazide"),
        ("dofetilide", "sulfamethoxazole-trimethoprim"),
        ("clarithromycin", "simvastatin"),
    ],
)
def test_contraindicated_pairs_are_major(data: DrugData, knowledge: ClinicalKnowledge, a: str, b: str):
    [entry, *_] = drug_interactions([a, b], data, knowledge)["interactions"]
    assert entry["severity"] == "major" and "contraindicated" in entry["significance"]


def test_output_is_deterministic_and_independent_of_input_order(data: DrugData, knowledge: ClinicalKnowledge):
    names = ["digoxin", "amiodarone", "warfarin", "verapamil", "furosemide", "clarithromycin"]
    first = json.dumps(drug_interactions(names, data, knowledge))
    assert json.dumps(drug_interactions(names, load_drug_data(), knowledge)) == first
    reordered = drug_interactions(list(reversed(names)), data, knowledge)
    assert reordered["interactions"] == json.loads(first)["interactions"]
    pairs = [tuple(e["drugs"]) for e in reordered["interactions"]]
    assert pairs == sorted(pairs)
    assert json.dumps(drug_safety("digoxin", data, knowledge)) == json.dumps(
        drug_safety("Lanoxin", data, knowledge)
    )


def test_unknown_names_and_repeats_are_reported_not_paired(data: DrugData, knowledge: ClinicalKnowledge):
    assert drug_interactions(["warfarin", "Coumadin", "unobtainium"], data, knowledge) == {
        "drugs": ["warfarin"],
        "unknown": ["unobtainium"],
        "interactions": [],
    }
    assert drug_interactions(["metformin", "amoxicillin"], data, knowledge)["interactions"] == []


# ── strict loading ──

_MINIMAL = """\
drugs:
  oxycodone:
    aliases: [oxycontin]
    nti: false
    boxed_warnings: []
    contraindications:
      - text: "Contraindicated in significant respiratory depression."
        source: "FDA label: oxycodone, Contraindications"
    major_alerts: []
  gabapentin:
    aliases: []
    nti: false
    boxed_warnings: []
    contraindications: []
    major_alerts: []
interactions: []
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "drug_safety.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_file_from_elsewhere_loads_and_class_maps_add_their_own_source(
    tmp_path: Path, knowledge: ClinicalKnowledge
):
    data = load_drug_data(_write(tmp_path, _MINIMAL))
    assert data.resolve("OxyContin 10 mg") == "oxycodone"
    [entry] = drug_interactions(["oxycontin", "gabapentin"], data, knowledge)["interactions"]
    assert entry["drugs"] == ["gabapentin", "oxycodone"] and entry["source"] == CLASS_MAP_SOURCE
    assert "opioid map's gabapentinoids group" in entry["mechanism"]
    safety = drug_safety("oxycodone", data, knowledge)
    assert safety is not None and safety["monitoring"][0]["parameter"] == "respiratory_rate"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.replace('        source: "FDA label: oxycodone, Contraindications"\n', ""),
            r"missing \['source'\]",
        ),
        (
            lambda t: t.replace("    nti: false\n", "    nti: false\n    black_box: []\n", 1),
            r"unknown keys \['black_box'\]",
        ),
        (lambda t: t.replace("    nti: false\n", "", 1), r"drugs\.oxycodone is missing \['nti'\]"),
        (lambda t: t.replace("nti: false", "nti: maybe", 1), "nti must be true or false"),
        (lambda t: t.replace("aliases: []", "aliases: [oxycontin]"), "'oxycontin' belongs to both"),
        (lambda t: t.replace("aliases: [oxycontin]", "aliases: [OxyContin]"), "must be lower-case"),
        (lambda t: t.replace("boxed_warnings: []", "boxed_warnings:", 1), "must be a list"),
        (
            lambda t: t.replace("interactions: []", "interactions:\n  - {drugs: [oxycodone, gabapentin]}"),
            r"interactions\[0\] is missing \['mechanism', 'severity', 'significance', 'source'\]",
        ),
        (
            lambda t: t.replace(
                "interactions: []",
                "interactions:\n  - {drugs: [oxycodone, zzz], severity: major, mechanism: m.,"
                " significance: s., source: s}",
            ),
            "not generic names",
        ),
        (
            lambda t: t.replace(
                "interactions: []",
                "interactions:\n  - {drugs: [oxycodone, gabapentin], severity: severe, mechanism: m.,"
                " significance: s., source: s}",
            ),
            "severity must be one of",
        ),
        (lambda t: t + "extra: 1\n", r"unknown keys \['extra'\]"),
        (lambda t: "drugs: [\n", "not valid YAML"),
    ],
)
def test_a_malformed_file_raises_a_clear_error_naming_the_file(tmp_path: Path, edit, message: str):
    path = _write(tmp_path, edit(_MINIMAL))
    with pytest.raises(ValueError, match=message) as raised:
        load_drug_data(path)
    assert str(path) in str(raised.value)


def test_a_pair_listed_twice_is_rejected(tmp_path: Path):
    entry = "  - {drugs: [%s], severity: major, mechanism: m., significance: s., source: s}\n"
    text = _MINIMAL.replace(
        "interactions: []\n",
        "interactions:\n" + entry % "oxycodone, gabapentin" + entry % "gabapentin, oxycodone",
    )
    with pytest.raises(ValueError, match="twice"):
        load_drug_data(_write(tmp_path, text))
