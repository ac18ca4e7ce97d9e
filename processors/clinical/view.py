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

Each fact declares the resource types it reads (:attr:`PatientView.READS`). A fact is a function of the
records of those types alone, so after an update the patient's next view (:meth:`PatientView.successor`)
takes the facts none of whose types changed over from the previous view and computes only the others:
the assessment is the same as from a view built anew, at the cost of what the changed resources feed.
Every fact carries the issues it found with it, so taking a fact over takes its issues too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import ClassVar

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

PATIENT = frozenset({"Patient"})
MEDICATIONS = frozenset({"MedicationStatement", "MedicationRequest", "Medication"})
OBSERVATIONS = frozenset({"Observation"})
CONDITIONS = frozenset({"Condition"})
ENCOUNTERS = frozenset({"Encounter"})
RESOURCE_TYPES = PATIENT | MEDICATIONS | OBSERVATIONS | CONDITIONS | ENCOUNTERS
"""Every resource type the gates read (:data:`processors.clinical.records.Record`)."""


def changed_types(old: PatientState, new: PatientState) -> frozenset[str]:
    """The resource types of the records added, replaced or removed between two states of one patient."""
    before, after = old.resources, new.resources
    if before is after:
        return frozenset()
    changed = set()
    for key in before.keys() | after.keys():
        a, b = before.get(key), after.get(key)
        if a is not b and a != b:
            changed.add((a or b).resource_type)  # type: ignore[union-attr]  # one of them is a record
    return frozenset(changed)


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


def take_over(
    previous: object, successor: object, reads: Mapping[str, frozenset[str]], changed: frozenset[str]
) -> None:
    """Give ``successor`` every cached property ``previous`` computed that reads nothing in ``changed``
    (``reads``: what each cached property reads, by name)."""
    computed, taken = vars(previous), vars(successor)
    for name, inputs in reads.items():
        if name in computed and not inputs & changed:
            taken[name] = computed[name]


class PatientView:
    """Derived facts about one patient state; every fact is computed once, and only when asked for."""

    READS: ClassVar[Mapping[str, frozenset[str]]] = {
        "birth_date": PATIENT,
        "_medications": MEDICATIONS,
        "observations": OBSERVATIONS,
        "_effective": OBSERVATIONS,
        "_readings": OBSERVATIONS,
        "_conditions": CONDITIONS,
        "condition_text": CONDITIONS,
        "clinical_text": CONDITIONS | ENCOUNTERS | OBSERVATIONS,
        "resource_issues": RESOURCE_TYPES,
    }
    """The resource types each fact (a cached property) reads; what :meth:`successor` takes over."""

    def __init__(self, state: PatientState, knowledge: ClinicalKnowledge) -> None:
        self.state = state
        self.knowledge = knowledge

    def successor(self, state: PatientState, changed: frozenset[str]) -> PatientView:
        """The view of ``state``, a later state of this view's patient that differs from this view's in
        the records of the ``changed`` resource types only: it holds every fact this view computed that
        reads none of them (:func:`changed_types` says which types changed)."""
        view = PatientView(state, self.knowledge)
        take_over(self, view, self.READS, changed)
        return view

    @cached_property
    def birth_date(self) -> str | None:
        """The Patient's birthDate (the lowest-keyed Patient record if several)."""
        patients = [r for r in self.state.of_type("Patient") if isinstance(r, PatientRecord)]
        return patients[0].birth_date if patients else None

    @property
    def medications(self) -> tuple[ActiveMedication, ...]:
        """Current medications, deduplicated by text, in resource-key order."""
        return self._medications[0]

    @cached_property
    def _medications(self) -> tuple[tuple[ActiveMedication, ...], tuple[str, ...]]:
        """The current medications and the issues found reading them."""
        definitions = {
            r.id: r.text for r in self.state.of_type("Medication") if isinstance(r, MedicationDefinition)
        }
        seen: dict[str, ActiveMedication] = {}
        issues: list[str] = []
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
                issues.append(f"{rec.resource_type}/{rec.id}: medication has no readable name")
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
        return tuple(seen.values()), tuple(issues)

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
        """The effective instant in UTC of one of :attr:`observations`, or ``None`` (reported as an issue
        when it is not ISO 8601)."""
        return self._effective[0][obs.id]

    @cached_property
    def _effective(self) -> tuple[Mapping[str, datetime | None], tuple[str, ...]]:
        """The effective instant of each observation by id, and the issues of those that do not parse."""
        instants: dict[str, datetime | None] = {}
        issues: list[str] = []
        for obs in self.observations:
            when = None
            if obs.effective:
                try:
                    when = parse_instant(obs.effective)
                except ValueError:
                    issues.append(f"Observation/{obs.id}: effective {obs.effective!r} is not ISO 8601")
            instants[obs.id] = when
        return instants, tuple(issues)

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

    @property
    def readings(self) -> Mapping[str, Reading]:
        """Latest reading per parameter."""
        return self._readings[0]

    @cached_property
    def _readings(self) -> tuple[Mapping[str, Reading], tuple[str, ...]]:
        """The latest reading per parameter, and the issues of the values read (units)."""
        best: dict[str, Reading] = {}
        issues: list[str] = []
        for obs in self.observations:
            param = self._parameter_of(obs)
            if param is None:
                continue
            value: float | None = None
            if obs.value is not None:
                try:
                    value = self.knowledge.units.convert(
                        obs.value, obs.unit, param.unit, molar_mass=param.molar_mass, valence=param.valence
                    )
                except UnitError as exc:
                    issues.append(f"Observation/{obs.id}: {exc}")
                if not obs.unit and ucum_to_pint(param.unit) != "dimensionless":
                    issues.append(f"Observation/{obs.id}: no unit; read as {param.unit}")
            reading = Reading(
                parameter=param.key,
                observation=obs,
                effective=self.effective(obs),
                value=value,
                unit=param.unit,
            )
            prev = best.get(param.key)
            if prev is None or _recency(reading) > _recency(prev):
                best[param.key] = reading
        return best, tuple(issues)

    @cached_property
    def resource_issues(self) -> frozenset[str]:
        """The issues the edge recorded on the resources, each prefixed with its resource."""
        return frozenset(
            f"{r.resource_type}/{r.id}: {x}" for r in self.state.resources.values() for x in r.issues
        )

    @property
    def issues(self) -> frozenset[str]:
        """Every issue found reading the patient: the resources' own and those of the facts."""
        return self.resource_issues.union(self._medications[1], self._effective[1], self._readings[1])

    def has_medication(self, term: str) -> bool:
        """Whether any current medication's match text contains ``term``."""
        return any(term in m.match_text for m in self.medications)


def _recency(reading: Reading) -> tuple[datetime, str]:
    # Undated readings rank below dated ones; the id breaks ties so the choice never depends on order.
    return (reading.effective or datetime.min.replace(tzinfo=UTC), reading.observation.id)
