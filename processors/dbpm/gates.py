"""The three DBPM gates (paper Eq. 4, §4.5, §4.7, §4.8) and the flag policy applied to their result.

Every gate reads live state at the candidate's event time: effective severities are decayed to that
instant (Eq. 5) and there is no cache that could be stale (the paper's reference rebuilds its gate
caches only every 200 records).

**Three-tier rule (Eq. 4), literally.** For a pattern with effective severity B and count c:
whitelisted -> ALLOW; ``c >= n_min and B > θ_block`` -> BLOCK; ``c >= 1 and θ_down < B <= θ_block``
-> DOWNGRADE; otherwise ALLOW. Note the oddity this implies: the downgrade band is bounded above by
the block threshold, so a pattern *above* the block threshold without minimum support is ALLOWed
(rule ``above_block_without_support``), not downgraded. The paper's equation says so; it is kept.

**NER gate** (and the generic gate of any open task): the task's whitelist of verifier successes,
then Eq. 4 on the task's blocklist.

**Relation gate**: (1) a relation whose head or tail entity (normalised like a NER signature) is in
the NER-to-RE preemption set is BLOCKed (§4.4, before the verifier); (2) a triple *admitted* by the
ontology (its alias-normalised relation among the alias-normalised allowed labels of its (head
type, tail type) pair) is ALLOWed: the RE gate's whitelist is the ontology, not the verifier's
successes, because a success on a relation type must not whitelist it forever (the verifier-fed RE
channel could then never block); (3) Eq. 4 on the RE blocklist, which the verifier *and* the
Ontology-Violation Filter feed (§4.7): a violating triple is DOWNGRADEd in the band and BLOCKed once
it clears 0.70 with two observations.

**QA gate** (§4.8, the fifth source with its fallback): it decides from the §4.8 signal sources
only. For the nine categories with a NER bucket (Eq. 9): ALLOW when the patient's accepted NER
categories contain the bucket, else DOWNGRADE. For the others (adverse_event, outcome_mortality and any
unmapped category): DOWNGRADE when the category fail rate (Eq. 7) exceeds 0.30 *and* the patient
difficulty (Eq. 8) exceeds 0.30, else ALLOW. The fail rate counts observations, not severities:
classified QA fail observations of the category over all QA fail observations of the category plus
its QA success observations (the paper's counting asymmetry); with fewer than 10 observations the
category has no rate and is ALLOWed. The patient's NER categories and difficulty come from the gate
event when it carries them, else from the engine's own per-patient state. QA blocklist severities
are reported in the decision's provenance but do not gate.

**Flag policy**, applied in this order to the gate's result: QA hard-block (QA DOWNGRADE -> BLOCK),
three-tier OFF (DOWNGRADE -> ALLOW), ontology tag-only (RE BLOCK on a pattern with rule-based
evidence -> DOWNGRADE), DOWNGRADE-first (any BLOCK -> DOWNGRADE). Each applied step is listed in the
decision's ``policy``.
"""

from __future__ import annotations

from dataclasses import dataclass

from processors.dbpm.config import QA, RE
from processors.dbpm.events import GateEvent
from processors.dbpm.memory import SOURCE_RULE_BASED, Memory, source_names
from processors.dbpm.ontology import Ontology
from processors.dbpm.signatures import ner_signature, qa_category, signature

ALLOW = "ALLOW"
DOWNGRADE = "DOWNGRADE"
BLOCK = "BLOCK"


@dataclass(frozen=True, slots=True)
class GateRuling:
    """A gate decision with its provenance.

    Attributes:
        candidate_id: the candidate the decision is for.
        decision: ``ALLOW`` | ``DOWNGRADE`` | ``BLOCK``.
        rule: the rule that fired (see the module docstring).
        task: the candidate's task.
        signature: the candidate's signature.
        severity: effective severity of the signature's pattern at decision time (None: no pattern).
        support: the pattern's observation count (0: no pattern).
        multiplier: confidence multiplier for downstream consumers (1.0, 0.70 or 0.0 for BLOCK).
        sources: signal sources that contributed (pattern provenance, ontology, NER coverage...).
        policy: flag-policy steps applied after the rule (e.g. ``downgrade_first``).
    """

    candidate_id: str
    decision: str
    rule: str
    task: str
    signature: str
    severity: float | None
    support: int
    multiplier: float
    sources: tuple[str, ...] = ()
    policy: tuple[str, ...] = ()

    def to_json(self, provenance: bool = False) -> dict[str, object]:
        """The replay-contract decision object; provenance fields follow ``decision`` when asked."""
        out: dict[str, object] = {"candidate_id": self.candidate_id, "decision": self.decision}
        if provenance:
            out.update(
                rule=self.rule,
                task=self.task,
                signature=self.signature,
                severity=self.severity,
                support=self.support,
                multiplier=self.multiplier,
                sources=list(self.sources),
                policy=list(self.policy),
            )
        return out


def _three_tier(
    mem: Memory, event: GateEvent, task: str, sig: str, now: float, whitelisted: bool
) -> GateRuling:
    cfg = mem.config
    if whitelisted:
        return _decide(mem, event, ALLOW, "whitelist", sig, None, 0, ("whitelist",))
    pattern = mem.pattern(task, sig)
    if pattern is None:
        return _decide(mem, event, ALLOW, "no_evidence", sig, None, 0)
    params = cfg.tasks[task]
    severity = mem.severity(task, pattern, now)
    count = pattern.count
    sources = source_names(pattern.sources)
    if count >= params.min_support and severity > params.block_threshold:
        return _decide(mem, event, BLOCK, "block", sig, severity, count, sources, pattern.sources)
    if count >= 1 and cfg.downgrade_threshold < severity <= params.block_threshold:
        return _decide(
            mem, event, DOWNGRADE, "downgrade_band", sig, severity, count, sources, pattern.sources
        )
    rule = "above_block_without_support" if severity > params.block_threshold else "below_band"
    return _decide(mem, event, ALLOW, rule, sig, severity, count, sources)


