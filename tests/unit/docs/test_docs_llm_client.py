"""The arbiter's LLM phases through the project's LLM client, end to end against the test server.

The OpenAI-compatible test server runs in-process on its own event loop thread, so ``clingate arbiter
verify`` (which runs its own ``asyncio.run``) talks to it over real HTTP exactly as to vLLM.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from docs_examples import DATA
from typer.testing import CliRunner, Result

from processors.docs.llm import JUDGEMENT_SCHEMA, LlmJudgement
from streams.cli.arbiter import app
from streams.groups.arbiter_calls import LLM_ROLE
from streams.llm import CALL_PROFILES, CallType, Role
from streams.llm.lint import is_registered, json_schema_of, lint_response_model
from streams.llm.serve.http import Fault
from streams.llm.serve.testserver import DEFAULT_MODEL, OpenAiTestServer
from streams.runtime.settings import get_settings

runner = CliRunner()


@dataclass
class RunningServer:
    """A test server serving on a background event loop."""

    server: OpenAiTestServer
    loop: asyncio.AbstractEventLoop


@pytest.fixture
def llm_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningServer]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = OpenAiTestServer()
    base_url = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
    monkeypatch.setenv("CLINGATE_LLM_URL", base_url)
    monkeypatch.setenv("CLINGATE_LLM_MODEL", DEFAULT_MODEL)
    monkeypatch.setenv("CLINGATE_LLM_MAX_RETRIES", "0")
    get_settings.cache_clear()
    try:
        yield RunningServer(server, loop)
    finally:
        get_settings.cache_clear()
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


def _invoke(classification: str, *extra: str) -> Result:
    bundle = str(DATA / "bundle_doc2_6.json")
    args = ["verify", "--classification", str(DATA / classification), "--bundle", bundle, *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _verify(classification: str, *extra: str) -> dict:
    return json.loads(_invoke(classification, *extra).stdout)


def test_the_judgement_is_a_linted_registered_response_model_whose_schema_the_requests_carry():
    assert is_registered(LlmJudgement)
    assert lint_response_model(LlmJudgement) == []
    assert json_schema_of(LlmJudgement) == JUDGEMENT_SCHEMA


def test_the_arbiter_calls_are_operational_greedy_calls_of_the_default_role():
    profile = CALL_PROFILES[CallType.OPERATIONAL]
    assert (LLM_ROLE, profile.temperature) == (Role.DEFAULT, 0.0)


def test_verify_with_a_configured_llm_makes_and_counts_one_call_per_phase(llm_server: RunningServer):
    disposition = _verify("classification_doc2_6_clean.json")
    assert (disposition["llm_mode"], disposition["decision"]) == ("LLM", "AUTO_ACCEPT")
    assert disposition["llm_calls"] == 3 == len(llm_server.server.requests)
    bodies = llm_server.server.requests
    assert {b["temperature"] for b in bodies} == {0.0}
    assert {b["response_format"]["json_schema"]["name"] for b in bodies} == {"LlmJudgement"}
    assert all(b["structured_outputs"]["json"] == JUDGEMENT_SCHEMA for b in bodies)


def test_verify_with_no_llm_flag_skips_the_configured_llm(llm_server: RunningServer):
    disposition = _verify("classification_doc2_6_clean.json", "--no-llm")
    assert (disposition["llm_mode"], disposition["llm_calls"]) == ("RULES_ONLY", 0)
    assert llm_server.server.requests == []


def test_a_server_failure_is_a_major_llm_issue_and_an_escalation_never_an_exception(
    llm_server: RunningServer,
):
    llm_server.server.fault_hook = lambda _request: Fault.http(500)
    disposition = _verify("classification_doc2_6_clean.json")
    assert disposition["decision"] == "ESCALATE_TO_SME"
    assert disposition["llm_calls"] == 3
    failed = [i for i in disposition["issues"] if i["source"] == "LLM"]
    assert [(i["agent"], i["severity"], i["auto_fixable"]) for i in failed] == [
        ("V2", "MAJOR", False),
        ("V3", "MAJOR", False),
        ("V4", "MAJOR", False),
    ]
    assert all("unavailable" in i["message"] for i in failed)


def test_verify_without_an_llm_url_says_rules_only_llm_not_configured(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CLINGATE_LLM_URL", raising=False)
    get_settings.cache_clear()
    try:
        result = _invoke("classification_doc2_6_clean.json")
    finally:
        get_settings.cache_clear()
    assert "rules-only: LLM not configured" in result.stderr
    disposition = json.loads(result.stdout)
    assert disposition["llm_mode"] == "RULES_ONLY"
    assert disposition["llm_note"].startswith("rules-only: LLM not configured")
