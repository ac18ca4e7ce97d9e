"""The memory update operator U (paper Algorithm 1, Eq. 3) and cross-task propagation (§4.4).

Per verdict event (σ, t, v, τ, s):

* **success** -> whitelist path (§4.3): confidence 0.90 on first sighting, else
  ``min(0.99, conf + eta_success_t)``; count + 1; last seen = τ. Returns before any severity change.
* **hard_fail / soft_downgrade** -> blocklist path: a new pattern starts at ``w_s * σ0(v)`` (0.50 /
  0.25) with count 1 and κ 0; an existing one becomes ``min(1, ρ_v * B(σ, τ) + w_s * η_{v,t})`` with
  count + 1 (Eq. 3), where B(σ, τ) is the severity *effective at τ* (Eq. 5, lazily decayed; see
  :mod:`processors.dbpm.memory`). The reference time and last-seen time become τ.
* Then, for a direct (not propagated) **hard_fail** with cross-task ON:
  - RE -> NER: the head and tail entity strings receive soft evidence at the ``cross_task_re`` weight;
  - QA -> NER: the comma-separated parts of the answer receive it at the ``cross_task_qa`` weight;
    in both directions a target is normalised like a NER signature, must satisfy 4 < length < 60
    (Algorithm 1 line 23; the paper states the bound for RE only, the contract's example stream shows
    it on QA parts too: a ``yes`` part is not propagated), and each distinct target counts once per
    event;
  - NER -> RE: the entity signature (longer than 4 characters) joins the preemption set, whatever
    the source; it stays there (a later success does not lift it).

Propagation is an output, not a side effect. :func:`apply_verdict` writes only the records of the
verdict's own signature (and the patient's and category aggregates) and *returns* the RE/QA -> NER
evidence as :class:`Propagation` values, one per distinct target, in the order Algorithm 1 visits
them. Each names its target (task, signature) and carries what the target needs that only the origin
knows: the cross-task weight, the event time and the provenance (origin task and signature, patient).
Whoever owns the target signature applies it with :func:`apply_propagation`; the in-process engine
does so at once, in the same transaction, which is exactly the inline Algorithm 1; the Kafka runtime
sends it keyed by the target signature, so every signature has one writer.

:func:`apply_propagation`, Propagate(e, w) of Algorithm 1 (lines 36-45), evaluates the guards that
read the target's state *there*, at the target's writer: it does nothing when e is on the NER
whitelist (whitelist protection), when κ(e) >= 3 (propagation cap), or when B(e, NER) >= 0.55
(severity-zone guard); otherwise it runs the soft_downgrade update with weight w, keeps only half of
the increment, and raises κ. The guards that depend on the origin alone (a direct hard_fail, the
length bound, one hit per distinct target per event) are applied before a Propagation exists.
Recursion prevention is structural: applying a Propagation returns nothing to propagate, and it
never preempts.

Per-patient state for the QA gate is kept from the same verdict stream (Eq. 8 and Eq. 9): a NER
success adds one to the patient's NER yield and records its category (lower-cased) as accepted; a
direct NER or RE hard_fail, whatever its source, adds one upstream rejection. (The paper counts
"verifier rejections"; the contract's example stream also counts the Filter's rule-based hard fails,
and soft downgrades are not rejections.)

Numeric guard: severities and confidences are clipped to [0, 1] (constraint C3).
"""

from __future__ import annotations

from typing import NamedTuple

from processors.dbpm.config import (
    CROSS_TASK_QA,
    CROSS_TASK_RE,
    HARD_FAIL,
    NER,
    QA,
    RE,
    RULE_BASED,
    SOFT_DOWNGRADE,
    SUCCESS,
    DBPMConfig,
)
from processors.dbpm.events import VerdictEvent
from processors.dbpm.memory import SOURCE_CROSS_TASK, Memory, Pattern, WhiteEntry, source_bit
from processors.dbpm.signatures import ner_signature, qa_category, signature


class Propagation(NamedTuple):
    """Cross-task soft evidence for one target signature (§4.4), to be applied by the target's writer.

    Attributes:
        task: the target task (always NER: the graded directions are RE -> NER and QA -> NER).
        signature: the target signature, normalised as a NER signature.
        weight: the cross-task source weight w (``cross_task_re`` or ``cross_task_qa`` of Table 4).
        source: the Table 4 source label of ``weight``.
        time: the origin verdict's event time; the evidence is applied at this time.
        origin_task: the task of the hard-failed record the evidence derives from.
        origin_signature: that record's signature.
        patient_id: the patient of the origin verdict (provenance only).
    """

    task: str
    signature: str
    weight: float
    source: str
    time: float
    origin_task: str
    origin_signature: str
    patient_id: str


def _clip(value: float) -> float:
    return 0.0 if value < 0.0 else 1.0 if value > 1.0 else value


def effective_verdict(config: DBPMConfig, task: str, verdict: str) -> str:
    """The verdict as applied: with uncertainty OFF an ambiguous QA verdict counts as success."""
    if task == QA and verdict == SOFT_DOWNGRADE and not config.flags.uncertainty:
        return SUCCESS
    return verdict


def record_success(mem: Memory, task: str, sig: str, now: float, category: str = "") -> None:
    """The whitelist path of §4.3 (Algorithm 1 lines 4-7)."""
    cfg = mem.config
    old = mem.white(task, sig)
    if old is None:
        new = WhiteEntry(cfg.whitelist_initial, now, 1, category)
    else:
        confidence = min(cfg.whitelist_ceiling, old.confidence + cfg.tasks[task].eta_success)
        new = WhiteEntry(_clip(confidence), max(old.last_seen, now), old.count + 1, old.category)
    mem.put_white(task, sig, new, old)


