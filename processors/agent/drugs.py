"""The facts behind ``check_drug_safety`` and ``check_drug_interactions`` (spec §16), as pure lookups.

The runtime executes the two tools; what they return is computed here from two sources, both data:

* ``data/drug_safety.yaml``: per drug its aliases, FDA boxed warnings, contraindications and major
  alerts (each fact names its FDA label), whether it has a narrow therapeutic index, and a table of
  interacting pairs with severity, mechanism, significance and source. :func:`load_drug_data` reads and
  validates it strictly, so a typo fails at load time with the file position rather than as a missing
  warning at the bedside.
* clingate's NTI safety maps (:class:`~processors.clinical.knowledge.ClinicalKnowledge`, the same maps
  the clinical gates use): a drug's primary monitored parameters and toxicity threshold become its
  ``monitoring``, and the maps' interacting-drug groups add interaction entries of their own.

A map applies to a drug, and a map's listed interacting drug to another drug, when the map's term is
a substring of one of the drug's names (generic or alias), which is how the gates match medication text
(``processors.clinical.nti``): ``sulfamethoxazole`` and ``cotrimoxazole`` both reach
sulfamethoxazole-trimethoprim. Class maps (opioids, benzodiazepines) count like drug maps here: this is
a fact lookup, not the Tier B gate their flag guards.

The agent's drug dictionary (INPUT_ASSEMBLY, spec §4.1: about 5,000 generic and brand names) is wider
than the facts: :func:`drug_dictionary` adds to every name of the drug data the FDA vocabulary of
``data/drug_vocabulary.txt`` (the generic and brand names of FDA-approved active ingredients, from FDA's
UNII Names list; :mod:`streams.agent.vocabulary` writes it and states its source and licence). A name
the vocabulary knows and the drug data does not is recognised in a question and handed to TOOL_SELECT as
a hint, and ``check_drug_safety`` still answers ``drug_not_in_database`` for it: the safety facts and
interactions stay those of ``drug_safety.yaml``.

Nothing here reads a clock or a file after loading; the same names, data and knowledge give the same
dict, key order included, so tool results replay byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

import yaml

from processors.clinical.knowledge import ClinicalKnowledge, DrugMap
from processors.clinical.nti import display_unit

Severity = Literal["major", "moderate", "minor"]
SEVERITIES: Final[tuple[str, ...]] = get_args(Severity)

NTI_MAP_SOURCE: Final = "clingate NTI map (PharmMesh Supplementary Data 1)"
"""Source of facts taken from a Tier A drug map (warfarin, digoxin)."""

CLASS_MAP_SOURCE: Final = "clingate class map (ESC-021 Tier B)"
"""Source of facts taken from a class map (opioids, benzodiazepines), which is not PharmMesh's."""

_FACT_LISTS: Final = ("boxed_warnings", "contraindications", "major_alerts")
_DRUG_KEYS: Final = frozenset({"aliases", "nti", *_FACT_LISTS})
_FACT_KEYS: Final = frozenset({"text", "source"})
_INTERACTION_KEYS: Final = frozenset({"drugs", "severity", "mechanism", "significance", "source"})
_TOP_KEYS: Final = frozenset({"drugs", "interactions"})
_OP_WORDS: Final = {"<": "below", "<=": "at or below", ">": "above", ">=": "at or above"}

_NAME_END = r"(?=$|[\s,;(])"
"""What may follow a drug name at the start of a longer mention: the end, a space (dose, form), a comma,
a semicolon or an opening parenthesis. Not ``-`` or ``/``: ``lisinopril-hydrochlorothiazide`` is a
combination product, not lisinopril."""


@dataclass(frozen=True)
class Fact:
    """One sentence a clinician reads, and the label it paraphrases."""

    text: str
    source: str

    def as_dict(self) -> dict[str, str]:
        """The fact as the tool result carries it."""
        return {"text": self.text, "source": self.source}


