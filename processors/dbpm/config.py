"""DBPM parameters and flags: one frozen, typed configuration object with the paper's numbers.

Every default is the deployed value of the DBPM paper (arXiv 2607.00870) and cites where it is
stated: Table 3 (learning rates), Table 4 (source weights), §4.2 and Table 13/14 (thresholds, caps,
half-lives, in-run decay, severity-zone guard, propagation cap, multiplier), Table 12 (flags),
§4.8 / Eq. 7-9 and Appendix A.1 (QA gate thresholds).

Choices recorded here (the paper is silent or ambiguous):

* **Task set.** ``ner``, ``re`` and ``qa`` are configured with the paper's values. The set is open:
  add a :class:`TaskParams` under another name (``summary``, ``medications``, ``temporal_events``)
  and the update operator, maintenance and the generic three-tier gate (the NER gate's logic) work on
  it unchanged. Task names MUST NOT contain a NUL byte (they are part of store keys).
* **Maintenance clock.** Pruning, caps and the cross-task counter decay run at every boundary of a
  fixed grid of event time (``maintenance_interval_s``, default five seconds), not every N events, so the
  result depends only on the stream, never on how often state is saved.
* **Cross-task counter decay** (§4.4 / §4.6 say only that κ "decays at each prune"): κ loses one unit
  at every maintenance boundary crossed since it was last raised, never below zero.
* **Whitelist path.** A success raises confidence by the task's success learning rate (Table 3,
  "per-task success rate") toward the 0.99 ceiling, from 0.90 on first sighting; the source weight
  does not scale it (the paper's whitelist path names no weight).
* **Ontology tag-only.** With ``ontology_tag_only`` a relation gate BLOCK on a pattern that carries any
  rule-based (ontology) evidence is emitted as DOWNGRADE, so the ontology channel tags and never drops.
* **Flag interplay.** Gate results are post-processed in one order: QA hard-block (DOWNGRADE -> BLOCK
  on the QA gate), then three-tier OFF (DOWNGRADE -> ALLOW), then ontology tag-only and
  DOWNGRADE-first (BLOCK -> DOWNGRADE). The master switch short-circuits everything: ALLOW, no writes.
* **Uncertainty OFF** (Table 12, "ambiguous QAR verdicts treated as success"): a QA ``soft_downgrade``
  verdict, the stream's ambiguous QA verdict, is applied as a ``success``.
* **Cross-task OFF** disables all three directions of §4.4: no RE/QA -> NER propagation, no new
  preemptions and no preemption check in the relation gate.
* **QA signal source** (§4.8, §6.3, Table 11): the QA gate reads one of the five signals the paper
  tested; the fifth, NER coverage with its fail-rate x difficulty fallback, is the default and the
  deployed design. The other four are selectable for their measurement (``clingate bench ablation
  --qa-sources``); :mod:`.gates` states each rule. The fail-mass threshold is this implementation's
  (the paper names none): more rejection mass than one saturated pattern holds.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

HARD_FAIL = "hard_fail"
SOFT_DOWNGRADE = "soft_downgrade"
SUCCESS = "success"
VERDICTS = (HARD_FAIL, SOFT_DOWNGRADE, SUCCESS)

NER = "ner"
RE = "re"
QA = "qa"

RULE_BASED = "rule_based"
CROSS_TASK_RE = "cross_task_re"
CROSS_TASK_QA = "cross_task_qa"

OPERATOR_PIN = "operator_pin"
"""The source of an operator's pin (:mod:`processors.dbpm.pins`): not a Table 4 source, never weighed."""
PIN_ALLOW = "ALLOW"
PIN_BLOCK = "BLOCK"
UNPIN = "UNPIN"
PIN_ACTIONS = (PIN_ALLOW, PIN_BLOCK, UNPIN)
PIN_LABELS: Mapping[str, str] = MappingProxyType(
    {PIN_BLOCK: HARD_FAIL, PIN_ALLOW: SUCCESS, UNPIN: SOFT_DOWNGRADE}
)
"""The verdict label a pin record carries: its direction, for a reader of the verdict topic that does not
know pins (an UNPIN points neither way)."""


