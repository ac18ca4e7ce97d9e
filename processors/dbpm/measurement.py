"""DBPM measurement: gate selectivity (lift with its confidence interval) and channel population.

The paper measures a gate by what it tags, never by what it removes (§4.9, DOWNGRADE-first): a
candidate is *tagged* when the gate answered DOWNGRADE or BLOCK (Table 10 collapses the two), and the
gate's selectivity is the lift of Eq. (10),

    lift = P(tag | verifier = FAIL) / P(tag | verifier = PASS),

with a 95% confidence interval from the delta-method variance of the log of a risk ratio (§6.3)

    Var[log lift] = (1 - p_F) / (n_F p_F) + (1 - p_P) / (n_P p_P),

where ``p_F``, ``p_P`` are the two tag rates and ``n_F``, ``n_P`` the numbers of FAIL and PASS pairs.
On the paper's released held-out counts (FAIL 1,392 tagged of 3,868; PASS 6,101 tagged of 31,135)
this gives 1.84 [1.75, 1.93]; a unit test pins that.

Choices recorded here because the sources leave them open:

* **Which verdicts count.** Only verifier verdicts (source ``verifier_mmed``) measure a gate: the lift
  asks how the gate's tags line up with the verifier's decisions. Rule-based (ontology) and cross-task
  events are evidence for the memory, not verifier decisions, and are not counted.
* **FAIL and PASS.** ``hard_fail`` is FAIL; ``success`` is PASS; ``soft_downgrade`` is PASS. The
  replay contract's three verdicts map onto the paper's verifier spaces (§3.1: PASS/FAIL, and
  PASS_STRONG/PASS_WEAK/FAIL on RE), where the weak middle grade is an acceptance with lowered
  confidence (Appendix A.2: ambiguous RE outputs default to PASS_WEAK), not a rejection.
* **Category.** NER and QA cells are keyed by the candidate's category (QA lower-cased and stripped,
  empty -> ``other``, as in the QA signature); RE cells by the ``HEAD_TYPE|TAIL_TYPE`` pair, upper-cased:
  relation labels are an open vocabulary (§6.1) and would scatter the counters.
* **Degenerate lifts are typed, never an exception.** No pairs on a side, or no tags on either side,
  is :attr:`LiftStatus.UNDEFINED` (Table 8's "undefined"); tags on FAIL only is
  :attr:`LiftStatus.INFINITE`; tags on PASS only is :attr:`LiftStatus.ZERO` (lift 0, Table 8's
  fallback rows). None of these has a confidence interval (log 0 and log inf are not finite).

Channel population (§7.3 (i)): a blocklist can be configured and still hold nothing that ever
blocks, as the verifier-fed RE channel did at production scale (§6.1: 785,797 rejections, zero
patterns). :class:`PopulationReport` makes that visible: per task, the fail events the channel
consumed, the patterns it holds, how many clear the BLOCK threshold, how many sit in the DOWNGRADE
band and the whitelist size. A channel that consumed fail events but holds no BLOCK-clearing pattern
is :attr:`ChannelStatus.INERT` and the rendering flags it. This module defines the structure, its
merge and its rendering; :func:`channel_population` fills it from the engine's snapshot (the replay
contract's state document) and the engine's thresholds, with the fail-event counts the caller kept
(the engine's state does not count consumed events); :func:`memory_population` fills the same structure
from a live memory without scanning it (a running worker's metrics).

All values are frozen dataclasses that serialise to plain JSON (``to_json`` / ``from_json``) and
merge by addition, so counters kept per partition combine into the totals. Merging population
reports adds pattern counts, which is exact when partitions own disjoint signatures (the memory is
keyed by signature); the ``as_of`` of a merge is the later one.

Size: both halves answer one question, what a gate and its memory did, with the same conventions
(verifier verdicts only, the categories above, frozen values that serialise to JSON and merge by
addition), and the demo's report and checks and the workers' metrics read both, so they stay in one
module.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from statistics import NormalDist
from typing import Any

from processors.dbpm.config import HARD_FAIL, QA, RE, SOFT_DOWNGRADE, SUCCESS, DBPMConfig
from processors.dbpm.events import PAYLOAD_FIELDS, format_time
from processors.dbpm.gates import BLOCK, DOWNGRADE
from processors.dbpm.memory import Memory
from processors.dbpm.signatures import qa_category

VERIFIER_SOURCE = "verifier_mmed"
"""The only verdict source that measures a gate (module docstring)."""

TAGGING_DECISIONS: frozenset[str] = frozenset({DOWNGRADE, BLOCK})
"""Gate decisions that count as a tag (Table 10: DOWNGRADE collapsed with BLOCK)."""


class VerdictOutcome(StrEnum):
    """The verifier's decision on a candidate, as the lift reads it."""

    FAIL = "FAIL"
    PASS = "PASS"


