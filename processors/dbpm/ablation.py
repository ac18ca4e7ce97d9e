"""Paired ablation measurements of the DBPM paper (§5.2, §6.4, §6.5): what one arm did, and how two
arms on the same cohort differ.

An arm is one engine configuration run over the cohort's stream. :class:`ArmRecorder` is fed that
run in stream order (each gate event with the decision it got, each verdict) and keeps, per arm:

* every gate decision in stream order, so two arms over the same stream are compared candidate by
  candidate (paired: the decision in arm A against the decision in arm B);
* the decisions per task and the rule that produced each (provenance, §6.5);
* the tag-versus-verifier counts of :mod:`.measurement` (Eq. 10, Table 10), paired by
  :class:`~processors.dbpm.measurement.SelectivityTracker`;
* the NER coverage of each QA pair (the fraction of PASS pairs whose patient-level NER set holds the
  category's bucket, Table 8's ``cov%``), counted by a second tracker whose "tag" is *covered*, so it
  pairs exactly as the lift does. Coverage is read from the gate event's ``ner_categories`` with the
  paper's nine buckets (:data:`~processors.dbpm.config.DEFAULT_QA_NER_BUCKETS`) whatever the arm's
  configuration: it is a property of the data, the same in every arm. Gate events without
  ``ner_categories`` are not counted for coverage.

:func:`ablation_report` turns the arms into the paper's tables, as JSON data:

* **Table 9, pair-count deltas** of each arm against the reference arm (the full configuration), per
  task: the pairs an arm keeps are its candidates not BLOCKed (a BLOCKed candidate is dropped before
  the verifier, §4.5; a DOWNGRADE only tags), the delta and its percentage of the reference, and
  the 3 x 3 transition counts (decision in the reference x decision in the arm) behind them.
* **Table 10, tag confusion** per task: verifier verdict rows (FAIL, PASS) x gate tag columns
  (tagged = DOWNGRADE or BLOCK, Table 10's collapse), within-row percentages, and the lift with its
  95% CI.
* **Table 8, per QA category**: n_PASS, n_FAIL, coverage, P(tag | PASS), P(tag | FAIL), lift with
  CI and the operating regime; and the *path lift* over the categories that have a NER bucket in the
  paper's mapping (§6.3), so every arm reports it over the same categories.
* **Provenance shares**: per task, the share of decisions each (decision, rule) produced, and the
  share of all decisions the gates touched (DOWNGRADE or BLOCK; the paper's 2.44% of pipeline pairs).
* **Verifier calls saved**: BLOCKs per task (each is one verifier call not made, §4.5).

**Regimes** (§6.4, Table 8, Figure 5). The paper names four and gives one threshold, "Selective
(lift > 1.5)", the dashed line of Figure 4. The rules, in order:

1. ``fallback``: the arm's configuration has no NER bucket for the category, so the Eq. 9 branch
   cannot apply and the fail-rate x difficulty fallback decides (Table 8: adverse_event,
   outcome_mortality; every category when NER coverage is off).
2. ``undefined``: no PASS or no FAIL pairs, so there is no lift.
3. ``selective``: lift above :data:`SELECTIVE_LIFT` (1.5), or infinite (FAIL pairs tagged, no PASS
   pair tagged).
4. ``saturated``: coverage of at least :data:`SATURATED_COVERAGE` (0.90): nearly every patient is
   covered, so the gate allows almost everyone and its few tags say nothing. Table 8's saturated
   categories have 94.8-97.7% coverage, its other unselective ones at most 53.7%, so any cut
   between reproduces it; 0.90 is the round value below its lowest saturated coverage. (diagnosis,
   95.7%, is selective, which rule 3 decides first.)
5. ``no tagging``: no pair tagged at lower coverage (Table 8: history, observation).
6. ``categorical``: lift in [1/1.5, 1.5], the paper's "lift ~ 1.0": the gate tags both sides alike,
   a category-level filter rather than a per-patient one.
7. ``anti-selective``: lift below 1/1.5 (zero included): the gate tags PASS pairs more than FAIL
   pairs, the paper's word for its first signal sources (§6.3).

Applied to Table 8's own rows these rules give its regime column. An arm whose QA gate reads another
signal source than NER coverage has no Eq. 9 branch to speak of: its categories are classified by
their lift alone (rules 2, 3, 5-7).

**The five QA signal sources side by side** (§4.8, §6.3, Figure 4, Table 11). One arm per source
(:data:`~processors.dbpm.config.QA_SIGNALS`), all over the same stream; :func:`qa_sources_table` puts
each source's lift over all QA categories (Eq. 10, 95% CI) and over the nine mapped categories beside
the paper's figure for it (:data:`PAPER_QA_SOURCES`, quoted from §6.3 and Table 11), with what the
stream gave the source to read (:class:`QaSignalStats`): how many pairs carried the parse-failure
flag, the patient difficulty of PASS and FAIL pairs (the quantiles §6.3 compares) and the spread of
the category fail rates (§6.3: 0.52 held out).

Size: one job, the paired comparison of arms. The recorder, the paper's tables built from its
records and the QA-source table share the pairing and the regime rules above; :data:`PAPER_QA_SOURCES`
is a data table of the paper's figures.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from processors.dbpm.config import (
    DEFAULT_QA_NER_BUCKETS,
    QA,
    QA_SIGNAL_DIFFICULTY,
    QA_SIGNAL_FAIL_MASS,
    QA_SIGNAL_FAIL_RATE,
    QA_SIGNAL_NER_COVERAGE,
    QA_SIGNAL_PARSE_FAILURE,
    DBPMConfig,
)
from processors.dbpm.events import GateEvent, VerdictEvent
from processors.dbpm.gates import ALLOW, BLOCK, DOWNGRADE
from processors.dbpm.measurement import (
    LiftStatus,
    PopulationReport,
    SelectivityCounts,
    SelectivityTracker,
    TagCounts,
    VerdictOutcome,
    verdict_outcome,
)
from processors.dbpm.signatures import qa_category

DECISIONS: tuple[str, ...] = (ALLOW, DOWNGRADE, BLOCK)
_CODE = {decision: code for code, decision in enumerate(DECISIONS)}

SELECTIVE_LIFT = 1.5
"""A lift above this is selective (§6.4; the dashed line of Figure 4)."""
SATURATED_COVERAGE = 0.90
"""A category this covered that is not selective is saturated (module docstring, "Regimes")."""

COVERED = DOWNGRADE
NOT_COVERED = ALLOW
"""The coverage tracker's "decisions": a covered pair counts as tagged (module docstring)."""


