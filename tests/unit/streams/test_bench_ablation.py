"""``clingate bench ablation``: the cohort's stream, the arms in process, the command's JSON and HTML."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from processors.dbpm import DBPMConfig
from processors.dbpm.events import parse_time
from streams.bench.ablation import ARMS, CohortStream, cohort_stream, run_ablation, run_in_process
from streams.cli import app
from streams.runtime.settings import get_settings
from streams.testing.dbpm_stream import StreamShape, generate_events, generate_patients


@pytest.fixture(scope="module")
def stream() -> CohortStream:
    return cohort_stream(40, 120, seed=42)


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arms are the environment's settings with one changed: start from the defaults."""
    for name in [n for n in os.environ if n.startswith("CLINGATE_DBPM_")]:
        monkeypatch.delenv(name)
    get_settings.cache_clear()


def test_patients_carry_attributes_and_exactly_the_streams_events() -> None:
    shape = StreamShape(seed=3)
    patients = list(generate_patients(20, shape))
    events = [event for _, patient_events in patients for event in patient_events]
    assert events == list(generate_events(len(events), shape))
    attributes = [a for a, _ in patients]
    assert attributes == [a for a, _ in generate_patients(20, shape)]
    assert all(a.document_chars > 0 and a.patient_id == e[0]["patient_id"] for a, e in patients)


def test_the_cohort_stream_gates_each_stage_then_verifies_it_in_cohort_order(stream: CohortStream) -> None:
    events = list(stream.events())
    times = [parse_time(e["ts"]) for e in events]
    assert times == sorted(times)
    patients = list(dict.fromkeys(e["patient_id"] for e in events))
    assert patients == list(stream.cohort.ids)
    for stage in stream.stages:
        assert {g["kind"] for g in stage.gates} == {"gate"}
        assert {v["kind"] for v in stage.verdicts} == {"verdict"}
        assert len({g["ts"] for g in stage.gates}) == 1
        for gate, verdict in zip(stage.gates, stage.verdicts, strict=True):
            assert (gate["task"], gate["patient_id"]) == (verdict["task"], verdict["patient_id"])
            assert all(verdict["payload"][k] == v for k, v in gate["payload"].items() if isinstance(v, str))
    assert stream.candidates == sum(e["kind"] == "gate" for e in events)


def test_each_arm_changes_one_setting_and_the_full_arm_is_the_default_configuration() -> None:
    configs = {arm.name: arm.config() for arm in ARMS}
    assert configs["full"] == DBPMConfig()
    assert configs["memory_off"] == DBPMConfig().with_flags(disabled=True)
    assert configs["no_ontology"] == DBPMConfig().with_flags(ontology_filter=False)
    assert configs["no_cross_task"] == DBPMConfig().with_flags(cross_task=False)
    assert not configs["no_coverage"].qa_ner_buckets and configs["no_coverage"].flags == DBPMConfig().flags
    assert len({c.fingerprint() for c in configs.values()}) == len(ARMS)


def test_the_arms_run_paired_and_each_shows_its_mechanism(stream: CohortStream) -> None:
    results = {arm.name: run_in_process(arm, stream) for arm in ARMS}
    assert len({r.stream_digest for r in results.values()}) == 1
    full, off = results["full"].decision_counts(), results["memory_off"].decision_counts()
    assert full["ner"]["BLOCK"] > 0 and full["re"]["BLOCK"] > 0 and full["qa"]["DOWNGRADE"] > 0
    assert all(counts["BLOCK"] == counts["DOWNGRADE"] == 0 for counts in off.values())
    no_ontology = results["no_ontology"].decision_counts()
    assert no_ontology["re"]["BLOCK"] < full["re"]["BLOCK"] and no_ontology["ner"] == full["ner"]
    no_coverage = results["no_coverage"]
    assert all(rule != "ner_coverage_missing" for (_, _, rule) in no_coverage.provenance)
    population = results["full"].population
    assert population is not None
    assert next(c for c in population.channels if c.task == "re").block_eligible > 0  # ontology-fed


def test_the_report_pairs_every_arm_with_full(stream: CohortStream) -> None:
    report = run_ablation(stream, arms=ARMS[:2])
    assert [p["arm"] for p in report["paired"]] == ["memory_off"]
    re = report["paired"][0]["tasks"]["re"]
    assert re["delta"] == report["arms"][0]["verifier_calls_saved"]["blocks"]["re"] > 0
    assert report["cohort"]["patients"] == 40 and "ids" not in report["cohort"]


def test_clingate_bench_ablation_writes_json_and_html_and_the_full_arm_is_selective(tmp_path: Path) -> None:
    json_out, html_out = tmp_path / "ablation.json", tmp_path / "ablation.html"
    argv = ["bench", "ablation", "--patients", "50", "--population", "250", "--seed", "42"]
    done = CliRunner().invoke(app, [*argv, "--json", str(json_out), "--html", str(html_out)])
    assert done.exit_code == 0, done.output
    report = json.loads(json_out.read_text())
    assert [a["name"] for a in report["arms"]] == [arm.name for arm in ARMS]
    assert len(report["cohort"]["ids"]) == 50 and report["cohort"]["strata"]
    arms = {a["name"]: a for a in report["arms"]}
    # The paper's effect: the NER-coverage gate tags verifier-FAIL pairs more often (§6.3, Table 10).
    path = arms["full"]["qa_path_lift"]["lift"]
    assert path["status"] == "finite" and path["value"] > 1 and path["ci_low"] > 1
    history = next(r for r in arms["full"]["qa_categories"] if r["category"] == "history")
    assert history["lift"]["ci_low"] > 1 and 0.2 < history["coverage"] < 0.8
    assert {r["regime"] for r in arms["full"]["qa_categories"] if not r["ner_bucket"]} == {"fallback"}
    # The master switch: no BLOCK, no tag; every BLOCK of full is a pair it keeps.
    assert arms["memory_off"]["verifier_calls_saved"]["total"] == 0
    assert arms["memory_off"]["provenance"]["touched"] == 0
    assert arms["full"]["verifier_calls_saved"]["total"] > 0
    off = next(p for p in report["paired"] if p["arm"] == "memory_off")
    assert sum(t["delta"] for t in off["tasks"].values()) == arms["full"]["verifier_calls_saved"]["total"]
    assert {"qa", "ner", "re"} <= set(arms["full"]["tag_confusion"])
    page = html_out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "Table 9" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    assert "QA path lift" in done.stdout
