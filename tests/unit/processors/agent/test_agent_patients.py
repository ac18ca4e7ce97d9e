"""The agent's patient tools: search and chart (``processors.agent.patients``) and the three write tools'
draft FHIR proposals with the prescription's clinical gates (``processors.agent.proposals``).

Golden patients are the demo's PT-TEST bundles, read through the clinical worker's own path
(``parse_document`` then ``reduce_update``); generated ones are small bundles built here. Every resource a
test builds or a proposal returns is checked with the clinical edge's FHIR R4 validator.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from processors.agent.patients import (
    ALLERGIES_UNAVAILABLE,
    MAX_ITEMS,
    MAX_MATCHES,
    patient_chart,
    search_patients,
)
from processors.agent.proposals import (
    ALLERGY_CLINICAL,
    ALLERGY_VERIFICATION,
    Proposal,
    allergy_proposal,
    note_proposal,
    prescription_proposal,
)
from processors.agent.tools import format_result
from processors.clinical.exceptions import FhirInvalid
from processors.clinical.fhir_input import parse_document, validate_resource
from processors.clinical.knowledge import ClinicalKnowledge, GateFlags, default_knowledge
from processors.clinical.records import PatientState
from processors.clinical.state import PatientUpdate, reduce_update
from streams.data import CLINICAL

AS_OF = datetime(2026, 3, 29, tzinfo=UTC)
"""The golden cases' as-of instant."""
LOINC = "http://loinc.org"
ESC032 = GateFlags(esc032_staleness=True)


@pytest.fixture(scope="module")
def knowledge() -> ClinicalKnowledge:
    return default_knowledge()


def state_of(document: dict[str, Any]) -> PatientState:
    """A patient's state after one document, as the clinical worker reduces it."""
    parsed = parse_document(document)
    assert not parsed.invalid, parsed.invalid
    ((pid, changes),) = parsed.changes.items()
    state, _ = reduce_update(None, PatientUpdate(patient_id=pid, changes=tuple(changes)), AS_OF)
    return state


def golden(case: str) -> PatientState:
    return state_of(json.loads((CLINICAL / f"{case}.json").read_text(encoding="utf-8")))


def patient(pid: str, given_names: list[str], family: str) -> dict[str, Any]:
    return {
        "resourceType": "Patient",
        "id": pid,
        "name": [{"use": "official", "family": family, "given": given_names}],
        "gender": "female",
        "birthDate": "1950-01-01",
    }


def observation(pid: str, oid: str, code: str, display: str, value: float, unit: str, when: datetime,
                category: str = "laboratory") -> dict[str, Any]:  # fmt: skip
    return {
        "resourceType": "Observation",
        "id": oid,
        "status": "final",
        "category": [{"coding": [{"system": "http://terminology.hl7.org/CodeSystem/observation-category",
                                  "code": category}]}],
        "code": {"coding": [{"system": LOINC, "code": code, "display": display}], "text": display},
        "subject": {"reference": f"Patient/{pid}"},
        "effectiveDateTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "valueQuantity": {"value": value, "unit": unit, "system": "http://unitsofmeasure.org", "code": unit},
    }  # fmt: skip


def bundle(*resources: dict[str, Any]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "collection", "entry": [{"resource": r} for r in resources]}


def inr_patient(days_old: int) -> PatientState:
    """A generated patient on no medication whose last INR is ``days_old`` days old."""
    inr = observation("p-inr", "inr-1", "6301-6", "INR", 1.1, "{INR}", AS_OF - timedelta(days=days_old))
    return state_of(bundle(patient("p-inr", ["Ada"], "Byron"), inr))


def warfarin(pid: str, name: str = "warfarin", notes: str | None = None) -> dict[str, Any]:
    return {
        "patient_id": pid,
        "medication_name": name,
        "dosage": "5 mg",
        "frequency": "daily",
        "notes": notes,
    }


PATIENTS = [
    patient("p-001", ["John"], "Smith"),
    patient("p-002", ["Jane", "Ann"], "Smith"),
    patient("p-003", ["Johnny"], "Smithers"),
    patient("p-004", ["Mary"], "O'Brien-Smith"),
    patient("p-005", ["Luis"], "García López"),
]


def ids(result: dict[str, Any]) -> list[str]:
    return [m["patient_id"] for m in result["matches"]]


# ── search_patient ──


def test_the_generated_patients_are_valid_fhir() -> None:
    for resource in PATIENTS:
        validate_resource(resource)


