"""The agent graph's model requests through the production client (streams/agent/llm.py)."""

from __future__ import annotations

import base64

from processors.agent import prompts
from processors.agent.schemas import RESPONSE_MODELS
from processors.agent.state import LlmCall
from streams.agent.llm import ask_model, call_type_of, chat_messages
from streams.llm import CALL_PROFILES, CallType, LlmOk
from streams.llm.lint import is_registered
from streams.llm.serve.http import ChatRequest

from .conftest import Harness

GENERATIONS = {
    CallType.AGENT_IMAGE: prompts.IMAGE_ANALYSIS,
    CallType.AGENT_INTENT: prompts.INTENT,
    CallType.AGENT_TOOL_SELECT: prompts.TOOL_SELECT_STAGE1,
    CallType.AGENT_TOOL_ARGS: prompts.TOOL_SELECT_STAGE2,
    CallType.AGENT_RESULT: prompts.RESULT_CLASSIFY,
    CallType.AGENT_RETRY: prompts.RETRY,
    CallType.AGENT_SYNTHESIS: prompts.SYNTHESIZE,
}


def _call(node: str, schema: str | None, **extra: str) -> LlmCall:
    user = {"role": "user", "content": "Check FDA warnings for dofetilide", **extra}
    return LlmCall(node=node, schema_name=schema, messages=({"role": "system", "content": "s"}, user),
                   temperature=0.0, max_tokens=64)  # fmt: skip


def test_every_agent_call_type_has_the_graphs_temperature_and_budget() -> None:
    for call_type, generation in GENERATIONS.items():
        profile = CALL_PROFILES[call_type]
        assert (profile.temperature, profile.max_tokens) == (generation.temperature, generation.max_tokens)
    assert set(GENERATIONS) == {t for t in CallType if t.value.startswith("agent_")}


def test_every_agent_response_model_is_registered_with_the_linter() -> None:
    assert all(is_registered(model) for model in RESPONSE_MODELS.values())


def test_each_node_and_stage_has_its_call_type() -> None:
    assert call_type_of(_call("INTENT_CLASSIFY", "IntentClassification")) is CallType.AGENT_INTENT
    assert call_type_of(_call("TOOL_SELECT", "ToolSelection")) is CallType.AGENT_TOOL_SELECT
    assert call_type_of(_call("TOOL_SELECT", "DrugSafetyArgs")) is CallType.AGENT_TOOL_ARGS
    assert call_type_of(_call("SYNTHESIZE", None)) is CallType.AGENT_SYNTHESIS
    assert call_type_of(_call("INPUT_ASSEMBLY", "ImageFindings")) is CallType.AGENT_IMAGE


def test_an_image_reference_becomes_an_image_part(tmp_path) -> None:
    image = tmp_path / "chest.png"
    image.write_bytes(b"\x89PNG fake")
    _, user = chat_messages(_call("INPUT_ASSEMBLY", "ImageFindings", image_ref=str(image)))
    text, picture = user["content"]
    assert text == {"type": "text", "text": "Check FDA warnings for dofetilide"}
    assert (
        picture["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    )


def test_schema_answers_and_free_text_come_back_as_the_graphs_answer_text() -> None:
    seen: list[ChatRequest] = []

    def responder(request: ChatRequest) -> object:
        seen.append(request)
        if request.schema is None:
            return "Dofetilide carries a boxed warning."
        return {"intent": "TOOL_NEEDED", "suggested_tool": "check_drug_safety", "task_summary": "x"}

    async def scenario(server, client):
        intent, _ = await ask_model(client, _call("INTENT_CLASSIFY", "IntentClassification"))
        text, ok = await ask_model(client, _call("SYNTHESIZE", None))
        return intent, text, ok, list(server.requests)

    intent, text, ok, bodies = Harness().run(scenario, responder=responder)
    assert RESPONSE_MODELS["IntentClassification"].model_validate_json(intent.text).intent == "TOOL_NEEDED"
    assert text.text == "Dofetilide carries a boxed warning." and isinstance(ok, LlmOk)
    assert bodies[0]["response_format"]["json_schema"]["name"] == "IntentClassification"
    assert "response_format" not in bodies[1] and bodies[1]["temperature"] == 0.5
    assert [r.schema_name for r in seen] == ["IntentClassification", None]
