"""Exactly-once under chaos: SIGKILLed workers, a restarted broker, a worker that never comes back.

Every scenario runs the soak of :mod:`streams.bench.chaos` (the CI-sized version of ``clingate bench
chaos``): a synthetic stream replayed through ``clingate worker`` subprocesses while something is
broken at seeded points, then three end conditions: no candidate without a decision, no candidate
with two different decision records, and decisions and memory equal to the in-process engine's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.bench.chaos import SoakReport, kill_for_good, restart_broker, run_soak
from streams.broker import LocalKafka
from streams.settings import get_settings

pytestmark = pytest.mark.integration


def _assert_exactly_once(report: SoakReport, disruptions: int) -> None:
    print(report.render())
    assert len(report.disruptions) == disruptions, "the replay ended before every disruption"
    assert report.audit.missing == []
    assert report.audit.conflicting == []
    assert report.decisions_equal
    assert report.state_equal


def test_soak_keeps_exactly_once_under_repeated_sigkill(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Scenario: one worker is SIGKILLed twice at random points of a 3,000-event soak, restarted each time.

    Re-delivered verdicts are skipped (the memory equals the in-process engine's), re-delivered
    candidates repeat their decision byte for byte, and no candidate is committed without one.
    """
    report = run_soak(
        kafka_bootstrap, tmp_path, events=3000, disruptions=2, epoch=500, seed=11, timeout_s=120.0
    )
    _assert_exactly_once(report, 2)


def test_survivor_takes_over_a_sigkilled_workers_partitions_with_state(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: two workers share the app; one is SIGKILLed mid-soak and never restarted.

    After the session timeout the survivor is assigned the dead worker's verdict and candidate
    partitions, continues from its standby copy of their memory, and the soak ends exactly once.
    """
    report = run_soak(
        kafka_bootstrap, tmp_path, events=2000, disruptions=1, epoch=500, seed=5, workers=2,
        disrupt=kill_for_good(1), timeout_s=120.0,
    )  # fmt: skip
    _assert_exactly_once(report, 1)


def test_soak_stays_exactly_once_across_a_broker_restart(tmp_path: Path) -> None:
    """Scenario: a dedicated native broker is stopped and started again (same data, same port) mid-soak.

    Producers, the worker and the replay's clients ride out the outage (retries, reconnects, a group
    rejoin); afterwards the end conditions hold as without the outage.
    """
    broker = LocalKafka(tmp_path / "broker", home=get_settings().home)
    bootstrap = broker.start()
    try:
        report = run_soak(
            bootstrap, tmp_path, events=2000, disruptions=1, epoch=500, seed=3,
            disrupt=restart_broker(broker), timeout_s=120.0,
        )  # fmt: skip
    finally:
        broker.stop()
    _assert_exactly_once(report, 1)
