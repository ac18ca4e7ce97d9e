"""Deterministic text matching against the DocumentBundle: does a snippet exist on a page, and where.

The match ladder follows the citation-fidelity gate of the PharmMesh escape register (ESC-029,
Supplementary Table 4): exact substring first, then a normalised match, then ">= 70% word overlap"
counted as a paraphrase; below that the text is not on the page. Choices the source leaves open:

* Normalisation: Unicode NFKC, case-folded, curly quotes/dashes/ellipses unified, every run of
  non-alphanumeric characters collapsed to one space. So "BRCA1/2 — Full Gene" matches
  "brca1 2 full gene", and a trailing "..." never defeats a match.
* Word overlap is measured against the best window of the page: the share of the snippet's words
  (as a multiset) found in any run of page words as long as the snippet. A whole-page bag of words
  would let a snippet match by words scattered across a long page, which is exactly how a
  fabricated quote built from the page's vocabulary would slip through.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

OVERLAP_THRESHOLD = 0.70
"""Minimum word overlap for a paraphrase match (citation-fidelity gate: ">= 70% word overlap")."""

_UNIFY = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "–": "-", "—": "-", "…": " "})
_NON_WORD = re.compile(r"[^0-9a-z]+")


class MatchLevel(StrEnum):
    """How a text was found, best first."""

    EXACT = "EXACT"
    NORMALISED = "NORMALISED"
    OVERLAP = "OVERLAP"
    NONE = "NONE"


@dataclass(frozen=True)
class Match:
    """Result of matching one text against one page (or the best page)."""

    level: MatchLevel
    overlap: float
    page: int | None = None

    @property
    def found(self) -> bool:
        """True for any level but NONE."""
        return self.level is not MatchLevel.NONE


def normalise(text: str) -> str:
    """The normalised form used by every non-exact comparison (see module doc)."""
    folded = unicodedata.normalize("NFKC", text).translate(_UNIFY).casefold()
    return _NON_WORD.sub(" ", folded).strip()


def words(text: str) -> list[str]:
    """The normalised words of ``text``."""
    normal = normalise(text)
    return normal.split(" ") if normal else []


def window_overlap(needle: Sequence[str], haystack: Sequence[str]) -> float:
    """Best share of ``needle``'s words (multiset) inside any ``len(needle)``-word window of ``haystack``.

    Slides the window once, keeping the matched count incrementally, so the cost is linear in the page.
    """
    if not needle:
        return 0.0
    wanted = Counter(needle)
    size = len(needle)
    window: Counter[str] = Counter()
    matched = best = 0
    for position, word in enumerate(haystack):
        if window[word] < wanted[word]:
            matched += 1
        window[word] += 1
        if position >= size:
            leaving = haystack[position - size]
            window[leaving] -= 1
            if window[leaving] < wanted[leaving]:
                matched -= 1
        best = max(best, matched)
    return best / size


def match_text(snippet: str, page_text: str) -> Match:
    """Match ``snippet`` against one page's text with the exact → normalised → overlap ladder."""
    if snippet and snippet in page_text:
        return Match(MatchLevel.EXACT, 1.0)
    needle = normalise(snippet)
    if needle and f" {needle} " in f" {normalise(page_text)} ":
        return Match(MatchLevel.NORMALISED, 1.0)
    overlap = window_overlap(words(snippet), words(page_text))
    if overlap >= OVERLAP_THRESHOLD:
        return Match(MatchLevel.OVERLAP, overlap)
    return Match(MatchLevel.NONE, overlap)


_RANK = {MatchLevel.EXACT: 0, MatchLevel.NORMALISED: 1, MatchLevel.OVERLAP: 2, MatchLevel.NONE: 3}


def locate(snippet: str, pages: Sequence[tuple[int, str]], claimed_page: int | None) -> Match:
    """Where ``snippet`` is: on its claimed page if it matches there at any level, else the best other page.

    Args:
        snippet: the text to find.
        pages: ``(page_num, text)`` for every page of the bundle, in page order.
        claimed_page: the page the classifier cited; None when nothing was cited, and then the first
            page where the text matches at any level is taken (its first occurrence).

    Returns:
        The match with its page; ``level`` NONE (and ``page`` None) when no page reaches the threshold.
    """
    if claimed_page is None:
        for page_num, text in pages:
            first = match_text(snippet, text)
            if first.found:
                return Match(first.level, first.overlap, page_num)
        return Match(MatchLevel.NONE, 0.0)
    for page_num, text in pages:
        if page_num == claimed_page:
            on_claimed = match_text(snippet, text)
            if on_claimed.found:
                return Match(on_claimed.level, on_claimed.overlap, page_num)
    best = Match(MatchLevel.NONE, 0.0)
    for page_num, text in pages:
        if page_num == claimed_page:
            continue
        candidate = match_text(snippet, text)
        if candidate.found and (_RANK[candidate.level], -candidate.overlap) < (
            _RANK[best.level],
            -best.overlap,
        ):
            best = Match(candidate.level, candidate.overlap, page_num)
    return best


def best_paragraph(text: str, paragraphs: Sequence[str]) -> int | None:
    """Index of the paragraph holding ``text``: first normalised containment, else the best word overlap.

    Returns None when no paragraph shares a single word with ``text``.
    """
    needle = normalise(text)
    if needle:
        for index, paragraph in enumerate(paragraphs):
            if f" {needle} " in f" {normalise(paragraph)} ":
                return index
    needle_words = words(text)
    scores = [window_overlap(needle_words, words(paragraph)) for paragraph in paragraphs]
    if not scores or max(scores) == 0.0:
        return None
    return scores.index(max(scores))


def shorten(text: str, limit: int = 25) -> str:
    """The seed's quoting style: whole words up to ``limit`` characters, then "...".

    ("BRCA1 pathogenic variant c.5266dupC detected" → "BRCA1 pathogenic variant...")
    """
    if len(text) <= limit + 5:
        return text
    kept = ""
    for word in text.split():
        candidate = f"{kept} {word}".strip()
        if len(candidate) > limit:
            break
        kept = candidate
    return f"{kept or text[:limit]}..."