def test_search_by_family_name_matches_whole_words_only() -> None:
    # "Smithers" is another name; "O'Brien-Smith" has Smith as a word of its family name.
    assert ids(search_patients(PATIENTS, "Smith")) == ["p-001", "p-002", "p-004"]


def test_search_by_given_and_family_name_needs_every_word() -> None:
    assert ids(search_patients(PATIENTS, "John Smith")) == ["p-001"]
    assert ids(search_patients(PATIENTS, "Smith, Ann")) == ["p-002"]
    assert ids(search_patients(PATIENTS, "Johnny Smith")) == []


def test_search_ignores_case_and_reads_accents_and_apostrophes_as_letters() -> None:
    assert ids(search_patients(PATIENTS, "jOHN sMITH")) == ["p-001"]
    assert ids(search_patients(PATIENTS, "LÓPEZ")) == ["p-005"]
    assert ids(search_patients(PATIENTS, "mary o'brien")) == ["p-004"]


def test_several_matches_stay_a_result_with_demographics_sorted_by_id() -> None:
    result = search_patients(reversed(PATIENTS), "smith")
    assert result == {
        "matches": [
            {"patient_id": "p-001", "name": "John Smith", "birth_date": "1950-01-01", "gender": "female"},
            {"patient_id": "p-002", "name": "Jane Ann Smith", "birth_date": "1950-01-01", "gender": "female"},
            {"patient_id": "p-004", "name": "Mary O'Brien-Smith", "birth_date": "1950-01-01",
             "gender": "female"},
        ]
    }  # fmt: skip


def test_no_match_is_an_empty_list_of_matches() -> None:
    assert search_patients(PATIENTS, "Nobody") == {"matches": []}
    assert search_patients(PATIENTS, "   ") == {"matches": []}


def test_an_exact_patient_id_finds_that_patient() -> None:
    assert ids(search_patients(PATIENTS, " p-003 ")) == ["p-003"]
    assert ids(search_patients(PATIENTS, "p-00")) == []


def test_a_name_text_is_searched_and_shown_when_given_and_family_are_absent() -> None:
    textual = {"resourceType": "Patient", "id": "p-006", "name": [{"text": "Grace Hopper"}]}
    validate_resource(textual)
    assert search_patients([textual], "hopper")["matches"] == [
        {"patient_id": "p-006", "name": "Grace Hopper", "birth_date": None, "gender": None}
    ]


def test_a_long_search_is_bounded_and_says_how_many_were_left_out() -> None:
    many = [patient(f"p-{i:03d}", ["Pat"], "Lee") for i in range(MAX_MATCHES + 3)]
    result = search_patients(many, "lee")
    assert ids(result) == [f"p-{i:03d}" for i in range(MAX_MATCHES)]
    assert result["omitted"] == 3


def name_words(resource: dict[str, Any]) -> set[str]:
    """The test's own oracle: the words of a generated patient's name, split at spaces and hyphens."""
    name = resource["name"][0]
    return set(re.split(r"[\s-]+", " ".join([*name["given"], name["family"]]).casefold()))


QUERY_WORDS = ["john", "SMITH", "jane", "ann", "smithers", "o'brien", "brien", "lópez", "x"]


@given(st.lists(st.sampled_from(QUERY_WORDS), min_size=1, max_size=3))
def test_a_search_finds_exactly_the_patients_whose_name_has_every_query_word(words: list[str]) -> None:
    expected = [p["id"] for p in PATIENTS if {w.casefold() for w in words} <= name_words(p)]
    assert ids(search_patients(PATIENTS, " ".join(words))) == sorted(expected)


# ── get_patient_chart ──


def test_the_chart_of_pt_test_010_carries_medications_labs_and_the_gates(knowledge) -> None:
    state = golden("PT-TEST-010")
    chart = patient_chart(state, knowledge, AS_OF, patient=patient("PT-TEST-010", ["Test"], "Ten"))
    assert (chart["patient_id"], chart["name"], chart["birth_date"], chart["age"]) == (
        "PT-TEST-010", "Test Ten", "1943-06-20", 82,
    )  # fmt: skip
    assert "digoxin 0.125 mg po daily" in chart["medications"]
    digoxin = next(lab for lab in chart["labs"] if lab["code"] == "10535-3")
    assert digoxin == {
        "code": "10535-3",
        "display": "Digoxin [Mass/volume] in Serum or Plasma",
        "value": 2.1,
        "unit": "ng/mL",
        "effective": "2026-03-03T08:00:00Z",
        "staleness": "STALE",
        "age_days": 26,
    }
    assert [v["display"] for v in chart["vitals"]] == ["Heart rate"]
    assert {c["text"] for c in chart["conditions"]} >= {"Chronic kidney disease stage 3b"}
    assessment = chart["assessment"]
    assert assessment["nti_severity"] == "CRITICAL"
    assert assessment["nti_drugs"] == ["digoxin"]
    assert assessment["traffic_light"] == "RED"
    assert "Rule C: NTI CRITICAL" in assessment["sources"]
    assert assessment["staleness_banner"].startswith("PHASE 0 DATA READINESS: STALE")
    assert json.loads(json.dumps(chart)) == chart


