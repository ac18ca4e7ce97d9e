"""Avro schemas of the clinical events accept the models' JSON datums, and the round trip is exact."""

from __future__ import annotations

import fastavro
import pytest
from clinical_builders import AS_OF, load_bundle, state_from

from processors.clinical.assess import assess_view
from processors.clinical.knowledge import GateFlags
from processors.clinical.safety_patterns import audit_deliverable
from processors.clinical.traffic_light import ReviewInputs
from processors.clinical.view import PatientView
from schemas.clinical import AdversarialReview, ClinicalAssessment, Deliverable, SafetyAudit
from schemas.registry import load_registry


def schema(model) -> dict:
    # The standalone form: SafetyAudit.avsc uses enums that ClinicalAssessment.avsc defines.
    parsed = load_registry().for_model(model).current.parsed
    assert parsed["name"] == model.avro_name
    return parsed


def roundtrip(model, instance):
    datum = instance.model_dump(mode="json")
    assert fastavro.validate(datum, schema(model), strict=True)
    assert model.model_validate(datum) == instance


@pytest.mark.parametrize("case", ["PT-TEST-008", "PT-TEST-009", "PT-TEST-010", "PT-TEST-012"])
def test_assessment_and_audit_datums_fit_their_avro_schemas(knowledge, case):
    view = PatientView(state_from(load_bundle(case)), knowledge)
    assessment = assess_view(
        view,
        AS_OF,
        ReviewInputs(disposition="DISSENT", subcategory="odd", automation_bias_risk="HIGH"),
        GateFlags(tier_b_class_maps=True),
    )
    roundtrip(ClinicalAssessment, assessment)
    deliverable = Deliverable(
        patient_id=case, deliverable_id="d", event_time="2026-03-29T00:00:00Z", text="DDI"
    )
    roundtrip(Deliverable, deliverable)
    roundtrip(SafetyAudit, audit_deliverable(assessment, view, deliverable, knowledge))


def test_review_datum_fits_its_schema():
    roundtrip(
        AdversarialReview,
        AdversarialReview(
            patient_id="p",
            review_id="r",
            event_time="2026-03-29T00:00:00Z",
            disposition="CONCUR",
            revision_count=2,
        ),
    )


def test_contract_field_names_use_keywords_class_and_with(knowledge):
    datum = assess_view(
        PatientView(state_from(load_bundle("PT-TEST-010")), knowledge), AS_OF, None, GateFlags()
    ).model_dump(mode="json")
    assert "class" in datum["staleness"]["observations"][0]
    assert "with" in datum["nti"]["interactions"][0]
    assert set(datum) >= {
        "patient_id",
        "as_of",
        "age",
        "staleness",
        "medications",
        "medication_count_flag",
        "med_dependencies",
        "nti",
        "traffic_light",
    }
