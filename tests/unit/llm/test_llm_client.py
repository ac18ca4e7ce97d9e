"""The LLM client against the in-process OpenAI-compatible test server on loopback."""

from __future__ import annotations

import asyncio
import random
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

import streams.agent.llm  # noqa: F401  (registers the agent's response models)
from processors.agent.schemas import (
    DrugSafetyArgs,
    ImageFindings,
    IntentClassification,
    ResultAssessment,
    RetryStrategy,
    ToolSelection,
)
from streams.llm import (
    CALL_PROFILES,
    CallType,
    CircuitState,
    ClientPolicy,
    Endpoint,
    FailureKind,
    LlmClient,
    LlmFailed,
    LlmOk,
    Role,
)
from streams.llm.breaker import CircuitBreaker
from streams.llm.lint import UnregisteredResponseModelError, json_schema_of
from streams.llm.result import MESSAGE_TEMPLATES, clinician_message
from streams.llm.schemas import NerExtraction, NerVerdict, QaExtraction, QaVerdict, ReExtraction, ReVerdict
from streams.llm.serve.http import Fault

from .conftest import FAST

USER = [{"role": "user", "content": "Patient p-001 started metformin for type 2 diabetes."}]


def verdict_call(server, client):
    return client.call(CallType.NER_VERDICT, NerVerdict, USER)


def test_valid_answer_is_ok_with_the_validated_model(harness):
    result = harness.run(verdict_call)
    assert isinstance(result, LlmOk)
    assert result.value == NerVerdict(verdict="PASS")
    assert result.attempts == 1 and result.completion_tokens is not None


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (Fault.schema_invalid(), FailureKind.INVALID_OUTPUT),
        (Fault.invalid_json(), FailureKind.INVALID_OUTPUT),
        (Fault.truncated(), FailureKind.TRUNCATED),
    ],
)
def test_bad_answers_are_failed_calls_never_retried(harness, fault, kind):
    async def scenario(server, client):
        server.script(fault)
        return await verdict_call(server, client), len(server.requests)

    result, requests = harness.run(scenario)
    assert isinstance(result, LlmFailed)
    assert result.kind is kind and not kind.transient
    assert result.attempts == 1 and requests == 1  # greedy decoding: a retry would answer the same


def test_answer_over_the_token_budget_is_truncated_not_accepted(harness):
    long_answer = {"status": "ANSWERED", "answer": "y" * 400}  # ~105 tokens + envelope: fits 160
    too_long = {"entities": [{"entity": "z" * 100, "category": "Diagnosis"}] * 50}  # > 1500 tokens

    async def scenario(server, client):
        server.responder = lambda chat: long_answer if "status" in chat.schema["properties"] else too_long
        return (
            await client.call(CallType.QA_EXTRACTION, QaExtraction, USER),
            await client.call(CallType.NER_EXTRACTION, NerExtraction, USER),
        )

    fits, overflows = harness.run(scenario)
    assert isinstance(fits, LlmOk)
    assert isinstance(overflows, LlmFailed) and overflows.kind is FailureKind.TRUNCATED


def test_429_and_500_are_retried_with_seeded_jitter_then_succeed(harness):
    async def scenario(server, client):
        server.script(Fault.http(429), Fault.http(500), Fault.http(503))
        return await verdict_call(server, client)

    result = harness.run(scenario, seed=11)
    assert isinstance(result, LlmOk) and result.attempts == 4
    rng = random.Random(11)
    expected = [rng.uniform(0, min(FAST.backoff_max_s, FAST.backoff_base_s * 2**n)) for n in range(3)]
    assert harness.sleeps == expected


def test_retry_after_is_honoured_up_to_the_backoff_cap(harness):
    async def scenario(server, client):
        server.script(Fault.http(429, retry_after_s=3), Fault.http(429, retry_after_s=600))
        return await verdict_call(server, client)

    result = harness.run(scenario)
    assert isinstance(result, LlmOk)
    assert harness.sleeps[0] >= 3 and harness.sleeps[1] == FAST.backoff_max_s


def test_persistent_server_errors_fail_after_bounded_retries(harness):
    async def scenario(server, client):
        server.script(*[Fault.http(500)] * 10)
        return await verdict_call(server, client), len(server.requests)

    result, requests = harness.run(scenario)
    assert isinstance(result, LlmFailed) and result.kind is FailureKind.UNAVAILABLE
    assert result.attempts == FAST.max_retries + 1 == requests
    assert "500" in result.operator_detail and "500" not in result.message


def test_timeout_is_a_typed_failure(harness):
    async def scenario(server, client):
        server.script(Fault.hang())
        return await verdict_call(server, client)

    result = harness.run(scenario, policy=ClientPolicy(timeout_s=0.2, max_retries=0))
    assert isinstance(result, LlmFailed) and result.kind is FailureKind.TIMEOUT and result.kind.transient
    assert result.message == clinician_message(FailureKind.TIMEOUT, Role.VERIFIER)


