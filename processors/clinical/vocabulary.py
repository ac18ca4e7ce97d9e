"""Brand -> generic resolution through a real drug vocabulary.

The seed matches drug names by case-insensitive substring of the medication text (Supplementary Data 1,
note 5), so "Lanoxin 125 mcg" is invisible to it. We keep that substring rule and add a vocabulary:
each medication text is tokenised and every token (and token pair) that the vocabulary knows as a
variant of a generic is expanded with that generic, and substring matching then runs over the text plus
the generics. "Lanoxin" -> "digoxin", "Coumadin" -> "warfarin", "Bactrim" ->
"trimethoprim/sulfamethoxazole" (which contains "sulfamethoxazole").

Vocabulary: PyPI ``drug-named-entity-recognition`` (MIT; DrugBank / MeSH / Wikipedia-derived variant
dictionary, shipped inside the wheel, works offline; importing it costs ~2.5 s, so it is read once by
:meth:`DrugVocabulary.load` and only the variants of generics the maps care about are kept, which makes
the per-call lookup a dict probe). Gaps found in testing (e.g. "Jantoven") go to
``data/vocabulary_supplement.yaml``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_TOKEN = re.compile(r"[a-z][a-z0-9\-]*")


@dataclass(frozen=True)
class DrugVocabulary:
    """A restricted variant -> generic map (lower case)."""

    synonyms: Mapping[str, tuple[str, ...]]

    @classmethod
    def load(cls, terms: Iterable[str], supplement: Mapping[str, str] | None = None) -> DrugVocabulary:
        """Build the vocabulary for the drug ``terms`` the maps name.

        Args:
            terms: lower-case drug names or stems the maps match on (generics, class stems).
            supplement: extra variant -> generic pairs the upstream vocabulary lacks.

        Returns:
            Variants whose generic contains one of ``terms``, mapped to that generic.
        """
        from drug_named_entity_recognition import drugs_finder

        wanted = tuple(sorted({t.lower() for t in terms if len(t) >= 4}))
        canonical_ok: dict[str, bool] = {}
        out: dict[str, set[str]] = {}
        for variant, canonicals in drugs_finder.drug_variant_to_canonical.items():
            if len(variant) < 4:
                continue
            for canonical in canonicals:
                ok = canonical_ok.get(canonical)
                if ok is None:
                    ok = canonical_ok[canonical] = any(t in canonical for t in wanted)
                if ok and variant != canonical:
                    out.setdefault(variant, set()).add(canonical)
        for variant, generic in (supplement or {}).items():
            out.setdefault(variant.lower(), set()).add(generic.lower())
        return cls(synonyms={k: tuple(sorted(v)) for k, v in sorted(out.items())})

    @classmethod
    def empty(cls) -> DrugVocabulary:
        """A vocabulary that resolves nothing (the seed's substring rule alone)."""
        return cls(synonyms={})

    def generics(self, text: str) -> tuple[str, ...]:
        """Generic names that the tokens of ``text`` are variants of, sorted, without duplicates."""
        tokens = _TOKEN.findall(text.lower())
        found: set[str] = set()
        for i, tok in enumerate(tokens):
            found.update(self.synonyms.get(tok, ()))
            if i + 1 < len(tokens):
                found.update(self.synonyms.get(f"{tok} {tokens[i + 1]}", ()))
        return tuple(sorted(found))