def raised_pattern(
    mem: Memory,
    task: str,
    old: Pattern | None,
    verdict: str,
    weight: float,
    now: float,
    *,
    sources: int,
    category: str = "",
) -> tuple[float, Pattern]:
    """The severity update of Eq. 3 (Algorithm 1 lines 9-16), computed without writing.

    Args:
        mem: the memory (read for the effective severity and κ).
        task: the task.
        old: the stored pattern, or None for a first sighting.
        verdict: ``hard_fail`` or ``soft_downgrade``.
        weight: the source weight w_s.
        now: the event time τ.
        sources: provenance bits to add to the pattern.
        category: the QA category of a new pattern ("" for other tasks).

    Returns:
        The effective severity before the update (0 for a new pattern) and the updated pattern.
    """
    cfg = mem.config
    hard = verdict == HARD_FAIL
    if old is None:
        severity = weight * (cfg.initial_severity_hard_fail if hard else cfg.initial_severity_soft_downgrade)
        return 0.0, Pattern(_clip(severity), now, now, 1, 0, now, sources, category)
    params = cfg.tasks[task]
    before = mem.severity(task, old, now)
    rho = cfg.rho_hard_fail if hard else cfg.rho_soft_downgrade
    eta = params.eta_hard_fail if hard else params.eta_soft_downgrade
    return before, Pattern(
        _clip(min(1.0, rho * before + weight * eta)),
        max(old.ref_time, now),
        max(old.last_seen, now),
        old.count + 1,
        old.kappa,
        old.kappa_ref,
        old.sources | sources,
        old.category,
    )


def apply_propagation(mem: Memory, propagation: Propagation) -> bool:
    """Propagate(e, w) of Algorithm 1, applied by the writer of the target signature.

    The guards that read the target's state (whitelist protection, propagation cap, severity-zone
    guard) are evaluated here, on the target's memory at the propagation's event time.

    Args:
        mem: the memory holding the target signature.
        propagation: the evidence (from :func:`apply_verdict`).

    Returns:
        True when evidence was recorded, False when a guard (whitelist, cap, zone) stopped it.
    """
    cfg = mem.config
    task, entity, now = propagation.task, propagation.signature, propagation.time
    if mem.is_whitelisted(task, entity):
        return False
    old = mem.pattern(task, entity)
    kappa = mem.kappa(old, now)
    if kappa >= cfg.propagation_cap:
        return False
    before = mem.severity(task, old, now)
    if before >= cfg.severity_zone_guard:
        return False
    _, raised = raised_pattern(
        mem, task, old, SOFT_DOWNGRADE, propagation.weight, now, sources=SOURCE_CROSS_TASK
    )
    halved = before + cfg.propagation_increment_factor * (raised.severity - before)
    new = raised._replace(severity=_clip(halved), kappa=kappa + 1, kappa_ref=now)
    mem.put_pattern(task, entity, new, old)
    return True


def apply_verdict(mem: Memory, event: VerdictEvent, now: float) -> list[Propagation]:
    """Apply one verdict event to the memory of its own signature (Algorithm 1 up to line 23).

    Args:
        mem: the memory of the current state transaction.
        event: the verdict.
        now: the event time (seconds since the epoch).

    Returns:
        The cross-task evidence the verdict produces, in Algorithm 1's order (empty unless a direct
        RE or QA hard_fail with cross-task ON); the caller MUST have each applied, in order, by the
        writer of its target (:func:`apply_propagation`).
    """
    cfg = mem.config
    flags = cfg.flags
    task = event.task
    if task == RE and event.source == RULE_BASED and not flags.ontology_filter:
        return []
    verdict = effective_verdict(cfg, task, event.verdict)
    payload = event.payload
    category = qa_category(payload["category"]) if task == QA else ""  # type: ignore[arg-type]

    if task == NER and verdict == SUCCESS:
        mem.add_patient_counts(event.patient_id, 0, 1)
        mem.add_patient_category(event.patient_id, str(payload["category"]).strip().lower())
        mem.touch_patient(event.patient_id, now)
    elif verdict == HARD_FAIL and task in (NER, RE):
        mem.add_patient_counts(event.patient_id, 1, 0)
        mem.touch_patient(event.patient_id, now)

    if verdict == SUCCESS:
        record_success(mem, task, signature(task, payload), now, category)
        return []

    error_class = payload.get("error_class") if task == QA else None
    sig = signature(task, payload, error_class)  # type: ignore[arg-type]
    old = mem.pattern(task, sig)
    _, new = raised_pattern(
        mem,
        task,
        old,
        verdict,
        cfg.weight(event.source),
        now,
        sources=source_bit(event.source),
        category=category,
    )
    mem.put_pattern(task, sig, new, old)
    if verdict != HARD_FAIL or not flags.cross_task:
        return []
    if task == RE:
        targets = [payload["head"], payload["tail"]]
        source = CROSS_TASK_RE
    elif task == QA:
        targets = str(payload["answer"]).split(",")
        source = CROSS_TASK_QA
    else:
        # NER -> RE preemption writes the entity's own record: it stays with this signature's writer.
        if task == NER and len(sig) >= cfg.preempt_min_length:
            mem.preempt(sig, now)
        return []
    weight = cfg.weight(source)
    return [
        Propagation(NER, entity, weight, source, now, task, sig, event.patient_id)
        for entity in dict.fromkeys(ner_signature(t) for t in targets)  # type: ignore[arg-type]
        if cfg.propagation_min_length <= len(entity) <= cfg.propagation_max_length
    ]
