"""Regulatory lint of a clinical draft (PharmMesh ESC-025): header transforms and the imperative scanner.

* **Header transforms** rewrite imperative section headers into advisory language: ``HOLD DIGOXIN``
  becomes ``DIGOXIN HOLD CONSIDERATION`` (one substitution per imperative header verb, on ALL-CAPS drug
  headers only), and ``MUST BE`` becomes ``MAY NEED TO BE`` within header lines, its case kept. A header
  line is a Markdown heading or a line whose letters are all capitals. The rewritten forms match no
  substitution, so linting a linted draft changes nothing.
* **The imperative scanner** finds imperative medication verbs at a sentence start, after a colon or
  after a bullet; monitoring verbs are exempt and the text of CRG citations is not scanned (a quoted
  label says "discontinue" without the draft ordering it). Its warnings never change the draft.

The lists are data (:mod:`processors.drafts.rules`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from processors.drafts.citations import CITATION
from processors.drafts.rules import LintRules

Position = Literal["sentence_start", "post_colon", "post_bullet"]

_HEADING = re.compile(r"^(?P<marks>\s*#{1,6}\s+)(?P<text>.*)$")
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_WORD = re.compile(r"[A-Za-z]+")
_DRUG = r"[A-Z0-9][A-Z0-9 /-]*?"


@dataclass(frozen=True)
class Transform:
    """One header rewritten: the rule, and the header's text before and after."""

    rule: str
    before: str
    after: str


@dataclass(frozen=True)
class ImperativeWarning:
    """An imperative medication verb where the draft reads as an order."""

    verb: str
    position: Position
    excerpt: str


def _is_header(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and all(c.isupper() for c in letters)


def _keep_case(written: str, replacement: str) -> str:
    if written.isupper():
        return replacement.upper()
    if written.islower():
        return replacement.lower()
    return replacement.capitalize()


def transform_headers(draft: str, rules: LintRules) -> tuple[str, list[Transform]]:
    """The draft with its header lines rewritten, and what was rewritten, in order."""
    substitutions = [
        (
            sub,
            re.compile(
                rf"^(?:{'|'.join(map(re.escape, sub.verbs))})\s+(?P<drug>{_DRUG})(?P<colon>\s*:?)\s*$"
            ),
        )
        for sub in rules.headers
    ]
    modal = re.compile(rf"\b{re.escape(rules.modal_before)}\b", re.IGNORECASE)
    transforms: list[Transform] = []
    lines = draft.split("\n")
    for index, line in enumerate(lines):
        heading = _HEADING.match(line)
        marks, text = (heading["marks"], heading["text"]) if heading else ("", line)
        if not heading and not _is_header(text):
            continue
        for sub, pattern in substitutions:
            found = pattern.match(text.strip())
            if found and any(c.isalpha() for c in found["drug"]):
                after = f"{found['drug'].strip()} {sub.advisory}{found['colon'].strip()}"
                transforms.append(Transform(sub.rule, text.strip(), after))
                text = after
                break
        if modal.search(text):
            after = modal.sub(lambda m: _keep_case(m.group(0), rules.modal_after), text)
            transforms.append(Transform(rules.modal_rule, text.strip(), after.strip()))
            text = after
        lines[index] = marks + text
    return "\n".join(lines), transforms


def _excerpt(text: str, start: int, words: int) -> str:
    sentence = re.split(r"(?<=[.!?])\s|\n", text[start:], maxsplit=1)[0].strip()
    tokens = sentence.split()
    return " ".join(tokens[:words]) + (" ..." if len(tokens) > words else "")


def scan_imperatives(draft: str, rules: LintRules) -> list[ImperativeWarning]:
    """Imperative medication verbs at the three positions, in the order they appear (citations ignored)."""
    text = CITATION.sub(lambda m: " " * len(m.group(0)), draft)
    starts: dict[int, Position] = {}
    offset = 0
    for line in text.split("\n"):
        heading = _HEADING.match(line)
        body = len(heading["marks"]) if heading else 0
        rest = line[body:]
        bullet = _BULLET.match(rest)
        first = body + (bullet.end() if bullet else len(rest) - len(rest.lstrip()))
        starts.setdefault(offset + first, "post_bullet" if bullet else "sentence_start")
        for found in re.finditer(r"[.!?]\s+|:\s+", line):
            kind: Position = "post_colon" if found.group(0).startswith(":") else "sentence_start"
            starts.setdefault(offset + found.end(), kind)
        offset += len(line) + 1
    warnings = []
    for start in sorted(starts):
        word = _WORD.match(text, start)
        verb = word.group(0).lower() if word else ""
        if verb in rules.imperative_verbs and verb not in rules.monitoring_verbs:
            warnings.append(
                ImperativeWarning(verb, starts[start], _excerpt(text, start, rules.excerpt_words))
            )
    return warnings
