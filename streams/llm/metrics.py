"""Prometheus metrics of the calls through :class:`streams.llm.LlmClient` (:class:`LlmMetrics`).

Here, beside the client, because every LLM user counts its calls on them: the docs worker, the
generator and verifier groups and the clinician's agent (names, types and labels in docs/metrics.md).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from streams.llm.result import LlmFailed, LlmOk

LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0)
"""Histogram buckets in seconds for the wall time of LLM work: one call, or a turn of calls."""


class LlmMetrics:
    """Calls through :class:`streams.llm.LlmClient`, by caller group, call type and outcome.

    Shared by every LLM user: the docs worker (group ``docs``) and the generator and verifier
    groups (:class:`streams.groups.metrics.LlmGroupMetrics`), so a dashboard sums LLM traffic over one metric.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "clingate_llm_calls", "LLM calls by group, call type and outcome (ok or the failure kind).",
            ["group", "call_type", "outcome"], registry=registry,
        )  # fmt: skip
        self.retries = Counter(
            "clingate_llm_retries", "HTTP attempts after the first one.", ["group", "call_type"],
            registry=registry,
        )  # fmt: skip
        self.latency = Histogram(
            "clingate_llm_call_seconds", "Wall time of one call, retries included, queueing excluded.",
            ["group", "call_type"], buckets=LLM_BUCKETS, registry=registry,
        )  # fmt: skip

    def observe(self, group: str, answer: LlmOk[Any] | LlmFailed) -> None:
        """Count one call's answer for the caller ``group``."""
        call_type = str(answer.call_type)
        outcome = "ok" if isinstance(answer, LlmOk) else str(answer.kind)
        self.calls.labels(group, call_type, outcome).inc()
        if answer.attempts > 1:
            self.retries.labels(group, call_type).inc(answer.attempts - 1)
        self.latency.labels(group, call_type).observe(answer.latency_s)
