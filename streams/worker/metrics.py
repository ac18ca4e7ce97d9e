"""Prometheus metrics of ``clingate worker``'s loops: the DBPM memory writer and gate, the clinical patients.

They sit on the worker's one registry, beside the consumer lag and loop traffic every process shares
(:mod:`streams.runtime.metrics`, which serves them); names, types and labels in docs/metrics.md.

* :class:`DbpmMetrics`: decisions per task and decision, gate latency, barrier timeouts, dead letters,
  verdicts applied and duplicate verdicts skipped; through :meth:`DbpmMetrics.watch` the memory
  channel population (:class:`MemoryPopulation`) computed at scrape time; and the gate's selectivity
  (:class:`Selectivity`).
* :class:`ClinicalMetrics`: assessments per traffic light, red sources, gate latency, dead letters,
  and the output gates' activations.

Choices:

* **Population without a scan.** Pattern and whitelist counts are the engine's incremental counters;
  the BLOCK-clearing and DOWNGRADE-band counts walk the eviction index from the DOWNGRADE threshold up
  (:func:`processors.dbpm.measurement.memory_population`), at the memory's own event-time clock.
  Computed per scrape from the replicated view, so every worker reports the same global figure
  (do not sum it across workers: take ``max``).
* **Lift as the worker sees it.** The lift of Eq. 10 (``processors.dbpm.measurement``, whose maths is
  used unchanged) pairs a gate decision with the verifier's verdict on the same candidate. A worker
  pairs the decisions its gate loop made with the verdicts its memory writer applied; in a live
  pipeline only ALLOWed and DOWNGRADEd candidates are verified, so the live lift is
  ``P(DOWNGRADE | FAIL) / P(DOWNGRADE | PASS)`` among verified candidates (a BLOCK is never paired).
  With several workers a pair is seen only when the candidate's partition and the verdict's partition
  belong to the same worker: each worker's lift is then a sample of the pairs (the assignment does not
  depend on the outcome), and the pair counters (``clingate_dbpm_selectivity_pairs_total``) add up
  across workers for a fleet-wide lift. Pending decisions are bounded (:data:`MAX_PENDING_PAIRS`,
  oldest dropped and counted) because BLOCKed candidates never get a verdict. Category: the
  measurement module's (NER and QA category, RE ``HEAD|TAIL`` types); ``_all`` is the task total.
* **Degenerate lifts**: ``clingate_dbpm_lift`` is ``+Inf`` when only FAIL pairs are tagged and 0 when
  only PASS pairs are; an undefined lift (no pairs on a side, no tags) is absent; the interval exists
  for finite lifts only.
* **Red sources** are labelled by the rule before the first ``:`` of a traffic-light source
  (``Rule C: NTI CRITICAL`` -> ``Rule C``): a bounded set, never patient content.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from processors.dbpm.config import DBPMConfig
from processors.dbpm.events import VerdictEvent
from processors.dbpm.measurement import LiftStatus, SelectivityTracker, TagCounts, memory_population
from processors.dbpm.memory import KIND_PATIENT, KIND_PREEMPTED, KIND_WHITE, Memory
from schemas.clinical import ClinicalAssessment, GatedDraft, RevisionRoute, SafetyAudit
from state.base import Store

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

POPULATION_READS = 3
"""Reads of the memory's population one scrape makes at most (:meth:`MemoryPopulation.collect`)."""

MAX_PENDING_PAIRS = 100_000
"""Gate decisions a worker keeps waiting for their verdict. An entry is the candidate's pairing key (its
payload fields), a few hundred bytes: tens of MB at the bound. At 1,000 candidates/s it covers a verifier
that answers within 100 s."""

ALL_CATEGORIES = "_all"
"""The ``category`` label of a task's total lift."""


