"""Urgency classification: the traffic light (Supplementary Table 2, "Urgency Classification Gates").

Production light, in order, each step able only to escalate (Principle 5, "escalate only"):

1. Subcategory canonicalisation (ESC-024): upper-case, separators removed, variant spellings mapped
   (DATAGAP -> DATA_GAP, JUDGMENTCALL -> JUDGMENT_CALL, SAFETYSTOP -> SAFETY_STOP); an unrecognised
   value becomes ``UNCLASSIFIED_MANUAL_REVIEW`` (the canonical form seen in the PT-TEST-010 trace) and
   maps to RED. CONCUR + SAFETY_STOP / DATA_GAP is a contradiction; the subcategory is cleared
   (ESC-030) and a note kept.
2. Base mapping (ESC-008): CONCUR -> GREEN; subcategory JUDGMENT_CALL -> YELLOW; DATA_GAP / SAFETY_STOP
   -> RED; DISSENT / CAPACITY_LIMIT -> RED (unless the subcategory is JUDGMENT_CALL). The seed's
   "default -> GREEN" is read as "no disposition"; an unrecognised disposition string maps to RED
   (agents escalate, never de-escalate: the ESC-024 rule applied to the other field). An unrecognised
   subcategory adds its own ``Base:`` red source after the disposition's, so the trace's two
   independent paths to RED on PT-TEST-010 (note 6) are both visible.
3. Rule A (automation bias HIGH and light YELLOW -> RED): shadow mode as in the seed, i.e. recorded in
   ``shadow_mode`` and not applied, unless :attr:`GateFlags.rule_a_enforced`.
4. Rule B (revision count >= 2 and the audit verdict is not APPROVED -> RED).
5. Rule C (NTI CRITICAL -> RED, recorded whenever it holds, even if already RED: provenance).
6. Rule D (NTI ELEVATED and light GREEN -> YELLOW, recorded only when it escalates).
7. ESC-002 (the run's evidence lacks a must-retrieve source -> at least YELLOW, recorded whenever it
   holds): the seed injects a non-NORMAL NTI map's sources into the evidence before reasoning, so a
   draft written without them is not the draft the seed's safety floor assumes, and it cannot leave
   the light GREEN until the run's evidence has them (always on: it only escalates).
8. ESC-032 / ESC-033 (beyond the seed, behind flags, ids used as source prefixes).

Shadow light: the same rules over deterministic inputs only, i.e. without the adversarial reviewer
(Agent E: disposition, subcategory, automation bias). As in the trace it starts from GREEN and keeps
Rule B (revision count and audit verdict are pipeline state), Rule C, Rule D and the flagged rules;
this reproduces the published shadow lights (PT-TEST-008 RED via Rule B, -009 YELLOW via Rule D,
-010 RED via Rule C, -012 GREEN). Without a disposition the production light equals the shadow light.
Divergence compares the two (production minus shadow, in levels).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from processors.clinical.knowledge import GateFlags
from processors.clinical.phase0 import CLASS_ORDER
from schemas.clinical import Nti, Staleness, TrafficLight

LIGHTS = ("GREEN", "YELLOW", "RED")
SUBCATEGORIES = {
    "DATAGAP": "DATA_GAP",
    "JUDGMENTCALL": "JUDGMENT_CALL",
    "JUDGEMENTCALL": "JUDGMENT_CALL",
    "SAFETYSTOP": "SAFETY_STOP",
}
UNCLASSIFIED = "UNCLASSIFIED_MANUAL_REVIEW"
DISPOSITIONS = {"CONCUR": "CONCUR", "DISSENT": "DISSENT", "CAPACITYLIMIT": "CAPACITY_LIMIT", **SUBCATEGORIES}
SUBCATEGORY_LIGHT = {"JUDGMENT_CALL": "YELLOW", "DATA_GAP": "RED", "SAFETY_STOP": "RED"}


@dataclass(frozen=True)
class ReviewInputs:
    """What the pipeline around the gates reports for a patient; every field may be absent."""

    disposition: str | None = None
    subcategory: str | None = None
    automation_bias_risk: str | None = None
    revision_count: int | None = None
    audit_verdict: str | None = None
    missing_evidence: tuple[str, ...] = ()
    """The must-retrieve sources the current run's evidence lacks (ESC-002)."""


def _squash(value: str) -> str:
    return re.sub(r"[^A-Z]", "", value.upper())


def canonical_subcategory(raw: str | None) -> str | None:
    """Canonical subcategory, ``UNCLASSIFIED_MANUAL_REVIEW`` for unknown values, ``None`` when empty."""
    if raw is None or not raw.strip():
        return None
    return SUBCATEGORIES.get(_squash(raw), UNCLASSIFIED)


def canonical_disposition(raw: str | None) -> str | None:
    """Canonical disposition, the upper-cased raw value when unrecognised.

    The seed's base mapping lists JUDGMENT_CALL / DATA_GAP / SAFETY_STOP beside the dispositions, so a
    reviewer that reports one of them as its disposition is understood too.
    """
    if raw is None or not raw.strip():
        return None
    return DISPOSITIONS.get(_squash(raw), raw.strip().upper())


class _Ladder:
    def __init__(self, light: str, source: str) -> None:
        self.light = light
        self.sources = [source]

    def raise_to(self, target: str, source: str, *, always_record: bool = False) -> None:
        if LIGHTS.index(target) > LIGHTS.index(self.light):
            self.light = target
            self.sources.append(source)
        elif always_record:
            self.sources.append(source)


