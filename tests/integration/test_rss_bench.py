"""``clingate bench rss`` against the session broker: one production-configured worker fed live DBPM
traffic, sampled after every size once each candidate is decided and each verdict applied.

The short run checks what the command measures with, never a figure of speed: a sample per size, the
verdicts of the candidates the gate let through, and the stores' memory within its budget. The long run
(``make soak``) holds the worker to the bound the command prints: its resident set after 600,000
candidates at most 1.10 times the one after 200,000.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.bench.rss import BOUND, SIZES, rss_run
from streams.runtime.settings import Settings

pytestmark = pytest.mark.integration


def test_a_worker_is_sampled_after_each_size_within_its_store_budget(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    said: list[str] = []
    samples = rss_run(kafka_bootstrap, tmp_path, 1_000, 3_000, said.append)
    assert [s.candidates for s in samples] == [1_000, 2_000, 3_000]
    assert len(said) == 3
    budget = Settings().store_cache_bytes
    for before, after in zip([None, *samples], samples, strict=False):
        assert 0 < after.verdicts <= after.candidates
        assert before is None or before.verdicts < after.verdicts
        assert after.rss_bytes > 0 and 0 < after.store_cache_bytes <= budget


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_a_workers_resident_set_is_bounded(kafka_bootstrap: str, tmp_path: Path) -> None:
    first, last = SIZES["full"]
    samples = rss_run(kafka_bootstrap, tmp_path, first, last, print)
    assert samples[-1].rss_bytes <= BOUND * samples[0].rss_bytes, [s.rss_bytes for s in samples]