_VERDICT_OUTCOMES: Mapping[str, VerdictOutcome] = {
    HARD_FAIL: VerdictOutcome.FAIL,
    SOFT_DOWNGRADE: VerdictOutcome.PASS,
    SUCCESS: VerdictOutcome.PASS,
}


def verdict_outcome(verdict: str, source: str) -> VerdictOutcome | None:
    """Map a replay-stream verdict to FAIL/PASS, or ``None`` when it does not measure a gate.

    Args:
        verdict: ``hard_fail`` | ``soft_downgrade`` | ``success``.
        source: the verdict's signal source; only ``verifier_mmed`` counts.

    Returns:
        The outcome, or ``None`` for a non-verifier source.

    Raises:
        ValueError: for a verdict outside the replay contract.
    """
    if verdict not in _VERDICT_OUTCOMES:
        raise ValueError(f"unknown verdict {verdict!r}: expected one of {sorted(_VERDICT_OUTCOMES)}")
    return _VERDICT_OUTCOMES[verdict] if source == VERIFIER_SOURCE else None


def is_tagged(decision: str) -> bool:
    """Whether a gate decision (``ALLOW`` | ``DOWNGRADE`` | ``BLOCK``) tags its candidate."""
    return decision in TAGGING_DECISIONS


def measurement_category(task: str, payload: Mapping[str, Any]) -> str:
    """The category cell a candidate is counted in (module docstring, "Category").

    Args:
        task: ``ner`` | ``re`` | ``qa``.
        payload: the candidate's replay-stream payload.

    Returns:
        NER: the category as given; QA: the category lower-cased and stripped (``other`` if empty);
        RE: ``HEAD_TYPE|TAIL_TYPE``, each part stripped and upper-cased.
    """
    if task == RE:
        return f"{str(payload['head_type']).strip().upper()}|{str(payload['tail_type']).strip().upper()}"
    if task == QA:
        return qa_category(str(payload.get("category", "")))
    return str(payload["category"])


def pairing_key(task: str, patient_id: str, payload: Mapping[str, Any]) -> tuple[str, ...]:
    """The key pairing a gate event with the verdict on the same candidate.

    Replay-stream verdicts carry no candidate id, so a verdict belongs to the pending gate event of
    the same task and patient whose contract payload fields (the ``payload`` list of the replay
    contract for the task, extras such as ``error_class`` or ``ner_categories`` left out) are equal.
    An open task (none of ``ner``, ``re``, ``qa``) uses all its payload fields.

    Args:
        task: the event's task.
        patient_id: the event's patient.
        payload: the event's payload.

    Returns:
        A hashable key, equal for a gate event and its verdict.
    """
    fields = PAYLOAD_FIELDS.get(task) or tuple(sorted(payload))
    return (task, patient_id, *(str(payload.get(name, "")) for name in fields))


class LiftStatus(StrEnum):
    """Whether a lift is a finite positive number, or which degenerate case it is."""

    FINITE = "finite"
    ZERO = "zero"
    INFINITE = "infinite"
    UNDEFINED = "undefined"