def test_connection_refused_is_unavailable():
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def main():
        endpoint = Endpoint(f"http://127.0.0.1:{port}/v1", "m")
        async with LlmClient(
            {Role.VERIFIER: endpoint}, policy=ClientPolicy(max_retries=1), sleep=lambda _s: asyncio.sleep(0)
        ) as client:
            return await client.call(CallType.NER_VERDICT, NerVerdict, USER)

    result = asyncio.run(main())
    assert isinstance(result, LlmFailed) and result.kind is FailureKind.UNAVAILABLE and result.attempts == 2


def test_other_client_errors_are_rejected_without_retry(harness):
    async def scenario(server, client):
        server.models = ("another-model",)  # the client's model name is now unknown: 404, as vLLM says
        return await verdict_call(server, client), len(server.requests)

    result, requests = harness.run(scenario)
    assert isinstance(result, LlmFailed) and result.kind is FailureKind.REJECTED and requests == 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


BREAKER = ClientPolicy(max_retries=0, breaker_threshold=3, breaker_reset_s=30.0)


def test_circuit_opens_after_threshold_failures_and_fails_fast(harness):
    async def scenario(server, client):
        server.script(*[Fault.http(500)] * 3)
        failures = [await verdict_call(server, client) for _ in range(3)]
        fast = await verdict_call(server, client)
        return failures, fast, len(server.requests), client.circuit_state(Role.VERIFIER)

    failures, fast, requests, state = harness.run(scenario, policy=BREAKER, clock=FakeClock())
    assert [f.kind for f in failures] == [FailureKind.UNAVAILABLE] * 3
    assert fast.kind is FailureKind.CIRCUIT_OPEN and fast.attempts == 0
    assert requests == 3 and state is CircuitState.OPEN


@pytest.mark.parametrize("probe_succeeds", [True, False])
def test_circuit_half_opens_after_reset_and_the_probe_decides(harness, probe_succeeds):
    clock = FakeClock()

    async def scenario(server, client):
        server.script(*[Fault.http(500)] * 3)
        for _ in range(3):
            await verdict_call(server, client)
        clock.now += BREAKER.breaker_reset_s
        half_open = client.circuit_state(Role.VERIFIER)
        if not probe_succeeds:
            server.script(Fault.http(500))
        probe = await verdict_call(server, client)
        return half_open, probe, client.circuit_state(Role.VERIFIER)

    half_open, probe, after = harness.run(scenario, policy=BREAKER, clock=clock)
    assert half_open is CircuitState.HALF_OPEN
    if probe_succeeds:
        assert isinstance(probe, LlmOk) and after is CircuitState.CLOSED
    else:
        assert probe.kind is FailureKind.UNAVAILABLE and after is CircuitState.OPEN


def test_request_body_carries_the_schema_the_current_way_and_no_guided_keys(harness):
    async def scenario(server, client):
        await client.call(CallType.RE_EXTRACTION, ReExtraction, USER)
        return server.requests[0]

    body = harness.run(scenario)
    schema = json_schema_of(ReExtraction)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "ReExtraction", "schema": schema},
    }
    assert body["structured_outputs"] == {"json": schema, "disable_any_whitespace": True}
    assert not [key for key in body if key.startswith("guided")]
    assert not [key for key in body["structured_outputs"] if key.startswith("guided")]


MODELS: dict[CallType, type[BaseModel]] = {
    CallType.NER_EXTRACTION: NerExtraction,
    CallType.RE_EXTRACTION: ReExtraction,
    CallType.QA_EXTRACTION: QaExtraction,
    CallType.NER_VERDICT: NerVerdict,
    CallType.RE_VERDICT: ReVerdict,
    CallType.QA_VERDICT: QaVerdict,
    CallType.OPERATIONAL: NerVerdict,
    CallType.SYNTHESIS: QaExtraction,
    CallType.AGENT_IMAGE: ImageFindings,
    CallType.AGENT_INTENT: IntentClassification,
    CallType.AGENT_TOOL_SELECT: ToolSelection,
    CallType.AGENT_TOOL_ARGS: DrugSafetyArgs,
    CallType.AGENT_RESULT: ResultAssessment,
    CallType.AGENT_RETRY: RetryStrategy,
}
"""A registered response model per call type; the agent's synthesis is free text (no model)."""


@pytest.mark.parametrize("call_type", list(CallType))
def test_temperature_and_max_tokens_come_from_the_call_type_table(harness, call_type):
    async def scenario(server, client):
        if call_type is CallType.AGENT_SYNTHESIS:
            result = await client.call_text(call_type, USER)
        else:
            result = await client.call(call_type, MODELS[call_type], USER)
        return result, server.requests[0]

    result, body = harness.run(scenario)
    assert isinstance(result, LlmOk)
    profile = CALL_PROFILES[call_type]
    assert (body["temperature"], body["max_tokens"]) == (profile.temperature, profile.max_tokens)