def _covered(payload: Mapping[str, Any]) -> bool | None:
    """Whether a QA gate event's patient NER set holds its category's bucket (None: no bucket or no set)."""
    bucket = DEFAULT_QA_NER_BUCKETS.get(qa_category(str(payload.get("category", ""))))
    given = payload.get("ner_categories")
    if bucket is None or given is None:
        return None
    return bucket in {str(c).strip().lower() for c in given}  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class ArmResult:
    """What one arm did (see :class:`ArmRecorder`); its parts serialise to JSON in :func:`ablation_report`.

    Attributes:
        name: the arm's name.
        description: what the arm changes against the full configuration.
        fingerprint: the engine configuration's fingerprint (:meth:`DBPMConfig.fingerprint`).
        gate_buckets: QA categories that have a NER bucket in the arm's configuration.
        tasks: the task of every gate event, in stream order.
        decisions: the decision of every gate event, in stream order (index into :data:`DECISIONS`).
        stream_digest: SHA-256 of the gate events' candidate ids in order: equal for two arms over
            the same stream, the precondition of a paired comparison.
        provenance: (task, decision, rule) -> decisions.
        selectivity: tag-versus-verdict counts per (task, category).
        coverage: per QA category, PASS/FAIL pairs with "tagged" meaning covered.
        population: the memory's channel population at the end of the run (None when not measured).
        seconds: wall-clock seconds the arm took to run (None when not measured).
        qa_signal: the signal source the arm's QA gate read (§4.8).
    """

    name: str
    description: str
    fingerprint: str
    gate_buckets: frozenset[str]
    tasks: tuple[str, ...]
    decisions: bytes
    stream_digest: str
    provenance: Mapping[tuple[str, str, str], int]
    selectivity: SelectivityCounts
    coverage: SelectivityCounts
    population: PopulationReport | None = None
    seconds: float | None = None
    qa_signal: str = QA_SIGNAL_NER_COVERAGE

    def decision_counts(self) -> dict[str, dict[str, int]]:
        """task -> decision -> count (every decision listed, zeros included)."""
        counts: dict[str, dict[str, int]] = {}
        for (task, decision, _), n in self.provenance.items():
            per_task = counts.setdefault(task, dict.fromkeys(DECISIONS, 0))
            per_task[decision] += n
        return {task: counts[task] for task in sorted(counts)}


