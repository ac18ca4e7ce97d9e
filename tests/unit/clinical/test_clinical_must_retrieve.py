"""Must-retrieve evidence checked (ESC-002): a run's evidence against the patient's must-retrieve list.

The supplement's PT-TEST-010 trace: digoxin CRITICAL lists seven sources; similarity search brought the
label and the narrative review, and five were injected by exact filename. Here the run's evidence is
checked, the five are asked for on the evidence-request record, named on the gated draft and the safety
audit, and the light keeps an ESC-002 source until the run's evidence has them.
"""

from __future__ import annotations

from datetime import timedelta

from clinical_builders import AS_OF, load_bundle, med, mini_bundle

from processors.clinical.assess import process_event
from processors.clinical.fhir_input import parse_document
from processors.clinical.knowledge import GateFlags
from processors.clinical.state import PatientUpdate
from processors.clinical.traffic_light import ReviewInputs, compute_traffic_light
from processors.drafts.citations import Evidence
from processors.drafts.run import check_evidence, missing_sources, new_run
from schemas.clinical import (
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidencePacket,
    EvidenceRequest,
    GatedDraft,
    Nti,
    SafetyAudit,
    Staleness,
)

DIGOXIN_SOURCES = [
    "digoxin label med guides.pdf",
    "influence of ageing on PD and PK of chronically administered medicines in geriatric patients.pdf",
    "diagnosis_and_practical_management_of_digoxin_toxicity_a_narrative_review_and_concensus.pdf",
    "expert_consensus_on_the_diagnosis_and_management_of_digoxin_toxicity.pdf",
    "Managing_electrolyte_imbalances_and_iron_deficiency_in_heart_failure.pdf",
    "treatment_of_electrolyte_disorders_in_adult_patients_in_the_ICU.pdf",
    "renal dosing conceps ashp.pdf",
]
"""Supplementary Data 1 §3e, in its order."""

SEED_INJECTED = {
    "Managing_electrolyte_imbalances_and_iron_deficiency_in_heart_failure.pdf",
    "expert_consensus_on_the_diagnosis_and_management_of_digoxin_toxicity.pdf",
    "influence of ageing on PD and PK of chronically administered medicines in geriatric patients.pdf",
    "renal dosing conceps ashp.pdf",
    "treatment_of_electrolyte_disorders_in_adult_patients_in_the_ICU.pdf",
}
"""The five sources the trace's must-retrieve activation injected."""

RETRIEVED = [
    "digoxin label med guides.pdf",
    DIGOXIN_SOURCES[2],
    "AHA HF guidelines.pdf",
    "KDIGO-2024-CKD-Guideline.pdf",
]
"""What similarity search returned: two must-retrieve sources and two others."""

DRAFT = "# Digoxin\n\nDigoxin toxicity is likely; the pharmacist reviews the level and potassium.\n"


def _updates(document: dict, patient: str) -> list[PatientUpdate]:
    parsed = parse_document(document, default_patient=patient)
    return [
        PatientUpdate(patient_id=pid, changes=(c,))
        for pid, changes in parsed.changes.items()
        for c in changes
    ]


def _evidence(patient: str, sources: list[str], minutes: int = 0) -> EvidenceBundle:
    packets = [EvidencePacket(source=s, text=f"Text of {s}.") for s in sources]
    return EvidenceBundle(patient_id=patient, run_id="run-1", event_time=AS_OF + timedelta(minutes=minutes),
                          packets=packets)  # fmt: skip


def _draft(patient: str, revision: int, minutes: int) -> ClinicalDraft:
    return ClinicalDraft(patient_id=patient, run_id="run-1", revision=revision,
                         event_time=AS_OF + timedelta(minutes=minutes), text=DRAFT)  # fmt: skip


def _stream(events: list, knowledge, state=None):
    emitted = []
    for event in events:
        state, outputs = process_event(state, event, AS_OF, knowledge)
        emitted.append(outputs)
    return state, emitted


def _of(outputs: list, kind: type) -> list:
    return [o for o in outputs if isinstance(o, kind)]


def test_the_seed_trace_requests_the_five_sources_it_injected(knowledge):
    patient, _ = _stream(_updates(load_bundle("PT-TEST-010"), "PT-TEST-010"), knowledge)
    state, [outputs] = _stream([_evidence("PT-TEST-010", RETRIEVED)], knowledge, patient)
    [request] = _of(outputs, EvidenceRequest)
    assert set(request.missing) == SEED_INJECTED and len(request.missing) == 5
    assert request.must_retrieve == DIGOXIN_SOURCES
    assert (request.nti_severity, request.drugs, request.revision) == ("CRITICAL", ["digoxin"], None)
    [assessment] = _of(outputs, ClinicalAssessment)
    assert "ESC-002: the run's evidence lacks 5 must-retrieve sources" in assessment.traffic_light.sources
    assert state.run.missing == tuple(request.missing)


def test_the_gated_draft_and_the_safety_audit_name_what_the_evidence_lacks(knowledge):
    patient, _ = _stream(_updates(load_bundle("PT-TEST-010"), "PT-TEST-010"), knowledge)
    deliverable = Deliverable(patient_id="PT-TEST-010", deliverable_id="d-1", event_time=AS_OF, text=DRAFT)
    _state, emitted = _stream(
        [_evidence("PT-TEST-010", RETRIEVED), _draft("PT-TEST-010", 0, 5), deliverable], knowledge, patient
    )
    [gated] = _of(emitted[1], GatedDraft)
    assert gated.must_retrieve == DIGOXIN_SOURCES and set(gated.must_retrieve_missing) == SEED_INJECTED
    assert not _of(emitted[1], EvidenceRequest)  # the same gap was asked for at the evidence
    [audit] = _of(emitted[2], SafetyAudit)
    assert audit.run is not None and set(audit.run.must_retrieve_missing) == SEED_INJECTED


