"""QA error classifier: why a question-answer candidate is not grounded in its narrative.

DBPM keys a failing QA verdict on ``qa::<category>|<error_class>`` (paper §3.1: "the question template
plus an error-class disambiguator", introduced with the first QAR gate iteration, §4.8), so the error
class decides which pattern a failure reinforces. The paper names the classes only by what the verifier
judges, answer content "hallucinated, over-specified, or unsupported by the source text" (§4.8, §7.1),
and gives no algorithm; the replay contract fixes the three labels ``unsupported``, ``contradicted`` and
``over_specified``. This module is the precise, deterministic definition clingate uses. Every choice
below is ours and is recorded here because the source leaves it open.

Input and output
----------------
``classify_qa_error(answer, context)`` takes the candidate answer and its context (the patient narrative
the answer should be grounded in) and returns a :class:`~schemas.dbpm.QaErrorClass`, or ``None`` when the
answer is supported. :func:`assess_answer` returns the same decision together with the evidence behind
it. Both are pure functions of their two strings: no state, no clock, no randomness, no locale.

1. Normalisation
    Both texts are NFKC-normalised (so the micro sign and full-width digits read as their plain forms)
    and case-folded, and the typographic apostrophe (U+2019) reads as ``'``. A contraction ``n't`` is
    rewritten to the separate word ``not`` (``didn't`` -> ``did not``), so it acts as a negation cue.

2. Tokenisation
    The normalised text is scanned left to right into three kinds of token:

    * **number**: digits not preceded by a letter, digit, ``_`` or ``.``; either plain digits with an
      optional decimal part (``38``, ``38.5``), a thousands-grouped integer with an optional decimal
      part (``1,392`` = 1392; a comma counts as a thousands separator only before exactly three
      digits), or a bare decimal (``.5`` = 0.5). An ordinal suffix glued to the digits (``2nd``,
      ``5th``) is consumed and ignored. An optional unit may follow (directly, after spaces or after
      one hyphen) from the fixed table :data:`UNIT_ALIASES`, longest spelling first: ``20mg``,
      ``20 mg`` and ``20 milligrams`` are all value 20, unit ``mg``; ``45-year-old`` is 45 years.
      Signs are not read: a ``-`` before digits is a hyphen or a range dash far more often than a
      negative value in clinical prose (``covid-19``, ``5-10 mg``).
    * **word**: a maximal run of letters and digits that starts with a letter (``hba1c`` is one word;
      ``covid-19`` is the word ``covid`` and the number 19).
    * **boundary**: one of ``. ; : ! ?`` (a clause end; it closes any negation scope).

    Everything else (whitespace, commas, hyphens, slashes, brackets, quotes) separates tokens.

3. Content words
    A word is a *content word* unless it is shorter than two characters, a stop-word
    (:data:`STOP_WORDS`, a fixed English function-word list), a negation cue (:data:`NEGATION_CUES`),
    a scope terminator (:data:`SCOPE_TERMINATORS`) or a unit spelling (a key of :data:`UNIT_ALIASES`,
    so ``20 mg`` and ``20 milligrams`` never differ in content). Its comparison key drops one final
    ``s`` when the word has at least four letters and does not end in ``ss``, ``us`` or ``is``
    (``fevers`` = ``fever``; ``pelvis``, ``virus``, ``abscess`` unchanged). Nothing else is stemmed.

4. Coverage (``unsupported``)
    ``coverage`` = |distinct answer content keys found among the context content keys| / |distinct
    answer content keys|, or 1.0 when the answer has no content word. The answer is *unsupported* when
    ``coverage < SUPPORT_THRESHOLD`` (0.5): fewer than half of what it names occurs in the narrative.
    Half, not all, because a grounded answer paraphrases (``commenced on`` for ``started``) and the
    check must not fire on wording alone.

5. Negation (``contradicted``)
    A single-token cue from :data:`NEGATION_CUES` opens a scope over the next
    ``NEGATION_WINDOW`` (5) word or number tokens; a boundary token or a scope terminator closes it
    early, and a new cue restarts it. Every content-word occurrence inside a scope is *negated*,
    every other occurrence *affirmed* (one cue is enough; double negation is not resolved). Cues are
    pre-modifiers only: a cue after its term (``pneumonia was ruled out``) is not read. An answer
    occurrence is a *flip* when its key occurs in the context but never with the answer's polarity
    (``no fever`` against a context that only affirms fever, or ``fever`` against one that only
    negates it). The answer is *contradicted* when it has at least one flip.

6. Numbers (``over_specified``)
    An answer number is *matched* when the context has a number of equal value (compared as exact
    decimals, so ``38.0`` = ``38`` and ``0.50`` = ``.5``) whose unit is equal, or when either of the
    two carries no unit. Different units are different quantities (``20 mg`` is not matched by
    ``20 g``, ``3 days`` not by ``3 weeks``); an answer number is not matched by a word spelling the
    value. The answer is *over_specified* when at least one of its numbers is unmatched: it states a
    figure the narrative does not give. A different figure for the same thing (``850 mg`` where the
    narrative says ``500 mg``) is also ``over_specified``: telling it apart from ``contradicted``
    needs the number bound to its entity, which a token-level check cannot do reliably.

7. Precedence
    When several fire, the first in this order is returned: ``contradicted`` (the answer asserts the
    opposite of the narrative), ``unsupported`` (it is mostly not in the narrative), then
    ``over_specified`` (it is grounded but adds figures). An answer for which none fires, including
    the empty answer, is supported (``None``).

Consequences the tests check as properties: an answer that is a span of the context cut at token
boundaries is never ``unsupported`` (every content key is present and every number matched), and is
``None`` when the context has no negation cue; appending a number whose value the context lacks to a
supported answer makes it ``over_specified`` (coverage and polarities do not change).

Size: nearly half of the module is the fixed word tables the definition names (:data:`NEGATION_CUES`,
:data:`STOP_WORDS`, :data:`UNIT_ALIASES`); the code is one definition, read top to bottom against the
steps above.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import MappingProxyType

from schemas.dbpm import QaErrorClass

SUPPORT_THRESHOLD = 0.5
"""Minimum fraction of the answer's distinct content keys that must occur in the context."""

