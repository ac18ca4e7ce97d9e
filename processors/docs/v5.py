"""V5 — the arbiter: eight priority-ordered rules over the consolidated V1–V4 issues (slide 7).

Pure and auditable: the rules are a table, evaluated top to bottom, and the number of the rule that
fired travels with the decision. Rule 8 ("ambiguous → escalate") is the seed's safety fallback: with
three closed severities rules 1–7 already cover every issue set (a property test checks this), so the
fallback documents intent and guards any future severity, rather than being a branch anyone reaches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from schemas.docs import ArbiterDecision, Issue, Severity


@dataclass(frozen=True)
class IssueCounts:
    """What V5 looks at: counts by severity, MAJOR split by auto-fixability."""

    blocker: int
    major: int
    major_fixable: int
    minor: int

    @property
    def major_non_fixable(self) -> int:
        """MAJOR issues no AutoFixEngine repair addresses."""
        return self.major - self.major_fixable

    @classmethod
    def of(cls, issues: Sequence[Issue]) -> IssueCounts:
        """Count ``issues``."""
        majors = [issue for issue in issues if issue.severity is Severity.MAJOR]
        return cls(
            blocker=sum(issue.severity is Severity.BLOCKER for issue in issues),
            major=len(majors),
            major_fixable=sum(issue.auto_fixable for issue in majors),
            minor=sum(issue.severity is Severity.MINOR for issue in issues),
        )


@dataclass(frozen=True)
class Rule:
    """One row of V5's table."""

    number: int
    condition: str
    decision: ArbiterDecision
    applies: Callable[[IssueCounts], bool]


RULES: tuple[Rule, ...] = (
    Rule(1, "Any BLOCKER issue", ArbiterDecision.ESCALATE_TO_SME, lambda c: c.blocker > 0),
    Rule(2, ">= 3 MAJOR issues", ArbiterDecision.ESCALATE_TO_SME, lambda c: c.major >= 3),
    Rule(3, ">= 2 non-fixable MAJOR", ArbiterDecision.ESCALATE_TO_SME, lambda c: c.major_non_fixable >= 2),
    Rule(4, ">= 1 non-fixable MAJOR", ArbiterDecision.ESCALATE_TO_SME, lambda c: c.major_non_fixable >= 1),
    Rule(5, "1-2 fixable MAJOR", ArbiterDecision.AUTO_RETRY, lambda c: 1 <= c.major_fixable <= 2),
    Rule(
        6,
        "Only MINOR issues",
        ArbiterDecision.AUTO_ACCEPT,
        lambda c: c.minor > 0 and c.blocker == c.major == 0,
    ),
    Rule(7, "No issues", ArbiterDecision.AUTO_ACCEPT, lambda c: c.blocker == c.major == c.minor == 0),
    Rule(8, "Ambiguous (safety fallback)", ArbiterDecision.ESCALATE_TO_SME, lambda c: True),
)


def decide(issues: Sequence[Issue]) -> Rule:
    """The first rule of :data:`RULES` that applies to ``issues``; its ``decision`` is V5's decision."""
    counts = IssueCounts.of(issues)
    return next(rule for rule in RULES if rule.applies(counts))
