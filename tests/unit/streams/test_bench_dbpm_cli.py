"""``clingate bench dbpm``: the CI smoke run and the benchmark's bookkeeping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology, parse_event
from processors.dbpm.measurement import ChannelStatus, channel_population
from state import RamStore
from state.kinds import StoreKind
from streams.bench.dbpm import run_benchmark
from streams.cli.bench import app
from streams.testing.dbpm_stream import generate_events


def test_smoke_bench_dbpm_10000_events_on_both_stores_runs_and_prints_its_figures() -> None:
    """The CI smoke run: the short benchmark completes and prints every figure (no timing assertion)."""
    result = CliRunner().invoke(app, ["dbpm", "--events", "10000", "--store", "both"])
    print(result.output)
    assert result.exit_code == 0, result.output
    for figure in ("verdict updates/s", "gate decisions/s", "p50", "p99", "on disk", "RSS", "decile"):
        assert figure in result.output
    assert "store=memory" in result.output and "store=rocksdb" in result.output


def test_write_stream_writes_the_largest_size_and_benchmarks_nothing(tmp_path: Path) -> None:
    out = tmp_path / "stream.jsonl"
    result = CliRunner().invoke(
        app, ["dbpm", "--events", "300,700", "--write-stream", str(out), "--seed", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "decile" not in result.output
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 700
    assert all(parse_event(json.loads(line)) for line in lines)


@pytest.mark.parametrize("sizes", ["", "ten", "0", "100,-5"])
def test_bad_event_counts_are_rejected_with_a_usage_error(sizes: str) -> None:
    result = CliRunner().invoke(app, ["dbpm", "--events", sizes, "--store", "memory"])
    assert result.exit_code == 2


def test_a_run_accounts_for_every_event_and_reports_ten_deciles() -> None:
    result = run_benchmark(3_001, StoreKind.memory, commit_every=7)
    assert result.verdicts + result.gates == 3_001
    assert sum(count for _, _, count in result.decisions) == result.gates
    assert [d.decile for d in result.deciles] == list(range(1, 11))
    assert result.deciles[0].first_event == 1 and result.deciles[-1].last_event == 3_001
    assert all(
        a.last_event + 1 == b.first_event for a, b in zip(result.deciles, result.deciles[1:], strict=False)
    )
    assert result.disk_bytes is None and result.logical_bytes > 0
    paired = sum(c.counts.fail_total + c.counts.pass_total for c in result.selectivity.cells)
    assert 0 < paired <= result.verdicts


def test_the_same_stream_gives_the_same_decisions_on_both_stores() -> None:
    memory = run_benchmark(2_000, StoreKind.memory)
    rocksdb = run_benchmark(2_000, StoreKind.rocksdb)
    assert memory.decisions == rocksdb.decisions
    assert memory.population == rocksdb.population
    assert memory.selectivity == rocksdb.selectivity
    assert rocksdb.disk_bytes is not None and rocksdb.disk_bytes > 0


def test_channel_population_counts_block_clearing_patterns_from_the_engine_snapshot() -> None:
    config = DBPMConfig()
    engine = DBPMEngine(config, load_ontology())
    store = RamStore()
    fails: dict[str, int] = {}
    with store.transaction() as txn:
        for obj in generate_events(4_000):
            event = parse_event(obj)
            txn, _ = engine.process(txn, event, event.time)
            if obj["kind"] == "verdict" and obj["verdict"] != "success":
                fails[obj["task"]] = fails.get(obj["task"], 0) + 1
    snapshot = engine.snapshot(store.transaction())
    report = channel_population(snapshot, config, fails)
    ner = next(c for c in report.channels if c.task == "ner")
    assert ner.patterns == len(snapshot["blocklist"]["ner"])
    assert ner.whitelist == len(snapshot["whitelist"]["ner"])
    assert ner.status is ChannelStatus.POPULATED  # "patient" is rejected often enough to block
    assert report.as_of == snapshot["as_of"]
