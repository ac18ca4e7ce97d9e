"""The OpenAI-compatible test server: strict request checks and schema-valid deterministic answers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.llm.lint import json_schema_of, registered_models
from streams.llm.schemas import QaVerdict
from streams.llm.serve.http import ChatRequest, RequestRejectedError, parse_chat_request
from streams.llm.serve.testserver import OpenAiTestServer, hashed_responder, instance_from_schema

SCHEMA = json_schema_of(QaVerdict)
GOOD: dict[str, Any] = {
    "model": "clingate-test",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0.0,
    "response_format": {"type": "json_schema", "json_schema": {"name": "QaVerdict", "schema": SCHEMA}},
}


def post(body: dict[str, Any]) -> httpx.Response:
    async def main() -> httpx.Response:
        async with OpenAiTestServer() as server, httpx.AsyncClient() as http:
            return await http.post(f"{server.base_url}/chat/completions", json=body)

    return asyncio.run(main())


@pytest.mark.parametrize("key", ["guided_json", "guided_choice", "guided_decoding_backend"])
def test_removed_guided_keys_are_rejected_loudly_with_400(key):
    response = post({**GOOD, key: SCHEMA})
    assert response.status_code == 400
    assert "removed vLLM request key" in response.json()["message"]


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": None},
        {"model": ""},
        {"messages": []},
        {"messages": [{"role": "robot", "content": "x"}]},
        {"messages": [{"role": "user", "content": [{"type": "audio", "data": "x"}]}]},
        {"response_format": {"type": "json_object"}},
        {"structured_outputs": {"json": {"type": "object"}}},  # differs from response_format's schema
        {"structured_outputs": {"json": SCHEMA, "regex": "a+"}},
    ],
)
def test_malformed_requests_are_rejected(change):
    body = {key: value for key, value in {**GOOD, **change}.items() if value is not None}
    with pytest.raises(RequestRejectedError):
        parse_chat_request(body)


def test_schema_via_structured_outputs_alone_is_accepted_and_compact_json_honoured():
    body = {k: v for k, v in GOOD.items() if k != "response_format"}
    response = post({**body, "structured_outputs": {"json": SCHEMA, "disable_any_whitespace": True}})
    assert response.status_code == 200
    content = response.json()["choices"][0]["message"]["content"]
    assert content == '{"verdict":"PASS"}'


def test_models_endpoint_lists_the_served_models():
    async def main() -> dict[str, Any]:
        async with OpenAiTestServer(models=("a", "b")) as server, httpx.AsyncClient() as http:
            return (await http.get(f"{server.base_url}/models")).json()

    assert [m["id"] for m in asyncio.run(main())["data"]] == ["a", "b"]


@pytest.mark.parametrize("model", registered_models(), ids=lambda m: m.__name__)
def test_minimal_instances_validate_against_every_registered_model(model):
    model.model_validate(instance_from_schema(json_schema_of(model)))


@settings(max_examples=50, deadline=None)
@given(prompt=st.text(min_size=0, max_size=200), index=st.integers(0, len(registered_models()) - 1))
def test_hashed_answers_are_valid_and_reproducible(prompt, index):
    model = registered_models()[index]
    chat = ChatRequest("m", [{"role": "user", "content": prompt}], json_schema_of(model), 0.0, None, True)
    first = hashed_responder(chat)
    assert first == hashed_responder(chat)
    model.model_validate(first)
