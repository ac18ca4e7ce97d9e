"""One clinical reasoning run through the output gates: its state, and what each event does to it.

A run (``run_id``, keyed by its patient) receives its evidence packets, then drafts numbered 0, 1, 2, ...
and an audit of each gated draft. The run's state is what the gates need to decide the next event the
same way wherever it is processed (it is a table value, restored from its changelog by a restarted
worker): the last gated draft (content preservation compares the next revision with it, ESC-028), the
evidence, and a :class:`RevisionRecord` per gated revision (its gate activations and, once audited,
its route), which the SCDA assertions, Rule B and the patient's safety audit read.

* :func:`apply_evidence` keeps a run's packets (a later bundle for the same run replaces them).
* :func:`check_evidence` compares the run's packets with the patient's must-retrieve sources (ESC-002:
  the files an NTI drug map names for a patient whose map is not NORMAL), by exact source name as the
  seed injects them by exact filename. The run keeps what is missing, which its gated drafts, its
  safety audit and the traffic light read (a run whose evidence lacks a must-retrieve source cannot
  leave the light GREEN), and which sources are to be requested from the retrieval step: those missing
  now, when they differ from the last request of the run (so a bundle or a draft that changes nothing
  asks nothing again, and evidence that regresses after a complete bundle asks anew).
* :func:`apply_draft` gates revision ``last + 1`` (0 for a new run) with the run's evidence.
* :func:`apply_audit` routes the audit of the last gated revision; :func:`review_outcome` turns the
  route into the traffic light's Rule B inputs (revision count, audit verdict), so the light escalates
  from the run itself instead of an external system having to publish them.
* :func:`run_assertions` are the SCDA variable assertions of a run as of its last gated revision (the
  supplement's monitoring thresholds T-002, T-007, T-009 and T-010 among them), on each gated draft and
  in the patient's immutable safety-audit record.

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


class RevisionRecord(BaseModel):
    """What the gates did to one revision of a run: its draft gate's activations and, once audited, its
    route (the rows of the supplement's Supplementary Table 4 and post-audit gate table)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    revision: int
    draft_length: int
    restored: bool
    transforms: int
    imperative_warnings: int
    checked: int
    verified: int
    ellipsis_trimmed: int
    paraphrase_converted: int
    wrong_attribution: int
    fabricated_quote: int
    route: Route | None = None
    overrides: tuple[str, ...] = ()
    blocking_count: int = 0
    log_only_count: int = 0
    hq_decision_count: int = 0
    cds_compliant: bool | None = None
    audit_length: int | None = None
    """Characters of the audit agent's report, where the audit carries its text (T-001)."""

    @property
    def corrections(self) -> int:
        """Citations the gate corrected (ellipsis trimmed plus paraphrases converted)."""
        return self.ellipsis_trimmed + self.paraphrase_converted

    @classmethod
    def of(cls, result: DraftGateResult) -> RevisionRecord:
        citations = result.citations
        kinds = [o.kind for o in citations.observations]
        return cls(
            revision=result.revision,
            draft_length=len(result.draft),
            restored=result.restored,
            transforms=len(result.transforms),
            imperative_warnings=len(result.warnings),
            checked=citations.checked,
            verified=citations.verified,
            ellipsis_trimmed=citations.ellipsis_trimmed,
            paraphrase_converted=citations.paraphrase_converted,
            wrong_attribution=kinds.count("wrong_attribution"),
            fabricated_quote=kinds.count("fabricated_quote"),
        )


class DraftRun(BaseModel):
    """The state of one run (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    evidence: tuple[Evidence, ...] = ()
    draft: str = ""
    """The last gated draft."""
    revisions: tuple[RevisionRecord, ...] = ()
    """Each gated revision, in order."""
    must_retrieve: tuple[str, ...] = ()
    """The patient's must-retrieve sources at the run's last evidence check."""
    missing: tuple[str, ...] = ()
    """The must-retrieve sources the run's evidence lacked at that check, in must-retrieve order."""
    requested: tuple[str, ...] = ()
    """The missing sources last requested from the retrieval step (empty once the evidence had them)."""

    @property
    def revision(self) -> int | None:
        """The last gated revision (None: no draft yet)."""
        return self.revisions[-1].revision if self.revisions else None

    def routed(self) -> RevisionRecord | None:
        """The last revision with a route (None before any audit)."""
        return next((r for r in reversed(self.revisions) if r.route is not None), None)


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


def missing_sources(evidence: Sequence[Evidence], must_retrieve: Sequence[str]) -> tuple[str, ...]:
    """The must-retrieve sources no packet of ``evidence`` names, in ``must_retrieve``'s order."""
    present = {packet.source for packet in evidence}
    return tuple(dict.fromkeys(s for s in must_retrieve if s not in present))


def check_evidence(run: DraftRun, must_retrieve: Sequence[str]) -> tuple[DraftRun, tuple[str, ...]]:
    """The run with its evidence checked against ``must_retrieve``, and the sources to request now
    (empty: none missing, or the same as the run's last request)."""
    missing = missing_sources(run.evidence, must_retrieve)
    request = missing if missing != run.requested else ()
    checked = {"must_retrieve": tuple(must_retrieve), "missing": missing, "requested": missing}
    return run.model_copy(update=checked), request


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
    record = RevisionRecord.of(result)
    return run.model_copy(update={"draft": result.draft, "revisions": (*run.revisions, record)}), result


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
    record = run.revisions[-1].model_copy(update={
        "route": result.route, "overrides": tuple(result.overrides), "cds_compliant": audit.cds_compliant,
        "blocking_count": result.count("REVISION_REQUIRED"), "log_only_count": result.count("LOG_ONLY"),
        "hq_decision_count": result.count("HQ_DECISION"), "audit_length": audit.text_length,
    })  # fmt: skip
    return run.model_copy(update={"revisions": (*run.revisions[:-1], record)}), result


def review_outcome(run: DraftRun) -> ReviewOutcome | None:
    """Rule B's inputs after the run's last route (None before any): the revision count is the routed
    revision; the audit approved the draft only if it proceeds with nothing blocking and CDS-compliant
    (a draft that proceeds because the revision budget ran out is not approved: Rule B makes it RED)."""
    routed = run.routed()
    if routed is None:
        return None
    approved = routed.route == "PROCEED" and routed.blocking_count == 0 and bool(routed.cds_compliant)
    return ReviewOutcome(routed.revision, "APPROVED" if approved else "MODIFICATION_REQUIRED")


def run_assertions(run: DraftRun, rules: GateRules | None = None) -> list[RunAssertion]:
    """The SCDA variable assertions of the run as of its last gated revision.

    * ``draft_length`` in the comprehensive window (T-002; outside: WARN);
    * ``revision_count`` within the budget (T-009: above it FAIL: the router should have stopped);
    * ``evidence_count`` above 0 (a draft with no evidence cannot cite: WARN);
    * ``imperative_warnings`` 0 (lint, revision 0: WARN, the audit judges them);
    * ``fabricated_quotes`` 0 (the citation gate's primary safety function: FAIL);
    * ``wrong_attribution_rate`` at most 10% of checked citations (T-010: WARN);
    * ``citation_corrections_growth``: this revision's corrections not above revision 0's (T-007: WARN);
    * ``draft_restored`` 0 (content preservation fired: WARN, the previous draft stands).

    Raises:
        ValueError: the run has no gated draft yet.
    """
    if not run.revisions:
        raise ValueError(f"run {run.run_id} has no gated draft to assert on")
    budget = (rules or gate_rules()).router.revision_budget
    low, high = DRAFT_LENGTH_WINDOW
    last = run.revisions[-1]
    rate = wrong_attribution_rate(last)
    growth = last.corrections - run.revisions[0].corrections
    limit = WRONG_ATTRIBUTION_LIMIT

    def check(variable: str, value: float, expected: str, ok: bool, failing: AssertionStatus) -> RunAssertion:
        return RunAssertion(variable, value, expected, "PASS" if ok else failing)

    length, revision, warnings, fabricated = (
        last.draft_length,
        last.revision,
        last.imperative_warnings,
        last.fabricated_quote,
    )
    return [
        check("draft_length", length, f"{low}-{high} characters", low <= length <= high, "WARN"),
        check("revision_count", revision, f"<= {budget}", revision <= budget, "FAIL"),
        check("evidence_count", len(run.evidence), "> 0", bool(run.evidence), "WARN"),
        check("imperative_warnings", warnings, "0", not warnings, "WARN"),
        check("fabricated_quotes", fabricated, "0", fabricated == 0, "FAIL"),
        check("wrong_attribution_rate", round(rate, 4), f"<= {limit}", rate <= limit, "WARN"),
        check("citation_corrections_growth", growth, "<= 0", growth <= 0, "WARN"),
        check("draft_restored", int(last.restored), "0", not last.restored, "WARN"),
    ]


def wrong_attribution_rate(record: RevisionRecord) -> float:
    """A revision's wrong attributions per checked citation (0 with nothing checked)."""
    return record.wrong_attribution / record.checked if record.checked else 0.0
