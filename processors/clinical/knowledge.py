"""Clinical knowledge as data: drug safety maps, parameter catalogue, dependency map, safety patterns.

Why data and not code: Supplementary Data 1 (section 5) makes the NTI drug maps data-only configuration,
so adding a drug (the lithium template) is a new YAML file and no code change. Everything the gates
know about drugs, labs and keywords lives in ``processors/clinical/data/`` and is read here, once, by
:func:`load_knowledge`, which callers (the CLI, the stream, tests) invoke and pass into the pure gate
functions. The loader is the only function in this package that touches the file system.

Layout of the data directory:

* ``parameters.yaml``: lab / vital parameter catalogue (LOINC codes, display fallbacks, canonical unit,
  molar mass, valence). Drug maps may add parameters of their own under ``parameters:``.
* ``drug_maps/*.yaml``: Tier A drug-specific NTI maps (warfarin, digoxin; lithium in the test).
* ``class_maps/*.yaml``: ESC-021 Tier B class-level maps (opioids, benzodiazepines), loaded always,
  applied only when :attr:`GateFlags.tier_b_class_maps` is set.
* ``med_dependencies.yaml``: Phase 0.5 dependencies of non-NTI drugs.
* ``safety_patterns.yaml``: SCDA keyword sets.
* ``vocabulary_supplement.yaml``: brand names the drug vocabulary lacks.

Choices where the seed's template is loose: the toxicity threshold names its ``parameter``; when it
does not (the lithium template), the first primary ``lab_monitoring`` entry is used. ``inclusive``
defaults to true (">= min", digoxin's wording); warfarin's "> 3.0" sets it false.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from processors.clinical.exceptions import KnowledgeError
from processors.clinical.units import UnitConverter
from processors.clinical.vocabulary import DrugVocabulary

DATA_PACKAGE = "processors.clinical.data"


@dataclass(frozen=True)
class Parameter:
    """One lab / vital parameter and how to recognise it in an Observation."""

    key: str
    display_name: str
    loinc: tuple[str, ...]
    display: tuple[str, ...]
    display_exclude: tuple[str, ...]
    unit: str
    molar_mass: float | None = None
    valence: int | None = None


@dataclass(frozen=True)
class LabAlert:
    """A threshold on a monitored parameter that is reported but does not change severity."""

    op: Literal["<", "<=", ">", ">="]
    value: float
    unit: str
    label: str


@dataclass(frozen=True)
class LabMonitoring:
    """A parameter a drug map monitors."""

    parameter: str
    purpose: str
    primary: bool
    alert: LabAlert | None = None


@dataclass(frozen=True)
class ToxicityThreshold:
    """The supratherapeutic level of a drug map's primary parameter."""

    parameter: str
    min: float
    unit: str
    inclusive: bool = True


@dataclass(frozen=True)
class ThresholdOverride:
    """A condition-dependent replacement of the toxicity threshold (mechanical valve: INR > 3.5)."""

    name: str
    condition_terms: tuple[str, ...]
    condition_exclude: tuple[str, ...]
    min: float


@dataclass(frozen=True)
class IndicationFlag:
    """A non-severity flag: level above an indication target (digoxin > 0.8 ng/mL with HFrEF)."""

    name: str
    condition_terms: tuple[str, ...]
    parameter: str
    above: float
    unit: str


@dataclass(frozen=True)
class ConditionalMonitoring:
    """Parameters monitored only under a medication condition (heparin bridging, dual diuretics)."""

    name: str
    parameters: tuple[str, ...]
    any_medication: tuple[str, ...] = ()
    all_categories: tuple[str, ...] = ()
    warning_if_missing: str | None = None


@dataclass(frozen=True)
class DoseLimit:
    """A combination-specific dose cap (atorvastatin <= 40 mg with amiodarone)."""

    medication: str
    with_drug: str
    max_mg: float
    note: str


@dataclass(frozen=True)
class ElectrolyteEscalation:
    """Monitoring-priority escalation when an interaction category is present."""

    categories: tuple[str, ...]
    parameters: tuple[str, ...]
    priority: str