@dataclass
class ArmRecorder:
    """Accumulates one arm's run, fed in stream order (module docstring). Pure; no I/O."""

    name: str
    config: DBPMConfig
    description: str = ""
    _tasks: list[str] = field(default_factory=list)
    _decisions: bytearray = field(default_factory=bytearray)
    _digest: Any = field(default_factory=hashlib.sha256)
    _provenance: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    _selectivity: SelectivityTracker = field(default_factory=SelectivityTracker)
    _coverage: SelectivityTracker = field(default_factory=SelectivityTracker)

    def gate(self, event: GateEvent, decision: str, rule: str) -> None:
        """Record the decision a gate event got and the rule that produced it."""
        self._tasks.append(event.task)
        self._decisions.append(_CODE[decision])
        self._digest.update(event.candidate_id.encode() + b"\n")
        self._provenance[(event.task, decision, rule)] += 1
        self._selectivity.gate(event.task, event.patient_id, event.payload, decision)
        if event.task == QA:
            covered = _covered(event.payload)
            if covered is not None:
                marker = COVERED if covered else NOT_COVERED
                self._coverage.gate(QA, event.patient_id, event.payload, marker)

    def verdict(self, event: VerdictEvent) -> None:
        """Record a verdict; it pairs with its candidate's gate decision, if one is pending."""
        self._selectivity.verdict(event.task, event.patient_id, event.payload, event.verdict, event.source)
        if event.task == QA:
            self._coverage.verdict(QA, event.patient_id, event.payload, event.verdict, event.source)

    @property
    def fail_events(self) -> Mapping[str, int]:
        """Blocklist-path verdicts seen per task (for :func:`~.measurement.channel_population`)."""
        return dict(self._selectivity.fail_events)

    def result(self, population: PopulationReport | None = None, seconds: float | None = None) -> ArmResult:
        """The arm's result so far."""
        return ArmResult(
            name=self.name,
            description=self.description,
            fingerprint=self.config.fingerprint(),
            gate_buckets=frozenset(self.config.qa_ner_buckets),
            tasks=tuple(self._tasks),
            decisions=bytes(self._decisions),
            stream_digest=self._digest.hexdigest(),
            provenance=dict(self._provenance),
            selectivity=self._selectivity.counts(),
            coverage=self._coverage.counts(),
            population=population,
            seconds=seconds,
            qa_signal=self.config.qa_signal,
        )


def regime(counts: TagCounts, has_bucket: bool, coverage: float | None) -> str:
    """The operating regime of one QA category (module docstring, "Regimes")."""
    if not has_bucket:
        return "fallback"
    lift = counts.lift()
    if lift.p_tag_fail is None or lift.p_tag_pass is None:
        return "undefined"
    if lift.status is LiftStatus.INFINITE or (lift.value is not None and lift.value > SELECTIVE_LIFT):
        return "selective"
    if coverage is not None and coverage >= SATURATED_COVERAGE:
        return "saturated"
    if lift.value is None:  # both sides present, nothing tagged
        return "no tagging"
    return "categorical" if lift.value >= 1.0 / SELECTIVE_LIFT else "anti-selective"


def _pct(part: int, whole: int) -> float | None:
    return 100.0 * part / whole if whole else None


def tag_confusion(counts: TagCounts) -> dict[str, Any]:
    """Table 10: verifier verdict rows x tagged / not tagged, within-row percentages, and the lift."""
    rows = {}
    for side, tagged, total in (
        ("FAIL", counts.fail_tagged, counts.fail_total),
        ("PASS", counts.pass_tagged, counts.pass_total),
    ):
        rows[side] = {
            "tagged": tagged,
            "not_tagged": total - tagged,
            "total": total,
            "tagged_pct": _pct(tagged, total),
            "not_tagged_pct": _pct(total - tagged, total),
        }
    tagged = counts.fail_tagged + counts.pass_tagged
    total = counts.fail_total + counts.pass_total
    rows["total"] = {"tagged": tagged, "not_tagged": total - tagged, "total": total}
    return {"rows": rows, "lift": counts.lift().to_json()}