def test_the_injected_sources_close_the_gap_and_the_request_stops(knowledge):
    patient, _ = _stream(_updates(load_bundle("PT-TEST-010"), "PT-TEST-010"), knowledge)
    _state, emitted = _stream(
        [
            _evidence("PT-TEST-010", RETRIEVED),
            _evidence("PT-TEST-010", RETRIEVED + sorted(SEED_INJECTED), minutes=1),
            _draft("PT-TEST-010", 0, 5),
        ],
        knowledge,
        patient,
    )
    assert not _of(emitted[1], EvidenceRequest) and not _of(emitted[2], EvidenceRequest)
    [assessment] = _of(emitted[1], ClinicalAssessment)
    assert not any(s.startswith("ESC-002") for s in assessment.traffic_light.sources)
    [gated] = _of(emitted[2], GatedDraft)
    assert gated.must_retrieve_missing == [] and gated.must_retrieve == DIGOXIN_SOURCES


def test_a_draft_without_evidence_asks_for_every_source_and_a_regression_asks_again(knowledge):
    patient, _ = _stream(_updates(load_bundle("PT-TEST-010"), "PT-TEST-010"), knowledge)
    _, emitted = _stream(
        [
            _draft("PT-TEST-010", 0, 1),
            _evidence("PT-TEST-010", DIGOXIN_SOURCES, minutes=2),
            _evidence("PT-TEST-010", DIGOXIN_SOURCES[1:], minutes=3),
        ],
        knowledge,
        patient,
    )
    [first] = _of(emitted[0], EvidenceRequest)
    assert first.missing == DIGOXIN_SOURCES and first.revision == 0
    assert not _of(emitted[1], EvidenceRequest)
    [again] = _of(emitted[2], EvidenceRequest)
    assert again.missing == DIGOXIN_SOURCES[:1]


def test_a_normal_patient_has_nothing_to_retrieve(knowledge):
    patient, _ = _stream(_updates(load_bundle("PT-TEST-012"), "PT-TEST-012"), knowledge)
    _, emitted = _stream(
        [_evidence("PT-TEST-012", ["x.pdf"]), _draft("PT-TEST-012", 0, 1)], knowledge, patient
    )
    assert not _of(emitted[0] + emitted[1], EvidenceRequest)
    [gated] = _of(emitted[1], GatedDraft)
    assert (gated.must_retrieve, gated.must_retrieve_missing) == ([], [])


def test_a_draft_whose_evidence_lacks_a_source_cannot_turn_green(knowledge):
    """Warfarin with amiodarone is ELEVATED when the draft is gated; amiodarone stopped makes the NTI gate
    NORMAL, and the light stays YELLOW on ESC-002 alone until the run's evidence is checked again."""
    resources = [med("warfarin 5 mg po daily"), med("amiodarone 200 mg po daily")]
    patient, _ = _stream(_updates(mini_bundle("p-100", resources), "p-100"), knowledge)
    state, emitted = _stream([_draft("p-100", 0, 1)], knowledge, patient)
    assert set(_of(emitted[0], GatedDraft)[0].must_retrieve_missing) == {
        "warfarin_FDA_med_guide.pdf", "warfarin dosing nomogram.pdf", "renal dosing conceps ashp.pdf"
    }  # fmt: skip
    stopped = [resources[0], med("amiodarone 200 mg po daily", status="stopped")]
    state, emitted = _stream(_updates(mini_bundle("p-100", stopped), "p-100"), knowledge, state)
    light = _of([o for outputs in emitted for o in outputs], ClinicalAssessment)[-1].traffic_light
    assert light.light == "YELLOW" and light.shadow == "YELLOW"
    assert [s for s in light.sources if not s.startswith("Base")] == [
        "ESC-002: the run's evidence lacks 3 must-retrieve sources"
    ]
    state, emitted = _stream([_evidence("p-100", ["warfarin label.pdf"], minutes=9)], knowledge, state)
    [assessment] = _of(emitted[0], ClinicalAssessment)
    assert assessment.traffic_light.light == "GREEN" and state.run.missing == ()


def test_the_rule_escalates_only_and_names_its_count():
    nti = Nti(severity="NORMAL", drugs=[], supratherapeutic=[], interactions=[], symptoms=[], warnings=[],
              must_retrieve=[])  # fmt: skip
    staleness = Staleness(overall="CURRENT", banner="", observations=[])
    review = ReviewInputs(disposition="CONCUR", missing_evidence=("a.pdf",))
    light = compute_traffic_light(nti, staleness, review, GateFlags(), {}, set())
    assert light.light == "YELLOW"
    assert light.sources[-1] == "ESC-002: the run's evidence lacks 1 must-retrieve source"
    red = compute_traffic_light(nti, staleness, ReviewInputs("DISSENT", missing_evidence=("a.pdf",)),
                                GateFlags(), {}, set())  # fmt: skip
    assert red.light == "RED" and red.sources[-1].startswith("ESC-002")


def test_sources_match_by_exact_name_in_must_retrieve_order():
    evidence = [Evidence("renal dosing concepts ASHP.pdf", "t"), Evidence("b.pdf", "t")]
    assert missing_sources(evidence, ["a.pdf", "b.pdf", "renal dosing conceps ashp.pdf"]) == (
        "a.pdf",
        "renal dosing conceps ashp.pdf",
    )
    run, request = check_evidence(new_run("r"), ["a.pdf"])
    assert request == ("a.pdf",) and run.requested == ("a.pdf",)
    assert check_evidence(run, ["a.pdf"])[1] == ()