@dataclass(frozen=True)
class DrugMap:
    """One NTI safety map (drug-specific or class-level)."""

    name: str
    kind: Literal["drug", "class"]
    match: tuple[str, ...]
    lab_monitoring: tuple[LabMonitoring, ...]
    interactions: tuple[tuple[str, tuple[str, ...]], ...]
    symptom_keywords: tuple[tuple[str, tuple[str, ...]], ...]
    corpus_sources: tuple[str, ...]
    toxicity_threshold: ToxicityThreshold | None = None
    threshold_overrides: tuple[ThresholdOverride, ...] = ()
    indication_flags: tuple[IndicationFlag, ...] = ()
    conditional_monitoring: tuple[ConditionalMonitoring, ...] = ()
    dose_limits: tuple[DoseLimit, ...] = ()
    electrolyte_escalation: ElectrolyteEscalation | None = None
    interaction_effects: Mapping[str, str] = field(default_factory=dict)
    interaction_details: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def primary_parameters(self) -> tuple[str, ...]:
        """Primary monitored parameters, in map order."""
        return tuple(m.parameter for m in self.lab_monitoring if m.primary)


@dataclass(frozen=True)
class SafetyPatternTerms:
    """Keyword sets of the four SCDA HARD_FAIL patterns."""

    raw: Mapping[str, Mapping[str, Any]]

    def terms(self, pattern: str, key: str) -> tuple[str, ...]:
        """Published terms plus the documented ``extra_`` terms for ``key`` of ``pattern``."""
        spec = self.raw[pattern]
        return tuple(spec.get(key, ())) + tuple(spec.get(f"extra_{key}", ()))


@dataclass(frozen=True)
class ClinicalKnowledge:
    """Everything the pure gates need, loaded once and passed in."""

    parameters: Mapping[str, Parameter]
    drug_maps: tuple[DrugMap, ...]
    class_maps: tuple[DrugMap, ...]
    med_dependencies: Mapping[str, tuple[str, ...]]
    safety_patterns: SafetyPatternTerms
    vocabulary: DrugVocabulary
    units: UnitConverter

    def maps(self, *, tier_b: bool) -> tuple[DrugMap, ...]:
        """The active NTI maps: Tier A always, Tier B class maps when ``tier_b``."""
        return self.drug_maps + (self.class_maps if tier_b else ())


@dataclass(frozen=True)
class GateFlags:
    """Rules beyond the seed, each off by default so the golden cases reproduce the seed.

    Attributes:
        tier_b_class_maps: ESC-021 Tier B, class-level opioid / benzodiazepine maps join the NTI gate.
        esc032_staleness: ESC-032, a stale monitoring dependency of an active medication escalates the
            light (STALE -> minimum YELLOW, PROFOUNDLY_STALE -> RED), in production and shadow.
        esc033_compound: ESC-033, NTI ELEVATED + a monitoring parameter of that drug at or beyond
            ``esc033_min_class`` -> RED.
        esc033_min_class: the staleness class ESC-033 needs; the seed proposes PROFOUNDLY_STALE (which,
            note, does not fire on its own triggering case PT-TEST-009, a 26-day = STALE INR gap).
        rule_a_enforced: Rule A (automation bias HIGH on YELLOW -> RED) changes the production light;
            by default it only records what it would do, as in the seed (shadow mode).
    """

    tier_b_class_maps: bool = False
    esc032_staleness: bool = False
    esc033_compound: bool = False
    esc033_min_class: Literal["STALE", "PROFOUNDLY_STALE"] = "PROFOUNDLY_STALE"
    rule_a_enforced: bool = False


def _tuple(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in (value or ()))


def _parameter(key: str, spec: Mapping[str, Any]) -> Parameter:
    return Parameter(
        key=key,
        display_name=str(spec.get("display_name", key)),
        loinc=_tuple(spec.get("loinc")),
        display=tuple(s.lower() for s in _tuple(spec.get("display"))),
        display_exclude=tuple(s.lower() for s in _tuple(spec.get("display_exclude"))),
        unit=str(spec["unit"]),
        molar_mass=float(spec["molar_mass"]) if "molar_mass" in spec else None,
        valence=int(spec["valence"]) if "valence" in spec else None,
    )