@dataclass(frozen=True, slots=True)
class Lift:
    """A selectivity lift (Eq. 10) and its delta-method confidence interval.

    Attributes:
        status: which case applies; ``value`` and the interval are set only where they exist.
        value: the lift (``FINITE``, or 0.0 for ``ZERO``); ``None`` when infinite or undefined.
        ci_low: lower bound of the interval (``FINITE`` only).
        ci_high: upper bound of the interval (``FINITE`` only).
        p_value: two-sided p-value of H0 lift = 1 on the log scale (``FINITE`` only).
        p_tag_fail: tag rate among FAIL pairs, ``None`` without FAIL pairs.
        p_tag_pass: tag rate among PASS pairs, ``None`` without PASS pairs.
        confidence: the interval's confidence level.
        reason: why the lift is degenerate (empty for ``FINITE``).
    """

    status: LiftStatus
    value: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_tag_fail: float | None
    p_tag_pass: float | None
    confidence: float
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON object of every field (no infinities: an infinite lift has ``value`` null)."""
        return {
            "status": self.status.value,
            "value": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_value": self.p_value,
            "p_tag_fail": self.p_tag_fail,
            "p_tag_pass": self.p_tag_pass,
            "confidence": self.confidence,
            "reason": self.reason,
        }

    def __str__(self) -> str:
        if self.status is LiftStatus.FINITE:
            return f"{self.value:.2f} [{self.ci_low:.2f}, {self.ci_high:.2f}]"
        if self.status is LiftStatus.ZERO:
            return f"0.00 ({self.reason})"
        if self.status is LiftStatus.INFINITE:
            return f"inf ({self.reason})"
        return f"undefined ({self.reason})"


_COUNT_FIELDS = ("fail_tagged", "fail_total", "pass_tagged", "pass_total")


@dataclass(frozen=True, slots=True)
class TagCounts:
    """Tagged and total pairs on each verifier side (one row pair of Table 10)."""

    fail_tagged: int = 0
    fail_total: int = 0
    pass_tagged: int = 0
    pass_total: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.fail_tagged <= self.fail_total and 0 <= self.pass_tagged <= self.pass_total):
            raise ValueError(f"tagged counts must lie in [0, total]: {self}")

    def record(self, outcome: VerdictOutcome, tagged: bool, pairs: int = 1) -> TagCounts:
        """Return the counts with ``pairs`` more pairs of the given outcome, all tagged or all not."""
        if pairs < 0:
            raise ValueError(f"pairs must be >= 0, got {pairs}")
        tags = pairs if tagged else 0
        if outcome is VerdictOutcome.FAIL:
            return replace(self, fail_tagged=self.fail_tagged + tags, fail_total=self.fail_total + pairs)
        return replace(self, pass_tagged=self.pass_tagged + tags, pass_total=self.pass_total + pairs)

    def merge(self, other: TagCounts) -> TagCounts:
        """Add two sets of counts (e.g. from two partitions)."""
        return TagCounts(
            self.fail_tagged + other.fail_tagged,
            self.fail_total + other.fail_total,
            self.pass_tagged + other.pass_tagged,
            self.pass_total + other.pass_total,
        )

    def lift(self, confidence: float = 0.95) -> Lift:
        """Compute the lift of Eq. (10) with its delta-method interval (module docstring).

        Args:
            confidence: two-sided confidence level of the interval, in (0, 1).

        Returns:
            The lift; degenerate cases are reported in its ``status``, never raised.
        """
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
        p_fail = self.fail_tagged / self.fail_total if self.fail_total else None
        p_pass = self.pass_tagged / self.pass_total if self.pass_total else None

        def degenerate(status: LiftStatus, reason: str, value: float | None = None) -> Lift:
            return Lift(status, value, None, None, None, p_fail, p_pass, confidence, reason)

        if p_fail is None or p_pass is None:
            side = "FAIL" if p_fail is None else "PASS"
            return degenerate(LiftStatus.UNDEFINED, f"no {side} pairs")
        if p_fail == 0.0 and p_pass == 0.0:
            return degenerate(LiftStatus.UNDEFINED, "no pair tagged")
        if p_pass == 0.0:
            return degenerate(LiftStatus.INFINITE, "no PASS pair tagged")
        if p_fail == 0.0:
            return degenerate(LiftStatus.ZERO, "no FAIL pair tagged", 0.0)

        log_lift = math.log(p_fail / p_pass)
        variance = (1.0 - p_fail) / (self.fail_total * p_fail) + (1.0 - p_pass) / (self.pass_total * p_pass)
        std_err = math.sqrt(variance)
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        # The variance is zero only when every pair on both sides is tagged: lift exactly 1, interval a
        # point, and no evidence against H0.
        p_value = math.erfc(abs(log_lift) / std_err / math.sqrt(2.0)) if std_err else 1.0
        return Lift(
            LiftStatus.FINITE,
            math.exp(log_lift),
            math.exp(log_lift - z * std_err),
            math.exp(log_lift + z * std_err),
            p_value,
            p_fail,
            p_pass,
            confidence,
        )

    def to_json(self) -> dict[str, int]:
        """A JSON object of the four counts."""
        return {name: getattr(self, name) for name in _COUNT_FIELDS}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TagCounts:
        """Inverse of :meth:`to_json`."""
        return cls(**{name: int(data[name]) for name in _COUNT_FIELDS})


@dataclass(frozen=True, slots=True)
class SelectivityCell:
    """The counts of one (task, category) cell."""

    task: str
    category: str
    counts: TagCounts


@dataclass(frozen=True, slots=True)
class SelectivityCounts:
    """Tag counters per task and category; immutable, merge-able, JSON-serialisable.

    ``cells`` is sorted by (task, category) with unique keys; build values with :meth:`record`,
    :meth:`merge` or :meth:`from_cells` rather than by hand.
    """

    cells: tuple[SelectivityCell, ...] = ()

    def __post_init__(self) -> None:
        keys = [(c.task, c.category) for c in self.cells]
        if keys != sorted(set(keys)):
            raise ValueError("cells must be sorted by (task, category) with unique keys")

    @classmethod
    def from_cells(cls, cells: Iterable[SelectivityCell]) -> SelectivityCounts:
        """Build counters from cells in any order, adding cells that share a key."""
        merged: dict[tuple[str, str], TagCounts] = {}
        for cell in cells:
            key = (cell.task, cell.category)
            merged[key] = merged.get(key, TagCounts()).merge(cell.counts)
        return cls(tuple(SelectivityCell(t, c, merged[(t, c)]) for t, c in sorted(merged)))

    def record(self, task: str, category: str, outcome: VerdictOutcome, tagged: bool) -> SelectivityCounts:
        """Return the counters with one more observed pair."""
        one = SelectivityCell(task, category, TagCounts().record(outcome, tagged))
        return self.merge(SelectivityCounts((one,)))

    def merge(self, other: SelectivityCounts) -> SelectivityCounts:
        """Add two sets of counters cell by cell."""
        return SelectivityCounts.from_cells((*self.cells, *other.cells))

    def cell(self, task: str, category: str) -> TagCounts:
        """The counts of one cell (zero counts when never observed)."""
        return next((c.counts for c in self.cells if (c.task, c.category) == (task, category)), TagCounts())

    def task_total(self, task: str) -> TagCounts:
        """The counts of all categories of one task."""
        total = TagCounts()
        for c in self.cells:
            if c.task == task:
                total = total.merge(c.counts)
        return total

    def tasks(self) -> tuple[str, ...]:
        """The tasks observed, sorted."""
        return tuple(sorted({c.task for c in self.cells}))

    def to_json(self) -> list[dict[str, Any]]:
        """A JSON array of ``{"task", "category", counts...}`` objects."""
        return [{"task": c.task, "category": c.category, **c.counts.to_json()} for c in self.cells]

    @classmethod
    def from_json(cls, data: Iterable[Mapping[str, Any]]) -> SelectivityCounts:
        """Inverse of :meth:`to_json`."""
        return cls.from_cells(SelectivityCell(d["task"], d["category"], TagCounts.from_json(d)) for d in data)

    def render(self) -> str:
        """A plain-text table: one row per cell and one total row per task, with lift and interval."""
        header = f"{'task':<5} {'category':<28} {'FAIL tag/n':>14} {'PASS tag/n':>16}  lift [95% CI]"
        lines = [header]
        for task in self.tasks():
            rows = [(c.category, c.counts) for c in self.cells if c.task == task]
            rows.append(("(all)", self.task_total(task)))
            for category, counts in rows:
                lines.append(
                    f"{task:<5} {category:<28} {counts.fail_tagged:>6}/{counts.fail_total:<7} "
                    f"{counts.pass_tagged:>7}/{counts.pass_total:<8}  {counts.lift()}"
                )
        return "\n".join(lines)


@dataclass
class SelectivityTracker:
    """Pairs each gate decision with the verdict on the same candidate, in stream order.

    Feed it the stream's events in processing order: :meth:`gate` for a gate event with the decision it
    got, :meth:`verdict` for a verdict event. A verdict is counted against the pending gate decision of
    the same candidate (:func:`pairing_key`); verdicts with no pending gate (rule-based or propagated
    sources, or a live stream that starts mid-way) are not pairs and only count as fail events. It is an
    accumulator: deterministic, no I/O, and its result merges across partitions like the counts it yields.
    """

    pending: dict[tuple[str, ...], bool] = field(default_factory=dict)
    observed: dict[tuple[str, str, VerdictOutcome, bool], int] = field(default_factory=dict)
    fail_events: dict[str, int] = field(default_factory=dict)
    max_pending: int | None = None
    """Bound on gate decisions awaiting their verdict (None: unbounded, for finite replays). A live
    worker MUST bound it: BLOCKed candidates are never verified, so their entries would never leave."""
    expired: int = 0
    """Gate decisions dropped unpaired, oldest first, to keep ``pending`` within ``max_pending``."""

    def gate(self, task: str, patient_id: str, payload: Mapping[str, Any], decision: str) -> None:
        """Record the decision a gate event got; its verdict, when it comes, is paired with it."""
        key = pairing_key(task, patient_id, payload)
        self.pending.pop(key, None)  # a repeated candidate is the newest, not the oldest
        self.pending[key] = is_tagged(decision)
        if self.max_pending is not None and len(self.pending) > self.max_pending:
            del self.pending[next(iter(self.pending))]
            self.expired += 1

    def verdict(
        self, task: str, patient_id: str, payload: Mapping[str, Any], verdict: str, source: str
    ) -> None:
        """Record a verdict event; pair it with its candidate's pending gate decision, if any."""
        if verdict != SUCCESS:
            self.fail_events[task] = self.fail_events.get(task, 0) + 1
        # No decision pending (a process that only writes the memory decides none): nothing to pair.
        tagged = self.pending.pop(pairing_key(task, patient_id, payload), None) if self.pending else None
        outcome = verdict_outcome(verdict, source)
        if tagged is not None and outcome is not None:
            cell = (task, measurement_category(task, payload), outcome, tagged)
            self.observed[cell] = self.observed.get(cell, 0) + 1

    def counts(self) -> SelectivityCounts:
        """The paired tag-versus-verdict counts so far."""
        return SelectivityCounts.from_cells(
            SelectivityCell(task, category, TagCounts().record(outcome, tagged, pairs))
            for (task, category, outcome, tagged), pairs in self.observed.items()
        )


