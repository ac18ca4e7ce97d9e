"""``clingate bench ablation --via-kafka``: an arm run through the broker and a worker of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.bench.ablation import ARMS, cohort_stream, run_in_process, run_via_kafka

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def test_an_arm_through_kafka_decides_every_candidate_as_the_in_process_arm(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: the full arm of a 4-patient cohort, replayed through the broker to a fresh worker
    started with the arm's settings, gives the in-process arm's decisions and rules. (One arm: the
    others differ only in the settings the worker is started with, which the unit tests of the arms
    and of the settings cover, and each costs a worker start.)"""
    stream = cohort_stream(4, 20, seed=42)
    arm = ARMS[0]
    via_kafka = run_via_kafka(arm, stream, kafka_bootstrap, tmp_path / arm.name)
    in_process = run_in_process(arm, stream)
    assert via_kafka.decisions == in_process.decisions
    assert via_kafka.provenance == in_process.provenance
    assert via_kafka.selectivity == in_process.selectivity
