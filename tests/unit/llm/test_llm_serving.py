"""The HTTP front is one piece in front of any answer source: validation and faults do not depend on it."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from streams.cli.llm import app as llm_cli
from streams.llm.lint import json_schema_of
from streams.llm.schemas import NerVerdict
from streams.llm.serve import smollm2
from streams.llm.serve.http import (
    ChatRequest,
    Completion,
    Fault,
    OpenAiServer,
    RequestRejectedError,
)
from streams.testing.llm_server import ServerProcess

SCHEMA = json_schema_of(NerVerdict)
BODY: dict[str, Any] = {
    "model": "real-model",
    "messages": [{"role": "user", "content": "aspirin?"}],
    "temperature": 0.0,
    "max_tokens": 60,
    "structured_outputs": {"json": SCHEMA, "disable_any_whitespace": True},
}


class FixedSource:
    """A stand-in model: records what reached it and answers one fixed completion."""

    def __init__(self) -> None:
        self.seen: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> Completion:
        self.seen.append(request)
        if request.max_tokens == 1:
            raise RequestRejectedError("prompt plus max_tokens exceed the context window")
        return Completion('{"verdict":"FAIL"}', "stop", prompt_tokens=5, completion_tokens=6)


def exchange(source: FixedSource, *bodies: dict[str, Any], faults: tuple[Fault, ...] = ()) -> list[Any]:
    async def main() -> list[httpx.Response]:
        async with OpenAiServer(source, models=["real-model"]) as server, httpx.AsyncClient() as http:
            server.script(*faults)
            return [await http.post(f"{server.base_url}/chat/completions", json=b) for b in bodies]

    return asyncio.run(main())


def test_any_source_answers_through_the_same_envelope():
    source = FixedSource()
    [response] = exchange(source, BODY)
    answer = response.json()
    assert answer["choices"][0]["message"]["content"] == '{"verdict":"FAIL"}'
    assert answer["usage"] == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    assert source.seen[0].compact and source.seen[0].schema == SCHEMA


def test_rejected_requests_never_reach_the_source():
    source = FixedSource()
    responses = exchange(
        source, {**BODY, "guided_json": SCHEMA}, {**BODY, "model": "other"}, {**BODY, "temperature": None}
    )
    assert [r.status_code for r in responses] == [400, 404, 400]
    assert source.seen == []


def test_a_source_may_refuse_a_request_with_400():
    [response] = exchange(FixedSource(), {**BODY, "max_tokens": 1})
    assert response.status_code == 400 and "context window" in response.json()["message"]


def test_faults_apply_on_top_of_a_real_source():
    responses = exchange(FixedSource(), BODY, BODY, BODY, faults=(Fault.truncated(), Fault.http(500)))
    truncated, failed, normal = responses
    assert truncated.json()["choices"][0]["finish_reason"] == "length"
    assert failed.status_code == 500
    assert normal.json()["choices"][0]["finish_reason"] == "stop"


def test_smollm2_says_which_packages_are_missing_and_how_to_install_them(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "llama_cpp" else real(name))
    reason = smollm2.unavailable_reason()
    assert reason is not None and "llama-cpp-python" in reason and "make smollm2" in reason


def test_serve_without_the_smollm2_extra_exits_with_the_reason(monkeypatch):
    monkeypatch.setattr(smollm2, "unavailable_reason", lambda: "SmolLM2 backend unavailable: test says so")
    result = CliRunner().invoke(llm_cli, ["serve", "--backend", "smollm2"])
    assert result.exit_code == 2
    assert "SmolLM2 backend unavailable: test says so" in result.output


def test_server_process_starts_the_cli_server_and_reads_back_its_model():
    """A child `clingate llm serve --backend test` answers the production request shape, then stops."""
    with ServerProcess.start("test", args=["--hashed"]) as server:
        assert server.model == "clingate-test"
        response = httpx.post(
            f"{server.base_url}/chat/completions",
            json={**BODY, "model": server.model},
            timeout=30.0,
            trust_env=False,
        )
        assert response.status_code == 200
        NerVerdict.model_validate_json(response.json()["choices"][0]["message"]["content"])
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{server.base_url}/models", timeout=5.0, trust_env=False)