def _deterministic_rules(
    ladder: _Ladder,
    nti: Nti,
    review: ReviewInputs,
    flags: GateFlags,
    dependency_classes: dict[str, str],
    nti_parameters: dict[str, list[str]],
) -> None:
    if review.revision_count is not None and review.revision_count >= 2:
        verdict = (review.audit_verdict or "").strip().upper()
        if verdict != "APPROVED":
            ladder.raise_to(
                "RED",
                f"Rule B: circuit breaker ({review.revision_count} revisions, "
                f"audit {verdict or 'not approved'})",
                always_record=True,
            )
    if nti.severity == "CRITICAL":
        ladder.raise_to("RED", "Rule C: NTI CRITICAL", always_record=True)
    if nti.severity == "ELEVATED":
        ladder.raise_to("YELLOW", "Rule D: NTI ELEVATED")
    if review.missing_evidence:
        count = len(review.missing_evidence)
        ladder.raise_to(
            "YELLOW",
            f"ESC-002: the run's evidence lacks {count} must-retrieve source{'s' * (count != 1)}",
            always_record=True,
        )
    if flags.esc032_staleness:
        stale = sorted(p for p, c in dependency_classes.items() if c in ("STALE", "PROFOUNDLY_STALE"))
        if any(dependency_classes[p] == "PROFOUNDLY_STALE" for p in stale):
            ladder.raise_to("RED", f"ESC-032: monitoring data PROFOUNDLY_STALE ({', '.join(stale)})")
        elif stale:
            ladder.raise_to("YELLOW", f"ESC-032: monitoring data STALE ({', '.join(stale)})")
    if flags.esc033_compound and nti.severity == "ELEVATED":
        floor = CLASS_ORDER.index(flags.esc033_min_class)
        hits = sorted(
            {
                f"{d.drug}:{p}"
                for d in nti.per_drug
                if d.severity == "ELEVATED"
                for p in nti_parameters.get(d.drug, [])
                if dependency_classes.get(p) in CLASS_ORDER
                and CLASS_ORDER.index(dependency_classes[p]) >= floor
            }
        )
        if hits:
            ladder.raise_to(
                "RED", f"ESC-033: NTI ELEVATED + {flags.esc033_min_class} monitoring ({', '.join(hits)})"
            )


def compute_traffic_light(
    nti: Nti,
    staleness: Staleness,
    review: ReviewInputs | None,
    flags: GateFlags,
    nti_parameters: dict[str, list[str]],
    dependency_parameters: set[str],
) -> TrafficLight:
    """Production and shadow lights with their red sources.

    Args:
        nti: NTI gate output.
        staleness: Phase 0 staleness output.
        review: adversarial review / audit inputs, or ``None``.
        flags: rules beyond the seed.
        nti_parameters: monitored parameters per NTI drug (ESC-033 looks at these).
        dependency_parameters: parameters current medications depend on (ESC-032 looks at these).

    Returns:
        The traffic light block of the assessment.
    """
    review = review or ReviewInputs()
    classes = {o.parameter: o.class_ for o in staleness.observations if o.parameter}
    dependency_classes = {
        p: classes[p]
        for p in dependency_parameters | {q for v in nti_parameters.values() for q in v}
        if p in classes
    }

    shadow = _Ladder("GREEN", "Base: deterministic inputs only -> GREEN")
    _deterministic_rules(shadow, nti, review, flags, dependency_classes, nti_parameters)

    notes: list[str] = []
    shadow_mode: list[str] = []
    disposition = canonical_disposition(review.disposition)
    if disposition is None:
        production = shadow
    else:
        sub = canonical_subcategory(review.subcategory)
        if sub is not None and review.subcategory is not None and sub != review.subcategory.strip():
            notes.append(f"ESC-024: subcategory {review.subcategory!r} canonicalised to {sub}")
        if disposition == "CONCUR" and sub in ("SAFETY_STOP", "DATA_GAP"):
            notes.append(f"ESC-030: CONCUR with {sub} is contradictory; subcategory cleared")
            sub = None
        if disposition == "CONCUR":
            base = "GREEN"
        elif disposition in SUBCATEGORY_LIGHT:
            base = SUBCATEGORY_LIGHT[disposition]
        elif disposition in DISPOSITIONS.values():
            base = SUBCATEGORY_LIGHT.get(sub or "", "RED")
        else:
            base = "RED"
        label = disposition if disposition in DISPOSITIONS.values() else f"{disposition} (unrecognised)"
        shown = f"{label}/{sub}" if sub and sub != UNCLASSIFIED and disposition != "CONCUR" else label
        production = _Ladder(base, f"Base: CAA {shown} -> {base}")
        if sub == UNCLASSIFIED:
            production.raise_to(
                "RED", f"Base: CAA subcategory {UNCLASSIFIED} (unrecognised) -> RED", always_record=True
            )
        bias = (review.automation_bias_risk or "").strip().upper()
        if bias == "HIGH" and production.light == "YELLOW":
            if flags.rule_a_enforced:
                production.raise_to("RED", "Rule A: automation bias HIGH")
            else:
                shadow_mode.append(
                    "Rule A: automation bias HIGH on YELLOW would escalate to RED (shadow mode, not applied)"
                )
        _deterministic_rules(production, nti, review, flags, dependency_classes, nti_parameters)
    levels = LIGHTS.index(production.light) - LIGHTS.index(shadow.light)
    return TrafficLight(
        light=production.light,
        sources=production.sources,
        shadow=shadow.light,
        shadow_sources=shadow.sources,
        shadow_mode=shadow_mode,
        divergence="MATCH" if levels == 0 else "PRODUCTION_HIGHER" if levels > 0 else "SHADOW_HIGHER",
        divergence_levels=levels,
        notes=notes,
    )