def test_the_chart_never_reads_as_no_known_allergies(knowledge) -> None:
    chart = patient_chart(golden("PT-TEST-010"), knowledge, AS_OF)
    assert chart["allergies"] == ALLERGIES_UNAVAILABLE
    assert "Allergies: none" not in format_result("get_patient_chart", chart)


def test_the_chart_lists_the_most_recent_labs_within_its_bound_and_says_so(knowledge) -> None:
    labs = [
        observation("p-lab", f"o{i}", f"9999-{i}", f"Test {i}", float(i), "mg/dL", AS_OF - timedelta(hours=i))
        for i in range(MAX_ITEMS + 5)
    ]
    old = observation("p-lab", "old", "9999-0", "Test 0", 99.0, "mg/dL", AS_OF - timedelta(days=9))
    resolved = {
        "resourceType": "Condition",
        "id": "c1",
        "clinicalStatus": {"coding": [{"code": "resolved"}]},
        "code": {"text": "Pneumonia"},
        "subject": {"reference": "Patient/p-lab"},
    }
    chart = patient_chart(
        state_of(bundle(patient("p-lab", ["Lab"], "Rat"), *labs, old, resolved)), knowledge, AS_OF
    )
    assert [lab["code"] for lab in chart["labs"]] == [f"9999-{i}" for i in range(MAX_ITEMS)]
    assert chart["labs"][0]["value"] == 0.0  # the latest result of its code, not the older 99
    assert chart["conditions"] == []
    assert f"labs: {MAX_ITEMS} of {MAX_ITEMS + 5} shown" in chart["limits"]


def test_the_chart_refuses_a_naive_instant(knowledge) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        patient_chart(golden("PT-TEST-012"), knowledge, AS_OF.replace(tzinfo=None))


# ── prescribe_medication ──


def test_the_prescription_is_a_draft_medication_request_proposal(knowledge) -> None:
    proposal = prescription_proposal(
        golden("PT-TEST-010"), warfarin("PT-TEST-010", notes=" target INR 2-3 "), "rx-1", AS_OF, knowledge
    )
    assert (proposal.proposal_id, proposal.patient_id, proposal.tool, proposal.resource_type) == (
        "rx-1", "PT-TEST-010", "prescribe_medication", "MedicationRequest",
    )  # fmt: skip
    assert proposal.resource == {
        "resourceType": "MedicationRequest",
        "id": "rx-1",
        "status": "draft",
        "intent": "proposal",
        "medicationCodeableConcept": {"text": "warfarin"},
        "subject": {"reference": "Patient/PT-TEST-010"},
        "authoredOn": "2026-03-29T00:00:00Z",
        "dosageInstruction": [{"text": "5 mg daily"}],
        "note": [{"text": "target INR 2-3"}],
    }
    validate_resource(proposal.resource)


def test_warfarin_for_the_digoxin_patient_without_an_inr_shows_the_gates(knowledge) -> None:
    gates = prescription_proposal(golden("PT-TEST-010"), warfarin("PT-TEST-010"), "rx-1", AS_OF, knowledge)
    assert gates.gates is not None
    assert gates.gates["nti_drugs"] == gates.gates["nti_drugs_added"] == ["warfarin"]
    assert gates.gates["after"]["nti_drugs"] == ["digoxin", "warfarin"]
    assert gates.gates["monitoring"] == [{"parameter": "pt_inr", "class": "MISSING", "age_days": None,
                                          "effective": None}]  # fmt: skip
    assert gates.gates["after"]["traffic_light"] == "RED"
    assert "Rule C: NTI CRITICAL" in gates.gates["red_sources"]
    assert gates.verdict == (
        "warfarin is a narrow-therapeutic-index drug (warfarin): NTI CRITICAL, traffic light RED from "
        "Rule C: NTI CRITICAL; monitoring pt_inr MISSING."
    )