def qa_categories(arm: ArmResult) -> list[dict[str, Any]]:
    """Table 8: one row per QA category observed, in category order."""
    rows = []
    for cell in arm.selectivity.cells:
        if cell.task != QA:
            continue
        covered = arm.coverage.cell(QA, cell.category)
        coverage = covered.pass_tagged / covered.pass_total if covered.pass_total else None
        by_coverage = arm.qa_signal == QA_SIGNAL_NER_COVERAGE
        has_bucket = cell.category in arm.gate_buckets or not by_coverage
        lift = cell.counts.lift()
        rows.append({
            "category": cell.category,
            "n_pass": cell.counts.pass_total,
            "n_fail": cell.counts.fail_total,
            "ner_bucket": cell.category in DEFAULT_QA_NER_BUCKETS,
            "coverage": coverage,
            "p_tag_pass": lift.p_tag_pass,
            "p_tag_fail": lift.p_tag_fail,
            "lift": lift.to_json(),
            "regime": regime(cell.counts, has_bucket, coverage if by_coverage else None),
        })  # fmt: skip
    return rows


def path_lift(arm: ArmResult) -> TagCounts:
    """QA counts over the categories with a NER bucket in the paper's mapping (§6.3's path lift)."""
    total = TagCounts()
    for cell in arm.selectivity.cells:
        if cell.task == QA and cell.category in DEFAULT_QA_NER_BUCKETS:
            total = total.merge(cell.counts)
    return total


def provenance_shares(arm: ArmResult) -> dict[str, Any]:
    """Per task, each (decision, rule)'s count and share of the task's decisions; the touched share."""
    totals: Counter[str] = Counter()
    for (task, _, _), n in arm.provenance.items():
        totals[task] += n
    per_task: dict[str, list[dict[str, Any]]] = {}
    for (task, decision, rule), n in sorted(arm.provenance.items(), key=lambda item: (item[0][0], -item[1])):
        per_task.setdefault(task, []).append(
            {"decision": decision, "rule": rule, "count": n, "share": n / totals[task]}
        )
    touched = sum(n for (_, decision, _), n in arm.provenance.items() if decision != ALLOW)
    decisions = sum(totals.values())
    return {
        "tasks": per_task,
        "touched": touched,
        "decisions": decisions,
        "touched_share": touched / decisions if decisions else None,
    }


def paired_deltas(reference: ArmResult, arm: ArmResult) -> dict[str, Any]:
    """Table 9 of ``arm`` against ``reference``, candidate by candidate (module docstring).

    Raises:
        ValueError: the two arms did not run over the same stream of gate events.
    """
    if reference.stream_digest != arm.stream_digest or reference.tasks != arm.tasks:
        raise ValueError(f"arms {reference.name!r} and {arm.name!r} ran over different streams: not paired")
    transitions: dict[str, Counter[tuple[int, int]]] = {}
    for task, ref, other in zip(reference.tasks, reference.decisions, arm.decisions, strict=True):
        transitions.setdefault(task, Counter())[(ref, other)] += 1
    blocked = _CODE[BLOCK]
    tasks = {}
    for task in sorted(transitions):
        moves = transitions[task]
        kept_ref = sum(n for (ref, _), n in moves.items() if ref != blocked)
        kept_arm = sum(n for (_, other), n in moves.items() if other != blocked)
        tasks[task] = {
            "reference_pairs": kept_ref,
            "arm_pairs": kept_arm,
            "delta": kept_arm - kept_ref,
            "delta_pct": _pct(kept_arm - kept_ref, kept_ref),
            "changed": sum(n for (ref, other), n in moves.items() if ref != other),
            "transitions": [
                {"reference": DECISIONS[ref], "arm": DECISIONS[other], "count": n}
                for (ref, other), n in sorted(moves.items())
            ],
        }
    return {"reference": reference.name, "arm": arm.name, "tasks": tasks}


def arm_json(arm: ArmResult) -> dict[str, Any]:
    """Everything measured on one arm, as JSON data."""
    decisions = arm.decision_counts()
    blocks = {task: counts[BLOCK] for task, counts in decisions.items()}
    return {
        "name": arm.name,
        "description": arm.description,
        "fingerprint": arm.fingerprint,
        "seconds": arm.seconds,
        "candidates": len(arm.decisions),
        "decisions": decisions,
        "verifier_calls_saved": {"blocks": blocks, "total": sum(blocks.values())},
        "tag_confusion": {
            task: tag_confusion(arm.selectivity.task_total(task)) for task in arm.selectivity.tasks()
        },
        "qa_path_lift": tag_confusion(path_lift(arm)),
        "qa_categories": qa_categories(arm),
        "provenance": provenance_shares(arm),
        "population": arm.population.to_json() if arm.population is not None else None,
        "selectivity": arm.selectivity.to_json(),
        "qa_signal": arm.qa_signal,
    }


