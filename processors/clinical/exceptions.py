"""One exception root for the clinical gates; messages say what the operator should do next."""

from __future__ import annotations


class ClinicalError(Exception):
    """Root of every error raised by :mod:`processors.clinical`."""


class KnowledgeError(ClinicalError):
    """The clinical knowledge data (YAML maps) is malformed or inconsistent."""


class UnitError(ClinicalError):
    """A measurement unit cannot be understood or converted to the parameter's unit."""


class FhirInvalid(ClinicalError):
    """A FHIR resource or bundle failed validation; carries the validation message for the DLQ."""

    def __init__(
        self, message: str, resource_type: str | None = None, resource_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.resource_type = resource_type
        self.resource_id = resource_id
