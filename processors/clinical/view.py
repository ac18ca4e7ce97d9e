"""A read-only view of one patient's state, built once per assessment and shared by every gate.

Choices recorded here:

* **Active medications.** MedicationStatement status active / intended / on-hold / unknown and
  MedicationRequest status active / on-hold / unknown count as current; a missing status (ESC-016:
  synthetic data lacks it) counts as current too, since dropping a drug can only de-escalate.
  Completed, stopped, cancelled, entered-in-error, not-taken and draft do not count. Identical
  medication texts are one medication (Synthea repeats the same request at every encounter).
* **Medication match text** is the lower-cased medication name (CodeableConcept text / display, or the
  referenced Medication's) plus the generics the drug vocabulary resolves its tokens to; the seed's
  substring rule runs over it. Dosage instructions are shown in the medication list but never matched.
* **Clinical text** (symptom stems) is Condition code text / displays / notes, Encounter reasonCode texts,
  and observation notes and text values outside the laboratory category. Medication strings are never
  part of it, so "ondansetron prn nausea" is not a nausea symptom. Conditions whose clinicalStatus is
  inactive / resolved / remission, or verificationStatus refuted / entered-in-error, are left out.
* **Observation -> parameter** uses LOINC first, display text second, and in both cases a unit check
  (see ``data/parameters.yaml``): a prothrombin time in seconds is never an INR. The latest reading per
  parameter (by effective time, then id) is the one thresholds see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property

from processors.clinical.exceptions import UnitError
from processors.clinical.knowledge import ClinicalKnowledge, Parameter
from processors.clinical.records import (
    ConditionRecord,
    EncounterRecord,
    MedicationDefinition,
    MedicationRecord,
    ObservationRecord,
    PatientRecord,
    PatientState,
)
from processors.clinical.sanitise import parse_instant
from processors.clinical.units import ucum_to_pint

LOINC = "http://loinc.org"
ACTIVE_STATEMENT = frozenset({"active", "intended", "on-hold", "unknown", None})
ACTIVE_REQUEST = frozenset({"active", "on-hold", "unknown", None})
INACTIVE_CONDITION = frozenset({"inactive", "resolved", "remission"})
REFUTED_CONDITION = frozenset({"refuted", "entered-in-error"})
VOID_OBSERVATION = frozenset({"entered-in-error", "cancelled"})


@dataclass(frozen=True)
class ActiveMedication:
    """One current medication: display text and the text substring matching runs over."""

    text: str
    match_text: str


@dataclass(frozen=True)
class Reading:
    """The latest observation of one parameter, value converted to the parameter's unit."""

    parameter: str
    observation: ObservationRecord
    effective: datetime | None
    value: float | None
    unit: str


