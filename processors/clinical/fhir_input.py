"""The FHIR edge: sanitise, validate with ``fhir.resources``, normalise into plain records.

Validation library: ``fhir.resources`` 8.x, whose top-level package is FHIR R5. We validate with its
``fhir.resources.R4B`` subpackage (FHIR 4.3.0). There is no R4 (4.0.1) subpackage in 8.x; HL7 states
that R4B changed only selected modules (medication definition / evidence-based medicine, subscriptions)
and that "implementers that do not use the specific portions where changes have been made can continue
to use either R4 or R4B without any functional difference" (hl7.org/fhir/R4B/r4b-explanation.html). The
resources read here (Patient, Observation, MedicationStatement, MedicationRequest, Medication, Condition,
Encounter) are outside those portions, so R4B validation gives R4 semantics for them; the official R4
examples (``hl7.fhir.r4.examples``) validate cleanly (tests/unit/clinical/test_real_data.py).

Granularity: a Bundle is split into entries and every entry is validated on its own, so one invalid
resource is reported (for the DLQ, with the validation message) without losing its siblings. Entries
of types the gates do not read are counted as ignored, not errors. ``request.method = DELETE`` entries
become :class:`ResourceDelete`. Contained / bundled Medication resources referenced by a statement are
inlined into the statement's text.

Cost: validation happens once per update at the edge, never inside assessment. Building the pydantic
model of a resource costs more than the rest of the edge, so :func:`validate_resource` builds it only for
a resource :func:`processors.clinical.fhir_check.accepts` cannot vouch for; the verdict and a rejection's
message are the model's either way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from processors.clinical.exceptions import FhirInvalid
from processors.clinical.fhir_check import accepts, prepare
from processors.clinical.records import (
    Coding,
    ConditionRecord,
    EncounterRecord,
    FhirChange,
    MedicationDefinition,
    MedicationRecord,
    ObservationRecord,
    PatientRecord,
    Record,
    ResourceDelete,
    ResourceUpsert,
    VersionStamp,
)
from processors.clinical.sanitise import sanitise_datetimes

SUPPORTED = (
    "Patient",
    "Observation",
    "MedicationStatement",
    "MedicationRequest",
    "Medication",
    "Condition",
    "Encounter",
)


#: Required-binding value sets (FHIR R4) of the coded elements the gates branch on. fhir.resources checks
#: structure, cardinality and primitive formats but not code bindings, and a status outside its value set
#: would otherwise silently decide whether a medication is current.
REQUIRED_CODES: dict[tuple[str, str], frozenset[str]] = {
    ("Observation", "status"): frozenset(
        {
            "registered",
            "preliminary",
            "final",
            "amended",
            "corrected",
            "cancelled",
            "entered-in-error",
            "unknown",
        }
    ),
    ("MedicationStatement", "status"): frozenset(
        {"active", "completed", "entered-in-error", "intended", "stopped", "on-hold", "unknown", "not-taken"}
    ),
    ("MedicationRequest", "status"): frozenset(
        {"active", "on-hold", "cancelled", "completed", "entered-in-error", "stopped", "draft", "unknown"}
    ),
    ("Encounter", "status"): frozenset(
        {
            "planned",
            "arrived",
            "triaged",
            "in-progress",
            "onleave",
            "finished",
            "cancelled",
            "entered-in-error",
            "unknown",
        }
    ),
    ("Patient", "gender"): frozenset({"male", "female", "other", "unknown"}),
}


@dataclass(frozen=True)
class InvalidResource:
    """A resource that failed validation, as reported to the DLQ."""

    resource_type: str | None
    resource_id: str | None
    error: str


@dataclass
class ParsedInput:
    """The outcome of parsing one FHIR document (a resource or a Bundle)."""

    changes: dict[str, list[FhirChange]] = field(default_factory=dict)
    invalid: list[InvalidResource] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)

    def count(self, reason: str) -> None:
        """Count an entry that is skipped on purpose (not read by the gates, or not attributable)."""
        self.ignored[reason] = self.ignored.get(reason, 0) + 1

    def total(self) -> int:
        """Every entry accounted for: accepted changes, invalid resources and counted skips."""
        return sum(len(c) for c in self.changes.values()) + len(self.invalid) + sum(self.ignored.values())


@cache
def _model(resource_type: str) -> Any:
    from fhir.resources.R4B import get_fhir_model_class

    return get_fhir_model_class(resource_type)


def prepare_validation() -> None:
    """Import the model of every resource type the edge validates (:data:`SUPPORTED`) and derive its
    shape (:func:`~processors.clinical.fhir_check.prepare`) now. The first resource of a type otherwise
    pays for both: a worker pays for them before it says it is ready, not on its first patients."""
    for resource_type in SUPPORTED:
        prepare(_model(resource_type))


def validate_resource(resource: Mapping[str, Any]) -> None:
    """Validate one resource against the FHIR R4(B) model: without building the model where
    :func:`~processors.clinical.fhir_check.accepts` shows it would accept the resource, otherwise with the
    model, whose message a rejection carries.

    Raises:
        FhirInvalid: with the library's validation message.
    """
    rtype = resource.get("resourceType")
    rid = resource.get("id")
    if not isinstance(rtype, str):
        raise FhirInvalid("resource has no resourceType", None, rid if isinstance(rid, str) else None)
    rid = rid if isinstance(rid, str) else None
    try:
        model = _model(rtype)
        if not accepts(model, resource):
            model.model_validate(dict(resource))
    except ValueError as exc:  # pydantic.ValidationError and unknown-type errors are ValueErrors
        raise FhirInvalid(str(exc), rtype, rid) from exc
    for (btype, element), codes in REQUIRED_CODES.items():
        value = resource.get(element)
        if btype == rtype and value is not None and value not in codes:
            raise FhirInvalid(
                f"{rtype}.{element} {value!r} is not in its required value set {sorted(codes)}", rtype, rid
            )


def _codings(concept: Mapping[str, Any] | None) -> tuple[Coding, ...]:
    if not concept:
        return ()
    return tuple(
        Coding(system=c.get("system"), code=c.get("code"), display=c.get("display"))
        for c in concept.get("coding", ())
    )


def _concept_texts(concept: Mapping[str, Any] | None) -> tuple[str, ...]:
    if not concept:
        return ()
    texts = [concept["text"]] if concept.get("text") else []
    texts += [
        c["display"] for c in concept.get("coding", ()) if c.get("display") and c["display"] not in texts
    ]
    return tuple(texts)


def _concept_text(concept: Mapping[str, Any] | None) -> str | None:
    texts = _concept_texts(concept)
    return texts[0] if texts else None


def _stamp(resource: Mapping[str, Any]) -> VersionStamp:
    meta = resource.get("meta") or {}
    return VersionStamp(version_id=meta.get("versionId"), last_updated=meta.get("lastUpdated"))


def _reference_id(ref: Mapping[str, Any] | None) -> str | None:
    if not ref or not isinstance(ref.get("reference"), str):
        return None
    value: str = ref["reference"]
    return value.rsplit("/", 1)[-1].removeprefix("urn:uuid:")


def _patient_of(resource: Mapping[str, Any]) -> str | None:
    if resource["resourceType"] == "Patient":
        return str(resource["id"]) if resource.get("id") else None
    return _reference_id(resource.get("subject")) or _reference_id(resource.get("patient"))


def _resource_id(resource: Mapping[str, Any]) -> str:
    if resource.get("id"):
        return str(resource["id"])
    # No id: a content hash keeps the key deterministic across replays.
    digest = hashlib.sha256(json.dumps(resource, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"sha256-{digest[:16]}"


def _med_text(resource: Mapping[str, Any], medications: Mapping[str, str]) -> tuple[str | None, str | None]:
    concept = resource.get("medicationCodeableConcept")
    if concept:
        return _concept_text(concept), None
    ref = (resource.get("medicationReference") or {}).get("reference")
    if not isinstance(ref, str):
        return None, None
    if ref.startswith("#"):
        for contained in resource.get("contained", ()):
            if contained.get("resourceType") == "Medication" and contained.get("id") == ref[1:]:
                return _concept_text(contained.get("code")), None
    key = ref.removeprefix("urn:uuid:")
    return medications.get(key) or medications.get(key.rsplit("/", 1)[-1]), key


def _names(names: Any) -> tuple[str, ...]:
    """A Patient's HumanNames as display strings: ``text``, else the given names and the family name."""
    out = []
    for name in names:
        text = name.get("text") or " ".join([*name.get("given", ()), name.get("family") or ""]).strip()
        if text:
            out.append(text)
    return tuple(out)