class MemoryPopulation(Collector):
    """Scrape-time gauges of the DBPM memory's channel population (module docstring)."""

    def __init__(self, view: Store, config: DBPMConfig, fail_events: Callable[[], Mapping[str, int]]) -> None:
        self._view = view
        self._config = config
        self._fail_events = fail_events

    def collect(self) -> Iterator[Metric]:
        """Patterns and whitelist per task, BLOCK-clearing and DOWNGRADE-band patterns, inert channels,
        records held and expired under retention.

        The view is written while a scrape reads it (the gate follows the memory's changelog in a thread
        of its own, and the view has no snapshot), so a read can count a pattern in a zone and miss it
        in the total: :func:`memory_population` then refuses the counts. Such a read is made again, up
        to :data:`POPULATION_READS` times; a scrape that got no consistent read leaves these gauges out
        (logged) rather than failing the whole endpoint.
        """
        for _ in range(POPULATION_READS):
            memory = Memory(self._view.transaction(), self._config)
            try:
                report = memory_population(memory, self._fail_events())
                break
            except ValueError as inconsistent:
                refused = inconsistent
        else:
            log.warning("memory population left out of this scrape: %s", refused)
            return
        population = GaugeMetricFamily(
            "clingate_dbpm_memory_patterns", "Records per memory channel (B blocklist, W whitelist).",
            labels=["task", "table"],
        )  # fmt: skip
        block = GaugeMetricFamily(
            "clingate_dbpm_memory_block_patterns",
            "Blocklist patterns that clear the BLOCK clause of Eq. 4 at the memory's event time.",
            labels=["task"],
        )
        band = GaugeMetricFamily(
            "clingate_dbpm_memory_downgrade_patterns",
            "Blocklist patterns in the DOWNGRADE band of Eq. 4 at the memory's event time.",
            labels=["task"],
        )
        inert = GaugeMetricFamily(
            "clingate_dbpm_memory_channel_inert",
            "1 when the task's channel consumed fail verdicts here but holds no BLOCK-clearing pattern.",
            labels=["task"],
        )
        for channel in report.channels:
            population.add_metric([channel.task, "B"], channel.patterns)
            population.add_metric([channel.task, "W"], channel.whitelist)
            block.add_metric([channel.task], channel.block_eligible)
            band.add_metric([channel.task], channel.downgrade_band)
            inert.add_metric([channel.task], 1.0 if channel.task in report.inert_channels() else 0.0)
        yield from (population, block, band, inert, *self._retention(memory))

    @staticmethod
    def _retention(memory: Memory) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "clingate_dbpm_memory_held",
            "Records under retention held (P preempted entities, T patient shares).",
            labels=["table"],
        )
        expired = CounterMetricFamily(
            "clingate_dbpm_memory_expired",
            "Records deleted by retention (W whitelist entries, P preempted entities, T patient shares).",
            labels=["table"],
        )
        for table in (KIND_PREEMPTED, KIND_PATIENT):
            held.add_metric([table.decode()], memory.held(table))
        for table in (KIND_WHITE, KIND_PREEMPTED, KIND_PATIENT):
            expired.add_metric([table.decode()], memory.expired(table))
        yield from (held, expired)