NEGATION_WINDOW = 5
"""Number of word or number tokens after a negation cue that the cue negates."""

NEGATION_CUES: frozenset[str] = frozenset(
    {
        "no",
        "not",
        "without",
        "denies",
        "denied",
        "deny",
        "denying",
        "negative",
        "absent",
        "absence",
        "never",
        "none",
        "neither",
        "nor",
        "cannot",
        "lacks",
        "lacked",
        "lacking",
    }
)
"""Single-token pre-negation cues (``n't`` is rewritten to ``not`` before tokenising)."""

SCOPE_TERMINATORS: frozenset[str] = frozenset(
    {"but", "however", "although", "though", "except", "yet", "whereas", "while", "apart"}
)
"""Words that end a negation scope early (``no fever but cough``: cough is affirmed)."""

STOP_WORDS: frozenset[str] = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "of",
        "in",
        "on",
        "at",
        "to",
        "for",
        "from",
        "by",
        "with",
        "as",
        "into",
        "onto",
        "upon",
        "over",
        "under",
        "after",
        "before",
        "during",
        "since",
        "until",
        "within",
        "per",
        "via",
        "about",
        "than",
        "then",
        "also",
        "only",
        "both",
        "each",
        "any",
        "all",
        "some",
        "such",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "why",
        "how",
        "it",
        "its",
        "he",
        "she",
        "they",
        "him",
        "her",
        "his",
        "hers",
        "them",
        "their",
        "we",
        "our",
        "you",
        "your",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "has",
        "have",
        "had",
        "having",
        "do",
        "does",
        "did",
        "done",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "could",
        "may",
        "might",
        "must",
        "so",
        "if",
        "because",
        "due",
        "up",
        "down",
        "out",
        "off",
        "again",
        "further",
        "other",
        "more",
        "most",
        "very",
        "well",
        "patient",
        "patients",
        "pt",
        "yes",
        "noted",
        "reported",
        "showed",
        "shows",
        "revealed",
    }
)
"""Function words (and answer boilerplate such as ``the patient``) that carry no grounding content."""

