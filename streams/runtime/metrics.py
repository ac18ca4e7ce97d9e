"""Prometheus metrics every clingate process shares: one registry and one ``/metrics`` endpoint per process.

Every metric is named ``clingate_<area>_*`` and listed in docs/metrics.md (a test fails when a registered
one is missing there). Every worker (``clingate worker``: the DBPM memory writer, the clinical patients
and the DBPM gate, loops of one process; ``clingate arbiter worker``; the LLM groups) builds one
:class:`CollectorRegistry` and calls :func:`serve` once, on its web port (``CLINGATE_WEB_PORT`` for
``clingate worker``) at ``/metrics``.

What holds here is what a process registers whatever its area: the endpoint (:func:`serve`), the
consumer lag (:class:`ConsumerLag`, :class:`LibrdkafkaLag`) and the consumer loops' traffic
(:class:`LoopMetrics`). Each area's own metrics live beside its loop, on the process's registry
(``streams.worker.metrics``, ``streams.groups.metrics``, ``streams.llm.metrics``,
``streams.agent.metrics``), so this base layer imports no domain.

**Consumer lag** is one name for every worker, ``clingate_consumer_lag{topic,partition}``, over the
partitions the process owns: the loops' own watermarks minus committed offsets, or librdkafka's
``consumer_lag`` statistic.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from state.rocksdb import cache_bytes

LagSource = Callable[[], Iterable[tuple[str, int, int]]]
"""Returns ``(topic, partition, lag)`` of the partitions the process consumes."""


@dataclass(frozen=True)
class MetricsEndpoint:
    """A running ``/metrics`` HTTP server (see :func:`serve`).

    Attributes:
        port: the port it listens on (the chosen one when 0 was asked).
        close: stops the server and frees the port.
    """

    port: int
    close: Callable[[], None]


def serve(registry: CollectorRegistry, port: int, addr: str) -> MetricsEndpoint:
    """Serve ``registry`` in Prometheus text format on ``addr:port`` (any path), from a daemon thread.

    The one way a clingate worker exposes its metrics; call it once per process, after the
    metrics are registered, and :attr:`MetricsEndpoint.close` it on shutdown. Collectors run on the
    server's thread: scrape-time collectors MUST only read state that is safe to read concurrently.

    Args:
        registry: the process's registry.
        port: TCP port; 0 picks a free one (read it from the result).
        addr: the address to bind (``Settings.metrics_host``: loopback unless the deployment asks for
            every interface).

    Returns:
        The endpoint, with its port and a close function.
    """
    server, thread = start_http_server(port, addr=addr, registry=registry)

    def close() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return MetricsEndpoint(server.server_port, close)


class ConsumerLag(Collector):
    """``clingate_consumer_lag{topic,partition}``: messages behind the end, per owned input partition."""

    def __init__(self, *sources: LagSource) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        """One gauge sample per partition the source reports."""
        lag = GaugeMetricFamily(
            "clingate_consumer_lag", "Messages between a consumed partition's end and the group's position.",
            labels=["topic", "partition"],
        )  # fmt: skip
        for source in self.sources:
            for topic, partition, value in source():
                lag.add_metric([topic, str(partition)], value)
        yield lag


class LibrdkafkaLag:
    """The consumer lag of a confluent-kafka consumer, from librdkafka's periodic statistics.

    Merge :meth:`client_config` into the consumer's configuration; librdkafka then calls
    :meth:`on_stats` from the consumer's own poll (so the worker's thread), and a scrape reads the latest
    figures (one atomic reference swap, safe from the server thread).
    """

    def __init__(self, registry: CollectorRegistry, interval_ms: int = 5000) -> None:
        """Register the lag gauge on ``registry``; statistics every ``interval_ms``."""
        self._interval_ms = interval_ms
        self._latest: tuple[tuple[str, int, int], ...] = ()
        registry.register(ConsumerLag(lambda: self._latest))

    def client_config(self) -> dict[str, object]:
        """librdkafka settings that turn the statistics on and deliver them here."""
        return {"statistics.interval.ms": self._interval_ms, "stats_cb": self.on_stats}

    def on_stats(self, stats_json: str) -> None:
        """Keep the ``consumer_lag`` of every assigned partition (librdkafka reports -1 when unknown)."""
        stats = json.loads(stats_json)
        self._latest = tuple(
            (topic, int(partition), int(p["consumer_lag"]))
            for topic, t in stats.get("topics", {}).items()
            for partition, p in t.get("partitions", {}).items()
            if partition != "-1" and p.get("consumer_lag", -1) >= 0
        )


class LoopMetrics:
    """Traffic of a process's consumer loops (``loop``: memory, clinical, gate, or an LLM group's consumer
    group): records consumed and produced per topic, partitions assigned and revoked, batches whose
    transaction was aborted.

    Counted per batch, not per record: a batch adds its count per topic once."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.consumed = Counter(
            "clingate_loop_records_consumed", "Input records a loop read, by topic.", ["loop", "topic"],
            registry=registry,
        )  # fmt: skip
        self.produced = Counter(
            "clingate_loop_records_produced",
            "Records a loop committed (outputs, dead letters, changelog and progress), by topic.",
            ["loop", "topic"], registry=registry,
        )  # fmt: skip
        self.rebalances = Counter(
            "clingate_loop_rebalances", "Partitions assigned to and revoked from a loop.", ["loop", "event"],
            registry=registry,
        )  # fmt: skip
        self.aborted = Counter(
            "clingate_loop_batches_aborted", "Batches whose transaction was aborted; they are applied again.",
            ["loop"], registry=registry,
        )  # fmt: skip
        self.store_cache = Gauge(
            "clingate_store_cache_bytes",
            "Bytes the process's RocksDB stores hold in memory: their read caches, and RocksDB's block "
            "cache with the memtables charged to it (together bounded by CLINGATE_STORE_CACHE_BYTES).",
            registry=registry,
        )
        self.store_cache.set_function(cache_bytes)

    def count(self, counter: Counter, loop: str, topics: Iterable[str]) -> None:
        """Add one to ``counter`` per topic occurrence in ``topics``, one increment per topic."""
        for topic, n in collections.Counter(topics).items():
            counter.labels(loop, topic).inc(n)
