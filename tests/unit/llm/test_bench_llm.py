"""Smoke test of the Little's-law benchmark (the full run is `clingate bench llm`)."""

from __future__ import annotations

from streams.bench.llm import run_benchmark


def test_benchmark_points_never_beat_the_littles_law_bound_and_lose_no_call():
    points = run_benchmark((1, 4), (0.02,), quick=True)
    assert [(p.concurrency, p.latency_s) for p in points] == [(1, 0.02), (4, 0.02)]
    for point in points:
        assert point.failures == 0 and point.calls == point.concurrency * 2
        assert 0 < point.ratio <= 1.05
        assert point.p50_s >= 0.02 * 0.95 and point.cpu_ms_per_call > 0
