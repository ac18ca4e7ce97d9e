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

**The four other QA signal sources** (§4.8, §6.3, Table 11), selected by ``qa_signal`` for their
measurement and never by default. Each replaces the fifth source for every category, reads only the
memory and the gate event, and tags (DOWNGRADE) or ALLOWs; the flag policy applies as to any QA result:

1. ``fail_mass``, category-aggregate fail mass: the sum of the effective severities (Eq. 5 at the
   event time) of the category's error-class patterns ``qa::<category>|*``, which every classified
   QA fail of the category feeds; DOWNGRADE above ``qa_fail_mass_threshold``. It is a property of the
   category, the same for every pair of it at one instant: the aggregation-level mismatch of §6.3.
2. ``parse_failure``, verifier uncertainty: DOWNGRADE when the gate event's payload carries
   ``parse_failed: true``, the verifier's flag that its output for the pair did not parse. A gate
   before the verifier has the flag only when upstream puts it on the candidate; absent means unset
   (§6.3: the field is left unset when the output parses, which is almost always).
3. ``fail_rate``, per-category fail rate with the paper's dual-bucket counting (Eq. 7 as §6.3
   describes it): fail observations of the category (the pattern counts behind its ``Q`` record)
   over those plus the category's question templates on the QA whitelist (successes counted per
   template, not per pair: the counting asymmetry); DOWNGRADE above ``qa_fail_rate_threshold``; no
   fail and no template -> no rate, ALLOW. Counting templates reads the QA whitelist, whose size is
   the number of distinct questions (eleven templates in the paper, §6.5).
4. ``difficulty``, per-patient difficulty: the fallback rule above (rate above
   ``qa_fail_rate_threshold`` *and* Eq. 8 above ``qa_difficulty_threshold``) for every category, with
   the dual-bucket rate of source 3, the rate the paper's fourth source combined.

The deployed fallback keeps its observation-count rate: the replay contract's example fixes its
decisions.

**Flag policy**, applied in this order to the gate's result: QA hard-block (QA DOWNGRADE -> BLOCK),
three-tier OFF (DOWNGRADE -> ALLOW), ontology tag-only (RE BLOCK on a pattern with rule-based
evidence -> DOWNGRADE), DOWNGRADE-first (any BLOCK -> DOWNGRADE). Each applied step is listed in the
decision's ``policy``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from processors.dbpm.config import (
    QA,
    QA_SIGNAL_DIFFICULTY,
    QA_SIGNAL_FAIL_MASS,
    QA_SIGNAL_FAIL_RATE,
    QA_SIGNAL_NER_COVERAGE,
    QA_SIGNAL_PARSE_FAILURE,
    RE,
)
from processors.dbpm.events import GateEvent
from processors.dbpm.memory import SOURCE_RULE_BASED, Memory, source_names
from processors.dbpm.ontology import Ontology
from processors.dbpm.signatures import ner_signature, qa_category, qa_class_prefix, signature

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


def dual_bucket_fail_rate(mem: Memory, category: str) -> float | None:
    """Eq. 7 with the paper's counting (third source): fail observations over fail observations plus
    the category's whitelisted question templates; None when both are zero."""
    fails = mem.qa_counts(category)[1]
    templates = sum(1 for _, entry in mem.whites(QA) if entry.category == category)
    total = fails + templates
    return None if total == 0 else fails / total


def category_fail_mass(mem: Memory, category: str, now: float) -> float:
    """The first source's category-aggregate fail mass: the effective severities at ``now`` of the
    category's error-class patterns, summed."""
    return sum(mem.severity(QA, pattern, now) for _, pattern in mem.patterns(QA, qa_class_prefix(category)))


def patient_difficulty(mem: Memory, patient_id: str) -> float:
    """Eq. 8 from the engine's per-patient counters: rejections / max(rejections + NER yield, 1)."""
    rejections, yields = mem.patient_counts(patient_id)
    return rejections / max(rejections + yields, 1)


def _difficulty(mem: Memory, event: GateEvent) -> tuple[float, str]:
    """Eq. 8 for the event's patient, as given on the event or else from the memory, with its source."""
    given = event.payload.get("difficulty")
    if given is not None:
        return float(given), "difficulty_given"  # type: ignore[arg-type]
    return patient_difficulty(mem, event.patient_id), "difficulty"


@dataclass(frozen=True, slots=True)
class _QaPick:
    """What a QA signal source decided before the flag policy: tag or not, the rule, the sources."""

    tagged: bool
    rule: str
    sources: tuple[str, ...]