def _frozen(mapping: Mapping) -> MappingProxyType:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class TaskParams:
    """Per-task constants of the update operator, decay, gate and storage policy.

    Attributes:
        eta_hard_fail: learning rate of a hard_fail (Table 3).
        eta_soft_downgrade: learning rate of a soft_downgrade (Table 3).
        eta_success: whitelist confidence increment of a success (Table 3, "success" row).
        half_life_days: wall-clock half-life h_t of Eq. 5 (§4.2, Table 14).
        block_threshold: θ_block of Eq. 4 (Table 13).
        min_support: n_min of Eq. 4, observations needed to BLOCK (Table 13).
        cap: storage cap C_t of §4.6 (Table 13); None = no cap.
    """

    eta_hard_fail: float
    eta_soft_downgrade: float
    eta_success: float
    half_life_days: float
    block_threshold: float
    min_support: int
    cap: int | None


@dataclass(frozen=True, slots=True)
class Flags:
    """The ablation flags of Table 12 plus the two channel modes of §4.7 / §4.9.

    Attributes:
        cross_task: BPM_ENABLE_CROSS_TASK; OFF: no pattern-level cross-task propagation (§4.4).
        three_tier: BPM_ENABLE_THREE_TIER; OFF: the gate collapses to BLOCK / ALLOW.
        uncertainty: BPM_ENABLE_UNCERTAINTY; OFF: ambiguous QA verdicts are treated as success.
        source_weights: BPM_ENABLE_SOURCE_WEIGHTS; OFF: every source weight is 1.
        ontology_filter: the Ontology-Violation Filter (§4.7; BPM_DISABLE_M3 inverted); OFF:
            rule-based RE verdicts are not recorded.
        ontology_tag_only: keep the ontology channel tag-only (DOWNGRADE-first, §4.9 / A.6).
        qa_hard_block: M1_QA_GATE_HARD_BLOCK; ON: the QA gate's DOWNGRADE becomes BLOCK.
        disabled: BPM_DISABLE master switch; ON: every gate ALLOWs and nothing is recorded.
        downgrade_first: the §4.9 measurement mode; ON: no gate emits BLOCK, it tags DOWNGRADE instead.
        maintenance: pruning, caps and cross-task counter decay (§4.6); OFF for implementation
            comparison (``clingate replay --no-maintenance``).
    """

    cross_task: bool = True
    three_tier: bool = True
    uncertainty: bool = True
    source_weights: bool = True
    ontology_filter: bool = True
    ontology_tag_only: bool = False
    qa_hard_block: bool = False
    disabled: bool = False
    downgrade_first: bool = False
    maintenance: bool = True


#: Table 3 (learning rates), §4.2 (half-lives), Table 13 (thresholds, support, caps).
DEFAULT_TASKS: Mapping[str, TaskParams] = _frozen(
    {
        NER: TaskParams(0.15, 0.05, 0.03, 5.0, 0.65, 3, 200),
        RE: TaskParams(0.20, 0.08, 0.05, 10.0, 0.70, 2, 300),
        QA: TaskParams(0.15, 0.05, 0.04, 10.0, 0.60, 3, 150),
    }
)

QA_SIGNAL_FAIL_MASS = "fail_mass"
QA_SIGNAL_PARSE_FAILURE = "parse_failure"
QA_SIGNAL_FAIL_RATE = "fail_rate"
QA_SIGNAL_DIFFICULTY = "difficulty"
QA_SIGNAL_NER_COVERAGE = "ner_coverage"
QA_SIGNALS: tuple[str, ...] = (
    QA_SIGNAL_FAIL_MASS,
    QA_SIGNAL_PARSE_FAILURE,
    QA_SIGNAL_FAIL_RATE,
    QA_SIGNAL_DIFFICULTY,
    QA_SIGNAL_NER_COVERAGE,
)
"""The five QA gate signal sources of §4.8, in the order the paper tried them (Table 11's rows)."""

#: Table 4. ``verifier_self`` is reserved and inactive in the paper; its weight is kept for completeness.
DEFAULT_SOURCE_WEIGHTS: Mapping[str, float] = _frozen(
    {
        "verifier_mmed": 1.0,
        RULE_BASED: 0.5,
        "cross_task_ner": 0.4,
        CROSS_TASK_RE: 0.3,
        CROSS_TASK_QA: 0.2,
        "cross_task": 0.5,
        "verifier_self": 0.7,
    }
)

