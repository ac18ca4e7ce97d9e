"""``clingate bench runtime`` at the smallest sizes: every part runs against the session broker and
yields every figure the README's table and ``--json`` promise (the figures themselves are measured
by the command, never asserted here)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from streams.bench.runtime import KEYS, SIZES, run_parts, table

pytestmark = pytest.mark.integration

SMOKE = {"kafka": 20_000, "loop": 5_000, "memory": 4_000, "gate": 1_000, "clinical": 5, "llm": 200,
         "replay": 2_000}  # fmt: skip


@pytest.mark.skipif(shutil.which("java") is None, reason="Kafka's perf tools need Java")
def test_every_part_runs_and_yields_every_figure(kafka_bootstrap: str, tmp_path: Path) -> None:
    assert set(SMOKE) == set(SIZES)
    figures = run_parts(kafka_bootstrap, tmp_path, SMOKE, lambda _line: None)
    for key in KEYS:
        assert math.isfinite(figures[key]) and figures[key] > 0, (key, figures.get(key))
    lines = table(figures)
    assert lines[0].split()[:2] == ["runtime", "records/s"]
    assert any(line.startswith("replay --via-kafka / in process") for line in lines)
