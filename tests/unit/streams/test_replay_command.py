"""``clingate replay``: the contract's example, determinism, bad input, provenance."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology
from state import RamStore
from streams.cli.replay import app
from streams.replay.engine import replay_stream
from tests.replay_example import EXAMPLE, assert_state_close, needs_example

_NER_GATE = {
    "kind": "gate",
    "ts": "2026-05-04T10:00:00Z",
    "task": "ner",
    "patient_id": "p1",
    "candidate_id": "c1",
    "payload": {"entity": "Patient", "category": "Diagnosis"},
}


def _run(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stderr if result.stderr_bytes is not None else result.output


@needs_example
@pytest.mark.parametrize("store", ["memory", "rocksdb"])
def test_replay_reproduces_the_contract_example(tmp_path, store):
    out, state = tmp_path / "decisions.jsonl", tmp_path / "state.json"
    code, _ = _run(
        tmp_path,
        "--in", str(EXAMPLE / "events.jsonl"),
        "--out", str(out),
        "--state-out", str(state),
        "--store", store,
        "--no-maintenance",
    )  # fmt: skip
    assert code == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    want = [json.loads(line) for line in (EXAMPLE / "decisions.jsonl").read_text().splitlines()]
    assert [(d["candidate_id"], d["decision"]) for d in got] == [
        (d["candidate_id"], d["decision"]) for d in want
    ]
    assert_state_close(json.loads(state.read_text()), json.loads((EXAMPLE / "state.json").read_text()))


@needs_example
def test_replaying_twice_gives_byte_identical_outputs(tmp_path):
    outputs = []
    for run, commit_every in (("a", "1000"), ("b", "7")):
        out, state = tmp_path / f"{run}.jsonl", tmp_path / f"{run}.json"
        code, _ = _run(
            tmp_path,
            "--in", str(EXAMPLE / "events.jsonl"),
            "--out", str(out),
            "--state-out", str(state),
            "--commit-every", commit_every,
            "--provenance",
        )  # fmt: skip
        assert code == 0
        outputs.append((out.read_bytes(), state.read_bytes()))
    assert outputs[0] == outputs[1]


def test_bad_lines_are_reported_with_line_numbers_and_skipped(tmp_path):
    lines = [
        json.dumps(_NER_GATE),
        "{not json",
        json.dumps({**_NER_GATE, "kind": "vote"}),
        json.dumps({**_NER_GATE, "task": "summary"}),
        json.dumps({**_NER_GATE, "candidate_id": None}),
        "",
        json.dumps({**_NER_GATE, "kind": "verdict", "verdict": "maybe", "source": "verifier_mmed"}),
        json.dumps({**_NER_GATE, "candidate_id": "c2"}),
    ]
    events = tmp_path / "events.jsonl"
    events.write_bytes(("\n".join(lines) + "\n").encode() + b'{"kind": "gate", "ts": "\xff"}\n')
    out = tmp_path / "decisions.jsonl"
    code, stderr = _run(tmp_path, "--in", str(events), "--out", str(out))
    assert code == 0
    assert [json.loads(line)["candidate_id"] for line in out.read_text().splitlines()] == ["c1", "c2"]
    dead = [json.loads(line) for line in (tmp_path / "decisions.jsonl.dlq.jsonl").read_text().splitlines()]
    assert [d["line"] for d in dead] == [2, 3, 4, 5, 6, 7, 9]
    assert "not UTF-8" in dead[6]["error"]
    assert dead[0]["raw"] == "{not json"
    assert "unknown kind 'vote'" in dead[1]["error"]
    assert "unknown task 'summary'" in dead[2]["error"]
    assert "missing field 'candidate_id'" in dead[3]["error"]
    assert "unknown verdict 'maybe'" in dead[5]["error"]
    for number in (2, 3, 4, 5, 6, 7):
        assert f"line {number}:" in stderr


def test_decision_lines_follow_the_contract_and_provenance_follows_decision():
    engine = DBPMEngine(DBPMConfig(), load_ontology())
    plain, with_provenance = io.StringIO(), io.StringIO()
    for sink, provenance in ((plain, False), (with_provenance, True)):
        replay_stream(
            io.StringIO(json.dumps(_NER_GATE) + "\n"),
            sink,
            io.StringIO(),
            RamStore(),
            engine,
            provenance=provenance,
        )
    assert plain.getvalue() == '{"candidate_id": "c1", "decision": "ALLOW"}\n'
    extended = json.loads(with_provenance.getvalue())
    assert list(extended)[:2] == ["candidate_id", "decision"]
    assert extended["rule"] == "no_evidence"
    assert extended["signature"] == "patient"


def test_store_path_must_be_new(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps(_NER_GATE) + "\n")
    (tmp_path / "db").mkdir()
    code, _ = _run(
        tmp_path, "--in", str(events), "--out", str(tmp_path / "o.jsonl"), "--store", "rocksdb",
        "--store-path", str(tmp_path / "db"),
    )  # fmt: skip
    assert code != 0
