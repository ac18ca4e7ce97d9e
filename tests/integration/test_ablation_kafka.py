"""``clingate bench ablation --via-kafka``: an arm run through the broker and a worker of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.bench.ablation import (
    ARMS,
    QA_SOURCE_ARMS,
    QA_SOURCES_DISPERSION,
    cohort_stream,
    run_in_process,
    run_via_kafka,
)
from streams.testing.dbpm_stream import StreamShape

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


@pytest.mark.parametrize("signal", ["fail_mass", "difficulty"])
def test_a_qa_source_arm_through_kafka_decides_as_in_process(
    kafka_bootstrap: str, tmp_path: Path, signal: str
) -> None:
    """Scenario: a QA signal-source arm (``--qa-sources``) whose gate reads the memory's category
    aggregates (the error-class patterns; the fail counts and the whitelisted templates), replayed
    through the broker to a worker started with ``CLINGATE_DBPM_QA_SIGNAL``, reads them through the
    gates' merged view of the partitions and gives the in-process arm's decisions and rules."""
    stream = cohort_stream(
        4, 20, seed=42, shape=StreamShape(seed=42, re_fail_dispersion=QA_SOURCES_DISPERSION)
    )
    arm = next(arm for arm in QA_SOURCE_ARMS if arm.name == signal)
    via_kafka = run_via_kafka(arm, stream, kafka_bootstrap, tmp_path / arm.name)
    in_process = run_in_process(arm, stream)
    assert via_kafka.decisions == in_process.decisions
    assert via_kafka.provenance == in_process.provenance
    assert any(
        rule.startswith(("fail_mass", "fail_rate", "difficulty")) for (_, _, rule) in in_process.provenance
    )
