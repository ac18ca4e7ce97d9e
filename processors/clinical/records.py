"""Normalised plain records of the FHIR resources the gates read, and the per-patient state.

FHIR parsing and validation (``fhir.resources``, costly: milliseconds per resource) happens once at the
edge (:mod:`processors.clinical.fhir_input`); the pure processors only ever see these small frozen
records, so assessing a patient never re-parses FHIR and a replay gives the same answer.

Every record carries its version stamp (``meta.versionId`` / ``meta.lastUpdated``) so the reducer in
:mod:`processors.clinical.state` can refuse an out-of-order older version. Datetimes are kept as the
sanitised ISO 8601 strings of the source (ESC-014: structured fields hold ISO 8601 only) and parsed
where arithmetic needs them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VersionStamp(_Frozen):
    """``meta.versionId`` and ``meta.lastUpdated`` of one resource version (either may be absent)."""

    version_id: str | None = None
    last_updated: str | None = None


class Coding(_Frozen):
    """A FHIR Coding reduced to what matching needs."""

    system: str | None = None
    code: str | None = None
    display: str | None = None


class _Record(_Frozen):
    id: str
    stamp: VersionStamp = VersionStamp()
    issues: tuple[str, ...] = ()


class PatientRecord(_Record):
    """Patient: the birth date is all the gates read (age is never derived from text, ESC-009); the names
    and gender identify the patient to a person (the clinician's agent searches them), never to a gate."""

    resource_type: Literal["Patient"] = "Patient"
    birth_date: str | None = None
    names: tuple[str, ...] = ()
    """Each FHIR HumanName as one display string (its ``text``, else given names then family)."""
    gender: str | None = None


class ObservationRecord(_Record):
    """Observation: code, category, effective time, value and any clinical text."""

    resource_type: Literal["Observation"] = "Observation"
    status: str | None = None
    codings: tuple[Coding, ...] = ()
    code_text: str | None = None
    categories: tuple[str, ...] = ()
    effective: str | None = None
    value: float | None = None
    unit: str | None = None
    value_text: str | None = None
    notes: tuple[str, ...] = ()


class MedicationRecord(_Record):
    """MedicationStatement / MedicationRequest: the medication text and status."""

    resource_type: Literal["MedicationStatement", "MedicationRequest"]
    status: str | None = None
    text: str | None = None
    codings: tuple[Coding, ...] = ()
    medication_reference: str | None = None
    dosage_text: str | None = None


class MedicationDefinition(_Record):
    """Medication: referenced by statements / requests through ``medicationReference``."""

    resource_type: Literal["Medication"] = "Medication"
    text: str | None = None
    codings: tuple[Coding, ...] = ()


class ConditionRecord(_Record):
    """Condition: its text feeds symptom, valve and HFrEF matching."""

    resource_type: Literal["Condition"] = "Condition"
    clinical_status: str | None = None
    verification_status: str | None = None
    texts: tuple[str, ...] = ()


class EncounterRecord(_Record):
    """Encounter: its reason texts feed symptom matching."""

    resource_type: Literal["Encounter"] = "Encounter"
    status: str | None = None
    reason_texts: tuple[str, ...] = ()
    start: str | None = None


Record = Annotated[
    PatientRecord
    | ObservationRecord
    | MedicationRecord
    | MedicationDefinition
    | ConditionRecord
    | EncounterRecord,
    Field(discriminator="resource_type"),
]


class ResourceUpsert(_Frozen):
    """A validated resource version to store."""

    kind: Literal["upsert"] = "upsert"
    record: Record


class ResourceDelete(_Frozen):
    """A deletion of ``resource_type/id`` (a Bundle entry with ``request.method = DELETE``)."""

    kind: Literal["delete"] = "delete"
    resource_type: str
    id: str
    stamp: VersionStamp = VersionStamp()


FhirChange = Annotated[ResourceUpsert | ResourceDelete, Field(discriminator="kind")]


class PatientState(_Frozen):
    """Latest version of each resource of one patient, plus tombstones of deleted ones.

    Keys are ``"<resourceType>/<id>"``. Tombstones keep the version stamp of the deletion so an older
    version that arrives late cannot resurrect a deleted resource. Retention: the state of a patient is
    dropped with the patient's own deletion (``Patient/<id>`` DELETE empties it); tombstones live as long
    as the patient's state.
    """

    patient_id: str
    resources: dict[str, Record] = Field(default_factory=dict)
    tombstones: dict[str, VersionStamp] = Field(default_factory=dict)

    def of_type(self, *types: str) -> list[Record]:
        """Records of the given resource types, sorted by key for a deterministic order."""
        return [self.resources[k] for k in sorted(self.resources) if self.resources[k].resource_type in types]