UNIT_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        # mass
        "mg": "mg",
        "milligram": "mg",
        "milligrams": "mg",
        "g": "g",
        "gram": "g",
        "grams": "g",
        "kg": "kg",
        "kilogram": "kg",
        "kilograms": "kg",
        "mcg": "mcg",
        "μg": "mcg",
        "ug": "mcg",
        "microgram": "mcg",
        "micrograms": "mcg",
        "ng": "ng",
        # volume
        "ml": "ml",
        "millilitre": "ml",
        "millilitres": "ml",
        "milliliter": "ml",
        "milliliters": "ml",
        "l": "l",
        "litre": "l",
        "litres": "l",
        "liter": "l",
        "liters": "l",
        # concentration, dose rate, counts
        "mg/dl": "mg/dl",
        "mg/l": "mg/l",
        "g/dl": "g/dl",
        "g/l": "g/l",
        "ng/ml": "ng/ml",
        "pg/ml": "pg/ml",
        "mmol/l": "mmol/l",
        "μmol/l": "umol/l",
        "umol/l": "umol/l",
        "meq/l": "meq/l",
        "iu/l": "iu/l",
        "u/l": "u/l",
        "mg/kg": "mg/kg",
        "iu": "iu",
        "unit": "unit",
        "units": "unit",
        # physiology
        "mmhg": "mmhg",
        "bpm": "bpm",
        "°c": "°c",
        "°f": "°f",
        "%": "%",
        "percent": "%",
        # length
        "mm": "mm",
        "cm": "cm",
        # time
        "s": "s",
        "sec": "s",
        "second": "s",
        "seconds": "s",
        "min": "min",
        "mins": "min",
        "minute": "min",
        "minutes": "min",
        "h": "h",
        "hr": "h",
        "hrs": "h",
        "hour": "h",
        "hours": "h",
        "d": "day",
        "day": "day",
        "days": "day",
        "wk": "week",
        "wks": "week",
        "week": "week",
        "weeks": "week",
        "mo": "month",
        "month": "month",
        "months": "month",
        "y": "year",
        "yr": "year",
        "yrs": "year",
        "year": "year",
        "years": "year",
    }
)
"""Unit spellings (after NFKC and case-folding) and the canonical unit each stands for."""

_BOUNDARY_CHARS = ".;:!?"

_UNIT_PATTERN = "|".join(re.escape(unit) for unit in sorted(UNIT_ALIASES, key=lambda u: (-len(u), u)))

_TOKEN_RE = re.compile(
    r"(?P<number>(?<![^\W_])(?<![._])"
    r"(?:\d{1,3}(?:,\d{3})+(?!\d)(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+))"
    r"(?:(?:st|nd|rd|th)(?![^\W_]))?"
    rf"(?:(?:\s*|-)(?P<unit>{_UNIT_PATTERN})(?![^\W_]))?"
    r"|(?P<word>[^\W\d_][^\W_]*)"
    rf"|(?P<boundary>[{re.escape(_BOUNDARY_CHARS)}])"
)

