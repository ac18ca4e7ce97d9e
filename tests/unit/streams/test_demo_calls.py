"""The demo's waits follow the LLM groups' calls: scraped from their /metrics, extended by progress."""

from __future__ import annotations

import time

import pytest
from prometheus_client import start_http_server

from streams.demo import calls as calls_module
from streams.demo.calls import GroupCalls, LlmCalls, Stall
from streams.groups.llm import new_metrics
from streams.local.broker import free_port


def test_a_groups_calls_in_flight_count_and_mean_latency_are_read_from_its_metrics() -> None:
    metrics = new_metrics()
    port = free_port()
    server, thread = start_http_server(port, registry=metrics.registry)
    try:
        metrics.in_flight.labels("verifier").set(3)
        for seconds in (2.0, 4.0):
            metrics.llm.latency.labels("verifier", "ner_verdict").observe(seconds)
        calls = LlmCalls({"verifier-1": port, "gone": free_port()})
        assert calls.groups()["verifier-1"] == GroupCalls(3, 2, 3.0)
        assert calls.groups()["gone"] == GroupCalls(0, 0, None), "an endpoint not up keeps the last figures"
        assert calls.done() == 2 and calls.stall_s() == calls_module.STALL_FLOOR_S
        assert "verifier-1: in flight 3, 2 calls, 3.0 s each" in calls.text()
    finally:
        server.shutdown()
        thread.join()


def test_a_slow_model_widens_the_stall_window() -> None:
    calls = LlmCalls({})
    calls._last = {"generator": GroupCalls(1, 5, 40.0)}  # a CPU model: 40 s a call
    assert calls.stall_s() == calls_module.STALL_CALLS * 40.0


def test_a_wait_expires_only_after_a_stall_and_progress_pushes_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(calls_module, "STALL_FLOOR_S", 0.2)
    stall = Stall(LlmCalls({}), 0.2)
    assert not stall.expired(1)
    time.sleep(0.1)
    assert not stall.expired(2), "progress"
    time.sleep(0.15)
    assert not stall.expired(2), "within the window since the last progress"
    time.sleep(0.1)
    assert stall.expired(2)
