"""NTI drug evaluation gate (ESC-023), generic over the drug maps in ``data/``.

Severity follows the section 4 algorithm of Supplementary Data 1 and the PT-TEST-010 trace
(Supplementary Note 3), evaluated **per drug, each against its own map** (the section 4 prose: "each
drug is evaluated independently against its own safety map. The overall severity is the maximum"):

* CRITICAL = NTI drug + supratherapeutic level + toxicity symptom (both for the same drug);
* ELEVATED = NTI drug + any one of: supratherapeutic level, toxicity symptom, interacting drug;
* NORMAL   = no NTI drug, or an NTI drug with no finding.

Contradiction in the seed, and what we follow: the summary tables (Supplementary Table 2 "all three
required", sections 2f / 3f "ALL THREE: supratherapeutic + symptoms + interaction") require an
interaction for CRITICAL, but the section 4 pseudocode (``IF has_supratherapeutic AND
has_toxicity_symptoms``), its comment ("ALL THREE: NTI drug + supra + symptoms") and the PT-TEST-010
trace ("All three required factors present: 1. NTI drug 2. Supratherapeutic level 3. Toxicity symptoms")
do not. We follow the algorithm and the trace; a digoxin patient at 2.1 ng/mL with nausea and no
interacting drug is CRITICAL (tested).

Why per drug and not pooled: the pseudocode's flags are pooled across drugs, which would make
PT-TEST-008 (supratherapeutic warfarin INR + digoxin confusion symptom) CRITICAL, while the seed
publishes ELEVATED for it. Per-drug evaluation reproduces the published result.

Matching rules: medication names by case-insensitive substring of the medication text plus vocabulary
generics (Supplementary Data 1 note 5, extended to brand names); symptom stems by case-insensitive
substring of clinical text only (see :mod:`processors.clinical.view`); units normalised with pint before
thresholds. Must-retrieve sources are those of each drug whose own severity is not NORMAL, in map
order, without duplicates. The medication-count flag (>= 5 distinct current medications) is context
only and never escalates.

Beyond the seed's open items: class-level maps (ESC-021 Tier B) are evaluated by the same code when the
flag is on; they report under ``classes`` and never reach CRITICAL (no toxicity threshold).

The gate runs in two steps so that an update re-evaluates what it feeds: which maps apply, with their
interactions, monitoring priorities and dose-limit checks, depend on the medications alone
(:func:`medication_findings`); levels, symptoms, indication flags and lab alerts depend on the
observations, conditions and encounters too (:func:`evaluate_nti`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from processors.clinical.knowledge import DrugMap, LabAlert
from processors.clinical.view import PatientView
from schemas.clinical import (
    DoseLimitCheck,
    DrugSeverity,
    Interaction,
    LevelFlag,
    MonitoringPriority,
    Nti,
    Supratherapeutic,
    SymptomMatch,
)

SEVERITY_ORDER = ("NORMAL", "ELEVATED", "CRITICAL")
MEDICATION_COUNT_THRESHOLD = 5
_MG = re.compile(r"(\d+(?:\.\d+)?)\s*mg\b")
_OPS = {
    "<": lambda v, t: v < t,
    "<=": lambda v, t: v <= t,
    ">": lambda v, t: v > t,
    ">=": lambda v, t: v >= t,
}


def display_unit(unit: str) -> str:
    """A unit as reported: a bare UCUM annotation is its label (``{INR}`` -> ``INR``)."""
    return unit[1:-1] if unit.startswith("{") and unit.endswith("}") else unit


def _round(value: float) -> float:
    return round(value, 4)


def contains_term(text: str, term: str, exclude: tuple[str, ...] = ()) -> bool:
    """Case-insensitive substring match after masking ``exclude`` terms out of ``text``.

    Masking is how "bioprosthetic valve" fails to satisfy "prosthetic valve" while "mechanical valve
    and bioprosthetic valve" still satisfies "mechanical valve".
    """
    lowered = text.lower()
    for ex in exclude:
        lowered = lowered.replace(ex, " ")
    return term in lowered


def _interactions(view: PatientView, drug_map: DrugMap) -> list[Interaction]:
    found: list[Interaction] = []
    for category, drugs in drug_map.interactions:
        for other in drugs:
            for med in view.medications:
                own = any(t in med.match_text for t in drug_map.match)
                if other in med.match_text and not own:
                    details = drug_map.interaction_details.get(other)
                    found.append(
                        Interaction(
                            drug=drug_map.name,
                            category=category,
                            effect=drug_map.interaction_effects.get(category),
                            detail="; ".join(details.values()) if details else None,
                            **{"with": other},
                        )
                    )
                    break
    return found


def _threshold(view: PatientView, drug_map: DrugMap) -> float | None:
    tox = drug_map.toxicity_threshold
    if tox is None:
        return None
    value = tox.min
    for override in drug_map.threshold_overrides:
        if any(
            contains_term(view.condition_text, t, override.condition_exclude)
            for t in override.condition_terms
        ):
            value = override.min
    return value


def _supratherapeutic(view: PatientView, drug_map: DrugMap) -> list[Supratherapeutic]:
    tox = drug_map.toxicity_threshold
    threshold = _threshold(view, drug_map)
    if tox is None or threshold is None:
        return []
    value = _level(view, tox.parameter, tox.unit)
    if value is None:
        return []
    hit = value >= threshold if tox.inclusive else value > threshold
    if not hit:
        return []
    return [
        Supratherapeutic(
            drug=drug_map.name,
            parameter=tox.parameter,
            value=_round(value),
            unit=display_unit(tox.unit),
            threshold=threshold,
        )
    ]


def _symptoms(view: PatientView, drug_map: DrugMap) -> list[SymptomMatch]:
    text = view.clinical_text
    return [
        SymptomMatch(drug=drug_map.name, category=category, stem=stem)
        for category, stems in drug_map.symptom_keywords
        for stem in stems
        if stem in text
    ]


def _level(view: PatientView, parameter: str, unit: str) -> float | None:
    """The latest reading of ``parameter`` converted to ``unit``, or ``None``."""
    reading = view.readings.get(parameter)
    if reading is None or reading.value is None:
        return None
    param = view.knowledge.parameters[parameter]
    return view.knowledge.units.convert(
        reading.value, reading.unit, unit, molar_mass=param.molar_mass, valence=param.valence
    )


def _flags(view: PatientView, drug_map: DrugMap) -> list[LevelFlag]:
    flags = []
    for f in drug_map.indication_flags:
        if not any(t in view.condition_text for t in f.condition_terms):
            continue
        value = _level(view, f.parameter, f.unit)
        if value is not None and value > f.above:
            flags.append(
                LevelFlag(
                    drug=drug_map.name,
                    flag=f.name,
                    parameter=f.parameter,
                    value=_round(value),
                    unit=f.unit,
                    threshold=f.above,
                )
            )
    return flags


def _alert(view: PatientView, drug: str, parameter: str, alert: LabAlert) -> LevelFlag | None:
    value = _level(view, parameter, alert.unit)
    if value is None or not _OPS[alert.op](value, alert.value):
        return None
    return LevelFlag(
        drug=drug,
        flag=alert.label or alert.op,
        parameter=parameter,
        value=_round(value),
        unit=alert.unit,
        threshold=alert.value,
    )


def _priorities(
    view: PatientView, drug_map: DrugMap, interactions: list[Interaction]
) -> list[MonitoringPriority]:
    esc = drug_map.electrolyte_escalation
    if esc is None:
        return []
    causes = [i.with_ for i in interactions if i.category in esc.categories]
    if not causes:
        return []
    reason = "electrolyte depleter: " + ", ".join(causes)
    return [
        MonitoringPriority(drug=drug_map.name, parameter=p, priority=esc.priority, reason=reason)
        for p in esc.parameters
    ]


def _dose_limits(view: PatientView, drug_map: DrugMap) -> list[DoseLimitCheck]:
    checks = []
    for limit in drug_map.dose_limits:
        meds = [m for m in view.medications if limit.medication in m.match_text]
        if not meds or not view.has_medication(limit.with_drug):
            continue
        doses = [float(x) for m in meds for x in _MG.findall(m.match_text.split(" | ")[0])]
        current = max(doses) if doses else None
        checks.append(
            DoseLimitCheck(
                drug=drug_map.name,
                medication=limit.medication,
                max_mg=limit.max_mg,
                current_mg=current,
                exceeded=current is not None and current > limit.max_mg,
                **{"with": limit.with_drug},
            )
        )
    return checks


@dataclass(frozen=True)
class MedicationFindings:
    """What one NTI map finds in the current medications alone: the map applies (the patient takes its
    drug), with these interactions, monitoring priorities and dose-limit checks."""

    drug_map: DrugMap
    interactions: tuple[Interaction, ...]
    priorities: tuple[MonitoringPriority, ...]
    dose_limits: tuple[DoseLimitCheck, ...]


def medication_findings(view: PatientView, maps: tuple[DrugMap, ...]) -> tuple[MedicationFindings, ...]:
    """The maps of ``maps`` whose drug the patient takes, in map order, each with what the medications
    show; reads the medications only, so it holds until they change."""
    found = []
    for drug_map in maps:
        if not any(view.has_medication(t) for t in drug_map.match):
            continue
        interactions = _interactions(view, drug_map)
        found.append(
            MedicationFindings(
                drug_map=drug_map,
                interactions=tuple(interactions),
                priorities=tuple(_priorities(view, drug_map, interactions)),
                dose_limits=tuple(_dose_limits(view, drug_map)),
            )
        )
    return tuple(found)


def evaluate_nti(
    view: PatientView, findings: tuple[MedicationFindings, ...], warnings: Mapping[str, list[str]]
) -> Nti:
    """Evaluate every map that applies against the patient; severity is the maximum across maps.

    Args:
        view: the patient view.
        findings: the maps that apply with what the medications show (:func:`medication_findings` of
            the active drug maps and, with the Tier B flag, class maps).
        warnings: Phase 0.5 conditional-monitoring warnings per map
            (:meth:`~processors.clinical.phase0.Dependencies.warnings`).

    Returns:
        The NTI gate output.
    """
    per_drug: list[DrugSeverity] = []
    supra: list[Supratherapeutic] = []
    interactions: list[Interaction] = []
    symptoms: list[SymptomMatch] = []
    flags: list[LevelFlag] = []
    alerts: list[LevelFlag] = []
    priorities: list[MonitoringPriority] = []
    dose_limits: list[DoseLimitCheck] = []
    found_warnings: list[str] = []
    must_retrieve: list[str] = []
    for finding in findings:
        drug_map = finding.drug_map
        d_supra = _supratherapeutic(view, drug_map)
        d_symp = _symptoms(view, drug_map)
        if d_supra and d_symp:
            severity = "CRITICAL"
        elif d_supra or d_symp or finding.interactions:
            severity = "ELEVATED"
        else:
            severity = "NORMAL"
        per_drug.append(DrugSeverity(drug=drug_map.name, kind=drug_map.kind, severity=severity))
        supra += d_supra
        interactions += finding.interactions
        symptoms += d_symp
        flags += _flags(view, drug_map)
        alerts += [
            a
            for m in drug_map.lab_monitoring
            if m.alert is not None and (a := _alert(view, drug_map.name, m.parameter, m.alert))
        ]
        priorities += finding.priorities
        dose_limits += finding.dose_limits
        found_warnings += [w for w in warnings.get(drug_map.name, []) if w not in found_warnings]
        if severity != "NORMAL":
            must_retrieve += [s for s in drug_map.corpus_sources if s not in must_retrieve]
    overall = max((d.severity for d in per_drug), key=SEVERITY_ORDER.index, default="NORMAL")
    return Nti(
        severity=overall,
        drugs=[d.drug for d in per_drug if d.kind == "drug"],
        classes=[d.drug for d in per_drug if d.kind == "class"],
        per_drug=per_drug,
        supratherapeutic=supra,
        interactions=interactions,
        symptoms=symptoms,
        warnings=found_warnings,
        must_retrieve=must_retrieve,
        flags=flags,
        lab_alerts=alerts,
        monitoring_priority=priorities,
        dose_limits=dose_limits,
    )
