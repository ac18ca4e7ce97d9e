"""The output gates' data (``data/gates.yaml``), loaded once and checked.

Every list, pattern and threshold the gates use is in the YAML file, with the supplement passage it
comes from and, where the supplement gives examples rather than the full set, how it was completed.
Loading checks what the code relies on: eight header substitutions, 13 imperative and 12 monitoring
verbs with none in both lists, buckets from the contract's value set.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, cast

import yaml

Bucket = Literal["REVISION_REQUIRED", "LOG_ONLY", "HQ_DECISION", "PASS_FINDING", "PARSER_WARNING"]
#: The buckets a violation can be classified into by rule number or keyword.
CLASSIFIED: tuple[Bucket, ...] = ("REVISION_REQUIRED", "LOG_ONLY", "HQ_DECISION")


class RulesError(ValueError):
    """The gates' data file breaks an invariant the gates rely on."""


@dataclass(frozen=True)
class HeaderSubstitution:
    """``<VERB> <DRUG>`` on a header line becomes ``<DRUG> <advisory>``."""

    rule: str
    verbs: tuple[str, ...]
    advisory: str


@dataclass(frozen=True)
class LintRules:
    headers: tuple[HeaderSubstitution, ...]
    modal_rule: str
    modal_before: str
    modal_after: str
    imperative_verbs: frozenset[str]
    monitoring_verbs: frozenset[str]
    excerpt_words: int


@dataclass(frozen=True)
class CitationRules:
    paraphrase_min_overlap: float
    ellipses: tuple[str, ...]
    sentence_ends: tuple[str, ...]


@dataclass(frozen=True)
class RouterRules:
    rules: dict[str, Bucket]
    keywords: tuple[tuple[Bucket, tuple[str, ...]], ...]
    parser_warning_prefixes: tuple[str, ...]
    strong_pass: tuple[str, ...]
    narrative_pass: tuple[str, ...]
    strong_fail: tuple[str, ...]
    revision_budget: int


@dataclass(frozen=True)
class GateRules:
    min_fraction_of_previous: float
    lint: LintRules
    citations: CitationRules
    router: RouterRules


def _bucket(value: object) -> Bucket:
    if value not in CLASSIFIED:
        raise RulesError(f"unknown bucket {value!r}; one of {', '.join(CLASSIFIED)}")
    return cast(Bucket, value)


def parse_rules(data: dict[str, Any]) -> GateRules:
    """The rules in ``data`` (the YAML file's content).

    Raises:
        RulesError: an invariant of the module docstring does not hold.
    """
    lint = data["lint"]
    headers = tuple(
        HeaderSubstitution(h["rule"], tuple(h["verbs"]), h["advisory"]) for h in lint["header_substitutions"]
    )
    modal = lint["modal_substitution"]
    if len(headers) + 1 != 8:
        raise RulesError(f"{len(headers) + 1} header substitutions, the supplement applies 8")
    imperative = frozenset(v.lower() for v in lint["imperative_verbs"])
    monitoring = frozenset(v.lower() for v in lint["monitoring_verbs"])
    if (len(imperative), len(monitoring)) != (13, 12):
        raise RulesError(
            f"{len(imperative)} imperative and {len(monitoring)} monitoring verbs, not 13 and 12"
        )
    if imperative & monitoring:
        raise RulesError(f"verbs both imperative and monitoring: {sorted(imperative & monitoring)}")
    router = data["router"]
    citations = data["citations"]
    return GateRules(
        min_fraction_of_previous=float(data["content_preservation"]["min_fraction_of_previous"]),
        lint=LintRules(
            headers,
            modal["rule"],
            modal["before"],
            modal["after"],
            imperative,
            monitoring,
            int(lint["excerpt_words"]),
        ),
        citations=CitationRules(
            float(citations["paraphrase_min_overlap"]),
            tuple(citations["ellipses"]),
            tuple(citations["sentence_ends"]),
        ),
        router=RouterRules(
            rules={str(number): _bucket(bucket) for number, bucket in router["rules"].items()},
            keywords=tuple(
                (_bucket(k["bucket"]), tuple(w.lower() for w in k["words"])) for k in router["keywords"]
            ),
            parser_warning_prefixes=tuple(router["parser_warning_prefixes"]),
            strong_pass=tuple(router["strong_pass"]),
            narrative_pass=tuple(router["narrative_pass"]),
            strong_fail=tuple(router["strong_fail"]),
            revision_budget=int(router["revision_budget"]),
        ),
    )


@lru_cache(maxsize=1)
def gate_rules() -> GateRules:
    """The packaged rules (``data/gates.yaml``)."""
    text = resources.files(__package__).joinpath("data", "gates.yaml").read_text(encoding="utf-8")
    return parse_rules(yaml.safe_load(text))
