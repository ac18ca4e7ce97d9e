"""Phase 0 gates: patient age (ESC-009), staleness (ESC-001), medication dependencies (ESC-013).

Numbers from Supplementary Table 2 ("Phase 0: Pre-Reasoning Gates"): CURRENT <= 48 h, RECENT <= 7 d,
STALE <= 30 d, PROFOUNDLY_STALE > 30 d, on **exact elapsed time** between the observation's effective
instant and the as-of instant. ``age_days`` is reported separately as whole UTC calendar days between the
two dates (2026-03-03 -> 2026-03-29 is 26), which is what the banner prints.

Which observations are classified: the latest observation of each distinct code (LOINC code, else the
first code, else the code text); older results of the same test are superseded, not stale. Monitoring
dependencies with no observation at all appear as ``MISSING`` entries; ``MISSING`` never enters the
overall class, which is the worst class among observed entries (``MISSING`` only when there are none).

Canonical banner: the seed publishes the STALE form (Supplementary Note 3, PT-TEST-010):

    PHASE 0 DATA READINESS: STALE
    Labs dated 2026-03-03 | Vitals dated 2026-03-05 | System date: 2026-03-29 |
        Lab gap: 26 days | Vital gap: 24 days            (one line in the banner)
    Patient Age: 82 (deterministic, computed from DOB)
    EXCEEDS 48-hour threshold. All lab-based recommendations are CONDITIONAL.

"Labs dated" is the oldest date among the latest laboratory results ("2026-03-03 (oldest)" in the trace),
likewise for vital signs. Forms the seed does not publish are ours: CURRENT ends with
``WITHIN 48-hour threshold.``; an absent group prints ``Labs dated none`` and ``Lab gap: n/a``; an
unknown age prints ``Patient Age: unknown (no birthDate)``.

Age: whole years from ``birthDate`` to the as-of UTC date (a 29 February birthday counts on 1 March in
non-leap years). Never from text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from processors.clinical.knowledge import ClinicalKnowledge, DrugMap
from processors.clinical.records import ObservationRecord
from processors.clinical.sanitise import format_instant, parse_instant
from processors.clinical.view import LOINC, PatientView
from schemas.clinical import Staleness, StalenessObservation

CLASS_ORDER = ("CURRENT", "RECENT", "STALE", "PROFOUNDLY_STALE")
LIMITS = (
    ("CURRENT", timedelta(hours=48)),
    ("RECENT", timedelta(days=7)),
    ("STALE", timedelta(days=30)),
)


def patient_age(birth_date: str | None, as_of: datetime) -> int | None:
    """Age in whole years at the as-of UTC date, or ``None`` without a birth date."""
    if not birth_date:
        return None
    born = parse_instant(birth_date).date()
    today = as_of.date()
    return today.year - born.year - ((today.month, today.day) < (born.month, born.day))


def staleness_class(effective: datetime, as_of: datetime) -> str:
    """CURRENT / RECENT / STALE / PROFOUNDLY_STALE on exact elapsed time (future data is CURRENT)."""
    elapsed = as_of - effective
    for name, limit in LIMITS:
        if elapsed <= limit:
            return name
    return "PROFOUNDLY_STALE"


def worst(classes: Iterable[str]) -> str | None:
    """The worst staleness class of ``classes`` (MISSING ignored), or ``None``."""
    ranked = [CLASS_ORDER.index(c) for c in classes if c in CLASS_ORDER]
    return CLASS_ORDER[max(ranked)] if ranked else None


def _code_key(obs: ObservationRecord) -> tuple[str, str]:
    loinc = next((c.code for c in obs.codings if c.system == LOINC and c.code), None)
    code = loinc or next((c.code for c in obs.codings if c.code), None) or (obs.code_text or "")
    display = obs.code_text or next((c.display for c in obs.codings if c.display), None) or code
    return code, display


@dataclass(frozen=True)
class _Dated:
    obs: ObservationRecord
    effective: datetime
    code: str
    display: str


def _latest_per_code(view: PatientView) -> list[_Dated]:
    """The latest dated observation of each code, ordered by code (module docstring)."""
    latest: dict[str, _Dated] = {}
    for obs in view.observations:
        when = view.effective(obs)
        if when is None:
            continue
        code, display = _code_key(obs)
        prev = latest.get(code)
        if prev is None or (when, obs.id) > (prev.effective, prev.obs.id):
            latest[code] = _Dated(obs=obs, effective=when, code=code, display=display)
    return [latest[k] for k in sorted(latest)]


def _group_line(label: str, dated: Sequence[_Dated], as_of: datetime) -> tuple[str, str]:
    if not dated:
        return f"{label}s dated none", f"{label} gap: n/a"
    oldest = min(dated, key=lambda d: (d.effective, d.obs.id))
    gap = (as_of.date() - oldest.effective.date()).days
    return f"{label}s dated {oldest.effective.date().isoformat()}", f"{label} gap: {gap} days"


def banner(overall: str, age: int | None, dated: Sequence[_Dated], as_of: datetime) -> str:
    """The canonical Phase 0 staleness banner (see module docstring)."""
    labs = [d for d in dated if "laboratory" in d.obs.categories]
    vitals = [d for d in dated if "vital-signs" in d.obs.categories]
    lab_dated, lab_gap = _group_line("Lab", labs, as_of)
    vital_dated, vital_gap = _group_line("Vital", vitals, as_of)
    age_line = (
        f"Patient Age: {age} (deterministic, computed from DOB)"
        if age is not None
        else "Patient Age: unknown (no birthDate)"
    )
    verdict = (
        "WITHIN 48-hour threshold."
        if overall == "CURRENT"
        else "EXCEEDS 48-hour threshold. All lab-based recommendations are CONDITIONAL."
    )
    return "\n".join(
        (
            f"PHASE 0 DATA READINESS: {overall}",
            " | ".join(
                (lab_dated, vital_dated, f"System date: {as_of.date().isoformat()}", lab_gap, vital_gap)
            ),
            age_line,
            verdict,
        )
    )


def future_issues(dated: Iterable[_Dated], as_of: datetime) -> tuple[str, ...]:
    """The issues of the latest observations dated after the as-of instant."""
    return tuple(
        f"Observation/{d.obs.id}: effective {d.obs.effective} is after the as-of instant (classed CURRENT)"
        for d in dated
        if d.effective > as_of
    )


def assess_staleness(
    view: PatientView, dated: Sequence[_Dated], as_of: datetime, age: int | None, dependencies: Iterable[str]
) -> Staleness:
    """Per-observation staleness of ``dated`` (the latest observation of each code, ``_latest_per_code``),
    MISSING dependencies, overall class and banner."""
    param_of = {r.observation.id: key for key, r in view.readings.items()}
    entries = [
        StalenessObservation(
            code=d.code,
            display=d.display,
            effective=format_instant(d.obs.effective or ""),
            age_days=(as_of.date() - d.effective.date()).days,
            parameter=param_of.get(d.obs.id),
            **{"class": staleness_class(d.effective, as_of)},
        )
        for d in dated
    ]
    for key in sorted(set(dependencies) - set(view.readings)):
        param = view.knowledge.parameters[key]
        entries.append(
            StalenessObservation(
                code=param.loinc[0] if param.loinc else key,
                display=param.display_name,
                effective=None,
                age_days=None,
                parameter=key,
                **{"class": "MISSING"},
            )
        )
    overall = worst(e.class_ for e in entries) or "MISSING"
    return Staleness(overall=overall, banner=banner(overall, age, dated, as_of), observations=entries)


def _conditional_active(
    view: PatientView, drug_map: DrugMap
) -> list[tuple[str, tuple[str, ...], str | None]]:
    categories = dict(drug_map.interactions)
    active = []
    for cm in drug_map.conditional_monitoring:
        hit_any = bool(cm.any_medication) and any(view.has_medication(m) for m in cm.any_medication)
        hit_all = bool(cm.all_categories) and all(
            any(view.has_medication(d) for d in categories.get(cat, ())) for cat in cm.all_categories
        )
        if hit_any or hit_all:
            active.append((cm.name, cm.parameters, cm.warning_if_missing))
    return active


@dataclass(frozen=True)
class Dependencies:
    """Phase 0.5 output: medication -> required monitoring parameters. Read from the medications
    alone; the warnings they may give depend on the readings too (:meth:`warnings`)."""

    primary: dict[str, list[str]]
    conditional: dict[str, list[str]]
    watched: dict[str, list[tuple[tuple[str, ...], str]]]
    """Per NTI map, each active conditional monitoring with a warning text: its parameters and the
    warning given while one of them has no reading."""

    def all_parameters(self) -> set[str]:
        """Every parameter some current medication depends on."""
        return {p for v in (*self.primary.values(), *self.conditional.values()) for p in v}

    def warnings(self, readings: Mapping[str, object]) -> dict[str, list[str]]:
        """Per NTI map, the warnings of its conditional monitoring a parameter of which has no reading
        (dual diuretics without calcium)."""
        found = {
            drug: [warning for params, warning in watched if any(p not in readings for p in params)]
            for drug, watched in self.watched.items()
        }
        return {drug: warnings for drug, warnings in found.items() if warnings}


def medication_dependencies(
    view: PatientView, knowledge: ClinicalKnowledge, maps: tuple[DrugMap, ...]
) -> Dependencies:
    """Map each current medication's generic to its monitoring parameters.

    NTI maps contribute their primary parameters and their conditional ones whose condition holds; the
    dependency map covers the other drugs. A conditional monitoring with a warning text (dual diuretics
    without calcium) is watched: its warning is given while a parameter of it has no reading. Reads the
    medications only.
    """
    primary: dict[str, list[str]] = {}
    conditional: dict[str, list[str]] = {}
    watched: dict[str, list[tuple[tuple[str, ...], str]]] = {}
    for drug_map in maps:
        if not any(view.has_medication(t) for t in drug_map.match):
            continue
        primary[drug_map.name] = list(drug_map.primary_parameters)
        for _name, params, warning in _conditional_active(view, drug_map):
            conditional.setdefault(drug_map.name, []).extend(
                p for p in params if p not in primary[drug_map.name]
            )
            if warning:
                watched.setdefault(drug_map.name, []).append((params, warning))
    for med in view.medications:
        for generic, params in knowledge.med_dependencies.items():
            if generic in med.match_text and generic not in primary:
                primary[generic] = list(params)
    return Dependencies(primary=primary, conditional=conditional, watched=watched)