class PatientView:
    """Derived facts about one patient state; every property is computed once."""

    def __init__(self, state: PatientState, knowledge: ClinicalKnowledge) -> None:
        self.state = state
        self.knowledge = knowledge
        self.issues: list[str] = []

    @cached_property
    def birth_date(self) -> str | None:
        """The Patient's birthDate (the lowest-keyed Patient record if several)."""
        patients = [r for r in self.state.of_type("Patient") if isinstance(r, PatientRecord)]
        return patients[0].birth_date if patients else None

    @cached_property
    def medications(self) -> tuple[ActiveMedication, ...]:
        """Current medications, deduplicated by text, in resource-key order."""
        definitions = {
            r.id: r.text for r in self.state.of_type("Medication") if isinstance(r, MedicationDefinition)
        }
        seen: dict[str, ActiveMedication] = {}
        for rec in self.state.of_type("MedicationStatement", "MedicationRequest"):
            assert isinstance(rec, MedicationRecord)
            statuses = ACTIVE_STATEMENT if rec.resource_type == "MedicationStatement" else ACTIVE_REQUEST
            if rec.status not in statuses:
                continue
            text = rec.text or (
                definitions.get(rec.medication_reference.rsplit("/", 1)[-1])
                if rec.medication_reference
                else None
            )
            if not text:
                self.issues.append(f"{rec.resource_type}/{rec.id}: medication has no readable name")
                continue
            name = text.lower()
            if rec.dosage_text and rec.dosage_text.lower() not in name:
                text = f"{text} {rec.dosage_text}"
            if text in seen:
                continue
            # Matching runs over the medication's name only: a dosage instruction such as "do not take
            # with antacids" must not read as the patient taking an antacid.
            generics = self.knowledge.vocabulary.generics(name)
            seen[text] = ActiveMedication(text=text, match_text=" | ".join((name, *generics)))
        return tuple(seen.values())

    @cached_property
    def _conditions(self) -> list[ConditionRecord]:
        return [
            r
            for r in self.state.of_type("Condition")
            if isinstance(r, ConditionRecord)
            and r.clinical_status not in INACTIVE_CONDITION
            and r.verification_status not in REFUTED_CONDITION
        ]

    @cached_property
    def condition_text(self) -> str:
        """Lower-cased text of current Conditions (valve, HFrEF detection)."""
        return " | ".join(t.lower() for r in self._conditions for t in r.texts)

    @cached_property
    def clinical_text(self) -> str:
        """Lower-cased clinical text for symptom stems (never medication strings)."""
        parts = [self.condition_text] if self.condition_text else []
        parts += [
            t.lower()
            for r in self.state.of_type("Encounter")
            if isinstance(r, EncounterRecord)
            for t in r.reason_texts
        ]
        for obs in self.observations:
            if "laboratory" in obs.categories:
                continue
            parts += [n.lower() for n in obs.notes]
            if obs.value_text:
                parts.append(obs.value_text.lower())
        return " | ".join(parts)

    @cached_property
    def observations(self) -> list[ObservationRecord]:
        """Observations that are not void (entered-in-error / cancelled)."""
        return [
            r
            for r in self.state.of_type("Observation")
            if isinstance(r, ObservationRecord) and r.status not in VOID_OBSERVATION
        ]

    def effective(self, obs: ObservationRecord) -> datetime | None:
        """The observation's effective instant in UTC, or ``None`` (reported as an issue)."""
        if not obs.effective:
            return None
        try:
            return parse_instant(obs.effective)
        except ValueError:
            self.issues.append(f"Observation/{obs.id}: effective {obs.effective!r} is not ISO 8601")
            return None

    def _parameter_of(self, obs: ObservationRecord) -> Parameter | None:
        params = self.knowledge.parameters
        loincs = {c.code for c in obs.codings if c.system == LOINC and c.code}
        candidates = [p for p in params.values() if loincs & set(p.loinc)]
        if not candidates:
            text = " | ".join([obs.code_text or "", *(c.display or "" for c in obs.codings)]).lower()
            candidates = [
                p
                for p in params.values()
                if any(d in text for d in p.display) and not any(x in text for x in p.display_exclude)
            ]
        units = self.knowledge.units
        for p in candidates:
            if units.compatible(obs.unit, p.unit, molar_mass=p.molar_mass, valence=p.valence):
                return p
        return None

    @cached_property
    def readings(self) -> Mapping[str, Reading]:
        """Latest reading per parameter."""
        best: dict[str, Reading] = {}
        for obs in self.observations:
            param = self._parameter_of(obs)
            if param is None:
                continue
            when = self.effective(obs)
            value: float | None = None
            if obs.value is not None:
                try:
                    value = self.knowledge.units.convert(
                        obs.value, obs.unit, param.unit, molar_mass=param.molar_mass, valence=param.valence
                    )
                except UnitError as exc:
                    self.issues.append(f"Observation/{obs.id}: {exc}")
                if not obs.unit and ucum_to_pint(param.unit) != "dimensionless":
                    self.issues.append(f"Observation/{obs.id}: no unit; read as {param.unit}")
            reading = Reading(
                parameter=param.key, observation=obs, effective=when, value=value, unit=param.unit
            )
            prev = best.get(param.key)
            if prev is None or _recency(reading) > _recency(prev):
                best[param.key] = reading
        return best

    def has_medication(self, term: str) -> bool:
        """Whether any current medication's match text contains ``term``."""
        return any(term in m.match_text for m in self.medications)


def _recency(reading: Reading) -> tuple[datetime, str]:
    # Undated readings rank below dated ones; the id breaks ties so the choice never depends on order.
    return (reading.effective or datetime.min.replace(tzinfo=UTC), reading.observation.id)
