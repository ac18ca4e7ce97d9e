"""``clingate bench runtime`` at the smallest sizes: every part runs against the session broker and
yields every figure the README's table and ``--json`` promise (the figures themselves are measured
by the command, never asserted here). The quix-streams peer's figures are there too, unless the run
said why quix-streams could not be installed (no package index on a first run)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from streams.bench.runtime import KEYS, PEER_KEYS, SIZES, run_parts, table

# Every part starts its own workers and waits for their outputs, on a CPU the rest of the suite keeps busy:
# the test waits for them as the chaos soaks wait for theirs, not for the default 300 s, which a run under
# the suite's load outlasted (docs/performance.md).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

SMOKE = {"kafka": 10_000, "loop": 3_000, "memory": 2_000, "gate": 1_000, "clinical": 3, "llm": 100,
         "replay": 1_000}  # fmt: skip


@pytest.mark.skipif(shutil.which("java") is None, reason="Kafka's perf tools need Java")
def test_every_part_runs_and_yields_every_figure(kafka_bootstrap: str, tmp_path: Path) -> None:
    assert set(SMOKE) == set(SIZES)
    said: list[str] = []
    figures = run_parts(kafka_bootstrap, tmp_path, SMOKE, said.append)
    peer = PEER_KEYS if "quix_records_per_s" in figures else ()
    if not peer:
        assert any("quix-streams peer: NOT MEASURED" in line for line in said), said
    for key in (*KEYS, *peer):
        assert math.isfinite(figures[key]) and figures[key] > 0, (key, figures.get(key))
    lines = table(figures)
    assert lines[0].split()[:2] == ["runtime", "records/s"]
    assert any(line.startswith("replay --via-kafka / in process") for line in lines)