class Selectivity(Collector):
    """The live gate selectivity: pairs of gate decisions and verdicts, lift with its 95% interval.

    Feed it :meth:`gates` from the gate loop and :meth:`verdicts` from the memory writer (module docstring).
    Thread-safe: a lock guards the tracker, so it also works behind :func:`streams.runtime.metrics.serve`.
    """

    def __init__(self, max_pending: int = MAX_PENDING_PAIRS) -> None:
        self._tracker = SelectivityTracker(max_pending=max_pending)
        self._lock = threading.Lock()

    def gates(self, decided: Iterable[tuple[str, str, Mapping[str, Any], str]]) -> None:
        """Record a batch's gate decisions, ``(task, patient id, payload, decision)`` each, in order (see
        :meth:`SelectivityTracker.gate`)."""
        with self._lock:
            for task, patient_id, payload, decision in decided:
                self._tracker.gate(task, patient_id, payload, decision)

    def verdicts(self, applied: Sequence[VerdictEvent]) -> None:
        """Record verdicts applied to the memory, in order (see :meth:`SelectivityTracker.verdict`)."""
        if not applied:
            return
        with self._lock:
            for v in applied:
                self._tracker.verdict(v.task, v.patient_id, v.payload, v.verdict, v.source)

    def fail_events(self) -> dict[str, int]:
        """Fail verdicts (not ``success``) applied per task by this process."""
        with self._lock:
            return dict(self._tracker.fail_events)

    def collect(self) -> Iterator[Metric]:
        """Pair counters, lift and interval per task and category, pending and expired decisions."""
        with self._lock:
            counts = self._tracker.counts()
            pending, expired = len(self._tracker.pending), self._tracker.expired
        pairs = CounterMetricFamily(
            "clingate_dbpm_selectivity_pairs", "Gate decisions paired with the verifier's verdict.",
            labels=["task", "category", "outcome", "tagged"],
        )  # fmt: skip
        lift = GaugeMetricFamily(
            "clingate_dbpm_lift", "Lift of Eq. 10: P(tag | FAIL) / P(tag | PASS) over this worker's pairs.",
            labels=["task", "category"],
        )  # fmt: skip
        low = GaugeMetricFamily(
            "clingate_dbpm_lift_ci_low", "Lower bound of the lift's 95% delta-method interval.",
            labels=["task", "category"],
        )  # fmt: skip
        high = GaugeMetricFamily(
            "clingate_dbpm_lift_ci_high", "Upper bound of the lift's 95% delta-method interval.",
            labels=["task", "category"],
        )  # fmt: skip
        rows: list[tuple[str, str, TagCounts]] = [(c.task, c.category, c.counts) for c in counts.cells]
        for cell in counts.cells:
            c = cell.counts
            for outcome, tagged, n in (
                ("FAIL", "true", c.fail_tagged), ("FAIL", "false", c.fail_total - c.fail_tagged),
                ("PASS", "true", c.pass_tagged), ("PASS", "false", c.pass_total - c.pass_tagged),
            ):  # fmt: skip
                pairs.add_metric([cell.task, cell.category, outcome, tagged], n)
        rows += [(task, ALL_CATEGORIES, counts.task_total(task)) for task in counts.tasks()]
        for task, category, tag_counts in rows:
            value = tag_counts.lift()
            if value.status is LiftStatus.UNDEFINED:
                continue
            labels = [task, category]
            infinite = value.status is LiftStatus.INFINITE
            lift.add_metric(labels, math.inf if infinite else float(value.value or 0.0))
            if value.status is LiftStatus.FINITE:
                low.add_metric(labels, float(value.ci_low or 0.0))
                high.add_metric(labels, float(value.ci_high or 0.0))
        waiting = GaugeMetricFamily("clingate_dbpm_selectivity_pending", "Gate decisions awaiting a verdict.")
        waiting.add_metric([], pending)
        dropped = CounterMetricFamily(
            "clingate_dbpm_selectivity_expired", "Gate decisions dropped unpaired (bound on pending)."
        )
        dropped.add_metric([], expired)
        yield from (pairs, lift, low, high, waiting, dropped)


