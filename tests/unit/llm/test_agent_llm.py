"""The agent graph's model requests through the production client (streams/agent/llm.py), and the
``response_format`` schema each call type sends against the DocGemma spec's §6 field lists.

Where the spec is beside the clone (``../shared/seeds``), the §6 lists written here are also compared with
its text; elsewhere that test skips.
"""

from __future__ import annotations

import base64
import re

from processors.agent import prompts
from processors.agent.schemas import RESPONSE_MODELS, TOOL_ARG_SCHEMAS
from processors.agent.state import LlmCall, NodeName
from streams.agent.llm import ask_model, call_type_of, chat_messages
from streams.llm import CALL_PROFILES, CallType, LlmOk
from streams.llm.lint import is_registered
from streams.llm.serve.http import ChatRequest
from tests.seeds import AGENT_SPEC, needs_agent_spec

from .conftest import Harness

SECTION_6: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "IntentClassification": (("intent", "task_summary"), ("suggested_tool",)),
    "ToolSelection": (("tool_name",), ()),
    "DrugSafetyArgs": (("drug_name",), ()),
    "DrugInteractionArgs": (("drug_names",), ()),
    "LiteratureSearchArgs": (("query",), ()),
    "ClinicalTrialsArgs": (("condition",), ("status",)),
    "PatientSearchArgs": (("name",), ()),
    "PatientChartArgs": (("patient_id",), ()),
    "PrescribeMedicationArgs": (("patient_id", "medication_name", "dosage", "frequency"), ("notes",)),
    "AddAllergyArgs": (("patient_id", "substance", "reaction"), ("severity",)),
    "ClinicalNoteArgs": (("patient_id", "note_type", "note_text"), ()),
    "ImageAnalysisArgs": (("query",), ()),
    "ResultAssessment": (("quality", "brief_summary"), ()),
    "RetryStrategy": (("strategy",), ("reasoning",)),
    "ImageFindings": (("modality", "findings", "confidence"), ()),
}
"""Each schema's fields as §6 lists them (``ImageFindings``: §5's TypedDict): required, then optional."""

SCHEMA_CALLS: list[tuple[NodeName, str]] = [
    ("INPUT_ASSEMBLY", "ImageFindings"),
    ("INTENT_CLASSIFY", "IntentClassification"),
    ("TOOL_SELECT", "ToolSelection"),
    *(("TOOL_SELECT", model.__name__) for model in TOOL_ARG_SCHEMAS.values()),
    ("RESULT_CLASSIFY", "ResultAssessment"),
    ("ERROR_HANDLER", "RetryStrategy"),
]
"""Every constrained request the graph makes: node and schema (stage 2: each tool's arguments)."""

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
        return {"intent": "TOOL_NEEDED", "task_summary": "x", "suggested_tool": "check_drug_safety"}

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


def test_every_call_type_sends_its_schema_fields_in_section_6_order_required_first() -> None:
    calls = [_call(node, schema) for node, schema in SCHEMA_CALLS]

    async def scenario(server, client):
        for call in [*calls, _call("SYNTHESIZE", None)]:
            await ask_model(client, call)
        return list(server.requests)

    bodies = Harness().run(scenario)
    *constrained, synthesis = bodies
    assert {call_type_of(c) for c in calls} | {CallType.AGENT_SYNTHESIS} == set(GENERATIONS)
    assert "response_format" not in synthesis
    sent = {}
    for body in constrained:
        form = body["response_format"]["json_schema"]
        sent[form["name"]] = (list(form["schema"]["properties"]), form["schema"].get("required", []))
    assert sent == {name: ([*req, *opt], list(req)) for name, (req, opt) in SECTION_6.items()}


def _section_6_fields(text: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The fields of every class in the spec's §6 code blocks (and §5's ``ImageFindings``): a field is
    optional when its annotation is ``Optional[...]`` or its default None."""
    section_5 = text[text.index("## 5. State Schema") : text.index("## 6. ")]
    section_6 = text[text.index("## 6. ") : text.index("## 7. ")]
    image = section_5[section_5.index("class ImageFindings") :]
    blocks = [image[: image.index("\n\n")], *re.findall(r"```python\n(.*?)```", section_6, re.DOTALL)]
    fields: dict[str, tuple[list[str], list[str]]] = {}
    for block in blocks:
        for name, body in re.findall(r"^class (\w+)\([^)]*\):\n(.*?)(?=^class |\Z)", block, re.M | re.S):
            required, optional = fields.setdefault(name, ([], []))
            for field, annotation in re.findall(r"^    (\w+): (.*)$", body, re.M):
                optional_field = annotation.startswith("Optional[") or re.search(r"=\s*None\b", annotation)
                (optional if optional_field else required).append(field)
    return {name: (tuple(req), tuple(opt)) for name, (req, opt) in fields.items()}


@needs_agent_spec
def test_the_section_6_field_lists_are_the_specs() -> None:
    assert _section_6_fields(AGENT_SPEC.read_text(encoding="utf-8")) == SECTION_6