def _drug_map(spec: Mapping[str, Any], source: str) -> DrugMap:
    try:
        monitoring = tuple(
            LabMonitoring(
                parameter=key,
                purpose=str(m.get("purpose", "")),
                primary=bool(m.get("primary", False)),
                alert=LabAlert(
                    op=m["alert"]["op"],
                    value=float(m["alert"]["value"]),
                    unit=str(m["alert"]["unit"]),
                    label=str(m["alert"].get("label", "")),
                )
                if "alert" in m
                else None,
            )
            for key, m in (spec.get("lab_monitoring") or {}).items()
        )
        ranges = spec.get("therapeutic_ranges") or {}
        tox = ranges.get("toxicity_threshold")
        primary = [m.parameter for m in monitoring if m.primary]
        threshold = (
            ToxicityThreshold(
                parameter=str(tox.get("parameter") or primary[0]),
                min=float(tox["min"]),
                unit=str(tox["unit"]),
                inclusive=bool(tox.get("inclusive", True)),
            )
            if tox
            else None
        )
        escalation = spec.get("electrolyte_escalation")
        return DrugMap(
            name=str(spec["name"]).lower(),
            kind=spec.get("kind", "drug"),
            match=tuple(s.lower() for s in _tuple(spec.get("match") or [spec["name"]])),
            lab_monitoring=monitoring,
            interactions=tuple(
                (str(cat), tuple(d.lower() for d in _tuple(drugs)))
                for cat, drugs in (spec.get("interactions") or {}).items()
            ),
            symptom_keywords=tuple(
                (str(cat), tuple(s.lower() for s in _tuple(stems)))
                for cat, stems in (spec.get("symptom_keywords") or {}).items()
            ),
            corpus_sources=_tuple(spec.get("corpus_sources")),
            toxicity_threshold=threshold,
            threshold_overrides=tuple(
                ThresholdOverride(
                    name=str(o["name"]),
                    condition_terms=tuple(t.lower() for t in _tuple(o["condition_terms"])),
                    condition_exclude=tuple(t.lower() for t in _tuple(o.get("condition_exclude"))),
                    min=float(o["min"]),
                )
                for o in spec.get("threshold_overrides") or ()
            ),
            indication_flags=tuple(
                IndicationFlag(
                    name=str(f["name"]),
                    condition_terms=tuple(t.lower() for t in _tuple(f["condition_terms"])),
                    parameter=str(f["parameter"]),
                    above=float(f["above"]),
                    unit=str(f["unit"]),
                )
                for f in spec.get("indication_flags") or ()
            ),
            conditional_monitoring=tuple(
                ConditionalMonitoring(
                    name=str(name),
                    parameters=_tuple(c["parameters"]),
                    any_medication=tuple(m.lower() for m in _tuple(c.get("any_medication"))),
                    all_categories=_tuple(c.get("all_categories")),
                    warning_if_missing=c.get("warning_if_missing"),
                )
                for name, c in (spec.get("conditional_monitoring") or {}).items()
            ),
            dose_limits=tuple(
                DoseLimit(
                    medication=str(d["medication"]).lower(),
                    with_drug=str(d["with"]).lower(),
                    max_mg=float(d["max_mg"]),
                    note=str(d.get("note", "")),
                )
                for d in spec.get("dose_limits") or ()
            ),
            electrolyte_escalation=ElectrolyteEscalation(
                categories=_tuple(escalation["categories"]),
                parameters=_tuple(escalation["parameters"]),
                priority=str(escalation["priority"]),
            )
            if escalation
            else None,
            interaction_effects={str(k): str(v) for k, v in (spec.get("interaction_effects") or {}).items()},
            interaction_details={
                str(k).lower(): {str(a): str(b) for a, b in v.items()}
                for k, v in (spec.get("interaction_details") or {}).items()
            },
        )
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise KnowledgeError(
            f"drug map {source} is malformed ({exc!r}); compare it with warfarin.yaml"
        ) from exc


