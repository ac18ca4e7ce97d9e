"""The escape register's tracked items T-001 to T-010, as a run's safety-audit record states them.

The PharmMesh supplement tracks ten findings that are not escapes, each with a monitoring method and an
escalation criterion (its Part B table). A run's audit record carries all ten, each with one status, so
the register can be rebuilt from the safety-audit topic:

* ``PASS``: measured, within the monitoring threshold;
* ``WARN``: the monitoring threshold tripped on this run (the register watches such runs across runs);
* ``ESCALATE``: the escalation criterion is met by this run alone;
* ``NOT_MEASURED``: the run lacks the input (why is in ``detail``);
* ``CLOSED``: the register closed the item.

What each item measures here:

=======  =========================================================================================
T-001    the audit agent's report length (the audit's ``text``), WARN below 1,500 characters
T-002    the last gated draft's length, WARN outside 55K-105K (the comprehensive window)
T-003    CLOSED: folded into ESC-006 (off-target retrieval)
T-004    NOT_MEASURED: displacement of a dosing table needs the retrieval ranking, no input carries it
T-005    the production/shadow light divergence (a better-grounded draft on stale data), WARN on any
T-006    NOT_MEASURED: displacement within one query's scope needs the retrieval ranking too
T-007    the last revision's citation corrections above revision 0's, WARN
T-008    a non-NTI patient with stale or missing data whose production light differs from the shadow
         light (staleness escalated only by the adversarial disposition), WARN
T-009    revisions above 2.0 (the register's average, here one run's count), ESCALATE
T-010    wrong attributions above 10% of the last revision's checked citations, ESCALATE
=======  =========================================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from processors.drafts.run import (
    DRAFT_LENGTH_WINDOW,
    WRONG_ATTRIBUTION_LIMIT,
    DraftRun,
    wrong_attribution_rate,
)

TrackedStatus = Literal["PASS", "WARN", "ESCALATE", "NOT_MEASURED", "CLOSED"]

#: The audit agent's report length below which the SCDA warns (T-001, characters).
AUDIT_LENGTH_MIN = 1_500
#: The average revision count above which the register escalates (T-009).
REVISIONS_ESCALATION = 2.0


@dataclass(frozen=True)
class PatientSignals:
    """What the patient's assessment says about the shadow light (T-005, T-008)."""

    nti_severity: str
    divergence: str
    """``MATCH`` | ``PRODUCTION_HIGHER`` | ``SHADOW_HIGHER``."""
    divergence_levels: int
    stale: bool
    """Any monitoring dependency STALE, PROFOUNDLY_STALE or MISSING."""


@dataclass(frozen=True)
class TrackedItem:
    """One register item as this run measures it."""

    item: str
    status: TrackedStatus
    value: float | None
    detail: str


def tracked_items(run: DraftRun | None, patient: PatientSignals) -> list[TrackedItem]:
    """T-001 to T-010 for ``run`` (None: the patient has no run through the output gates)."""
    items = [_t001(run), _t002(run)]
    items.append(TrackedItem("T-003", "CLOSED", None, "folded into ESC-006 (off-target evidence retrieval)"))
    items.append(_not_measured("T-004", "dosing-table displacement needs the retrieval ranking"))
    items.append(_t005(patient))
    items.append(_not_measured("T-006", "displacement within a query needs the retrieval ranking"))
    items += [_t007(run), _t008(patient), _t009(run), _t010(run)]
    return items


def _not_measured(item: str, why: str) -> TrackedItem:
    return TrackedItem(item, "NOT_MEASURED", None, why)


def _no_run(item: str) -> TrackedItem:
    return _not_measured(item, "no gated draft for this patient")


def _t001(run: DraftRun | None) -> TrackedItem:
    routed = run.routed() if run is not None else None
    if routed is None or routed.audit_length is None:
        return _not_measured("T-001", "no audit report text received")
    length = routed.audit_length
    status: TrackedStatus = "WARN" if length < AUDIT_LENGTH_MIN else "PASS"
    detail = f"audit report of revision {routed.revision}: {length} characters"
    return TrackedItem("T-001", status, length, detail)


def _t002(run: DraftRun | None) -> TrackedItem:
    if run is None or not run.revisions:
        return _no_run("T-002")
    low, high = DRAFT_LENGTH_WINDOW
    last = run.revisions[-1]
    inside = low <= last.draft_length <= high
    detail = f"revision {last.revision}: {last.draft_length} characters (window {low}-{high})"
    return TrackedItem("T-002", "PASS" if inside else "WARN", last.draft_length, detail)


def _t005(patient: PatientSignals) -> TrackedItem:
    diverged = patient.divergence != "MATCH"
    detail = f"production vs shadow light: {patient.divergence}"
    return TrackedItem("T-005", "WARN" if diverged else "PASS", patient.divergence_levels, detail)


def _t007(run: DraftRun | None) -> TrackedItem:
    if run is None or not run.revisions:
        return _no_run("T-007")
    first, last = run.revisions[0], run.revisions[-1]
    growth = last.corrections - first.corrections
    detail = f"corrections: revision 0 {first.corrections}, revision {last.revision} {last.corrections}"
    return TrackedItem("T-007", "WARN" if growth > 0 else "PASS", growth, detail)


def _t008(patient: PatientSignals) -> TrackedItem:
    if patient.nti_severity != "NORMAL":
        return TrackedItem("T-008", "PASS", None, f"NTI {patient.nti_severity}: the NTI rules see staleness")
    exposed = patient.stale and patient.divergence != "MATCH"
    detail = f"non-NTI, {'stale' if patient.stale else 'current'} data, lights {patient.divergence}"
    return TrackedItem("T-008", "WARN" if exposed else "PASS", patient.divergence_levels, detail)


def _t009(run: DraftRun | None) -> TrackedItem:
    if run is None or run.revision is None:
        return _no_run("T-009")
    escalate = run.revision > REVISIONS_ESCALATION
    detail = f"{run.revision} revisions (escalate above {REVISIONS_ESCALATION})"
    return TrackedItem("T-009", "ESCALATE" if escalate else "PASS", run.revision, detail)


def _t010(run: DraftRun | None) -> TrackedItem:
    if run is None or not run.revisions:
        return _no_run("T-010")
    last = run.revisions[-1]
    rate = wrong_attribution_rate(last)
    detail = f"revision {last.revision}: {last.wrong_attribution} of {last.checked} citations"
    status: TrackedStatus = "ESCALATE" if rate > WRONG_ATTRIBUTION_LIMIT else "PASS"
    return TrackedItem("T-010", status, round(rate, 4), detail)
