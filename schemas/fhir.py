"""The FHIR update envelope: one FHIR R4 resource created or updated for a patient.

The resource travels as JSON text (see :mod:`schemas.base`) so the envelope does not change when FHIR
profiles do. The envelope checks only what routing and replay need: the resource is a JSON object whose
``resourceType`` equals ``resource_type``. Clinical validation of the resource is the clinical gates'
job, not the decoder's.
"""

from __future__ import annotations

import json
from typing import ClassVar, Self

from pydantic import Field, model_validator

from schemas.base import AvroModel, EventTime, JsonText


class FhirUpdate(AvroModel):
    """Envelope of one FHIR R4 resource for a patient, keyed by ``patient_id``."""

    avro_name: ClassVar[str] = "clingate.fhir.FhirUpdate"

    ts: EventTime
    patient_id: str
    resource_type: str = Field(examples=["Observation", "MedicationRequest", "Patient"])
    resource: JsonText
    resource_id: str | None = None

    @model_validator(mode="after")
    def _resource_matches_type(self) -> Self:
        document = json.loads(self.resource)
        if not isinstance(document, dict) or document.get("resourceType") != self.resource_type:
            raise ValueError(f"resource must be a JSON object with resourceType {self.resource_type!r}")
        return self
