"""V3 — trap detector, phase 1 (rules from data; slide 5). Phase 2 is an LLM request (see llm.py).

The three traps are rule sets in ``v3_trap_rules.yaml``; this module knows only the three rule kinds.
:func:`load_trap_rules` reads the file (callers load once and pass the rules in; the checks stay pure).

Choices where the seed is terse:

* A type "marked PRIMARY" (trap 1) or "classified as non-NO_EVIDENCE" (trap 2) is judged on the
  document mixture and on every segment; the issue names the mixture when it matches there (the
  seed's example location, "document_mixture → Genomic Report"), else the first matching segment.
  One issue per rule and type, so a trap is not counted once per segment toward V5's MAJOR counts.
* Vendor and keyword matching uses the normalised text of :mod:`processors.docs.text` with word
  boundaries, so "QUEST DIAGNOSTICS INC." matches "Quest Diagnostics", while "requisitioned" does
  not match "requisition".
* Trap 3 looks at evidence snippets (the seed: "if evidence snippets match these"), one MINOR per
  snippet naming every pattern it matched.
"""

from __future__ import annotations

import re
from functools import cached_property
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict

from processors.docs.issues import make_issue, mixture_location, segment_location, type_name
from processors.docs.text import normalise, shorten
from schemas.docs import (
    Agent,
    ClassificationOutput,
    DocumentBundle,
    DocumentType,
    Issue,
    PresenceLevel,
    Severity,
)


class _Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    severity: Severity
    why: str
    suggested_fix: str


class VendorRule(_Rule):
    """Trap 1: a listed vendor in ``vendor_signals`` while ``document_type`` is at ``presence_level``."""

    vendors: list[str]
    document_type: DocumentType
    presence_level: PresenceLevel


class KeywordRule(_Rule):
    """Trap 2: a listed keyword in the document while a report type has any presence."""

    keywords: list[str]
    report_types: list[DocumentType]


class HeaderFooterRule(_Rule):
    """Trap 3: evidence snippets matching page header/footer patterns."""

    patterns: dict[str, str]

    @cached_property
    def compiled(self) -> dict[str, re.Pattern[str]]:
        """The patterns, compiled case-insensitively."""
        return {name: re.compile(pattern, re.IGNORECASE) for name, pattern in self.patterns.items()}


class TrapRules(BaseModel):
    """The three rule sets of V3."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vendor_rules: list[VendorRule]
    keyword_rules: list[KeywordRule]
    header_footer_rules: list[HeaderFooterRule]


def load_trap_rules(path: Path | None = None) -> TrapRules:
    """Read trap rules from ``path``, or the packaged ``v3_trap_rules.yaml`` when None."""
    text = (
        path.read_text(encoding="utf-8")
        if path is not None
        else resources.files("processors.docs").joinpath("v3_trap_rules.yaml").read_text(encoding="utf-8")
    )
    return TrapRules.model_validate(yaml.safe_load(text))


def _contains(haystack_normal: str, needle: str) -> bool:
    needle_normal = normalise(needle)
    return bool(needle_normal) and f" {needle_normal} " in f" {haystack_normal} "


def _first_presence(
    classification: ClassificationOutput, document_type: DocumentType, wanted: set[PresenceLevel]
) -> tuple[PresenceLevel, int | None] | None:
    """Where ``document_type`` first has a level in ``wanted``: the mixture (None), else a segment index."""
    for entry in classification.document_mixture:
        if entry.document_type is document_type and entry.presence_level in wanted:
            return entry.presence_level, None
    for index, segment in enumerate(classification.segments):
        for classified in segment.classifications:
            if classified.document_type is document_type and classified.presence_level in wanted:
                return classified.presence_level, index
    return None


def _where(segment_index: int | None, document_type: DocumentType) -> str:
    if segment_index is None:
        return mixture_location(document_type)
    return segment_location(segment_index, document_type)


def check_v3_rules(
    classification: ClassificationOutput, bundle: DocumentBundle, rules: TrapRules
) -> list[Issue]:
    """Phase 1 of V3: every vendor rule, then every keyword rule, then every header/footer rule."""
    issues: list[Issue] = []
    signals = [normalise(signal) for signal in classification.vendor_signals]
    for vendor_rule in rules.vendor_rules:
        vendors = [vendor for vendor in vendor_rule.vendors if any(_contains(s, vendor) for s in signals)]
        hit = _first_presence(classification, vendor_rule.document_type, {vendor_rule.presence_level})
        if vendors and hit:
            level, segment_index = hit
            issues.append(
                make_issue(
                    Agent.V3,
                    vendor_rule.severity,
                    f"Routine lab vendor detected ({', '.join(vendors)}) but "
                    f"{type_name(vendor_rule.document_type)} marked {level.value}",
                    _where(segment_index, vendor_rule.document_type),
                    ig_code=vendor_rule.id,
                    suggested_fix=vendor_rule.suggested_fix,
                    segment_index=segment_index,
                    document_type=vendor_rule.document_type,
                    evidence_text=vendors[0],
                )
            )
    pages = [(page.page_num, normalise(page.text)) for page in bundle.pages]
    present = set(PresenceLevel) - {PresenceLevel.NO_EVIDENCE}
    for keyword_rule in rules.keyword_rules:
        found = [(kw, num) for kw in keyword_rule.keywords for num, text in pages if _contains(text, kw)]
        keywords = list(dict.fromkeys(keyword for keyword, _ in found))
        if not keywords:
            continue
        for report_type in keyword_rule.report_types:
            hit = _first_presence(classification, report_type, present)
            if hit is None:
                continue
            level, segment_index = hit
            issues.append(
                make_issue(
                    Agent.V3,
                    keyword_rule.severity,
                    f"Administrative keywords found ({', '.join(repr(k) for k in keywords)}) but "
                    f"{type_name(report_type)} marked {level.value}",
                    _where(segment_index, report_type),
                    ig_code=keyword_rule.id,
                    suggested_fix=keyword_rule.suggested_fix,
                    segment_index=segment_index,
                    document_type=report_type,
                    page=found[0][1],
                    evidence_text=found[0][0],
                )
            )
    for header_rule in rules.header_footer_rules:
        for index, segment in enumerate(classification.segments):
            for classified in segment.classifications:
                for evidence in classified.top_evidence:
                    names = [n for n, rx in header_rule.compiled.items() if rx.search(evidence.snippet)]
                    if names:
                        issues.append(
                            make_issue(
                                Agent.V3,
                                header_rule.severity,
                                f"Evidence snippet '{shorten(evidence.snippet)}' is page header/footer "
                                f"content ({', '.join(names)})",
                                segment_location(index, classified.document_type),
                                ig_code=header_rule.id,
                                suggested_fix=header_rule.suggested_fix,
                                segment_index=index,
                                document_type=classified.document_type,
                                page=evidence.page,
                                evidence_text=evidence.snippet,
                            )
                        )
    return issues