def test_warfarin_with_a_stale_inr_turns_the_light_yellow_through_esc032(knowledge) -> None:
    proposal = prescription_proposal(inr_patient(20), warfarin("p-inr"), "rx-2", AS_OF, knowledge, ESC032)
    gates = proposal.gates
    assert gates is not None
    assert gates["before"] == {"nti_severity": "NORMAL", "nti_drugs": [], "traffic_light": "GREEN",
                               "sources": ["Base: deterministic inputs only -> GREEN"]}  # fmt: skip
    assert gates["after"]["traffic_light"] == "YELLOW"
    assert "ESC-032: monitoring data STALE (pt_inr)" in gates["after"]["sources"]
    assert gates["nti_drugs_added"] == ["warfarin"]
    assert gates["monitoring"] == [
        {"parameter": "pt_inr", "class": "STALE", "age_days": 20, "effective": "2026-03-09T00:00:00Z"}
    ]
    assert gates["staleness_banner"].startswith("PHASE 0 DATA READINESS: STALE")
    assert gates["red_sources"] == []
    assert proposal.verdict == (
        "warfarin is a narrow-therapeutic-index drug (warfarin): NTI NORMAL, traffic light YELLOW (was "
        "GREEN) from ESC-032: monitoring data STALE (pt_inr); monitoring pt_inr STALE (20 days old)."
    )


def test_a_profoundly_stale_inr_turns_the_light_red(knowledge) -> None:
    gates = prescription_proposal(inr_patient(45), warfarin("p-inr"), "rx-3", AS_OF, knowledge, ESC032).gates
    assert gates is not None
    assert gates["after"]["traffic_light"] == "RED"
    assert gates["red_sources"][1:] == ["ESC-032: monitoring data PROFOUNDLY_STALE (pt_inr)"]


def test_without_escalating_flags_a_stale_inr_still_shows_in_the_monitoring(knowledge) -> None:
    proposal = prescription_proposal(inr_patient(20), warfarin("p-inr"), "rx-2", AS_OF, knowledge)
    assert proposal.gates is not None
    assert proposal.gates["after"]["traffic_light"] == "GREEN"
    assert proposal.verdict is not None and proposal.verdict.endswith(
        "monitoring pt_inr STALE (20 days old)."
    )


def test_a_brand_name_reaches_the_nti_map_through_the_drug_vocabulary(knowledge) -> None:
    gates = prescription_proposal(
        inr_patient(1), warfarin("p-inr", "Coumadin"), "rx-4", AS_OF, knowledge
    ).gates
    assert gates is not None and gates["nti_drugs_added"] == ["warfarin"]


def test_warfarin_again_for_a_patient_on_warfarin_adds_no_nti_drug_but_shows_the_stale_inr(knowledge) -> None:
    proposal = prescription_proposal(golden("PT-TEST-009"), warfarin("PT-TEST-009"), "rx-5", AS_OF, knowledge)
    assert proposal.gates is not None
    assert (proposal.gates["nti_drugs"], proposal.gates["nti_drugs_added"]) == (["warfarin"], [])
    assert proposal.verdict == (
        "warfarin is a narrow-therapeutic-index drug (warfarin already active): NTI ELEVATED, traffic light "
        "YELLOW from Rule D: NTI ELEVATED; monitoring pt_inr STALE (26 days old)."
    )


def test_a_drug_outside_the_nti_maps_says_so(knowledge) -> None:
    args = {
        "patient_id": "PT-TEST-012",
        "medication_name": "amoxicillin",
        "dosage": "500 mg",
        "frequency": "tid",
    }
    proposal = prescription_proposal(golden("PT-TEST-012"), args, "rx-6", AS_OF, knowledge)
    assert proposal.verdict == (
        "amoxicillin is not a narrow-therapeutic-index drug in clingate's maps: NTI NORMAL, traffic light "
        "GREEN; no monitoring dependency in clingate's maps."
    )


def test_an_unknown_patient_gets_the_draft_and_a_verdict_that_the_gates_did_not_run(knowledge) -> None:
    proposal = prescription_proposal(None, warfarin("p-999"), "rx-7", AS_OF, knowledge)
    assert proposal.gates is None
    assert proposal.resource["status"] == "draft"
    assert proposal.verdict == (
        "clingate holds no clinical state for patient p-999, so its gates (NTI, traffic light, Phase 0 "
        "staleness) could not run on warfarin."
    )


def test_the_proposal_leaves_the_patient_state_as_it_was(knowledge) -> None:
    state = golden("PT-TEST-010")
    copy = state.model_copy(deep=True)
    prescription_proposal(state, warfarin("PT-TEST-010"), "rx-1", AS_OF, knowledge)
    assert state == copy
    assert "MedicationRequest/rx-1" not in state.resources


