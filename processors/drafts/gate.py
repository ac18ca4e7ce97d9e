"""The draft gate: content preservation, then lint (revision 0), then citation fidelity.

``gate_draft`` is the whole pre-audit path of an LLM's clinical draft (PharmMesh ESC-025, ESC-028,
ESC-029; specs/output-gates.md, "Draft gate"):

1. **Content preservation** (ESC-028): a revision (number above 0) shorter than half the previous
   draft (characters) is a refusal or a meta-answer, not a care plan (the 4,821- and 6,080-character
   texts that replaced 91,479- and 67,000-character approved drafts). The previous draft is returned
   and nothing else runs on the rejected text.
2. **Lint** on revision 0 only (later revisions answer an audit of the linted draft): header transforms,
   then the imperative scanner on the transformed draft.
3. **Citation fidelity** on every revision (a revision regenerates quotes the gate corrected before,
   the supplement's T-007).

The result is the same for the same input, and the gate run on its own output returns that output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from processors.drafts.citations import CitationReport, Evidence, check_citations
from processors.drafts.lint import ImperativeWarning, Transform, scan_imperatives, transform_headers
from processors.drafts.rules import GateRules, gate_rules


@dataclass(frozen=True)
class DraftGateResult:
    """What the draft gate decided for one draft (its contract JSON: :meth:`contract`)."""

    revision: int
    draft: str
    restored: bool
    transforms: list[Transform] = field(default_factory=list)
    warnings: list[ImperativeWarning] = field(default_factory=list)
    citations: CitationReport = field(default_factory=CitationReport)

    def contract(self) -> dict[str, Any]:
        """The record of specs/output-gates.md, keys in its order."""
        citations = self.citations
        return {
            "revision": self.revision,
            "draft": self.draft,
            "restored": self.restored,
            "lint": {
                "transforms": [
                    {"rule": t.rule, "before": t.before, "after": t.after} for t in self.transforms
                ],
                "imperative_warnings": [
                    {"verb": w.verb, "position": w.position, "excerpt": w.excerpt} for w in self.warnings
                ],
            },
            "citations": {
                "checked": citations.checked,
                "verified": citations.verified,
                "ellipsis_trimmed": citations.ellipsis_trimmed,
                "paraphrase_converted": citations.paraphrase_converted,
                "observations": [
                    {"kind": o.kind, "cited_source": o.cited_source, "found_in": o.found_in, "quote": o.quote}
                    for o in citations.observations
                ],
            },
        }


def shrunk(draft: str, previous: str | None, revision: int, rules: GateRules) -> bool:
    """Whether a revision lost too much of the previous draft to be kept (step 1)."""
    return (
        revision > 0 and previous is not None and len(draft) < rules.min_fraction_of_previous * len(previous)
    )


def gate_draft(
    draft: str,
    evidence: Sequence[Evidence],
    previous: str | None = None,
    revision: int = 0,
    rules: GateRules | None = None,
) -> DraftGateResult:
    """Gate one draft (module docstring).

    Args:
        draft: the LLM's draft (Markdown).
        evidence: the run's evidence packets.
        previous: the previous revision's gated draft (content preservation compares with it).
        revision: 0 for the first draft, then 1, 2, ...
        rules: the gates' data; default: the packaged file.
    """
    rules = rules or gate_rules()
    if revision < 0:
        raise ValueError(f"revision {revision}: revisions count from 0")
    if shrunk(draft, previous, revision, rules):
        assert previous is not None
        return DraftGateResult(revision, previous, restored=True)
    transforms: list[Transform] = []
    warnings: list[ImperativeWarning] = []
    if revision == 0:
        draft, transforms = transform_headers(draft, rules.lint)
        warnings = scan_imperatives(draft, rules.lint)
    draft, citations = check_citations(draft, evidence, rules.citations)
    return DraftGateResult(revision, draft, False, transforms, warnings, citations)