def _rate_and_difficulty(
    mem: Memory, event: GateEvent, rate: float | None, rate_source: str, untagged: str
) -> _QaPick:
    """The fourth source's rule: tag when the fail rate and the patient difficulty both exceed their
    thresholds; ``untagged`` prefixes the rules that ALLOW."""
    cfg = mem.config
    difficulty, difficulty_source = _difficulty(mem, event)
    sources = (rate_source, difficulty_source)
    if rate is None:
        return _QaPick(False, f"{untagged}_insufficient_observations", sources)
    if rate > cfg.qa_fail_rate_threshold and difficulty > cfg.qa_difficulty_threshold:
        return _QaPick(True, "fail_rate_difficulty", sources)
    return _QaPick(False, f"{untagged}_below_thresholds", sources)


def _ner_coverage(mem: Memory, event: GateEvent, category: str, now: float) -> _QaPick:
    """The fifth source (Eq. 9), falling back to the fourth for a category without a NER bucket."""
    bucket = mem.config.qa_ner_buckets.get(category)
    if bucket is None:
        return _rate_and_difficulty(mem, event, qa_fail_rate(mem, category), "fail_rate", "fallback")
    given = event.payload.get("ner_categories")
    if given is not None:
        covered = bucket in {str(c).strip().lower() for c in given}  # type: ignore[union-attr]
        source = "ner_coverage_given"
    else:
        covered = mem.has_patient_category(event.patient_id, bucket)
        source = "ner_coverage"
    return _QaPick(not covered, "ner_coverage_missing" if not covered else "ner_coverage", (source,))


def _fail_mass(mem: Memory, event: GateEvent, category: str, now: float) -> _QaPick:
    """The first source: the category's fail mass above its threshold."""
    above = category_fail_mass(mem, category, now) > mem.config.qa_fail_mass_threshold
    return _QaPick(above, "fail_mass" if above else "fail_mass_below_threshold", ("fail_mass",))


def _parse_failure(mem: Memory, event: GateEvent, category: str, now: float) -> _QaPick:
    """The second source: the verifier's parse-failure flag on the pair."""
    flagged = event.payload.get("parse_failed") is True
    return _QaPick(flagged, "parse_failed" if flagged else "parse_flag_unset", ("parse_failure",))


def _fail_rate(mem: Memory, event: GateEvent, category: str, now: float) -> _QaPick:
    """The third source: the dual-bucket fail rate above its threshold."""
    rate = dual_bucket_fail_rate(mem, category)
    sources = ("fail_rate_dual_bucket",)
    if rate is None:
        return _QaPick(False, "fail_rate_insufficient_observations", sources)
    above = rate > mem.config.qa_fail_rate_threshold
    return _QaPick(above, "fail_rate" if above else "fail_rate_below_threshold", sources)


def _difficulty_source(mem: Memory, event: GateEvent, category: str, now: float) -> _QaPick:
    """The fourth source for every category, with the dual-bucket fail rate."""
    rate = dual_bucket_fail_rate(mem, category)
    return _rate_and_difficulty(mem, event, rate, "fail_rate_dual_bucket", "difficulty")


_QA_SOURCES: dict[str, Callable[[Memory, GateEvent, str, float], _QaPick]] = {
    QA_SIGNAL_FAIL_MASS: _fail_mass,
    QA_SIGNAL_PARSE_FAILURE: _parse_failure,
    QA_SIGNAL_FAIL_RATE: _fail_rate,
    QA_SIGNAL_DIFFICULTY: _difficulty_source,
    QA_SIGNAL_NER_COVERAGE: _ner_coverage,
}


def gate_qa(mem: Memory, event: GateEvent, now: float) -> GateRuling:
    """The QA gate of §4.8 reading the configured signal source (default: NER coverage, Eq. 9, with
    the fail rate x difficulty fallback, Eq. 7-8)."""
    payload = event.payload
    sig = signature(QA, payload)
    pattern = mem.pattern(QA, sig)
    severity = mem.severity(QA, pattern, now) if pattern is not None else None
    support = pattern.count if pattern is not None else 0
    category = qa_category(payload["category"])  # type: ignore[arg-type]
    pick = _QA_SOURCES[mem.config.qa_signal](mem, event, category, now)
    decision = DOWNGRADE if pick.tagged else ALLOW
    return _decide(mem, event, decision, pick.rule, sig, severity, support, pick.sources)