_CONTRACTION_RE = re.compile(r"n't\b")


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number read from text: its exact value and its canonical unit (``None`` when unitless)."""

    value: Decimal
    unit: str | None

    def matches(self, other: Quantity) -> bool:
        """Same value, and the same unit unless either side has none (module docstring, step 6)."""
        if self.value != other.value:
            return False
        return self.unit is None or other.unit is None or self.unit == other.unit

    def __str__(self) -> str:
        text = format(self.value.normalize(), "f")
        return text if self.unit is None else f"{text} {self.unit}"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word" | "number" | "boundary"
    text: str
    quantity: Quantity | None = None


@dataclass(frozen=True, slots=True)
class _Reading:
    """What the classifier needs from one text: content occurrences with polarity, and its numbers."""

    occurrences: tuple[tuple[str, bool], ...]  # (content key, negated) in text order
    quantities: tuple[Quantity, ...]


@dataclass(frozen=True, slots=True)
class QAAssessment:
    """The classifier's decision and the evidence behind it.

    Attributes:
        error_class: the class returned by :func:`classify_qa_error` (``None`` = supported).
        coverage: fraction of the answer's distinct content keys found in the context (1.0 if none).
        missing_terms: answer content keys absent from the context, sorted.
        flipped_terms: answer content keys whose polarity the context never shares, sorted.
        unmatched_numbers: answer numbers without a matching context number, in answer order.
    """

    error_class: QaErrorClass | None
    coverage: float
    missing_terms: tuple[str, ...]
    flipped_terms: tuple[str, ...]
    unmatched_numbers: tuple[Quantity, ...]


def _normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    return _CONTRACTION_RE.sub(" not", text)


def _tokens(text: str) -> Iterator[_Token]:
    for match in _TOKEN_RE.finditer(_normalise(text)):
        if match.group("number") is not None:
            unit = match.group("unit")
            value = Decimal(match.group("number").replace(",", ""))
            quantity = Quantity(value, None if unit is None else UNIT_ALIASES[unit])
            yield _Token("number", match.group("number"), quantity)
        elif match.group("word") is not None:
            yield _Token("word", match.group("word"))
        else:
            yield _Token("boundary", match.group("boundary"))


def _content_key(word: str) -> str | None:
    if (
        len(word) < 2
        or word in STOP_WORDS
        or word in NEGATION_CUES
        or word in SCOPE_TERMINATORS
        or word in UNIT_ALIASES
    ):
        return None
    if len(word) >= 4 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _read(text: str) -> _Reading:
    occurrences: list[tuple[str, bool]] = []
    quantities: list[Quantity] = []
    scope_left = 0
    for token in _tokens(text):
        if token.kind == "boundary" or token.text in SCOPE_TERMINATORS:
            scope_left = 0
            continue
        if token.text in NEGATION_CUES:
            scope_left = NEGATION_WINDOW
            continue
        negated = scope_left > 0
        if negated:
            scope_left -= 1
        if token.quantity is not None:
            quantities.append(token.quantity)
            continue
        key = _content_key(token.text)
        if key is not None:
            occurrences.append((key, negated))
    return _Reading(tuple(occurrences), tuple(quantities))


def assess_answer(answer: str, context: str) -> QAAssessment:
    """Classify ``answer`` against ``context`` and return the decision with its evidence.

    Args:
        answer: the candidate answer text.
        context: the narrative the answer must be grounded in.

    Returns:
        The assessment; its ``error_class`` follows the precedence of the module docstring (step 7).
    """
    ans = _read(answer)
    ctx = _read(context)

    context_polarities: dict[str, set[bool]] = {}
    for key, negated in ctx.occurrences:
        context_polarities.setdefault(key, set()).add(negated)

    answer_keys = {key for key, _ in ans.occurrences}
    missing = sorted(key for key in answer_keys if key not in context_polarities)
    coverage = 1.0 if not answer_keys else (len(answer_keys) - len(missing)) / len(answer_keys)
    flipped = sorted(
        {
            key
            for key, negated in ans.occurrences
            if key in context_polarities and negated not in context_polarities[key]
        }
    )
    unmatched = tuple(q for q in ans.quantities if not any(q.matches(c) for c in ctx.quantities))

    error_class: QaErrorClass | None = None
    if flipped:
        error_class = QaErrorClass.CONTRADICTED
    elif coverage < SUPPORT_THRESHOLD:
        error_class = QaErrorClass.UNSUPPORTED
    elif unmatched:
        error_class = QaErrorClass.OVER_SPECIFIED
    return QAAssessment(error_class, coverage, tuple(missing), tuple(flipped), unmatched)


def classify_qa_error(answer: str, context: str) -> QaErrorClass | None:
    """Return the error class of ``answer`` given its ``context``, or ``None`` when it is supported.

    The algorithm, thresholds and word lists are defined in the module docstring.

    Args:
        answer: the candidate answer text.
        context: the narrative the answer must be grounded in.

    Returns:
        ``contradicted``, ``unsupported`` or ``over_specified`` (that precedence), or ``None``.
    """
    return assess_answer(answer, context).error_class