def test_a_proposal_refuses_a_state_of_another_patient_a_naive_instant_and_a_bad_id(knowledge) -> None:
    state = golden("PT-TEST-010")
    with pytest.raises(ValueError, match="PT-TEST-009"):
        prescription_proposal(state, warfarin("PT-TEST-009"), "rx-1", AS_OF, knowledge)
    with pytest.raises(ValueError, match="timezone-aware"):
        prescription_proposal(state, warfarin("PT-TEST-010"), "rx-1", AS_OF.replace(tzinfo=None), knowledge)
    with pytest.raises(FhirInvalid):
        prescription_proposal(state, warfarin("PT-TEST-010"), "rx 1", AS_OF, knowledge)
    with pytest.raises(ValidationError):
        prescription_proposal(state, {"patient_id": "PT-TEST-010"}, "rx-1", AS_OF, knowledge)


# ── add_allergy and save_clinical_note ──


def test_the_allergy_is_an_unconfirmed_active_allergy_intolerance() -> None:
    args = {"patient_id": "p-999", "substance": "penicillin", "reaction": "hives", "severity": "severe"}
    proposal = allergy_proposal(None, args, "al-1", AS_OF)
    assert (proposal.tool, proposal.resource_type, proposal.gates, proposal.verdict) == (
        "add_allergy", "AllergyIntolerance", None, None,
    )  # fmt: skip
    assert proposal.resource == {
        "resourceType": "AllergyIntolerance",
        "id": "al-1",
        "clinicalStatus": {"coding": [{"system": ALLERGY_CLINICAL, "code": "active"}]},
        "verificationStatus": {"coding": [{"system": ALLERGY_VERIFICATION, "code": "unconfirmed"}]},
        "code": {"text": "penicillin"},
        "patient": {"reference": "Patient/p-999"},
        "recordedDate": "2026-03-29T00:00:00Z",
        "reaction": [{"manifestation": [{"text": "hives"}], "severity": "severe"}],
    }
    validate_resource(proposal.resource)


def test_an_allergy_without_severity_has_none_and_a_known_patient_is_accepted() -> None:
    args = {"patient_id": "PT-TEST-010", "substance": "sulfa", "reaction": "rash"}
    proposal = allergy_proposal(golden("PT-TEST-010"), args, "al-2", AS_OF)
    assert proposal.resource["reaction"] == [{"manifestation": [{"text": "rash"}]}]
    validate_resource(proposal.resource)


def test_the_note_is_a_preliminary_document_reference_with_the_text_attached() -> None:
    text = "Stable on current regimen. Pt états: no bleeding."
    args = {"patient_id": "p-999", "note_type": "progress note", "note_text": text}
    proposal = note_proposal(None, args, "note-1", AS_OF)
    resource = proposal.resource
    assert (proposal.tool, proposal.resource_type, proposal.gates) == (
        "save_clinical_note", "DocumentReference", None,
    )  # fmt: skip
    assert (resource["status"], resource["docStatus"], resource["type"]) == (
        "current", "preliminary", {"text": "progress note"},
    )  # fmt: skip
    assert (resource["subject"], resource["date"]) == ({"reference": "Patient/p-999"}, "2026-03-29T00:00:00Z")
    attachment = resource["content"][0]["attachment"]
    assert attachment["contentType"] == "text/plain; charset=utf-8"
    assert base64.b64decode(attachment["data"]).decode("utf-8") == text
    validate_resource(resource)


# ── determinism and JSON ──


def test_the_same_inputs_give_equal_json_answers(knowledge) -> None:
    def answers() -> list[Any]:
        state = golden("PT-TEST-008")
        proposals: list[Proposal] = [
            prescription_proposal(state, warfarin("PT-TEST-008"), "rx-1", AS_OF, knowledge, ESC032),
            allergy_proposal(
                state, {"patient_id": "PT-TEST-008", "substance": "x", "reaction": "y"}, "a", AS_OF
            ),
            note_proposal(
                state, {"patient_id": "PT-TEST-008", "note_type": "t", "note_text": "n"}, "n", AS_OF
            ),
        ]
        return [
            search_patients(PATIENTS, "smith"),
            patient_chart(state, knowledge, AS_OF, ESC032),
            *(asdict(p) for p in proposals),
        ]

    first, second = answers(), answers()
    assert first == second
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert json.loads(json.dumps(first)) == first