def _read_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _data_dir() -> Path:
    return Path(str(resources.files(DATA_PACKAGE)))


def load_knowledge(
    drug_map_dirs: Sequence[Path] | None = None,
    vocabulary: DrugVocabulary | None = None,
) -> ClinicalKnowledge:
    """Load the clinical knowledge base from YAML.

    Args:
        drug_map_dirs: directories whose ``*.yaml`` files are Tier A drug maps; defaults to the packaged
            ``drug_maps/``. Adding a drug = adding a file to one of these directories.
        vocabulary: a prepared drug vocabulary; by default :func:`DrugVocabulary.load` builds one from
            the PyPI ``drug-named-entity-recognition`` dictionary restricted to the drugs named in the maps.

    Returns:
        The frozen knowledge base.

    Raises:
        KnowledgeError: when a file is malformed, a map references an unknown parameter, two maps share
            a name, or a drug is defined both in a map and in the dependency map.
    """
    data = _data_dir()
    parameters: dict[str, Parameter] = {
        key: _parameter(key, spec) for key, spec in _read_yaml(data / "parameters.yaml").items()
    }
    dirs = list(drug_map_dirs) if drug_map_dirs is not None else [data / "drug_maps"]
    drug_specs = [(p, _read_yaml(p)) for d in dirs for p in sorted(Path(d).glob("*.yaml"))]
    class_specs = [(p, _read_yaml(p)) for p in sorted((data / "class_maps").glob("*.yaml"))]
    for path, spec in drug_specs + class_specs:
        for key, pspec in (spec.get("parameters") or {}).items():
            if key in parameters and _parameter(key, pspec) != parameters[key]:
                raise KnowledgeError(
                    f"{path.name} redefines parameter {key!r} differently from the catalogue"
                )
            parameters[key] = _parameter(key, pspec)
    drug_maps = tuple(_drug_map(spec, p.name) for p, spec in drug_specs)
    class_maps = tuple(_drug_map(spec, p.name) for p, spec in class_specs)
    names = [m.name for m in drug_maps + class_maps]
    if len(set(names)) != len(names):
        raise KnowledgeError(f"two drug maps share a name: {sorted(names)}")
    for m in drug_maps + class_maps:
        used = [lm.parameter for lm in m.lab_monitoring]
        used += [c for cm in m.conditional_monitoring for c in cm.parameters]
        used += [f.parameter for f in m.indication_flags]
        unknown = sorted({u for u in used if u not in parameters})
        if unknown:
            raise KnowledgeError(
                f"drug map {m.name!r} uses undefined parameters {unknown}; add them under parameters:"
            )
    deps = {str(k).lower(): _tuple(v) for k, v in (_read_yaml(data / "med_dependencies.yaml") or {}).items()}
    clash = sorted(set(deps) & {m.name for m in drug_maps})
    if clash:
        raise KnowledgeError(f"{clash} defined both in a drug map and in med_dependencies.yaml; keep one")
    unknown_dep = sorted({p for v in deps.values() for p in v if p not in parameters})
    if unknown_dep:
        raise KnowledgeError(f"med_dependencies.yaml uses undefined parameters {unknown_dep}")
    if vocabulary is None:
        terms = {t for m in drug_maps + class_maps for t in m.match}
        terms |= {d for m in drug_maps + class_maps for _, ds in m.interactions for d in ds}
        terms |= set(deps)
        supplement = _read_yaml(data / "vocabulary_supplement.yaml") or {}
        vocabulary = DrugVocabulary.load(
            terms, {str(k).lower(): str(v).lower() for k, v in supplement.items()}
        )
    return ClinicalKnowledge(
        parameters=parameters,
        drug_maps=drug_maps,
        class_maps=class_maps,
        med_dependencies=deps,
        safety_patterns=SafetyPatternTerms(raw=_read_yaml(data / "safety_patterns.yaml")),
        vocabulary=vocabulary,
        units=UnitConverter(),
    )


@cache
def default_knowledge() -> ClinicalKnowledge:
    """The packaged knowledge base, loaded once per process (it is immutable, so sharing is safe)."""
    return load_knowledge()