#: §4.8 / Eq. 9: the nine QA categories with a matching NER bucket, mapped to that bucket (compared
#: case-insensitively with the patient's accepted NER categories). adverse_event and
#: outcome_mortality have none and fall back to Eq. 7 x Eq. 8.
DEFAULT_QA_NER_BUCKETS: Mapping[str, str] = _frozen(
    {
        "diagnosis": "diagnosis",
        "treatment": "treatment",
        "symptoms": "symptoms",
        "tests": "tests",
        "history": "history",
        "observation": "observation",
        "risk_factor": "risk_factor",
        "outcome_clinicalstatus": "outcome_clinicalstatus",
        "outcome_disposition": "outcome_disposition",
    }
)


@dataclass(frozen=True, slots=True)
class DBPMConfig:
    """Every constant and flag of the DBPM engine (defaults: the paper's deployed values).

    Attributes:
        flags: the ablation flags (Table 12).
        tasks: per-task parameters (Table 3, 13, 14).
        source_weights: w_s of Table 4; unknown sources weigh ``unknown_source_weight``.
        unknown_source_weight: weight of a source not in the table (replay contract: 1.0).
        initial_severity_hard_fail: σ0(hard_fail) = 0.50 (§4.2), scaled by w_s.
        initial_severity_soft_downgrade: σ0(soft_downgrade) = 0.25 (§4.2), scaled by w_s.
        rho_hard_fail: in-run decay ρ of a hard_fail = 0.99 (§4.2, Eq. 3).
        rho_soft_downgrade: in-run decay ρ of a soft_downgrade = 0.985 (§4.2, Eq. 3).
        whitelist_initial: whitelist confidence on first success = 0.90 (§4.3).
        whitelist_ceiling: whitelist confidence ceiling = 0.99 (§4.3).
        downgrade_threshold: θ_down of Eq. 4 = 0.40, all tasks (Table 13).
        downgrade_multiplier: confidence multiplier of a DOWNGRADE = 0.70 (§4.5, Table 13).
        severity_zone_guard: cross-task severity ceiling = 0.55 (§4.4, Table 13).
        propagation_cap: cross-task hits ceiling κ = 3 (§4.4, Table 13).
        propagation_increment_factor: the "increment halved" of §4.4 (Algorithm 1 line 43) = 0.5.
        propagation_min_length: RE -> NER entity strings need length > 4 (Algorithm 1 line 23).
        propagation_max_length: ... and length < 60 (Algorithm 1 line 23).
        preempt_min_length: NER -> RE preemption takes entity strings longer than 4 characters.
        prune_floor: severity below which a pattern is pruned = 0.01 (§4.6).
        maintenance_interval_s: spacing of the event-time maintenance grid (this implementation): five
            seconds. The paper's workers pruned and capped on every save, after every 200 events each,
            about one merge per 12.5 events across its 16 workers (Appendix A.7); between two
            boundaries a channel can outgrow its cap by what arrives in five seconds of event time,
            which is wall-clock time live.
        cap_partitions: how many partitions the memory is split over, each maintaining its own share
            of every cap, ``floor(cap / cap_partitions)`` (at least 1 of a cap above 0), so the whole
            memory stays within the paper's caps (§4.6); 1 in process. A partitioned runtime sets its
            partition count.
        verdict_dedupe_horizon_s: how long, in event time, the verdict ledger remembers a
            candidate's verdict to ignore its duplicates, and a candidate a gate decided so that
            its verdict is known (:mod:`.ledger`; this implementation): 30 days, the retention of
            ``clingate.dbpm.verdicts``.
        whitelist_retention_s: a whitelist entry not confirmed again for this long (event time) is
            deleted by maintenance (:mod:`.retention`; this implementation): 365 days.
        preempt_retention_s: likewise for an entity of the preemption set not preempted again: 365 days.
        patient_retention_s: a patient's counters and accepted categories in a memory partition are
            deleted when no verdict wrote them for this long: 90 days.
        qa_fail_rate_threshold: Eq. 7 threshold, M1V5_FAIL_THRESHOLD = 0.30 (A.1, development value).
        qa_difficulty_threshold: Eq. 8 threshold, M1V6_DIFFICULTY_THRESHOLD = 0.30 (A.1).
        qa_min_observations: observations a category needs before it has a fail rate (10).
        qa_ner_buckets: QA category -> NER bucket of the NER-coverage gate (Eq. 9).
        qa_signal: the signal source the QA gate reads (:data:`QA_SIGNALS`); default the fifth,
            NER coverage (§4.8), the others only for their measurement (§6.3, Table 11).
        qa_fail_mass_threshold: the category-aggregate fail mass above which the first source tags
            (this implementation: 1.0, one saturated pattern's severity; the paper gives no value).
    """

    flags: Flags = field(default_factory=Flags)
    tasks: Mapping[str, TaskParams] = field(default_factory=lambda: DEFAULT_TASKS)
    source_weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_SOURCE_WEIGHTS)
    unknown_source_weight: float = 1.0
    initial_severity_hard_fail: float = 0.50
    initial_severity_soft_downgrade: float = 0.25
    rho_hard_fail: float = 0.99
    rho_soft_downgrade: float = 0.985
    whitelist_initial: float = 0.90
    whitelist_ceiling: float = 0.99
    downgrade_threshold: float = 0.40
    downgrade_multiplier: float = 0.70
    severity_zone_guard: float = 0.55
    propagation_cap: int = 3
    propagation_increment_factor: float = 0.5
    propagation_min_length: int = 5
    propagation_max_length: int = 59
    preempt_min_length: int = 5
    prune_floor: float = 0.01
    maintenance_interval_s: float = 5.0
    cap_partitions: int = 1
    verdict_dedupe_horizon_s: float = 30 * 86400.0
    whitelist_retention_s: float = 365 * 86400.0
    preempt_retention_s: float = 365 * 86400.0
    patient_retention_s: float = 90 * 86400.0
    qa_fail_rate_threshold: float = 0.30
    qa_difficulty_threshold: float = 0.30
    qa_min_observations: int = 10
    qa_ner_buckets: Mapping[str, str] = field(default_factory=lambda: DEFAULT_QA_NER_BUCKETS)
    qa_signal: str = QA_SIGNAL_NER_COVERAGE
    qa_fail_mass_threshold: float = 1.0

    def __post_init__(self) -> None:
        # Freeze caller-supplied dicts so a config can never change under a running engine.
        for name in ("tasks", "source_weights", "qa_ner_buckets"):
            value = getattr(self, name)
            if not isinstance(value, MappingProxyType):
                object.__setattr__(self, name, _frozen(value))
        for task in self.tasks:
            if "\x00" in task or not task:
                raise ValueError(f"task name {task!r} must be non-empty and contain no NUL byte")
        if self.maintenance_interval_s <= 0:
            raise ValueError("maintenance_interval_s must be positive")
        if self.cap_partitions < 1:
            raise ValueError("cap_partitions must be at least 1")
        if self.qa_signal not in QA_SIGNALS:
            raise ValueError(f"qa_signal {self.qa_signal!r} is not one of {', '.join(QA_SIGNALS)}")
        for name in (
            "verdict_dedupe_horizon_s",
            "whitelist_retention_s",
            "preempt_retention_s",
            "patient_retention_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    def cap(self, task: str) -> int | None:
        """The storage cap of ``task`` in one memory partition (None: no cap)."""
        cap = self.tasks[task].cap
        # A partition's share is at least one pattern, unless the cap is zero.
        return None if cap is None else cap // self.cap_partitions or min(cap, 1)

    def weight(self, source: str) -> float:
        """The source weight w_s (Table 4); 1.0 for every source when source weights are OFF."""
        if not self.flags.source_weights:
            return 1.0
        return self.source_weights.get(source, self.unknown_source_weight)

    def with_flags(self, **changes: bool) -> DBPMConfig:
        """A copy of this configuration with some flags changed (e.g. ``maintenance=False``)."""
        return replace(self, flags=replace(self.flags, **changes))

    def describe(self) -> dict[str, object]:
        """Every constant and flag as JSON data, by attribute name: what :meth:`fingerprint` hashes."""
        described: dict[str, object] = {}
        for attribute in fields(self):
            value = getattr(self, attribute.name)
            if isinstance(value, Flags):
                value = _fields_of(value)
            elif attribute.name == "tasks":
                value = {task: _fields_of(params) for task, params in value.items()}
            elif isinstance(value, Mapping):
                value = dict(value)
            described[attribute.name] = value
        return described

    def fingerprint(self) -> str:
        """12 hex digits naming this configuration: equal for equal configurations, in any process, so
        two processes configured differently can be told apart by it (``clingate config --dbpm``)."""
        canonical = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _fields_of(instance: Flags | TaskParams) -> dict[str, object]:
    return {attribute.name: getattr(instance, attribute.name) for attribute in fields(instance)}
