"""Poison records on every consumed topic, through every runtime as the product runs it (the CI version of
``clingate bench poison``; the suite itself is :mod:`streams.testing.poison`).

Real subprocesses on the session broker: ``clingate worker`` (memory writer, gate, clinical agent), the
request runtime (``clingate worker --role requests``), ``clingate arbiter worker``, ``clingate generator``
and ``clingate verifier`` against ``clingate llm serve --backend test --hashed``. A few hundred records:
on each fed topic 12 good and 12 bad ones (every kind of bad record at least once), six oversized bad
values (one near the 8 MiB topic limit, one with a 2 MiB key whose dead letter must be cut, 2 MiB ones),
large valid records (2 MiB texts) whose outputs must come, and valid records too large for their outputs
or state. Measured on the 2-core development VM: ~30 s for the suite after the broker is up.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from streams.testing.poison import DEFAULT_KINDS, RUNTIMES, UNFED, Kind, Scale, run_poison
from topics.catalog import CATALOG, DBPM_CANDIDATES, FHIR_UPDATES

pytestmark = pytest.mark.integration


def test_bad_records_on_every_consumed_topic_are_dead_lettered_once_and_good_ones_flow_unchanged(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: every consumed topic gets good records with bad ones drawn by the Hypothesis strategies
    interleaved, while every runtime runs.

    Every bad record is on its topic's dead-letter topic exactly once, at its coordinates, byte for byte
    (or cut to fit, the cut described), with the error type of the first check that fails; every good
    record's outputs equal the in-process reference's, record for record; the memory equals the
    in-process engine's; no process exited or restarted an agent; every group committed the end of every
    partition it consumes.
    """
    started = time.monotonic()
    report = run_poison(kafka_bootstrap, tmp_path, scale=Scale(), seed=7, timeout_s=60.0)
    print(report.render())
    print(f"test wall time {time.monotonic() - started:.1f} s")

    consumed = {spec.name for spec in CATALOG if spec.consumed}
    assert consumed == set(RUNTIMES) | set(UNFED), "a consumed topic is neither fed nor said to be unfed"
    for topic in RUNTIMES:
        kinds = report.topics[topic].bad_kinds
        assert set(DEFAULT_KINDS) <= {Kind(k) for k in kinds}, f"{topic}: {kinds}"
    assert sum(t.bad_kinds[Kind.OVERSIZE] for t in report.topics.values()) == 6
    assert report.topics[DBPM_CANDIDATES].truncated >= 1, "the 2 MiB key's dead letter was not cut"
    assert report.topics[DBPM_CANDIDATES].bad_kinds[Kind.TOO_LARGE] == 1
    assert report.topics[FHIR_UPDATES].bad_kinds[Kind.TOO_LARGE] == 1
    assert report.passed, report.render()
