"""Prometheus metrics of a DBPM worker, served in text format at ``/metrics`` on its web port.

Faust's own Prometheus sensor (:func:`faust.sensors.prometheus.setup_prometheus_sensors`) supplies
the transport metrics, prefixed ``clingate_``: records received per topic
(``clingate_messages_received_per_topic``), records sent per topic
(``clingate_topic_messages_sent``), end and committed offsets per partition, commit and send
latencies, rebalances. This module adds, on the same registry, what only the DBPM agents know:

* ``clingate_dbpm_dead_letters_total{topic}``: records routed to the dead-letter topic of ``topic``;
* ``clingate_dbpm_decisions_total{task,decision}``;
* ``clingate_dbpm_gate_latency_seconds``: from the gate consuming a candidate's batch to the
  broker acknowledging its decision, barrier wait included;
* ``clingate_dbpm_barrier_timeouts_total``: gates decided without the memory having reached their
  event time;
* ``clingate_dbpm_consumer_lag{topic,partition}``: end offset minus committed offset, per
  assigned input partition (verdicts: the Faust memory agent; candidates: the gate's group, as of
  its last batch), computed at scrape time;
* ``clingate_dbpm_memory_patterns{task,table}``: memory channel population (``B`` blocklist
  patterns, ``W`` whitelist entries) from the replicated view, computed at scrape time from the
  engine's incremental counts (no scan).

Not yet exported (issue 4 lists them): the population of BLOCK-clearing patterns (needs an
eviction-index walk per task) and lift with confidence intervals (needs verified outcomes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from processors.dbpm.config import DBPMConfig
from processors.dbpm.memory import Memory
from state.base import Store

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _ScrapeTime(Collector):
    """Gauges computed when Prometheus scrapes: consumer lag and memory population."""

    def __init__(
        self,
        lag: Callable[[], Iterable[tuple[str, int, int]]],
        view: Store,
        config: DBPMConfig,
    ) -> None:
        self.lags = [lag]
        self._view = view
        self._config = config

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "clingate_dbpm_consumer_lag", "End offset minus committed offset per input partition.",
            labels=["topic", "partition"],
        )  # fmt: skip
        for source in self.lags:
            for topic, partition, value in source():
                lag.add_metric([topic, str(partition)], value)
        yield lag
        population = GaugeMetricFamily(
            "clingate_dbpm_memory_patterns", "Records per memory channel (B blocklist, W whitelist).",
            labels=["task", "table"],
        )  # fmt: skip
        memory = Memory(self._view.transaction(), self._config)
        for task in self._config.tasks:
            for table in ("B", "W"):
                population.add_metric([task, table], memory.population(table, task))
        yield population


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
        self.barrier_timeouts = Counter(
            "clingate_dbpm_barrier_timeouts", "Gates decided before the memory reached their event time.",
            registry=registry,
        )  # fmt: skip

    def watch(
        self, lag: Callable[[], Iterable[tuple[str, int, int]]], view: Store, config: DBPMConfig
    ) -> None:
        """Register the scrape-time gauges (consumer lag, memory population)."""
        self._scrape = _ScrapeTime(lag, view, config)
        self.registry.register(self._scrape)

    def add_lag(self, lag: Callable[[], Iterable[tuple[str, int, int]]]) -> None:
        """Add a consumer's lag to ``clingate_dbpm_consumer_lag`` (after :meth:`watch`).

        The memory agent (Faust) and the gate (its own consumer group) report their input
        partitions separately; one metric family holds both.
        """
        self._scrape.lags.append(lag)