@dataclass(frozen=True)
class DrugFacts:
    """Everything the data file says about one drug. ``name`` is the lower-case generic name."""

    name: str
    aliases: tuple[str, ...]
    boxed_warnings: tuple[Fact, ...]
    contraindications: tuple[Fact, ...]
    major_alerts: tuple[Fact, ...]
    nti: bool

    @property
    def names(self) -> tuple[str, ...]:
        """The generic name first, then the aliases."""
        return (self.name, *self.aliases)


@dataclass(frozen=True)
class Interaction:
    """One interacting pair; ``drugs`` holds two generic names in sorted order."""

    drugs: tuple[str, str]
    severity: Severity
    mechanism: str
    significance: str
    source: str

    def as_dict(self) -> dict[str, Any]:
        """The entry as the tool result carries it."""
        return {
            "drugs": list(self.drugs),
            "severity": self.severity,
            "mechanism": self.mechanism,
            "significance": self.significance,
            "source": self.source,
        }


@dataclass(frozen=True)
class DrugData:
    """The drug dictionary and its interaction table, as loaded and validated by :func:`load_drug_data`.

    Every name (generic or alias) belongs to exactly one drug and every pair appears once; the loader
    guarantees both, so :meth:`resolve` and :attr:`interactions` are unambiguous.
    """

    drugs: Mapping[str, DrugFacts]
    interactions: tuple[Interaction, ...]

    @cached_property
    def _generic_of(self) -> dict[str, str]:
        return {n: facts.name for facts in self.drugs.values() for n in facts.names}

    @cached_property
    def _leading_name(self) -> re.Pattern[str]:
        # Longest names first, so the alternation matches the longest known name at the start.
        ordered = sorted(self._generic_of, key=lambda n: (-len(n), n))
        return re.compile("(?:" + "|".join(re.escape(n) for n in ordered) + ")" + _NAME_END)

    @cached_property
    def _table(self) -> dict[tuple[str, str], Interaction]:
        return {i.drugs: i for i in self.interactions}

    def names(self) -> frozenset[str]:
        """Every generic name and alias: the agent's drug dictionary (spec §4.1)."""
        return frozenset(self._generic_of)

    def resolve(self, name: str) -> str | None:
        """The generic name ``name`` refers to, or None.

        Case-insensitive, whitespace collapsed; a name followed by a dose or form ("warfarin 5 mg
        tablet", "Toprol XL 50 mg") resolves through the longest known name it starts with.
        """
        text = " ".join(name.lower().split())
        if text in self._generic_of:
            return self._generic_of[text]
        match = self._leading_name.match(text)
        return self._generic_of[match.group()] if match else None

    def pair(self, a: str, b: str) -> Interaction | None:
        """The table's entry for two generic names, in either order."""
        return self._table.get((min(a, b), max(a, b)))


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def _keys(value: object, keys: frozenset[str], where: str) -> Mapping[str, Any]:
    """``value`` as a mapping with exactly ``keys``: every key is required, no other is allowed."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: {sorted(keys)}")
    missing = sorted(keys - set(value))
    if missing:
        hint = " (every fact names the FDA label it comes from)" if "source" in missing else ""
        raise ValueError(f"{where} is missing {missing}{hint}")
    return value


def _name(value: object, where: str) -> str:
    name = _text(value, where)
    if name != " ".join(name.lower().split()):
        raise ValueError(f"{where}: {name!r} must be lower-case with single spaces")
    return name


def _facts(value: object, where: str) -> tuple[Fact, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list (use [] when there is none), got {value!r}")
    facts = []
    for i, item in enumerate(value):
        spec = _keys(item, _FACT_KEYS, f"{where}[{i}]")
        facts.append(
            Fact(_text(spec["text"], f"{where}[{i}].text"), _text(spec["source"], f"{where}[{i}].source"))
        )
    return tuple(facts)


def _drug(name: str, value: object, where: str) -> DrugFacts:
    spec = _keys(value, _DRUG_KEYS, where)
    if not isinstance(spec["aliases"], list):
        raise ValueError(f"{where}.aliases must be a list, got {spec['aliases']!r}")
    if not isinstance(spec["nti"], bool):
        raise ValueError(f"{where}.nti must be true or false, got {spec['nti']!r}")
    return DrugFacts(
        name=name,
        aliases=tuple(_name(a, f"{where}.aliases[{i}]") for i, a in enumerate(spec["aliases"])),
        boxed_warnings=_facts(spec["boxed_warnings"], f"{where}.boxed_warnings"),
        contraindications=_facts(spec["contraindications"], f"{where}.contraindications"),
        major_alerts=_facts(spec["major_alerts"], f"{where}.major_alerts"),
        nti=spec["nti"],
    )


def _interaction(value: object, drugs: Mapping[str, DrugFacts], where: str) -> Interaction:
    spec = _keys(value, _INTERACTION_KEYS, where)
    pair = spec["drugs"]
    if not isinstance(pair, list) or not all(isinstance(d, str) for d in pair) or len(set(pair)) != 2:
        raise ValueError(f"{where}.drugs must list two different drugs, got {pair!r}")
    unknown = [d for d in pair if d not in drugs]
    if unknown:
        raise ValueError(f"{where}.drugs names {unknown}, which are not generic names under drugs:")
    if spec["severity"] not in SEVERITIES:
        raise ValueError(f"{where}.severity must be one of {list(SEVERITIES)}, got {spec['severity']!r}")
    a, b = sorted(pair)
    return Interaction(
        drugs=(a, b),
        severity=spec["severity"],
        mechanism=_text(spec["mechanism"], f"{where}.mechanism"),
        significance=_text(spec["significance"], f"{where}.significance"),
        source=_text(spec["source"], f"{where}.source"),
    )


def _parse(text: str, origin: str) -> DrugData:
    """YAML text in the ``drug_safety.yaml`` format, validated; ``origin`` prefixes every error."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{origin} is not valid YAML: {exc}") from exc
    top = _keys(raw, _TOP_KEYS, origin)
    if not isinstance(top["drugs"], Mapping) or not top["drugs"]:
        raise ValueError(f"{origin}: drugs must be a non-empty mapping of generic name to facts")
    drugs: dict[str, DrugFacts] = {}
    owner: dict[str, str] = {}
    for key, value in top["drugs"].items():
        name = _name(key, f"{origin}: drug name")
        facts = _drug(name, value, f"{origin}: drugs.{name}")
        for n in facts.names:
            if n in owner:
                raise ValueError(f"{origin}: name {n!r} belongs to both {owner[n]!r} and {name!r}")
            owner[n] = name
        drugs[name] = facts
    if not isinstance(top["interactions"], list):
        raise ValueError(f"{origin}: interactions must be a list")
    interactions = tuple(
        _interaction(v, drugs, f"{origin}: interactions[{i}]") for i, v in enumerate(top["interactions"])
    )
    seen: set[tuple[str, str]] = set()
    for i in interactions:
        if i.drugs in seen:
            raise ValueError(f"{origin}: interactions list {list(i.drugs)} twice; keep one entry per pair")
        seen.add(i.drugs)
    return DrugData(drugs=MappingProxyType(drugs), interactions=interactions)


