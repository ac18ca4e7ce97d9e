"""The incremental assessment equals the full one, record by record, on generated patient streams.

``process_event_reusing`` assesses each record on the parts of the patient's previous assessment that
the record's changes do not feed; ``process_event`` computes every part anew
(:mod:`processors.clinical.assess`). Over streams of FHIR updates, reviews, deliverables and a run's records
(:mod:`tests.clinical_streams`), under every combination of gate flags, both give the same outputs,
byte for byte as the loop publishes them, and the same state after every record.
"""

from __future__ import annotations

from datetime import timedelta
from functools import cached_property

import pytest
from clinical_builders import AS_OF as AS_OF_TIME
from clinical_builders import condition, encounter, lab, med, mini_bundle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.clinical.assess import AS_OF, AssessmentParts, process_event, process_event_reusing
from processors.clinical.fhir_input import parse_document
from processors.clinical.knowledge import GateFlags, default_knowledge
from processors.clinical.state import PatientUpdate
from processors.clinical.view import RESOURCE_TYPES, PatientView
from processors.drafts.inputs import DraftInputError
from processors.drafts.run import RunEventRejected
from schemas.base import AvroModel
from schemas.clinical import AdversarialReview, ClinicalAssessment
from schemas.wire import make_serde
from streams.worker.clinical import OUTPUT_TOPICS, Published
from tests.clinical_streams import patient_streams, processor_event

KNOWLEDGE = default_knowledge()
CHART_TIME = AS_OF_TIME
LATER = AS_OF_TIME + timedelta(days=400)
SERDE = make_serde(None)
FLAGS = st.builds(
    GateFlags,
    tier_b_class_maps=st.booleans(),
    esc032_staleness=st.booleans(),
    esc033_compound=st.booleans(),
    esc033_min_class=st.sampled_from(["STALE", "PROFOUNDLY_STALE"]),
    rule_a_enforced=st.booleans(),
)


def _published(outputs: list) -> list[bytes | str]:
    """The outputs as the loop publishes them (Avro), the reducer's change outcomes as JSON."""
    return [
        SERDE.encode(o, topic=OUTPUT_TOPICS[type(o)]) if isinstance(o, Published) else o.model_dump_json()
        for o in outputs
    ]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=patient_streams(), flags=FLAGS)
def test_the_incremental_assessment_equals_the_full_one_record_by_record(
    stream: list[AvroModel], flags: GateFlags
) -> None:
    full = incremental = parts = None
    for record in stream:
        item, now = processor_event(record)
        if item is None:
            continue
        try:
            expected_state, expected = process_event(full, item, now, KNOWLEDGE, flags)
        except (RunEventRejected, DraftInputError) as error:
            with pytest.raises(type(error)):
                process_event_reusing(incremental, parts, item, now, KNOWLEDGE, flags)
            continue
        got = process_event_reusing(incremental, parts, item, now, KNOWLEDGE, flags)
        assert _published(got.outputs) == _published(expected)
        assert got.state.model_dump_json() == expected_state.model_dump_json()
        if got.parts is not None:
            _assert_as_computed_anew(got.parts)
        full, incremental, parts = expected_state, got.state, got.parts


def _assert_as_computed_anew(parts: AssessmentParts) -> None:
    """Every part and fact ``parts`` holds (taken over or computed) equals the one computed anew: a part
    taken over wrongly is found even while no output shows it yet."""
    fresh = AssessmentParts(PatientView(parts.view.state, KNOWLEDGE), parts.as_of, parts.flags)
    for holder, anew in ((parts, fresh), (parts.view, fresh.view)):
        for name in type(holder).READS:
            if name in vars(holder):
                assert vars(holder)[name] == getattr(anew, name), name