def _decide(
    mem: Memory,
    event: GateEvent,
    decision: str,
    rule: str,
    sig: str,
    severity: float | None,
    support: int,
    sources: tuple[str, ...] = (),
    pattern_sources: int = 0,
) -> GateRuling:
    """Apply the flag policy to a gate result and attach the multiplier."""
    flags = mem.config.flags
    policy: list[str] = []
    if decision == DOWNGRADE and event.task == QA and flags.qa_hard_block:
        decision = BLOCK
        policy.append("qa_hard_block")
    if decision == DOWNGRADE and not flags.three_tier:
        decision = ALLOW
        policy.append("three_tier_off")
    if (
        decision == BLOCK
        and event.task == RE
        and flags.ontology_tag_only
        and pattern_sources & SOURCE_RULE_BASED
    ):
        decision = DOWNGRADE
        policy.append("ontology_tag_only")
    if decision == BLOCK and flags.downgrade_first:
        decision = DOWNGRADE
        policy.append("downgrade_first")
    multiplier = {ALLOW: 1.0, DOWNGRADE: mem.config.downgrade_multiplier, BLOCK: 0.0}[decision]
    return GateRuling(
        event.candidate_id,
        decision,
        rule,
        event.task,
        sig,
        severity,
        support,
        multiplier,
        sources,
        tuple(policy),
    )


def gate_ner(mem: Memory, event: GateEvent, now: float) -> GateRuling:
    """The NER gate (and the generic gate of an open task): whitelist, then Eq. 4."""
    sig = signature(event.task, event.payload)
    return _three_tier(mem, event, event.task, sig, now, mem.is_whitelisted(event.task, sig))


def gate_relation(mem: Memory, ontology: Ontology, event: GateEvent, now: float) -> GateRuling:
    """The relation gate: preemption BLOCK, ontology-admitted ALLOW, then Eq. 4 on the RE blocklist."""
    payload = event.payload
    sig = signature(RE, payload)
    if mem.config.flags.cross_task:
        for end in ("head", "tail"):
            if mem.is_preempted(ner_signature(payload[end])):  # type: ignore[arg-type]
                return _decide(mem, event, BLOCK, f"preempted_{end}", sig, None, 0, ("cross_task_ner",))
    if ontology.admits(payload["head_type"], payload["relation"], payload["tail_type"]):  # type: ignore[arg-type]
        return _decide(mem, event, ALLOW, "ontology_admitted", sig, None, 0, ("ontology",))
    return _three_tier(mem, event, RE, sig, now, False)


def qa_fail_rate(mem: Memory, category: str) -> float | None:
    """Eq. 7 for a normalised QA category, or None below the minimum number of observations."""
    classified, fails, successes = mem.qa_counts(category)
    observations = fails + successes
    if observations < mem.config.qa_min_observations:
        return None
    return classified / observations


def patient_difficulty(mem: Memory, patient_id: str) -> float:
    """Eq. 8 from the engine's per-patient counters: rejections / max(rejections + NER yield, 1)."""
    rejections, yields = mem.patient_counts(patient_id)
    return rejections / max(rejections + yields, 1)


def gate_qa(mem: Memory, event: GateEvent, now: float) -> GateRuling:
    """The QA gate of §4.8: NER coverage (Eq. 9), else fail rate (Eq. 7) x difficulty (Eq. 8)."""
    cfg = mem.config
    payload = event.payload
    sig = signature(QA, payload)
    pattern = mem.pattern(QA, sig)
    severity = mem.severity(QA, pattern, now) if pattern is not None else None
    support = pattern.count if pattern is not None else 0
    category = qa_category(payload["category"])  # type: ignore[arg-type]
    bucket = cfg.qa_ner_buckets.get(category)
    if bucket is not None:
        given = payload.get("ner_categories")
        if given is not None:
            covered = bucket in {str(c).strip().lower() for c in given}  # type: ignore[union-attr]
            source = "ner_coverage_given"
        else:
            covered = mem.has_patient_category(event.patient_id, bucket)
            source = "ner_coverage"
        if covered:
            return _decide(mem, event, ALLOW, "ner_coverage", sig, severity, support, (source,))
        return _decide(mem, event, DOWNGRADE, "ner_coverage_missing", sig, severity, support, (source,))
    rate = qa_fail_rate(mem, category)
    given_difficulty = payload.get("difficulty")
    if given_difficulty is not None:
        difficulty = float(given_difficulty)  # type: ignore[arg-type]
        sources = ("fail_rate", "difficulty_given")
    else:
        difficulty = patient_difficulty(mem, event.patient_id)
        sources = ("fail_rate", "difficulty")
    if rate is None:
        return _decide(
            mem, event, ALLOW, "fallback_insufficient_observations", sig, severity, support, sources
        )
    if rate > cfg.qa_fail_rate_threshold and difficulty > cfg.qa_difficulty_threshold:
        return _decide(mem, event, DOWNGRADE, "fail_rate_difficulty", sig, severity, support, sources)
    return _decide(mem, event, ALLOW, "fallback_below_thresholds", sig, severity, support, sources)