def ablation_report(arms: Sequence[ArmResult], reference: str = "full") -> dict[str, Any]:
    """Every arm's measurements and each arm's paired deltas against ``reference``.

    Raises:
        ValueError: no arm is named ``reference``, or an arm ran over a different stream.
    """
    by_name = {arm.name: arm for arm in arms}
    if reference not in by_name:
        raise ValueError(f"no arm named {reference!r} among {sorted(by_name)}")
    base = by_name[reference]
    return {
        "reference": reference,
        "arms": [arm_json(arm) for arm in arms],
        "paired": [paired_deltas(base, arm) for arm in arms if arm.name != reference],
    }


# --- the five QA signal sources (§4.8, §6.3, Figure 4, Table 11) ----------------------------------


@dataclass(frozen=True, slots=True)
class PaperQaSource:
    """What the paper reports for one QA signal source.

    Attributes:
        signal: the source (:data:`~processors.dbpm.config.QA_SIGNALS`).
        name: Table 11's name of the source.
        figure: the paper's figure for it, as printed (Table 11's outcome column).
        failure_mode: Table 11's failure mode (``working design`` for the fifth).
        basis: where the figure comes from (section, cohort, pairs).
        path: the figure is a path lift (over the nine mapped categories, §6.3), not a lift over all
            QA pairs; the measured outcome is then read from the path lift too.
    """

    signal: str
    name: str
    figure: str
    failure_mode: str
    basis: str
    path: bool = False


PAPER_QA_SOURCES: tuple[PaperQaSource, ...] = (
    PaperQaSource(
        QA_SIGNAL_FAIL_MASS, "Category-aggregate fail-mass", "anti-selective (lift 0.006)",
        "aggregation-level mismatch", "§6.3, development cohort, N = 2,000 pairs; Table 11",
    ),
    PaperQaSource(
        QA_SIGNAL_PARSE_FAILURE, "Verifier uncertainty", "signal absent", "signal absence",
        "§6.3, no flag on 1,283 development-cohort pairs; Table 11",
    ),
    PaperQaSource(
        QA_SIGNAL_FAIL_RATE, "Per-category fail-rate", "anti-selective (lift 0.05)", "counting asymmetry",
        "§6.3, category fail-rate spread 0.52 held out; Table 11",
    ),
    PaperQaSource(
        QA_SIGNAL_DIFFICULTY, "Per-patient difficulty", "no signal (lift 0.00)", "cross-task orthogonality",
        "§6.3, difficulty PASS / FAIL: medians 0.179 / 0.174, means 0.188 / 0.191, Q3 0.290 / 0.294; "
        "Table 11",
    ),
    PaperQaSource(
        QA_SIGNAL_NER_COVERAGE, "NER-coverage intersection",
        "selective (path lift 1.52–1.84 across four replications)", "working design",
        "§6.3, §8.3: held out 1.84 [1.75, 1.93] over the nine mapped categories, 1.52 over all eleven; "
        "Table 11, Figure 4", path=True,
    ),
)  # fmt: skip
"""Table 11's rows in the paper's order, with §6.3's figures."""