CHART = mini_bundle(
    "p",
    [
        med("digoxin 0.125 mg po daily"),
        med("warfarin 5 mg po daily"),
        {
            "resourceType": "MedicationStatement",
            "status": "active",
            "medicationReference": {"reference": "Medication/m1"},
        },
        lab("6301-6", "INR", 3.2, "{INR}", when="2026-03-27T08:00:00Z"),
        lab("10535-3", "Digoxin", 0.9, "ng/mL", when="2026-03-27T08:00:00Z"),
        lab("2823-3", "Potassium", 3.2, "mmol/L", when="2026-03-27T08:00:00Z"),
        condition("Atrial fibrillation"),
    ],
)
"""A patient on digoxin and warfarin (a third statement names its drug through a Medication it lacks),
with an INR between warfarin's two thresholds and a digoxin level above the heart-failure target."""
MEDICATION = {"resourceType": "Medication", "id": "m1", "code": {"text": "trimethoprim-sulfamethoxazole"}}
CHANGES = {
    "Patient": ({"resourceType": "Patient", "id": "p", "birthDate": "1990-06-01"}, "age"),
    "MedicationStatement": ({**med("amiodarone 200 mg po daily"), "id": "s9"}, "nti"),
    "MedicationRequest": (
        {
            **med("furosemide 40 mg po daily"),
            "resourceType": "MedicationRequest",
            "intent": "order",
            "id": "q9",
        },
        "nti",
    ),
    "Medication": (MEDICATION, "nti"),
    "Observation": ({**lab("6301-6", "INR", 3.8, "{INR}", when="2026-03-28T08:00:00Z"), "id": "o9"}, "nti"),
    "Condition (a valve raises warfarin's threshold)": (
        {**condition("Mechanical aortic valve"), "id": "c9"},
        "nti",
    ),
    "Condition (heart failure lowers digoxin's target)": ({**condition("Heart failure"), "id": "c8"}, "nti"),
    "Encounter": ({**encounter("Nausea and blurred vision"), "id": "e9"}, "nti"),
    "Condition with an annotated onset (an issue)": (
        {**condition("Gout"), "id": "c7", "onsetDateTime": "2020-01-01 [STALE]"},
        "issues",
    ),
    "Observation dated after the event": (
        {**lab("2823-3", "Potassium", 4.0, "mmol/L", when="2026-03-30T08:00:00Z"), "id": "o8"},
        "issues",
    ),
}


def _update(document: dict) -> PatientUpdate:
    """The changes of ``document``, all valid, for patient ``p``."""
    parsed = parse_document(document, default_patient="p")
    assert not parsed.invalid, parsed.invalid
    return PatientUpdate(patient_id="p", changes=tuple(parsed.changes["p"]))


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_of_each_resource_type_recomputes_what_it_feeds(change: str) -> None:
    """On a chart every gate has something to say of, one resource of each type changes the assessment
    in what the type feeds: the incremental assessment has it as the full one does."""
    resource, field = CHANGES[change]
    flags = GateFlags(esc032_staleness=True, esc033_compound=True)
    chart = process_event_reusing(None, None, _update(CHART), CHART_TIME, KNOWLEDGE, flags)
    subject = (
        {}
        if resource["resourceType"] in ("Patient", "Medication")
        else {"subject": {"reference": "Patient/p"}}
    )
    event = _update(
        {"resourceType": "Bundle", "type": "collection", "entry": [{"resource": {**resource, **subject}}]}
    )
    got = process_event_reusing(chart.state, chart.parts, event, CHART_TIME, KNOWLEDGE, flags)
    expected_state, expected = process_event(chart.state, event, CHART_TIME, KNOWLEDGE, flags)
    assert _published(got.outputs) == _published(expected)
    assert got.state == expected_state
    before, after = (next(o for o in p.outputs if isinstance(o, ClinicalAssessment)) for p in (chart, got))
    assert getattr(after, field) != getattr(before, field)


def test_a_later_event_time_recomputes_what_the_instant_feeds() -> None:
    chart = process_event_reusing(None, None, _update(CHART), CHART_TIME, KNOWLEDGE, GateFlags())
    review = AdversarialReview(patient_id="p", review_id="r", event_time=LATER, disposition="CONCUR")
    got = process_event_reusing(chart.state, chart.parts, review, LATER, KNOWLEDGE, GateFlags())
    expected_state, expected = process_event(chart.state, review, LATER, KNOWLEDGE, GateFlags())
    assert _published(got.outputs) == _published(expected) and got.state == expected_state
    (before,) = (o for o in chart.outputs if isinstance(o, ClinicalAssessment))
    (after,) = (o for o in got.outputs if isinstance(o, ClinicalAssessment))
    assert (after.age, after.staleness) != (before.age, before.staleness)


@pytest.mark.parametrize("holder", [PatientView, AssessmentParts])
def test_every_cached_part_declares_what_it_reads(holder: type) -> None:
    """A cached part that is not declared is never taken over (computed anew each time); one declared
    must exist and read only resource types and the assessment instant."""
    cached = {name for name, value in vars(holder).items() if isinstance(value, cached_property)}
    assert set(holder.READS) == cached
    assert all(reads <= RESOURCE_TYPES | {AS_OF} for reads in holder.READS.values())
