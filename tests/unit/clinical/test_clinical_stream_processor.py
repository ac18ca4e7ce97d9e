"""The pure stream processor: re-assess on every event, emit only on change, replay gives the same."""

from __future__ import annotations

from datetime import UTC, datetime

from clinical_builders import AS_OF, lab, load_bundle, med, mini_bundle
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.clinical.assess import process_event
from processors.clinical.fhir_input import parse_document
from processors.clinical.state import ChangeOutcome, PatientUpdate
from schemas.clinical import AdversarialReview, ClinicalAssessment, Deliverable, SafetyAudit


def updates(document, patient="p"):
    parsed = parse_document(document, default_patient=patient)
    return [
        PatientUpdate(patient_id=pid, changes=(c,))
        for pid, changes in parsed.changes.items()
        for c in changes
    ]


def run(events, knowledge):
    state, emitted = None, []
    for event in events:
        state, outputs = process_event(state, event, AS_OF, knowledge)
        emitted.append(outputs)
    return state, emitted


def assessments(outputs):
    return [o for o in outputs if isinstance(o, ClinicalAssessment)]


def test_each_resource_update_reassesses_and_emits_only_when_changed(knowledge):
    events = updates(load_bundle("PT-TEST-010"), "PT-TEST-010")
    _, emitted = run([*events, events[3]], knowledge)
    assert all(
        isinstance(o, ChangeOutcome) for out in emitted for o in out if not isinstance(o, ClinicalAssessment)
    )
    assert assessments(emitted[0])  # first event always emits
    assert assessments(emitted[-1]) == []  # replayed duplicate: nothing changed
    final = [a for out in emitted for a in assessments(out)][-1]
    assert final.nti.severity == "CRITICAL"


def test_replaying_the_same_events_emits_the_same_outputs(knowledge):
    events = updates(load_bundle("PT-TEST-008"), "PT-TEST-008")
    assert run(events, knowledge)[1] == run(events, knowledge)[1]


def test_adversarial_review_event_changes_the_light(knowledge):
    events = updates(load_bundle("PT-TEST-012"), "PT-TEST-012")
    state, _ = run(events, knowledge)
    review = AdversarialReview(
        patient_id="PT-TEST-012",
        review_id="r1",
        event_time="2026-03-29T00:00:00Z",
        disposition="DISSENT",
        subcategory="DATAGAP",
    )
    state, outputs = process_event(state, review, AS_OF, knowledge)
    (assessment,) = assessments(outputs)
    assert (assessment.traffic_light.light, assessment.traffic_light.shadow) == ("RED", "GREEN")
    _, again = process_event(state, review, AS_OF, knowledge)
    assert assessments(again) == []


def test_deliverable_event_emits_one_audit_and_leaves_state_alone(knowledge):
    state, _ = run(updates(load_bundle("PT-TEST-010"), "PT-TEST-010"), knowledge)
    deliverable = Deliverable(
        patient_id="PT-TEST-010", deliverable_id="d1", event_time="2026-03-29T00:00:00Z", text="DDI reviewed"
    )
    new_state, outputs = process_event(state, deliverable, AS_OF, knowledge)
    assert new_state is state
    assert [type(o) for o in outputs] == [SafetyAudit]


def test_event_time_is_the_as_of(knowledge):
    (event,) = updates(mini_bundle("p", [med("x 1 mg")]))[1:]
    _, outputs = process_event(None, event, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), knowledge)
    assert assessments(outputs)[0].as_of == "2026-01-02T03:04:05Z"


def test_invalid_resources_are_reported_with_their_error_and_siblings_survive():
    bad = {"resourceType": "Observation", "status": "not-a-status", "code": {"text": "x"}}
    parsed = parse_document(mini_bundle("p", [bad, lab("2823-3", "Potassium", 4.0, "mmol/L")]))
    assert [(i.resource_type, i.resource_id) for i in parsed.invalid] == [("Observation", "r000")]
    assert "status" in parsed.invalid[0].error
    assert len(parsed.changes["p"]) == 2  # the Patient and the valid Observation


@settings(max_examples=15, deadline=None)
@given(st.randoms(use_true_random=False))
def test_arrival_order_of_resources_never_changes_the_assessment(knowledge, rnd):
    bundle = load_bundle("PT-TEST-008")
    baseline = run(updates(bundle, "PT-TEST-008"), knowledge)[0]
    entries = list(bundle["entry"])
    rnd.shuffle(entries)
    shuffled = run(updates({**bundle, "entry": entries}, "PT-TEST-008"), knowledge)[0]
    assert shuffled.last_digest == baseline.last_digest


def test_malformed_documents_are_reported_not_raised():
    assert parse_document([1, 2]).invalid[0].error.startswith("not a FHIR JSON object")
    parsed = parse_document(
        {"resourceType": "Bundle", "entry": ["x", {"resource": {"resourceType": "Patient"}}]}
    )
    assert [i.error for i in parsed.invalid] == ["Bundle.entry item is not an object"]
    assert parsed.total() == 2