def normalise(resource: Mapping[str, Any], issues: tuple[str, ...], medications: Mapping[str, str]) -> Record:
    """Turn one validated, sanitised resource into its plain record."""
    rtype = resource["resourceType"]
    common: dict[str, Any] = {"id": _resource_id(resource), "stamp": _stamp(resource), "issues": issues}
    if rtype == "Patient":
        return PatientRecord(
            birth_date=resource.get("birthDate"), names=_names(resource.get("name") or ()),
            gender=resource.get("gender"), **common,
        )  # fmt: skip
    if rtype == "Observation":
        period = resource.get("effectivePeriod") or {}
        effective = (
            resource.get("effectiveDateTime")
            or resource.get("effectiveInstant")
            or period.get("end")
            or period.get("start")
            or resource.get("issued")
        )
        quantity = resource.get("valueQuantity") or {}
        value_text = resource.get("valueString") or _concept_text(resource.get("valueCodeableConcept"))
        return ObservationRecord(
            status=resource.get("status"),
            codings=_codings(resource.get("code")),
            code_text=_concept_text(resource.get("code")),
            categories=tuple(
                c.get("code") for cat in resource.get("category", ()) for c in cat.get("coding", ())
            ),
            effective=effective,
            value=float(quantity["value"]) if "value" in quantity else None,
            unit=quantity.get("code") or quantity.get("unit"),
            value_text=value_text,
            notes=tuple(n["text"] for n in resource.get("note", ()) if n.get("text")),
            **common,
        )
    if rtype in ("MedicationStatement", "MedicationRequest"):
        text, reference = _med_text(resource, medications)
        dosage = resource.get("dosage") or resource.get("dosageInstruction") or ()
        dosage_text = "; ".join(d["text"] for d in dosage if d.get("text")) or None
        return MedicationRecord(
            resource_type=rtype,
            status=resource.get("status"),
            text=text,
            codings=_codings(resource.get("medicationCodeableConcept")),
            medication_reference=reference if text is None else None,
            dosage_text=dosage_text,
            **common,
        )
    if rtype == "Medication":
        return MedicationDefinition(
            text=_concept_text(resource.get("code")), codings=_codings(resource.get("code")), **common
        )
    if rtype == "Condition":
        texts = _concept_texts(resource.get("code")) + tuple(
            n["text"] for n in resource.get("note", ()) if n.get("text")
        )
        return ConditionRecord(
            clinical_status=(_codings(resource.get("clinicalStatus")) or (Coding(),))[0].code,
            verification_status=(_codings(resource.get("verificationStatus")) or (Coding(),))[0].code,
            texts=texts,
            **common,
        )
    if rtype == "Encounter":
        reasons = tuple(t for c in resource.get("reasonCode", ()) for t in _concept_texts(c))
        return EncounterRecord(
            status=resource.get("status"),
            reason_texts=reasons,
            start=(resource.get("period") or {}).get("start"),
            **common,
        )
    raise FhirInvalid(f"resource type {rtype} is not read by the clinical gates", rtype, resource.get("id"))


