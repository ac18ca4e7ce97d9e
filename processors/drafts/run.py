"""One clinical reasoning run through the output gates: its state, and what each event does to it.

A run (``run_id``, keyed by its patient) receives its evidence packets, then drafts numbered 0, 1, 2, ...
and an audit of each gated draft. The run's state is what the gates need to decide the next event the
same way wherever it is processed (it is a table value, restored from its changelog by a restarted
worker): the last gated draft (content preservation compares the next revision with it, ESC-028), the
evidence, every revision's draft length and the last route.

* :func:`apply_evidence` keeps a run's packets (a later bundle for the same run replaces them).
* :func:`apply_draft` gates revision ``last + 1`` (0 for a new run) with the run's evidence.
* :func:`apply_audit` routes the audit of the last gated revision; :func:`review_outcome` turns the
  route into the traffic light's Rule B inputs (revision count, audit verdict), so the light escalates
  from the run itself instead of an external system having to publish them.
* :func:`run_assertions` are the SCDA variable assertions of a run (the supplement's monitoring
  thresholds T-002, T-007, T-009 and T-010 among them), for its immutable safety-audit record.

An event out of order (a revision that skips a number, an audit of a draft not gated) raises
:class:`RunEventRejected` with the reason: the worker dead-letters it and goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from processors.drafts.citations import Evidence
from processors.drafts.gate import DraftGateResult, gate_draft
from processors.drafts.inputs import AuditFindings
from processors.drafts.router import Route, RouteResult, route_audit
from processors.drafts.rules import GateRules, gate_rules

#: The SCDA warning window of a comprehensive draft's length (T-002, characters).
DRAFT_LENGTH_WINDOW = (55_000, 105_000)
#: Wrong attributions above this share of a revision's checked citations are escalated (T-010).
WRONG_ATTRIBUTION_LIMIT = 0.10

AssertionStatus = Literal["PASS", "WARN", "FAIL"]


class RunEventRejected(ValueError):
    """An event the run cannot take in the order it came (the reason is the message)."""


class DraftRun(BaseModel):
    """The state of one run (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    evidence: tuple[Evidence, ...] = ()
    revision: int | None = None
    """The last gated revision (None: no draft yet)."""
    draft: str = ""
    """The last gated draft."""
    draft_lengths: tuple[int, ...] = ()
    """Each gated revision's draft length, in order."""
    corrections: tuple[int, ...] = ()
    """Each gated revision's citation corrections (ellipsis trimmed plus paraphrases converted)."""
    restorations: int = 0
    route: Route | None = None
    routed_revision: int | None = None
    cds_compliant: bool | None = None
    blocking: int = 0


@dataclass(frozen=True)
class ReviewOutcome:
    """The traffic light's Rule B inputs a route leaves (``revision_count``, ``audit_verdict``)."""

    revision_count: int
    audit_verdict: str


@dataclass(frozen=True)
class RunAssertion:
    """One SCDA variable assertion of a run."""

    variable: str
    value: float
    expected: str
    status: AssertionStatus


def new_run(run_id: str) -> DraftRun:
    return DraftRun(run_id=run_id)


def apply_evidence(run: DraftRun, packets: Sequence[Evidence]) -> DraftRun:
    """The run with these evidence packets (the gate of its next draft checks citations against them)."""
    return run.model_copy(update={"evidence": tuple(packets)})


def apply_draft(
    run: DraftRun, revision: int, text: str, rules: GateRules | None = None
) -> tuple[DraftRun, DraftGateResult]:
    """Gate the run's next draft.

    Raises:
        RunEventRejected: ``revision`` is not the next one (0 for a new run, else the last plus one).
    """
    expected = 0 if run.revision is None else run.revision + 1
    if revision != expected:
        raise RunEventRejected(
            f"run {run.run_id}: draft revision {revision} where revision {expected} is next"
        )
    previous = run.draft if run.revision is not None else None
    result = gate_draft(text, run.evidence, previous, revision, rules)
    citations = result.citations
    run = run.model_copy(update={
        "revision": revision,
        "draft": result.draft,
        "draft_lengths": (*run.draft_lengths, len(result.draft)),
        "corrections": (*run.corrections, citations.ellipsis_trimmed + citations.paraphrase_converted),
        "restorations": run.restorations + result.restored,
    })  # fmt: skip
    return run, result


def apply_audit(
    run: DraftRun, revision: int, audit: AuditFindings, rules: GateRules | None = None
) -> tuple[DraftRun, RouteResult]:
    """Route the audit of the run's last gated draft.

    Raises:
        RunEventRejected: the audit is of another revision than the last gated one.
    """
    if run.revision is None or revision != run.revision:
        last = "no draft gated" if run.revision is None else f"revision {run.revision} gated last"
        raise RunEventRejected(f"run {run.run_id}: audit of revision {revision}, {last}")
    result = route_audit(audit.violations, audit.cds_compliant, revision, rules)
    run = run.model_copy(update={
        "route": result.route, "routed_revision": revision, "cds_compliant": audit.cds_compliant,
        "blocking": result.count("REVISION_REQUIRED"),
    })  # fmt: skip
    return run, result


def review_outcome(run: DraftRun) -> ReviewOutcome | None:
    """Rule B's inputs after the run's last route (None before any): the revision count is the routed
    revision; the audit approved the draft only if it proceeds with nothing blocking and CDS-compliant
    (a draft that proceeds because the revision budget ran out is not approved: Rule B makes it RED)."""
    if run.route is None or run.routed_revision is None:
        return None
    approved = run.route == "PROCEED" and run.blocking == 0 and bool(run.cds_compliant)
    return ReviewOutcome(run.routed_revision, "APPROVED" if approved else "MODIFICATION_REQUIRED")


def run_assertions(
    run: DraftRun, result: DraftGateResult, rules: GateRules | None = None
) -> list[RunAssertion]:
    """The SCDA variable assertions of the run after ``result`` (its latest gated draft).

    * ``draft_length`` in the comprehensive window (T-002; outside: WARN);
    * ``revision_count`` within the budget (T-009: above it FAIL: the router should have stopped);
    * ``evidence_count`` above 0 (a draft with no evidence cannot cite: WARN);
    * ``imperative_warnings`` 0 (lint, revision 0: WARN, the audit judges them);
    * ``fabricated_quotes`` 0 (the citation gate's primary safety function: FAIL);
    * ``wrong_attribution_rate`` at most 10% of checked citations (T-010: WARN);
    * ``citation_corrections_growth``: this revision's corrections not above revision 0's (T-007: WARN);
    * ``draft_restored`` 0 (content preservation fired: WARN, the previous draft stands).
    """
    budget = (rules or gate_rules()).router.revision_budget
    low, high = DRAFT_LENGTH_WINDOW
    citations = result.citations
    wrong = sum(o.kind == "wrong_attribution" for o in citations.observations)
    fabricated = sum(o.kind == "fabricated_quote" for o in citations.observations)
    rate = wrong / citations.checked if citations.checked else 0.0
    length = len(result.draft)
    growth = run.corrections[-1] - run.corrections[0] if run.corrections else 0
    limit = WRONG_ATTRIBUTION_LIMIT

    def check(variable: str, value: float, expected: str, ok: bool, failing: AssertionStatus) -> RunAssertion:
        return RunAssertion(variable, value, expected, "PASS" if ok else failing)

    return [
        check("draft_length", length, f"{low}-{high} characters", low <= length <= high, "WARN"),
        check("revision_count", result.revision, f"<= {budget}", result.revision <= budget, "FAIL"),
        check("evidence_count", len(run.evidence), "> 0", bool(run.evidence), "WARN"),
        check("imperative_warnings", len(result.warnings), "0", not result.warnings, "WARN"),
        check("fabricated_quotes", fabricated, "0", fabricated == 0, "FAIL"),
        check("wrong_attribution_rate", round(rate, 4), f"<= {limit}", rate <= limit, "WARN"),
        check("citation_corrections_growth", growth, "<= 0", growth <= 0, "WARN"),
        check("draft_restored", int(result.restored), "0", not result.restored, "WARN"),
    ]