class ChannelStatus(StrEnum):
    """Whether a task's blocklist channel can block anything (§7.3 (i))."""

    POPULATED = "populated"
    """At least one pattern clears the BLOCK threshold."""
    INERT = "inert"
    """Fail events were consumed but no pattern clears the BLOCK threshold (the §6.1 failure)."""
    IDLE = "idle"
    """No fail event was consumed yet, so emptiness says nothing."""


@dataclass(frozen=True, slots=True)
class ChannelPopulation:
    """The population of one task's memory channel at a point in event time.

    Attributes:
        task: ``ner`` | ``re`` | ``qa``.
        fail_events: blocklist-path verdict events (hard_fail, soft_downgrade) the channel consumed.
        patterns: blocklist signatures held.
        block_eligible: patterns that clear the BLOCK clause of Eq. (4) (count >= n_min and severity
            above the block threshold, with decay applied up to ``as_of``).
        downgrade_band: patterns whose severity lies in the DOWNGRADE band of Eq. (4).
        whitelist: whitelisted signatures held.
    """

    task: str
    fail_events: int = 0
    patterns: int = 0
    block_eligible: int = 0
    downgrade_band: int = 0
    whitelist: int = 0

    def __post_init__(self) -> None:
        counts = (self.fail_events, self.patterns, self.block_eligible, self.downgrade_band, self.whitelist)
        if min(counts) < 0 or self.block_eligible + self.downgrade_band > self.patterns:
            raise ValueError(f"inconsistent channel population: {self}")

    @property
    def status(self) -> ChannelStatus:
        """Populated, inert or idle (see :class:`ChannelStatus`)."""
        if self.block_eligible:
            return ChannelStatus.POPULATED
        return ChannelStatus.INERT if self.fail_events else ChannelStatus.IDLE

    def merge(self, other: ChannelPopulation) -> ChannelPopulation:
        """Add the counts of the same task from another partition."""
        if other.task != self.task:
            raise ValueError(f"cannot merge channel {other.task!r} into {self.task!r}")
        return ChannelPopulation(
            self.task,
            self.fail_events + other.fail_events,
            self.patterns + other.patterns,
            self.block_eligible + other.block_eligible,
            self.downgrade_band + other.downgrade_band,
            self.whitelist + other.whitelist,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the counts and the derived status."""
        return {
            "task": self.task,
            "fail_events": self.fail_events,
            "patterns": self.patterns,
            "block_eligible": self.block_eligible,
            "downgrade_band": self.downgrade_band,
            "whitelist": self.whitelist,
            "status": self.status.value,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChannelPopulation:
        """Inverse of :meth:`to_json` (the status is derived, not read)."""
        return cls(
            str(data["task"]),
            int(data["fail_events"]),
            int(data["patterns"]),
            int(data["block_eligible"]),
            int(data["downgrade_band"]),
            int(data["whitelist"]),
        )


@dataclass(frozen=True, slots=True)
class PopulationReport:
    """Channel population of every gated task at ``as_of`` (ISO 8601 UTC event time, or ``None``)."""

    as_of: str | None = None
    channels: tuple[ChannelPopulation, ...] = field(default=())

    def __post_init__(self) -> None:
        tasks = [c.task for c in self.channels]
        if tasks != sorted(set(tasks)):
            raise ValueError("channels must be sorted by task with one entry per task")

    @classmethod
    def of(cls, as_of: str | None, channels: Iterable[ChannelPopulation]) -> PopulationReport:
        """Build a report from channels in any order, merging channels of the same task."""
        merged: dict[str, ChannelPopulation] = {}
        for channel in channels:
            merged[channel.task] = merged[channel.task].merge(channel) if channel.task in merged else channel
        return cls(as_of, tuple(merged[t] for t in sorted(merged)))

    def merge(self, other: PopulationReport) -> PopulationReport:
        """Combine reports of disjoint partitions: counts add, ``as_of`` is the later instant."""
        stamps = [s for s in (self.as_of, other.as_of) if s is not None]
        # ISO 8601 UTC stamps in the contract's one format order lexicographically.
        return PopulationReport.of(max(stamps, default=None), (*self.channels, *other.channels))

    def inert_channels(self) -> tuple[str, ...]:
        """Tasks whose channel consumed fail events yet can block nothing."""
        return tuple(c.task for c in self.channels if c.status is ChannelStatus.INERT)

    def to_json(self) -> dict[str, Any]:
        """A JSON object: ``as_of`` and one object per channel."""
        return {"as_of": self.as_of, "channels": [c.to_json() for c in self.channels]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PopulationReport:
        """Inverse of :meth:`to_json`."""
        return cls.of(data.get("as_of"), (ChannelPopulation.from_json(c) for c in data["channels"]))

    def render(self) -> str:
        """A plain-text table, followed by one warning line per inert channel."""
        lines = [
            f"channel population as of {self.as_of or '-'}",
            f"{'task':<5} {'fail events':>12} {'patterns':>9} {'>=BLOCK':>8} {'DOWNGRADE':>10} "
            f"{'whitelist':>10}  status",
        ]
        for c in self.channels:
            lines.append(
                f"{c.task:<5} {c.fail_events:>12} {c.patterns:>9} {c.block_eligible:>8} "
                f"{c.downgrade_band:>10} {c.whitelist:>10}  {c.status.value}"
            )
        for c in self.channels:
            if c.status is ChannelStatus.INERT:
                lines.append(
                    f"WARNING: the {c.task} channel consumed {c.fail_events} fail events but holds no "
                    "pattern that clears the BLOCK threshold: its blocklist is configured but cannot block "
                    "(paper §6.1)."
                )
        return "\n".join(lines)


def channel_population(
    snapshot: Mapping[str, Any], config: DBPMConfig, fail_events: Mapping[str, int]
) -> PopulationReport:
    """The channel population of an engine snapshot (the replay contract's state document).

    Args:
        snapshot: ``DBPMEngine.snapshot`` output (severities effective at its ``as_of``).
        config: the engine's configuration (thresholds and minimum support of Eq. 4).
        fail_events: blocklist-path verdict events (hard_fail, soft_downgrade) seen per task.

    Returns:
        One :class:`ChannelPopulation` per configured task.
    """
    channels = []
    for task in config.tasks:
        patterns = snapshot["blocklist"].get(task, [])
        blocking, band = _zones(config, task, ((p["count"], p["severity"]) for p in patterns))
        whitelist = len(snapshot["whitelist"].get(task, []))
        channels.append(
            ChannelPopulation(task, fail_events.get(task, 0), len(patterns), blocking, band, whitelist)
        )
    return PopulationReport.of(snapshot["as_of"], channels)


def _zones(config: DBPMConfig, task: str, patterns: Iterable[tuple[int, float]]) -> tuple[int, int]:
    """(BLOCK-clearing, DOWNGRADE-band) counts of ``(count, effective severity)`` pairs (Eq. 4)."""
    params = config.tasks[task]
    block, down = params.block_threshold, config.downgrade_threshold
    blocking = band = 0
    for count, severity in patterns:
        if count >= params.min_support and severity > block:
            blocking += 1
        elif down < severity <= block:
            band += 1
    return blocking, band


def memory_population(memory: Memory, fail_events: Mapping[str, int]) -> PopulationReport:
    """The channel population of a live memory at its own clock, without scanning it.

    Pattern and whitelist sizes are the memory's incremental counts; the BLOCK and DOWNGRADE zones walk
    the eviction index from the DOWNGRADE threshold up (:meth:`Memory.above`), so the cost is the patterns
    above that threshold, not the memory. Equals :func:`channel_population` of the memory's snapshot at
    the same ``as_of``.

    Args:
        memory: the memory (one partition, or the merged view of all of them).
        fail_events: blocklist-path verdict events seen per task (the caller counts them).
    """
    as_of, _ = memory.clock()
    config = memory.config
    channels = []
    for task in config.tasks:
        if as_of is None:
            blocking = band = 0
        else:
            above = memory.above(task, config.downgrade_threshold, as_of)
            blocking, band = _zones(
                config, task, ((p.count, memory.severity(task, p, as_of)) for _, p in above)
            )
        channels.append(ChannelPopulation(
            task, fail_events.get(task, 0), memory.population("B", task), blocking, band,
            memory.population("W", task),
        ))  # fmt: skip
    return PopulationReport.of(None if as_of is None else format_time(as_of), channels)