def parse_document(document: Any, default_patient: str | None = None) -> ParsedInput:
    """Parse a FHIR resource or Bundle into per-patient changes, invalid resources and ignored counts.

    Args:
        document: parsed JSON of one resource or a Bundle.
        default_patient: the patient id to use for resources that name none (the Kafka key in the
            stream); without one, such resources are counted under ``ignored`` as "(no patient)".

    Returns:
        The parsed input. Never raises for content problems: they are reported in ``invalid``.
    """
    out = ParsedInput()
    if not isinstance(document, Mapping):
        out.invalid.append(InvalidResource(None, None, f"not a FHIR JSON object ({type(document).__name__})"))
        return out
    if document.get("resourceType") == "Bundle":
        raw_entries = document.get("entry") or []
        raw_entries = raw_entries if isinstance(raw_entries, list) else [raw_entries]
        entries = [e for e in raw_entries if isinstance(e, Mapping)]
        for _ in range(len(raw_entries) - len(entries)):
            out.invalid.append(
                InvalidResource("Bundle", document.get("id"), "Bundle.entry item is not an object")
            )
    else:
        entries = [{"resource": document}]
    medications: dict[str, str] = {}
    for entry in entries:
        res = entry.get("resource") or {}
        if res.get("resourceType") == "Medication":
            text = _concept_text(res.get("code"))
            if text:
                for key in (entry.get("fullUrl"), f"Medication/{res.get('id')}", res.get("id")):
                    if isinstance(key, str):
                        medications[key.removeprefix("urn:uuid:")] = text
    for entry in entries:
        request = entry.get("request") or {}
        if request.get("method") == "DELETE":
            target = str(request.get("url", "")).split("?", 1)[0]
            rtype, _, rid = target.partition("/")
            owner = rid if rtype == "Patient" else default_patient
            if rtype not in SUPPORTED or not rid:
                out.count(f"DELETE {rtype}")
            elif owner is None:
                out.invalid.append(InvalidResource(rtype, rid, f"DELETE {target!r} needs a patient key"))
            else:
                out.changes.setdefault(owner, []).append(ResourceDelete(resource_type=rtype, id=rid))
            continue
        raw = entry.get("resource")
        if not isinstance(raw, Mapping):
            if request or entry.get("response"):
                out.count("entry without resource (request / response only)")
            else:
                out.invalid.append(InvalidResource(None, None, "bundle entry has no resource"))
            continue
        rtype = raw.get("resourceType")
        if rtype not in SUPPORTED:
            out.count(str(rtype))
            continue
        clean, issues = sanitise_datetimes(raw)
        full_url = entry.get("fullUrl")
        if not clean.get("id") and isinstance(full_url, str) and full_url.startswith("urn:uuid:"):
            # Transaction bundles identify new resources by fullUrl; references point at it.
            clean["id"] = full_url.removeprefix("urn:uuid:")
        try:
            validate_resource(clean)
        except FhirInvalid as exc:
            out.invalid.append(InvalidResource(exc.resource_type, exc.resource_id, exc.message))
            continue
        patient = _patient_of(clean) or default_patient
        if patient is None:
            # A shared Medication definition is inlined into the statements that reference it; any other
            # resource without a subject cannot be attributed to a patient (the stream keys by patient,
            # so there it always has one).
            out.count(f"{rtype} (no patient)")
            continue
        record = normalise(clean, issues, medications)
        out.changes.setdefault(patient, []).append(ResourceUpsert(record=record))
    return out