def test_generator_and_verifier_calls_are_greedy_and_synthesis_is_not():
    for call_type, profile in CALL_PROFILES.items():
        if profile.role in (Role.GENERATOR, Role.VERIFIER) or call_type is CallType.OPERATIONAL:
            assert profile.temperature == 0.0
    assert (CALL_PROFILES[CallType.SYNTHESIS].temperature, CALL_PROFILES[CallType.SYNTHESIS].max_tokens) == (
        0.5,
        256,
    )
    verdicts = (CallType.NER_VERDICT, CallType.RE_VERDICT, CallType.QA_VERDICT)
    assert {CALL_PROFILES[t].max_tokens for t in verdicts} == {60}
    assert CALL_PROFILES[CallType.QA_EXTRACTION].max_tokens == 160
    assert {CALL_PROFILES[t].max_tokens for t in (CallType.NER_EXTRACTION, CallType.RE_EXTRACTION)} == {1500}


def test_unconfigured_role_is_disabled_without_a_request(harness):
    async def scenario(server, client):
        return await verdict_call(server, client), len(server.requests)

    result, requests = harness.run(scenario, roles=(Role.GENERATOR,))
    assert isinstance(result, LlmFailed) and result.kind is FailureKind.DISABLED
    assert result.attempts == 0 and requests == 0
    assert "CLINGATE_VERIFIER_URL" in result.operator_detail and "not configured" in result.message


def test_unregistered_response_model_is_refused(harness):
    class Sneaky(BaseModel):
        note: str

    async def scenario(server, client):
        return await client.call(CallType.OPERATIONAL, Sneaky, USER)

    with pytest.raises(UnregisteredResponseModelError):
        harness.run(scenario)


def test_concurrency_is_bounded_per_server_and_calls_overlap(harness):
    async def scenario(server, client):
        results = await asyncio.gather(*[verdict_call(server, client) for _ in range(24)])
        return results, server.peak_in_flight

    results, peak = harness.run(scenario, policy=ClientPolicy(max_in_flight=6), latency_s=0.02)
    assert all(isinstance(r, LlmOk) for r in results)
    assert peak == 6


def test_roles_sharing_a_server_share_its_slots(harness):
    async def scenario(server, client):
        calls = [client.call(CallType.NER_EXTRACTION, NerExtraction, USER) for _ in range(8)]
        calls += [verdict_call(server, client) for _ in range(8)]
        await asyncio.gather(*calls)
        return server.peak_in_flight

    assert harness.run(scenario, policy=ClientPolicy(max_in_flight=4), latency_s=0.02) == 4


@given(kind=st.sampled_from(FailureKind), role=st.sampled_from(Role))
def test_clinician_messages_are_fixed_templates_without_raw_error_text(kind, role):
    message = clinician_message(kind, role)
    assert message.endswith(".") and "{" not in message
    assert not any(ch.isdigit() for ch in message)
    assert not any(word in message for word in ("HTTP", "Error", "Exception", "http", "json", "JSON"))
    assert set(MESSAGE_TEMPLATES) == set(FailureKind)


BREAKER_OPS = st.lists(
    st.one_of(st.sampled_from(["fail", "succeed"]), st.floats(min_value=0.0, max_value=40.0)),
    max_size=40,
)


@given(BREAKER_OPS)
def test_circuit_breaker_invariants(ops):
    """Open after `threshold` straight failures, never let a call through while open, close on success."""
    clock = FakeClock()
    breaker = CircuitBreaker(threshold=3, reset_s=30.0, clock=clock)
    streak = 0
    for op in ops:
        if isinstance(op, float):
            clock.now += op
            continue
        state_before = breaker.state
        allowed = breaker.allow()
        assert allowed == (state_before is not CircuitState.OPEN)
        if not allowed:
            continue
        if op == "succeed":
            breaker.record_success()
            streak = 0
            assert breaker.state is CircuitState.CLOSED
        else:
            breaker.record_failure()
            streak += 1
            if streak >= 3 or state_before is CircuitState.HALF_OPEN:
                assert breaker.state is not CircuitState.CLOSED


@pytest.mark.parametrize("call_type", [CallType.NER_VERDICT, CallType.QA_EXTRACTION])
def test_encoded_body_is_the_request_body_with_only_the_messages_serialised_per_call(call_type):
    import json

    model = QaExtraction if call_type is CallType.QA_EXTRACTION else NerVerdict
    client = LlmClient({})
    for messages in (USER, [{"role": "system", "content": 'say "hi"\n'}, *USER], []):
        encoded = client.encoded_body(call_type, model, messages, "m")
        assert json.loads(encoded) == client.request_body(call_type, model, messages, "m")
