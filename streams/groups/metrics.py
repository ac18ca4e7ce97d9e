"""Prometheus metrics of the consumer groups: the LLM generator and verifier, the docs worker (the arbiter).

Each group's process builds one registry with its metrics and serves it
(:func:`streams.runtime.metrics.serve`); names, types and labels in docs/metrics.md.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from schemas.docs import Disposition
from streams.llm.metrics import LlmMetrics
from streams.runtime.metrics import LibrdkafkaLag, LoopMetrics


class LlmGroupMetrics:
    """Metrics of the LLM consumer groups (``clingate generator`` / ``clingate verifier``).

    * the calls themselves: :class:`LlmMetrics` (``clingate_llm_calls_total{group,call_type,outcome}``,
      retries, ``clingate_llm_call_seconds``); verifier calls per task are the ``*_verdict`` call types;
    * ``clingate_llm_in_flight{group}``: records being processed;
    * ``clingate_llm_verifier_calls_saved_total{task}``: BLOCK decisions seen on
      ``clingate.dbpm.decisions``, each one verifier call not made;
    * ``clingate_llm_verdicts_total{task,verdict,defaulted}``: memory verdicts published;
    * ``clingate_llm_unprocessed_total{group,reason}``: records dead-lettered, by reason.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.llm = LlmMetrics(registry)
        self.loops = LoopMetrics(registry)
        self.in_flight = Gauge(
            "clingate_llm_in_flight", "Records being processed.", ["group"], registry=registry
        )
        self.calls_saved = Counter(
            "clingate_llm_verifier_calls_saved", "Verifier calls not made because the gate BLOCKed.",
            ["task"], registry=registry,
        )  # fmt: skip
        self.verdicts = Counter(
            "clingate_llm_verdicts", "Memory verdicts published.", ["task", "verdict", "defaulted"],
            registry=registry,
        )  # fmt: skip
        self.unprocessed = Counter(
            "clingate_llm_unprocessed", "Records dead-lettered, by reason.", ["group", "reason"],
            registry=registry,
        )  # fmt: skip


class DocsMetrics:
    """The docs worker's metrics (``clingate arbiter worker``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.dispositions = Counter(
            "clingate_docs_dispositions", "Documents decided, by V5 decision and LLM mode.",
            ["decision", "llm_mode"], registry=registry,
        )  # fmt: skip
        self.in_flight = Gauge("clingate_docs_in_flight", "Documents being decided now.", registry=registry)
        self.dead_letters = Counter(
            "clingate_docs_dead_letters", "Records routed to a dead-letter topic.", ["topic"],
            registry=registry,
        )  # fmt: skip
        self.llm = LlmMetrics(registry)
        self.lag = LibrdkafkaLag(registry)
        self.loops = LoopMetrics(registry)

    def decided(self, disposition: Disposition) -> None:
        """Count a decided disposition (the docs worker counts it when the document is decided)."""
        self.dispositions.labels(str(disposition.decision), str(disposition.llm_mode)).inc()
