"""``clingate demo`` end to end against the session broker (the KAFKA_BOOTSTRAP_SERVERS path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streams.testing.browser import CHROMIUM

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RUN_S = 840
"""How long a demo run may take (each test a minute more). The run starts every part of clingate as a
process of its own, the console and Chromium too, on a CPU the rest of the suite keeps busy, so the test
waits for it to end as the chaos soaks wait for their workers: under the suite's load a run took longer
than the 300 s allowed before (docs/performance.md)."""


def _processes_with(marker: bytes) -> list[str]:
    """Command lines of live processes whose environment holds ``marker``: every process the demo
    started inherits its environment, and only they (another demo on the machine is not counted)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in environ:
            found.append(b" ".join(cmdline).decode(errors="replace"))
    return found


@pytest.mark.timeout(RUN_S + 60)
def test_demo_runs_end_to_end_and_leaves_no_worker(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Scenario: the demo runs tiny streams against an existing broker.

    It exits 0 (every check passed: the DBPM lockstep slice, clinical and arbiter outputs of the
    workers equal the in-process results), reports the bulk phase, prints the summary with latency
    per stream, writes a self-contained report.html and stops the workers, groups and LLM test server
    it started. The real-model step runs one narrative when the smollm2 extra is installed. The console
    runs on the demo's broker and, where Chromium is installed, each of its pages is photographed next to
    report.html and shows what it must, and so is the report. Everything the run writes is in its
    ``--out`` folder: nothing is left in the working directory.
    """
    run = uuid.uuid4().hex
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "DEMO_TEST_RUN": run}
    out, cwd = tmp_path / "out", tmp_path / "cwd"
    cwd.mkdir()
    report, summary_path = out / "report.html", out / "summary.json"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "streams.cli", "demo", "--patients", "4", "--lockstep", "2",
         "--model-narratives", "1",
         "--clinical-patients", "8", "--documents", "7", "--fhir-rate", "0", "--docs-rate", "0",
         "--out", str(out)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_S,
    )  # fmt: skip
    failures = json.loads(summary_path.read_text("utf-8"))["failures"] if summary_path.exists() else []
    assert done.returncode == 0, f"{failures}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    assert summary["passed"] and all(summary["checks"].values()), summary["failures"]
    named = {"dbpm_lockstep_decisions_equal", "dbpm_one_verdict_per_candidate_let_through",
             "dbpm_channels_within_caps", "clinical_equal", "gates_equal", "gates_rule_b", "gates_scda",
             "agent_budget", "agent_answers", "agent_replay", "agent_gates", "arbiter_equal"}  # fmt: skip
    assert named <= set(summary["checks"])
    dbpm = summary["dbpm"]
    assert dbpm["candidates"] > 0 and len(dbpm["config"]) == 1, "one configuration decided everything"
    assert {"verifier_mmed", "rule_based"} <= set(dbpm["verdicts_by_source"]), "the Filter is live"
    assert set(dbpm["patterns"]) == {"ner", "re", "qa"} and dbpm["verifier_calls_saved"] >= 0
    assert dbpm["lift"] and all({"lift", "ci", "status"} <= set(v) for v in dbpm["lift"].values())
    assert set(dbpm["coverage"]) <= {"settled", "timeout", "no_ner"} and dbpm["coverage"]
    gates = summary["output_gates"]
    assert sorted(gates["cases"]) == ["PT-TEST-008", "PT-TEST-009", "PT-TEST-010", "PT-TEST-012"]
    assert gates["citations"]["rev0"]["checked"] == 53, "the golden runs' revision 0 is Table 4 Part B"
    assert gates["cases"]["PT-TEST-008"]["routes"][-1] == "PROCEED (revision_budget_exhausted)"
    assert "clingate demo summary" in done.stdout and "latency p99" in done.stdout
    assert "lockstep slice (2 patients" in done.stdout and "bulk phase (2 patients" in done.stdout
    html = report.read_text(encoding="utf-8")
    assert "<svg" in html and "QA lift per category" in html and "Throughput and latency per stream" in html
    assert "Output gates: the golden runs" in html and "The clinician&#x27;s agent" in html
    agent = summary["agent"]
    assert {a["path"] for a in agent} == {"direct", "single_tool", "multi_tool", "clarification"}
    assert all(a["llm_calls"] == a["budget"] and a["replayed"] for a in agent)
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    console = summary["console"]
    assert console["url"].startswith("http://127.0.0.1:") and "the console is up: http://" in done.stdout
    if CHROMIUM.exists():
        assert summary["checks"]["console_pages"], "every page shows what it must"
        assert {p["name"] for p in console["pages"]} >= {"login", "pharmacist-board", "pharmacist-patient"}
        assert all((out / p["screenshot"]).stat().st_size > 0 for p in console["pages"]), "next to the report"
        assert 'src="console-pharmacist-board.png"' in html
        assert (out / "report.png").stat().st_size > 0, "the report is photographed too"
    assert list(cwd.iterdir()) == [], "nothing is written outside --out"
    assert done.stdout.rstrip().splitlines()[-1].startswith(f"report: {report} ")
    assert "clingate demo --serve" in done.stdout.rstrip().splitlines()[-1]
    assert _processes_with(f"DEMO_TEST_RUN={run}".encode()) == []


@pytest.mark.timeout(RUN_S + 60)
def test_demo_with_every_optional_part_off_says_what_it_left_out_and_passes(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: the demo runs with no generated clinical patients, no lockstep slice and no real model.

    It exits 0 with every check passed; the agent's questions about generated patients (the
    prescription for PT-DEMO-0003, the search for the Smiths) are not asked and the summary says why,
    naming the option; the other questions are asked and checked.
    """
    summary_path = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "streams.cli", "demo", "--patients", "2", "--lockstep", "0",
         "--clinical-patients", "0", "--documents", "1", "--model-narratives", "0", "--fhir-rate", "0",
         "--docs-rate", "0", "--out", str(tmp_path)],
        cwd=REPO, env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}, capture_output=True,
        text=True, timeout=RUN_S,
    )  # fmt: skip
    failures = json.loads(summary_path.read_text("utf-8"))["failures"] if summary_path.exists() else []
    assert done.returncode == 0, f"{failures}\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    assert summary["passed"] and summary["checks"]["agent_gates"] and summary["checks"]["agent_budget"]
    assert set(summary["not_run"]) == {
        "agent: Prescribe warfarin 5 mg daily for PT-DEMO-0003",
        "agent: Find patient Smith and review the chart",
    }
    assert all("--clinical-patients" in why for why in summary["not_run"].values())
    assert {a["path"] for a in summary["agent"]} == {"direct", "single_tool", "multi_tool"}
    assert "not asked: 'Prescribe warfarin" in done.stdout
