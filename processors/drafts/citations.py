"""Citation fidelity (PharmMesh ESC-029): every quoted CRG citation checked against the evidence packets.

A citation is written ``[CRG: <source> — "<quoted text>"]`` (an em dash; a spaced hyphen is accepted).
Each is judged in this order and counted in exactly one outcome:

1. A quote with a mid-quote ellipsis is first cut to its text up to the last sentence end before the
   ellipsis (the skipped content is not what the source says in one piece); with no sentence end there,
   it is not cut.
2. Found verbatim (whitespace normalised, case kept) in a packet of the cited source: verified, or
   ``ellipsis_trimmed`` if it was cut (the draft then carries the cut quote).
3. Found verbatim only in another packet: a ``wrong_attribution`` observation (the content is right,
   its provenance imprecise).
4. Otherwise, at least the paraphrase share of its words (lower-cased, punctuation removed) in one
   sentence of the cited packet: ``paraphrase_converted``, the quotation marks removed (the draft no
   longer claims a verbatim quote).
5. Anything else: a ``fabricated_quote`` observation.

Observations never block; corrections only remove what the evidence does not support verbatim. A
corrected citation is verified or unquoted, so checking the gate's own output changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from processors.drafts.rules import CitationRules

#: A quoted CRG citation.
QUOTED = re.compile(r'\[CRG:\s*(?P<source>[^\]"]*?)(?:\s*—\s*|\s+-\s+)"(?P<quote>[^"\]]*)"\s*\]')
#: Any CRG citation, quoted or not (the imperative scanner ignores their text).
CITATION = re.compile(r"\[CRG:[^\]]*\]")

ObservationKind = Literal["wrong_attribution", "fabricated_quote"]


@dataclass(frozen=True)
class Evidence:
    """One evidence packet: its source name and text."""

    source: str
    text: str


@dataclass(frozen=True)
class Observation:
    """A citation the gate could not correct; never blocking."""

    kind: ObservationKind
    cited_source: str
    found_in: str | None
    quote: str


@dataclass
class CitationReport:
    """What the gate found in one draft; ``checked`` is the sum of the four outcomes."""

    verified: int = 0
    ellipsis_trimmed: int = 0
    paraphrase_converted: int = 0
    observations: list[Observation] = field(default_factory=list)

    @property
    def checked(self) -> int:
        return self.verified + self.ellipsis_trimmed + self.paraphrase_converted + len(self.observations)


def _normal(text: str) -> str:
    return " ".join(text.split())


def _key(source: str) -> str:
    return _normal(source).casefold()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def cut_at_ellipsis(quote: str, rules: CitationRules) -> str | None:
    """The quote up to the last sentence end before its first mid-quote ellipsis; None: no cut."""
    for index in range(len(quote)):
        for ellipsis in rules.ellipses:
            if (
                quote.startswith(ellipsis, index)
                and quote[:index].strip()
                and quote[index + len(ellipsis) :].strip()
            ):
                head = quote[:index]
                end = max(head.rfind(mark) for mark in rules.sentence_ends)
                return head[: end + 1].strip() if end >= 0 else None
    return None


def _overlap(quote: str, packets: Sequence[Evidence]) -> float:
    """The largest share of the quote's words found in one sentence of ``packets``."""
    words = _words(quote)
    if not words:
        return 0.0
    best = 0.0
    for packet in packets:
        for sentence in re.split(r"(?<=[.!?])\s+", _normal(packet.text)):
            present = set(_words(sentence))
            best = max(best, sum(word in present for word in words) / len(words))
    return best


def check_citations(
    draft: str, packets: Sequence[Evidence], rules: CitationRules
) -> tuple[str, CitationReport]:
    """The draft with its citations corrected, and the report (module docstring)."""
    report = CitationReport()
    normal = {id(p): _normal(p.text) for p in packets}
    parts: list[str] = []
    last = 0
    for found in QUOTED.finditer(draft):
        source, quote = found["source"].strip(), found["quote"]
        cut = cut_at_ellipsis(quote, rules)
        text = cut if cut is not None else quote
        wanted = _normal(text)
        cited = [p for p in packets if _key(p.source) == _key(source)]
        replacement = found.group(0)
        if wanted and any(wanted in normal[id(p)] for p in cited):
            if cut is None:
                report.verified += 1
            else:
                report.ellipsis_trimmed += 1
                replacement = (
                    draft[found.start() : found.start("quote")]
                    + cut
                    + draft[found.end("quote") : found.end()]
                )
        elif wanted and (elsewhere := [p for p in packets if p not in cited and wanted in normal[id(p)]]):
            report.observations.append(Observation("wrong_attribution", source, elsewhere[0].source, text))
        elif _overlap(text, cited) >= rules.paraphrase_min_overlap:
            report.paraphrase_converted += 1
            replacement = (
                draft[found.start() : found.start("quote") - 1]
                + text
                + draft[found.end("quote") + 1 : found.end()]
            )
        else:
            report.observations.append(Observation("fabricated_quote", source, None, text))
        parts += [draft[last : found.start()], replacement]
        last = found.end()
    parts.append(draft[last:])
    return "".join(parts), report
