"""Brand -> generic resolution through a real drug vocabulary.

The seed matches drug names by case-insensitive substring of the medication text (Supplementary Data 1,
note 5), so "Lanoxin 125 mcg" is invisible to it. We keep that substring rule and add a vocabulary:
each medication text is tokenised and every token (and token pair) that the vocabulary knows as a
variant of a generic is expanded with that generic, and substring matching then runs over the text plus
the generics. "Lanoxin" -> "digoxin", "Coumadin" -> "warfarin", "Bactrim" ->
"trimethoprim/sulfamethoxazole" (which contains "sulfamethoxazole").

Vocabulary: PyPI ``drug-named-entity-recognition`` (MIT; DrugBank / MeSH / Wikipedia-derived variant
dictionary, shipped inside the wheel, works offline). Its dictionary is read once by
:meth:`DrugVocabulary.load` and only the variants of generics the maps care about are kept, which makes
the per-call lookup a dict probe. Gaps found in testing (e.g. "Jantoven") go to
``data/vocabulary_supplement.yaml``.
"""

from __future__ import annotations

import bz2
import importlib.util
import pickle
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from processors.clinical.exceptions import KnowledgeError

_TOKEN = re.compile(r"[a-z][a-z0-9\-]*")


def _upstream_variants() -> Mapping[str, list[str]]:
    """The package's variant -> canonical dictionary, read from its data file.

    Importing ``drug_named_entity_recognition`` builds a fuzzy-match n-gram index we do not use (10+ s on a
    small machine); reading the dictionary it ships costs a third of that. The file is the package's own
    data, located without executing the package.
    """
    spec = importlib.util.find_spec("drug_named_entity_recognition")
    if spec is None or not spec.submodule_search_locations:
        raise KnowledgeError(
            "drug-named-entity-recognition is not installed; pip install the clingate package"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "drug_ner_dictionary.pkl.bz2"
    with bz2.open(path, "rb") as fh:
        data = pickle.load(fh)
    variants: Mapping[str, list[str]] = data["drug_variant_to_canonical"]
    return variants


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
        wanted = tuple(sorted({t.lower() for t in terms if len(t) >= 4}))
        canonical_ok: dict[str, bool] = {}
        out: dict[str, set[str]] = {}
        for variant, canonicals in _upstream_variants().items():
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
    def full(cls) -> DrugVocabulary:
        """Every variant of every drug the upstream vocabulary knows (generics map to themselves).

        For dictionary lookup of drug mentions in free text (the DBPM generator's hints); variants
        shorter than four characters are left out, as in :meth:`load`.
        """
        return cls(synonyms={
            variant: tuple(sorted(set(canonicals)))
            for variant, canonicals in _upstream_variants().items() if len(variant) >= 4
        })  # fmt: skip

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
