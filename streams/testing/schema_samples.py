"""One representative event of each type the serde benchmark measures; the demo's schema step starts
from them too."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from schemas.base import AvroModel
from schemas.common import DeadLetter, Stage
from schemas.dbpm import Candidate, GateAction, GateDecision, NerPayload, RePayload, Verdict, VerdictLabel
from schemas.fhir import FhirUpdate

TS = datetime(2026, 5, 4, 10, 0, 1, tzinfo=UTC)


def samples() -> list[AvroModel]:
    """One representative instance per measured event type, stamped :data:`TS`."""
    candidate = Candidate(
        ts=TS, task="re", patient_id="p-000123", candidate_id="c-000123-re-0007",
        payload=RePayload(head="metformin", head_type="Treatment", relation="TREATS",
                          tail="type 2 diabetes", tail_type="Diagnosis"),
    )  # fmt: skip
    observation = {"resourceType": "Observation", "id": "o-1", "status": "final",
                   "code": {"coding": [{"system": "http://loinc.org", "code": "2160-0"}]},
                   "subject": {"reference": "Patient/p-000123"}, "effectiveDateTime": "2026-05-04T09:00:00Z",
                   "valueQuantity": {"value": 1.4, "unit": "mg/dL"}}  # fmt: skip
    return [
        Verdict(ts=TS, task="ner", verdict=VerdictLabel.HARD_FAIL, source="verifier_mmed",
                patient_id="p-000123", payload=NerPayload(entity="patient", category="Diagnosis")),
        candidate,
        GateDecision(ts=TS, task="re", patient_id="p-000123", candidate_id="c-000123-re-0007",
                     decision=GateAction.DOWNGRADE, rule="downgrade_band",
                     signature="TREATMENT|TREATS|DIAGNOSIS",
                     severity=0.52, confidence_multiplier=0.7,
                     provenance=("blocklist re TREATMENT|TREATS|DIAGNOSIS severity=0.52 count=2",),
                     candidate=candidate),
        FhirUpdate(ts=TS, patient_id="p-000123", resource_type="Observation",
                   resource=json.dumps(observation), resource_id="o-1"),
        DeadLetter(ts=TS, topic="clingate.dbpm.candidates", partition=0, offset=42, stage=Stage.DECODE,
                   error_type="SchemaDecodeError", error="bad_magic: it looks like JSON",
                   key=b"p-000123", value=bytes(1024)),
    ]  # fmt: skip
