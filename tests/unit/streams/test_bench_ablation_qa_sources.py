"""``clingate bench ablation --qa-sources``: one arm per QA signal source, the stream that carries what
each reads, and the command's output keys beside the paper's figures (§6.3, Table 11)."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import get_args

import pytest
from typer.testing import CliRunner

from processors.dbpm import DBPMConfig
from processors.dbpm.config import QA_SIGNAL_NER_COVERAGE, QA_SIGNALS
from streams.bench.ablation import QA_SOURCE_ARMS, QA_SOURCES_DISPERSION
from streams.cli import app
from streams.runtime.settings import Settings, get_settings
from streams.testing.dbpm_stream import StreamShape, generate_events


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arms are the environment's settings with one changed: start from the defaults."""
    for name in [n for n in os.environ if n.startswith("CLINGATE_DBPM_")]:
        monkeypatch.delenv(name)
    get_settings.cache_clear()


def _qa_gates(shape: StreamShape, events: int = 20_000) -> list[dict]:
    return [e for e in generate_events(events, shape) if e["kind"] == "gate" and e["task"] == "qa"]


def test_the_setting_offers_exactly_the_engines_sources() -> None:
    assert set(get_args(Settings.model_fields["dbpm_qa_signal"].annotation)) == set(QA_SIGNALS)
    assert Settings().dbpm_qa_signal == QA_SIGNAL_NER_COVERAGE


def test_each_source_arm_changes_only_the_qa_signal_and_coverage_is_the_reference() -> None:
    assert QA_SOURCE_ARMS[0].name == QA_SIGNAL_NER_COVERAGE
    assert sorted(arm.name for arm in QA_SOURCE_ARMS) == sorted(QA_SIGNALS)
    for arm in QA_SOURCE_ARMS:
        assert arm.config() == DBPMConfig(qa_signal=arm.name)
        assert arm.environment() == {"CLINGATE_DBPM_QA_SIGNAL": arm.name}


def test_the_stream_carries_the_extra_signals_only_when_asked() -> None:
    default = _qa_gates(StreamShape(seed=7))
    assert all("parse_failed" not in g["payload"] for g in default)
    assert list(generate_events(3000, StreamShape(seed=7))) == list(
        generate_events(3000, StreamShape(seed=7, re_fail_dispersion=0.0, qa_parse_failure_rate=0.0))
    )
    flagged = _qa_gates(StreamShape(seed=7, qa_parse_failure_rate=0.5))
    share = sum(g["payload"].get("parse_failed") is True for g in flagged) / len(flagged)
    assert 0.4 < share < 0.6
    spread = _qa_gates(StreamShape(seed=7, re_fail_dispersion=QA_SOURCES_DISPERSION))

    def q3(gates: list[dict]) -> float:
        return statistics.quantiles([g["payload"]["difficulty"] for g in gates], n=4)[2]

    assert q3(default) < 0.22 < 0.25 < q3(spread), "the paper's third quartile is 0.29 (§6.3)"


def test_clingate_bench_ablation_qa_sources_prints_and_writes_each_source_beside_the_paper(
    tmp_path: Path,
) -> None:
    json_out, html_out = tmp_path / "qa-sources.json", tmp_path / "qa-sources.html"
    argv = ["bench", "ablation", "--qa-sources", "--patients", "40", "--population", "120", "--seed", "42"]
    done = CliRunner().invoke(app, [*argv, "--json", str(json_out), "--html", str(html_out)])
    assert done.exit_code == 0, done.output
    report = json.loads(json_out.read_text())
    assert report["reference"] == QA_SIGNAL_NER_COVERAGE
    assert {a["name"]: a["qa_signal"] for a in report["arms"]} == {s: s for s in QA_SIGNALS}
    part = report["qa_sources"]
    assert set(part) == {"stream", "sources"}
    assert {"qa_pairs", "parse_flagged", "difficulty", "difficulty_above_threshold", "category_fail_rates",
            "category_fail_rate_spread"} <= set(part["stream"])  # fmt: skip
    rows = part["sources"]
    assert [r["signal"] for r in rows] == list(QA_SIGNALS)
    for row in rows:
        assert set(row) == {
            "signal",
            "name",
            "paper",
            "arm",
            "lift",
            "path_lift",
            "tagged",
            "outcome",
            "evidence",
        }
        assert set(row["paper"]) == {"figure", "failure_mode", "basis"}
        assert set(row["tagged"]) == {"fail", "fail_total", "pass", "pass_total"}
        assert {"status", "value", "ci_low", "ci_high"} <= set(row["lift"])
    figures = [r["paper"]["figure"] for r in rows]
    for quoted in ("lift 0.006", "signal absent", "lift 0.05", "lift 0.00", "1.52–1.84"):
        assert any(quoted in figure for figure in figures) and quoted in done.stdout
    by_signal = {r["signal"]: r for r in rows}
    assert by_signal["parse_failure"]["tagged"]["fail"] == by_signal["parse_failure"]["tagged"]["pass"] == 0
    assert by_signal["parse_failure"]["evidence"]["parse_flagged"] == 0
    assert "QA signal sources" in done.stdout
    page = html_out.read_text()
    assert "The five QA signal sources" in page and all(f"<td>{s}</td>" in page for s in QA_SIGNALS)