def load_drug_data(path: Path | None = None) -> DrugData:
    """Read and validate a drug data file; None reads the packaged ``data/drug_safety.yaml``.

    Raises:
        ValueError: naming the file and position, on invalid YAML, unknown or missing keys, a fact
            without a source, a name used by two drugs, a pair naming a drug that is not a generic name
            of the file, an unknown severity or a pair listed twice.
    """
    if path is None:
        text = resources.files(__package__).joinpath("data", "drug_safety.yaml").read_text(encoding="utf-8")
        return _parse(text, "drug_safety.yaml")
    return _parse(Path(path).read_text(encoding="utf-8"), str(path))


@cache
def default_drug_data() -> DrugData:
    """The packaged drug data, loaded once per process (immutable, so sharing is safe)."""
    return load_drug_data()


VOCABULARY_KINDS: Final = ("generic", "brand")


def parse_drug_vocabulary(text: str, origin: str = "drug_vocabulary.txt") -> Mapping[str, str]:
    """``{name: kind}`` of a vocabulary file: ``#`` comment lines, then ``name<TAB>kind`` lines with a
    lower-case, single-spaced name listed once and a kind of :data:`VOCABULARY_KINDS`.

    Raises:
        ValueError: naming ``origin`` and the line, on any other line.
    """
    vocabulary: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line or line.startswith("#"):
            continue
        where = f"{origin}:{number}"
        name, _, kind = line.partition("\t")
        if kind not in VOCABULARY_KINDS:
            kinds = list(VOCABULARY_KINDS)
            raise ValueError(f"{where}: expected name<TAB>kind with kind in {kinds}, got {line!r}")
        _name(name, where)
        if name in vocabulary:
            raise ValueError(f"{where}: {name!r} is listed twice")
        vocabulary[name] = kind
    return MappingProxyType(vocabulary)