def _quantiles(values: Sequence[float]) -> dict[str, float | None]:
    """Median, mean and third quartile (nearest rank) of ``values``; None when empty."""
    if not values:
        return {"median": None, "mean": None, "q3": None}
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    median = ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"median": median, "mean": sum(ordered) / n, "q3": ordered[min(n - 1, (3 * n) // 4)]}


@dataclass
class QaSignalStats:
    """What a stream's QA pairs gave the signal sources to read, fed pair by pair. Pure; no I/O.

    Only verifier verdicts count (:func:`~processors.dbpm.measurement.verdict_outcome`). Difficulty is
    the gate event's ``difficulty`` (pairs without one are not counted for it), with the share of each
    side above the fourth source's threshold; a category's fail rate is its FAIL pairs over its pairs.
    """

    pairs: int = 0
    parse_flagged: int = 0
    difficulty: dict[str, list[float]] = field(
        default_factory=lambda: {VerdictOutcome.PASS.value: [], VerdictOutcome.FAIL.value: []}
    )
    categories: Counter[tuple[str, str]] = field(default_factory=Counter)
    difficulty_threshold: float = field(default_factory=lambda: DBPMConfig().qa_difficulty_threshold)

    def pair(self, gate: GateEvent, verdict: VerdictEvent) -> None:
        """Count one QA gate event with its own verdict (other tasks and sources are ignored)."""
        outcome = verdict_outcome(verdict.verdict, verdict.source)
        if gate.task != QA or outcome is None:
            return
        self.pairs += 1
        self.parse_flagged += int(gate.payload.get("parse_failed") is True)
        given = gate.payload.get("difficulty")
        if given is not None:
            self.difficulty[outcome.value].append(float(given))  # type: ignore[arg-type]
        self.categories[(qa_category(str(gate.payload.get("category", ""))), outcome.value)] += 1

    def to_json(self) -> dict[str, Any]:
        """The counts, the difficulty quantiles per side and the category fail rates with their spread."""
        names = sorted({category for category, _ in self.categories})
        rates = {}
        for category in names:
            fails = self.categories[(category, VerdictOutcome.FAIL.value)]
            total = fails + self.categories[(category, VerdictOutcome.PASS.value)]
            rates[category] = fails / total
        return {
            "qa_pairs": self.pairs,
            "parse_flagged": self.parse_flagged,
            "difficulty": {side: _quantiles(values) for side, values in self.difficulty.items()},
            "difficulty_above_threshold": {
                side: (sum(v > self.difficulty_threshold for v in values) / len(values) if values else None)
                for side, values in self.difficulty.items()
            },
            "category_fail_rates": rates,
            "category_fail_rate_spread": (max(rates.values()) - min(rates.values())) if rates else None,
        }


def qa_sources_table(arms: Sequence[ArmResult], stats: QaSignalStats) -> list[dict[str, Any]]:
    """One row per QA signal source in Table 11's order: the paper's figure beside the arm's lifts.

    Each row holds ``signal``, ``name``, ``paper`` (figure, failure mode, basis), ``arm``, ``lift``
    (all QA categories) and ``path_lift`` (the nine mapped categories), each the :class:`Lift` JSON
    with its 95% CI, ``tagged`` (FAIL and PASS pairs tagged of each side's total), ``outcome`` (the
    lift the paper quotes for the source, all pairs or path, classified by :func:`regime`'s lift
    rules) and ``evidence`` (the part of ``stats`` the source reads). A source without an arm is left
    out.

    Raises:
        ValueError: two arms read the same source.
    """
    by_signal: dict[str, ArmResult] = {}
    for arm in arms:
        if arm.qa_signal in by_signal:
            raise ValueError(f"arms {by_signal[arm.qa_signal].name!r} and {arm.name!r} read one QA source")
        by_signal[arm.qa_signal] = arm
    measured = stats.to_json()
    evidence = {
        QA_SIGNAL_FAIL_MASS: {"category_fail_rates": measured["category_fail_rates"]},
        QA_SIGNAL_PARSE_FAILURE: {k: measured[k] for k in ("qa_pairs", "parse_flagged")},
        QA_SIGNAL_FAIL_RATE: {"category_fail_rate_spread": measured["category_fail_rate_spread"]},
        QA_SIGNAL_DIFFICULTY: {k: measured[k] for k in ("difficulty", "difficulty_above_threshold")},
        QA_SIGNAL_NER_COVERAGE: {},
    }
    rows = []
    for paper in PAPER_QA_SOURCES:
        arm = by_signal.get(paper.signal)
        if arm is None:
            continue
        counts = arm.selectivity.task_total(QA)
        mapped = path_lift(arm)
        rows.append({
            "signal": paper.signal,
            "name": paper.name,
            "paper": {"figure": paper.figure, "failure_mode": paper.failure_mode, "basis": paper.basis},
            "arm": arm.name,
            "lift": counts.lift().to_json(),
            "path_lift": mapped.lift().to_json(),
            "tagged": {
                "fail": counts.fail_tagged, "fail_total": counts.fail_total,
                "pass": counts.pass_tagged, "pass_total": counts.pass_total,
            },
            "outcome": regime(mapped if paper.path else counts, True, None),
            "evidence": evidence[paper.signal],
        })  # fmt: skip
    return rows
