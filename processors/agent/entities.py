"""Node ① INPUT_ASSEMBLY's deterministic entity extraction (spec §4.1): regex, dictionary, keywords.

The model extracts drug names poorly (56.2%), so code pre-extracts entities and TOOL_SELECT stage 2
gets them as hints (§4.3). Everything here is a pure function of the text and the dictionary; results
keep the order of first appearance and carry no duplicates.

* Patient ids: the §4.1 regular expressions (UUIDs, the short form ``abc-123``), the bare eight-hex
  form §4.1 gives as an example (``f47ac10b``; it must contain a letter and a digit, so an English word or
  a date is not an id) and clingate's own identifiers (``PT-TEST-009``, ``p-000123``; at least three
  digits after ``p-`` so ``p-0.05`` is not an id). Case-insensitive. A match inside a longer match (the
  first group of a UUID) does not count.
* Drug mentions: the dictionary's names as whole words, case-insensitive; where names overlap the
  longest wins (``insulin glargine`` over ``insulin``). A mention is reported as the dictionary spells
  it.
* Action verbs: the verbs §4.1 lists plus those its walkthrough extracts (``find``, ``verify``), as whole
  words.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

_PATIENT_ID_PATTERNS: Final[tuple[re.Pattern[str], ...]] = (
    re.compile(r"\b[a-f0-9]{8}(?:-[a-f0-9]{4}){3}-[a-f0-9]{12}\b", re.IGNORECASE),
    re.compile(r"\bPT-[A-Z0-9]+-\d+\b", re.IGNORECASE),
    re.compile(r"\bp-\d{3,}\b", re.IGNORECASE),
    re.compile(r"\b[a-z]{3}-\d{3}\b", re.IGNORECASE),
    re.compile(r"\b(?=[a-f0-9]*\d)(?=[a-f0-9]*[a-f])[a-f0-9]{8}\b", re.IGNORECASE),
)
"""§4.1 UUID; clingate ``PT-…-NNN`` and ``p-NNN…``; §4.1 short form; §4.1 eight-hex example."""

ACTION_VERBS: Final[tuple[str, ...]] = (
    "prescribe",
    "document",
    "check",
    "search",
    "save",
    "find",
    "verify",
)
"""§4.1's keywords, plus ``find`` and ``verify`` from walkthrough example 3."""

_ACTION_VERB = re.compile(r"\b(" + "|".join(ACTION_VERBS) + r")\b", re.IGNORECASE)


def patient_ids(text: str) -> tuple[str, ...]:
    """Patient identifiers in ``text``, in order of appearance, without duplicates or nested matches."""
    spans = sorted(
        (m.start(), -len(m.group()), m.group()) for p in _PATIENT_ID_PATTERNS for m in p.finditer(text)
    )
    found: list[str] = []
    covered_to = -1
    for start, negative_length, value in spans:
        if start < covered_to:
            continue
        covered_to = start - negative_length
        found.append(value)
    return tuple(dict.fromkeys(found))


def is_patient_id(value: str) -> bool:
    """Whether ``value`` as a whole has one of the patient-identifier formats."""
    return any(p.fullmatch(value.strip()) for p in _PATIENT_ID_PATTERNS)


@lru_cache(maxsize=8)
def _drug_matcher(drug_names: frozenset[str]) -> tuple[re.Pattern[str] | None, dict[str, str]]:
    """One alternation over the dictionary (longest names first, so overlaps resolve to the longest)
    and the dictionary spelling of each lower-cased name (the smallest spelling where several differ
    only in case). Sorted, so the result never depends on set iteration order."""
    spelling: dict[str, str] = {}
    for name in sorted(n.strip() for n in drug_names if n.strip()):
        spelling.setdefault(name.lower(), name)
    if not spelling:
        return None, spelling
    ordered = sorted(spelling, key=lambda n: (-len(n), n))
    alternation = "|".join(r"\s+".join(re.escape(part) for part in name.split()) for name in ordered)
    return re.compile(rf"(?<!\w)(?:{alternation})(?!\w)", re.IGNORECASE), spelling


def drug_mentions(text: str, drug_names: frozenset[str]) -> tuple[str, ...]:
    """Dictionary drug names ``text`` mentions, as the dictionary spells them."""
    matcher, spelling = _drug_matcher(drug_names)
    if matcher is None:
        return ()
    found = (spelling[" ".join(m.group().lower().split())] for m in matcher.finditer(text))
    return tuple(dict.fromkeys(found))


def action_verbs(text: str) -> tuple[str, ...]:
    """The action keywords of ``text``, lower-cased."""
    return tuple(dict.fromkeys(m.group().lower() for m in _ACTION_VERB.finditer(text)))