@cache
def drug_vocabulary() -> Mapping[str, str]:
    """The packaged FDA vocabulary (``data/drug_vocabulary.txt``), loaded once per process."""
    text = resources.files(__package__).joinpath("data", "drug_vocabulary.txt").read_text(encoding="utf-8")
    return parse_drug_vocabulary(text)


@cache
def drug_dictionary() -> frozenset[str]:
    """The agent's drug dictionary (spec §4.1): the FDA vocabulary's names and every name of the drug
    data (its brand aliases and abbreviations such as ``bactrim ds`` are not all in the vocabulary)."""
    return frozenset(drug_vocabulary()) | default_drug_data().names()


def _maps_for(facts: DrugFacts, knowledge: ClinicalKnowledge) -> tuple[DrugMap, ...]:
    return tuple(m for m in knowledge.drug_maps + knowledge.class_maps if _matches(m.match, facts))


def _matches(terms: Iterable[str], facts: DrugFacts) -> bool:
    return any(term in name for term in terms for name in facts.names)


def _map_source(drug_map: DrugMap) -> str:
    return NTI_MAP_SOURCE if drug_map.kind == "drug" else CLASS_MAP_SOURCE


def _toxicity(drug_map: DrugMap, parameter: str) -> str | None:
    threshold = drug_map.toxicity_threshold
    if threshold is None or threshold.parameter != parameter:
        return None
    unit = display_unit(threshold.unit)
    word = "at or above" if threshold.inclusive else "above"
    overrides = "".join(
        f"; {o.name.replace('_', ' ')}: {word} {o.min} {unit}" for o in drug_map.threshold_overrides
    )
    return f"{word} {threshold.min} {unit}{overrides}"


def _monitoring(facts: DrugFacts, knowledge: ClinicalKnowledge) -> list[dict[str, str]]:
    """Each primary monitored parameter of each map that applies, with its toxicity threshold (only on
    the map's threshold parameter) and alert level (where the map gives one)."""
    entries: list[dict[str, str]] = []
    for drug_map in _maps_for(facts, knowledge):
        for lm in drug_map.lab_monitoring:
            if not lm.primary:
                continue
            entry = {
                "parameter": lm.parameter,
                "name": knowledge.parameters[lm.parameter].display_name,
                "purpose": lm.purpose,
            }
            toxicity = _toxicity(drug_map, lm.parameter)
            if toxicity:
                entry["toxicity_threshold"] = toxicity
            if lm.alert:
                level = f"{_OP_WORDS[lm.alert.op]} {lm.alert.value} {display_unit(lm.alert.unit)}"
                entry["alert"] = f"{level} ({lm.alert.label})" if lm.alert.label else level
            entry["source"] = _map_source(drug_map)
            entries.append(entry)
    return entries