class DbpmMetrics:
    """The DBPM agents' metrics on one registry (one per app: tests build several apps)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.dead_letters = Counter(
            "clingate_dbpm_dead_letters", "Records routed to a dead-letter topic.", ["topic"],
            registry=registry,
        )  # fmt: skip
        self.decisions = Counter(
            "clingate_dbpm_decisions", "Gate decisions.", ["task", "decision"], registry=registry
        )
        self.gate_latency = Histogram(
            "clingate_dbpm_gate_latency_seconds", "Candidate taken to decision sent (barrier included).",
            buckets=_LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.propagations = Counter(
            "clingate_dbpm_propagations",
            "Cross-task propagation events: sent (by the origin's partition), applied, stopped by a "
            "guard, or duplicate (a re-sent copy, skipped) at the target's partition.",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.gate_redelivered = Counter(
            "clingate_dbpm_gate_redelivered",
            "Candidates a gate read again (after a restart, a rebalance or an aborted batch) whose decisions "
            "were committed before: they rebuild the NER-coverage join, nothing is sent for them.",
            registry=registry,
        )
        self.barrier_timeouts = Counter(
            "clingate_dbpm_barrier_timeouts", "Gates decided before the memory reached their event time.",
            registry=registry,
        )  # fmt: skip
        self.barrier_waiting = Gauge(
            "clingate_dbpm_barrier_waiting",
            "Gates waiting now for every memory partition to reach their event time (0 or 1 per gate loop).",
            registry=registry,
        )
        self.config_mismatch = Gauge(
            "clingate_dbpm_config_mismatch",
            "Memory partitions whose last writer ran another DBPM configuration than this gate (0: one).",
            registry=registry,
        )
        self.coverage_held = Gauge(
            "clingate_dbpm_coverage_held",
            "QA candidates the gate holds now until their narrative's NER candidates are settled.",
            registry=registry,
        )
        self.coverage_released = Counter(
            "clingate_dbpm_coverage_released",
            "QA candidates the NER-coverage join released, by how their coverage was settled "
            "(settled, timeout, no_ner).",
            ["coverage"], registry=registry,
        )  # fmt: skip
        self.ontology_violations = Counter(
            "clingate_dbpm_ontology_violations",
            "Relation candidates the Ontology-Violation Filter failed, by violated (head type, tail type).",
            ["head_type", "tail_type"], registry=registry,
        )  # fmt: skip
        self.verdicts = Counter(
            "clingate_dbpm_verdicts", "Verdicts applied to the memory.", ["task", "verdict", "source"],
            registry=registry,
        )  # fmt: skip
        self.verdicts_duplicate = Counter(
            "clingate_dbpm_verdicts_duplicate",
            "Verdicts not applied: their candidate's verdict was applied before (a re-issued call).",
            ["task"], registry=registry,
        )  # fmt: skip
        self.verdicts_deferred = Counter(
            "clingate_dbpm_verdicts_deferred",
            "Verdicts read again: their candidate's dispatch was not read yet.",
            ["task"], registry=registry,
        )  # fmt: skip
        self.selectivity = Selectivity()
        registry.register(self.selectivity)

    def verdicts_applied(self, applied: Sequence[VerdictEvent]) -> None:
        """Count the verdicts a batch of the memory writer applied (once per label set) and offer them
        to the selectivity pairing (in their order)."""
        for (task, verdict, source), count in collections.Counter(
            (v.task, v.verdict, v.source) for v in applied
        ).items():
            self.verdicts.labels(task, verdict, source).inc(count)
        self.selectivity.verdicts(applied)

    def watch(self, view: Store, config: DBPMConfig) -> None:
        """Register the memory channel population's scrape-time gauges, read from ``view``."""
        self.registry.register(MemoryPopulation(view, config, self.selectivity.fail_events))


def red_source(source: str) -> str:
    """The rule of a traffic-light source: the text before its first ``:`` (``Rule C: ...`` -> ``Rule C``)."""
    return source.split(":", 1)[0].strip()


