"""The audit router (PharmMesh ESC-025, ESC-027, ESC-028, ESC-030): a regulatory audit's violations in,
the route out (``CLL_REVISION``: the draft goes back for revision; ``PROCEED``: to the pharmacist).

In this order, as the supplement's post-audit gate table applies them (specs/output-gates.md, "Audit
router"):

1. **Parser warnings** (``[PARSER WARNING]``, ``[RAW VIOLATION TEXT]``) are infrastructure text, not
   findings; if every violation is one, the route is PROCEED (``parser_warning_filter``, ESC-027: such
   text once triggered a revision whose refusal overwrote an approved care plan).
2. **Classification** of the others: the rule number (``Rule X.Y``) through the rule table, else the
   content keywords (ESC-030: variable prefixes misclassified 80% before the fallback); a violation
   nothing names goes to ``HQ_DECISION``, a person's judgement. Any ``REVISION_REQUIRED``: CLL_REVISION.
3. **PASS filter**: a strong or narrative PASS signal without a strong FAIL signal in the same string
   makes the violation a confirmed-compliant finding (``PASS_FINDING``): "No parametric leakage" in a
   PASS finding is not leakage.
4. ``zero_violations``: CLL_REVISION with no ``REVISION_REQUIRED`` left after (3) proceeds.
5. ``cds_backstop``: PROCEED while the audit says the draft is not CDS-compliant and the revision budget
   remains forces CLL_REVISION, whatever the violations list holds (non-compliant output never proceeds
   while it can still be revised, also when the audit names no violation).
6. ``revision_budget_exhausted``: CLL_REVISION at the budget (2 revisions) proceeds; the traffic
   light's Rule B takes it from there.

An empty list of violations from a CDS-compliant audit proceeds with no override.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from processors.drafts.rules import Bucket, GateRules, RouterRules, gate_rules

Route = Literal["CLL_REVISION", "PROCEED"]
ClassifiedBy = Literal["rule_number", "keyword", "pass_filter", "parser_warning"]
Override = Literal["parser_warning_filter", "zero_violations", "cds_backstop", "revision_budget_exhausted"]

_RULE = re.compile(r"\bRule\s+(\d+\.\d+)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Violation:
    """One violation string of the audit, as the router classified it."""

    text: str
    bucket: Bucket
    rule: str | None
    classified_by: ClassifiedBy


@dataclass(frozen=True)
class RouteResult:
    """The router's decision (its contract JSON: :meth:`contract`)."""

    route: Route
    violations: list[Violation] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)

    def count(self, bucket: Bucket) -> int:
        return sum(v.bucket == bucket for v in self.violations)

    def contract(self) -> dict[str, Any]:
        """The record of specs/output-gates.md, keys in its order."""
        return {
            "route": self.route,
            "blocking_count": self.count("REVISION_REQUIRED"),
            "log_only_count": self.count("LOG_ONLY"),
            "hq_decision_count": self.count("HQ_DECISION"),
            "violations": [
                {"text": v.text, "bucket": v.bucket, "rule": v.rule, "classified_by": v.classified_by}
                for v in self.violations
            ],
            "overrides": list(self.overrides),
        }


def classify(text: str, rules: RouterRules) -> Violation:
    """Step 2 for one violation: its rule number through the table, else its keywords."""
    number = _RULE.search(text)
    rule = number.group(1) if number else None
    if rule is not None and rule in rules.rules:
        return Violation(text, rules.rules[rule], rule, "rule_number")
    lowered = text.lower()
    for bucket, words in rules.keywords:
        if any(word in lowered for word in words):
            return Violation(text, bucket, rule, "keyword")
    return Violation(text, "HQ_DECISION", rule, "keyword")


def confirmed_pass(text: str, rules: RouterRules) -> bool:
    """Step 3: a PASS signal (strong or narrative) and no strong FAIL signal in the same string."""
    lowered = text.lower()
    passes = any(s.lower() in lowered for s in (*rules.strong_pass, *rules.narrative_pass))
    return passes and not any(s.lower() in lowered for s in rules.strong_fail)


def route_audit(
    violations: Sequence[str], cds_compliant: bool, revision: int, rules: GateRules | None = None
) -> RouteResult:
    """Route one audit (module docstring)."""
    router = (rules or gate_rules()).router
    if revision < 0:
        raise ValueError(f"revision {revision}: revisions count from 0")
    overrides: list[Override] = []
    judged: list[Violation] = []
    for text in violations:
        if text.startswith(router.parser_warning_prefixes):
            judged.append(Violation(text, "PARSER_WARNING", None, "parser_warning"))
        else:
            judged.append(classify(text, router))
    route: Route
    if judged and all(v.bucket == "PARSER_WARNING" for v in judged):
        route = "PROCEED"
        overrides.append("parser_warning_filter")
    else:
        route = "CLL_REVISION" if any(v.bucket == "REVISION_REQUIRED" for v in judged) else "PROCEED"
        judged = [
            replace(v, bucket="PASS_FINDING", classified_by="pass_filter")
            if v.bucket != "PARSER_WARNING" and confirmed_pass(v.text, router)
            else v
            for v in judged
        ]
        if route == "CLL_REVISION" and not any(v.bucket == "REVISION_REQUIRED" for v in judged):
            route = "PROCEED"
            overrides.append("zero_violations")
    if route == "PROCEED" and not cds_compliant and revision < router.revision_budget:
        route = "CLL_REVISION"
        overrides.append("cds_backstop")
    if route == "CLL_REVISION" and revision >= router.revision_budget:
        route = "PROCEED"
        overrides.append("revision_budget_exhausted")
    return RouteResult(route, judged, overrides)