def drug_safety(name: str, data: DrugData, knowledge: ClinicalKnowledge) -> dict[str, Any] | None:
    """``check_drug_safety``'s result for ``name``, or None when the drug is not in the data (the runtime
    reports that as ``drug_not_in_database``, spec §9)."""
    generic = data.resolve(name)
    if generic is None:
        return None
    facts = data.drugs[generic]
    return {
        "drug": generic,
        "boxed_warnings": [f.as_dict() for f in facts.boxed_warnings],
        "contraindications": [f.as_dict() for f in facts.contraindications],
        "major_alerts": [f.as_dict() for f in facts.major_alerts],
        "narrow_therapeutic_index": facts.nti,
        "monitoring": _monitoring(facts, knowledge),
    }


def _map_entries(
    drug: DrugFacts, other: DrugFacts, knowledge: ClinicalKnowledge, pair: tuple[str, str]
) -> list[Interaction]:
    """Entries from ``drug``'s maps that list ``other`` among their interacting drugs, one per group.

    Severity is major except in a group the map itself calls ``moderate`` (digoxin's); the mechanism
    names the group and its effect on the map's drug; the significance is the map's per-drug detail
    (effect, dose adjustment, note), or else the map's primary monitoring.
    """
    entries: list[Interaction] = []
    for drug_map in _maps_for(drug, knowledge):
        if _matches(drug_map.match, other):
            continue  # the other drug is itself covered by this map (the gates skip it the same way)
        for group, members in drug_map.interactions:
            listed = [m for m in members if _matches((m,), other)]
            if not listed:
                continue
            effect = drug_map.interaction_effects.get(group)
            label = group.replace("_", " ")
            subject = other.name[:1].upper() + other.name[1:]
            mechanism = f"{subject} is in the {drug_map.name} map's {label} group"
            mechanism += f" (effect on {drug_map.name}: {effect})." if effect else "."
            details = next(
                (drug_map.interaction_details[m] for m in listed if m in drug_map.interaction_details), None
            )
            if details:
                text = "; ".join(f"{key.replace('_', ' ')}: {value}" for key, value in details.items())
                significance = text[:1].upper() + text[1:] + "."
            else:
                watched = ", ".join(knowledge.parameters[p].display_name for p in drug_map.primary_parameters)
                significance = f"Monitor {watched} while the two are combined."
            entries.append(
                Interaction(
                    drugs=pair,
                    severity="moderate" if group == "moderate" else "major",
                    mechanism=mechanism,
                    significance=significance,
                    source=_map_source(drug_map),
                )
            )
    return entries


def drug_interactions(names: Sequence[str], data: DrugData, knowledge: ClinicalKnowledge) -> dict[str, Any]:
    """``check_drug_interactions``'s result: the drugs that resolved (generic names, first mention order,
    no repeats), the names that did not, and every known interaction among the resolved drugs.

    Pairs come in sorted order; per pair the table's entry comes first, then the maps' (map order, group
    order). Both are kept when both know a pair: they are different sources. With fewer than two
    resolved drugs the list is empty; what that means for the call is the runtime's decision.
    """
    resolved: list[str] = []
    unknown: list[str] = []
    for name in names:
        generic = data.resolve(name)
        if generic is None:
            unknown.append(name)
        elif generic not in resolved:
            resolved.append(generic)
    found: list[Interaction] = []
    ordered = sorted(resolved)
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            table = data.pair(a, b)
            if table:
                found.append(table)
            fa, fb = data.drugs[a], data.drugs[b]
            found.extend(_map_entries(fa, fb, knowledge, (a, b)))
            found.extend(_map_entries(fb, fa, knowledge, (a, b)))
    return {"drugs": resolved, "unknown": unknown, "interactions": [x.as_dict() for x in found]}
