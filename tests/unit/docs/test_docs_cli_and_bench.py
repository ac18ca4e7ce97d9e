"""``clingate arbiter verify`` / ``show-packet`` and the docs benchmark's overlap of LLM calls."""

from __future__ import annotations

import asyncio
import io
import json
from importlib import resources

import yaml
from docs_examples import DATA, example, judge_with
from rich.console import Console
from typer.testing import CliRunner

from processors.docs.arbiter import ArbiterConfig, run
from processors.docs.llm import LlmRequest, LlmResult
from schemas.docs import ReviewPacket
from streams.bench.docs import load_request, rules_only_rate, stub_llm_run
from streams.cli.arbiter import app, render_packet
from streams.groups.arbiter_calls import arbitrate
from streams.runtime.settings import get_settings

runner = CliRunner()


def _verify(*args: str):
    return runner.invoke(app, ["verify", *args])


def test_verify_prints_the_disposition_of_the_share_sum_example():
    result = _verify(
        "--classification",
        str(DATA / "classification_doc2_6_share_sum.json"),
        "--bundle",
        str(DATA / "bundle_doc2_6.json"),
        "--no-llm",
    )
    assert result.exit_code == 0, result.output
    disposition = json.loads(result.stdout)
    assert (disposition["decision"], disposition["rule_fired"], len(disposition["attempts"])) == (
        "AUTO_ACCEPT",
        7,
        2,
    )
    first_issue = disposition["attempts"][0]["issues"][0]
    assert {k: first_issue[k] for k in ("id", "agent", "severity", "auto_fixable", "location")} == {
        "id": "V2-0001",
        "agent": "V2",
        "severity": "MAJOR",
        "auto_fixable": True,
        "location": "segment 1 → segment_share",
    }
    shares = [
        c["segment_share"] for c in disposition["final_classification"]["segments"][0]["classifications"]
    ]
    assert shares == [0.472, 0.283, 0.094, 0.075, 0.075]
    assert (disposition["llm_mode"], disposition["llm_calls"]) == ("RULES_ONLY", 0)


def test_verify_without_an_llm_client_says_so_and_runs_rules_only():
    result = _verify(
        "--classification",
        str(DATA / "classification_doc2_6_clean.json"),
        "--bundle",
        str(DATA / "bundle_doc2_6.json"),
    )
    assert result.exit_code == 0
    assert "rules-only: LLM not configured" in result.stderr
    assert json.loads(result.stdout)["llm_mode"] == "RULES_ONLY"


def test_verify_refuses_a_structurally_invalid_bundle(tmp_path):
    broken = tmp_path / "bundle.json"
    data = json.loads((DATA / "bundle_doc2_6.json").read_text())
    data["total_pages"] = 9
    broken.write_text(json.dumps(data))
    result = _verify(
        "--classification", str(DATA / "classification_doc2_6_clean.json"), "--bundle", str(broken)
    )
    assert result.exit_code == 2
    assert "invalid DocumentBundle" in result.stderr


def test_verify_writes_the_packet_that_show_packet_renders_with_the_context(tmp_path):
    packet_path = tmp_path / "packet.json"
    result = _verify(
        "--classification",
        str(DATA / "classification_quest_genomic.json"),
        "--bundle",
        str(DATA / "bundle_quest_cbc.json"),
        "--production-label",
        "OTHER",
        "--packet-out",
        str(packet_path),
    )
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["show-packet", "--packet", str(packet_path)], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "[BLOCKER] V3-0001 (Agent: V3)" in shown.stdout
    assert "Other (differs)" in shown.stdout
    assert "QUEST DIAGNOSTICS" in shown.stdout


def test_render_highlights_the_matched_paragraph(rules_only):
    packet = run(example("fabricated"), rules_only).packet
    assert isinstance(packet, ReviewPacket)
    console = Console(record=True, width=160, color_system="truecolor", file=io.StringIO())
    console.print(render_packet(packet))
    text = console.export_text(clear=False)
    html = console.export_html(inline_styles=True)
    assert "¶2 Variant Classification" in text
    assert "background-color" in html


def test_async_driver_turns_a_raising_llm_call_into_an_escalation(with_llm):
    async def broken(request: LlmRequest) -> LlmResult:
        raise TimeoutError("model did not answer")

    finished = asyncio.run(arbitrate(example("clean"), with_llm, broken))
    assert finished.disposition.decision.value == "ESCALATE_TO_SME"
    assert all("TimeoutError" in i.message for i in finished.disposition.issues)


def test_async_and_sync_drivers_agree(with_llm, rules_only: ArbiterConfig):
    async def answer(request: LlmRequest) -> LlmResult:
        return judge_with()(request)

    for key in ("clean", "share_sum", "quest"):
        request = example(key)
        assert asyncio.run(arbitrate(request, with_llm, answer)) == run(request, with_llm, judge_with())
        assert asyncio.run(arbitrate(request, rules_only, None)) == run(request, rules_only)


def test_bench_overlaps_llm_calls_across_documents():
    request = load_request(DATA / "classification_doc2_6_clean.json", DATA / "bundle_doc2_6.json")
    stub = asyncio.run(stub_llm_run(request, documents=24, latency_s=0.03, concurrency=8))
    assert stub.llm_calls == 72
    # One document never has more than 3 calls in flight: a peak of 8 means documents overlap.
    assert stub.peak_in_flight == 8
    assert stub.wall_s < stub.llm_calls * stub.latency_s / 2
    assert rules_only_rate(request, documents=5) > 0


def test_verify_reads_trap_rules_from_the_configured_yaml(tmp_path, monkeypatch):
    rules = yaml.safe_load(resources.files("processors.docs").joinpath("v3_trap_rules.yaml").read_text())
    rules["vendor_rules"][0]["vendors"] = ["Oncology Associates"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    monkeypatch.setenv("CLINGATE_DOCS_TRAP_RULES", str(path))
    get_settings.cache_clear()
    try:
        result = _verify(
            "--classification",
            str(DATA / "classification_doc2_6_clean.json"),
            "--bundle",
            str(DATA / "bundle_doc2_6.json"),
        )
    finally:
        get_settings.cache_clear()
    assert json.loads(result.stdout)["issues"][0]["message"] == (
        "Routine lab vendor detected (Oncology Associates) but Genomic Report marked PRIMARY"
    )