class ClinicalMetrics:
    """The clinical loop's metrics (on the worker's registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.assessments = Counter(
            "clingate_clinical_assessments", "Assessments published, by production traffic light.", ["light"],
            registry=registry,
        )  # fmt: skip
        self.red_sources = Counter(
            "clingate_clinical_red_sources", "Rules behind RED production lights (per assessment).",
            ["source"], registry=registry,
        )  # fmt: skip
        self.gate_latency = Histogram(
            "clingate_clinical_gate_latency_seconds", "Clinical gates on one record (process_event).",
            buckets=_LATENCY_BUCKETS, registry=registry,
        )  # fmt: skip
        self.dead_letters = Counter(
            "clingate_clinical_dead_letters", "Records routed to a dead-letter topic.", ["topic"],
            registry=registry,
        )  # fmt: skip

        self.patients = Gauge(
            "clingate_clinical_patients",
            "Patients whose state a clinical partition holds, per partition this process last wrote.",
            ["partition"], registry=registry,
        )  # fmt: skip
        self.expired = Counter(
            "clingate_clinical_patients_expired",
            "Patients whose state retention deleted (no record of theirs for the retention period).",
            registry=registry,
        )  # fmt: skip

        # The output gates' activation records (PharmMesh Supplementary Table 4 and the escape register's
        # tracked items T-001 to T-010), counted as the clinical loop publishes them.
        self.draft_transforms = Counter(
            "clingate_output_gate_transforms", "Draft headers rewritten by the lint, by substitution.",
            ["rule"], registry=registry,
        )  # fmt: skip
        self.draft_warnings = Counter(
            "clingate_output_gate_imperative_warnings",
            "Imperative verbs the lint warned about, by position.", ["position"], registry=registry,
        )  # fmt: skip
        self.citations = Counter(
            "clingate_output_gate_citations",
            "Citations checked, by outcome (verified, ellipsis_trimmed, paraphrase_converted, "
            "wrong_attribution, fabricated_quote).", ["outcome"], registry=registry,
        )  # fmt: skip
        self.restorations = Counter(
            "clingate_output_gate_restorations",
            "Revisions rejected by content preservation (previous draft kept).", registry=registry,
        )  # fmt: skip
        self.assertions = Counter(
            "clingate_output_gate_assertions", "A run's SCDA variable assertions per gated draft, by status.",
            ["variable", "status"], registry=registry,
        )  # fmt: skip
        self.routes = Counter(
            "clingate_output_gate_routes", "Audits routed, by route.", ["route"], registry=registry
        )  # fmt: skip
        self.violations = Counter(
            "clingate_output_gate_violations", "Audit violations, by the router's bucket.", ["bucket"],
            registry=registry,
        )  # fmt: skip
        self.overrides = Counter(
            "clingate_output_gate_overrides", "Router overrides that fired, by override.", ["override"],
            registry=registry,
        )  # fmt: skip
        self.tracked = Counter(
            "clingate_output_gate_tracked_items",
            "The escape register's tracked items (T-001 to T-010) per safety audit, by status.",
            ["item", "status"], registry=registry,
        )  # fmt: skip

    def gated(self, draft: GatedDraft) -> None:
        """Count a published gated draft's activations: transforms, warnings, citation outcomes, a
        restoration and its SCDA assertions."""
        for transform in draft.lint.transforms:
            self.draft_transforms.labels(transform.rule).inc()
        for warning in draft.lint.imperative_warnings:
            self.draft_warnings.labels(warning.position).inc()
        citations = draft.citations
        for outcome in ("verified", "ellipsis_trimmed", "paraphrase_converted"):
            self.citations.labels(outcome).inc(getattr(citations, outcome))
        for observation in citations.observations:
            self.citations.labels(observation.kind).inc()
        if draft.restored:
            self.restorations.inc()
        for assertion in draft.assertions:
            self.assertions.labels(assertion.variable, assertion.status).inc()

    def routed(self, route: RevisionRoute) -> None:
        """Count a published route, its violations by bucket and its overrides."""
        self.routes.labels(route.route).inc()
        for violation in route.violations:
            self.violations.labels(violation.bucket).inc()
        for override in route.overrides:
            self.overrides.labels(override).inc()

    def audited(self, audit: SafetyAudit) -> None:
        """Count a published safety audit's tracked items by status."""
        for item in audit.tracked:
            self.tracked.labels(item.item, item.status).inc()

    def assessed(self, assessment: ClinicalAssessment) -> None:
        """Count a published assessment by light and, when RED, by the rules that made it RED."""
        light = assessment.traffic_light
        self.assessments.labels(str(light.light)).inc()
        if str(light.light) == "RED":
            for rule in sorted({red_source(s) for s in light.sources if not s.startswith("Base")}):
                self.red_sources.labels(rule).inc()
