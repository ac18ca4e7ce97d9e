"""The agent graph's model requests through the production client.

The pure graph (:mod:`processors.agent`) asks for an :class:`~processors.agent.state.LlmCall`: its node,
the §6 response model by name, the messages, and the node's §7 temperature and budget. This module

* registers every agent response model with the schema linter (:func:`streams.llm.lint.response_model`:
  a schema that breaks the critical-first rule fails at import, and the client refuses unregistered
  models);
* names the call type of each request (:func:`call_type_of`), whose profile in the call table carries
  the same temperature and budget as the graph's request (a unit test holds the two equal), so the
  client's one rule (callers never pass a temperature) holds for the agent too;
* turns a request into chat messages: the vision call's user message carries ``image_ref``, which
  becomes an ``image_url`` part (a local file is sent as a ``data:`` URL, an http(s) or data URL as is);
* makes the call (:func:`ask_model`) and gives the graph the answer as text: the validated answer
  re-serialised as JSON, or for SYNTHESIZE the free text. A failed call is an empty answer, which the
  graph handles as an answer that does not validate (its fallbacks, package docstring of
  :mod:`processors.agent`).
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any

from processors.agent.prompts import IMAGE_SYSTEM
from processors.agent.schemas import RESPONSE_MODELS, TOOL_ARG_SCHEMAS, ImageFindings
from processors.agent.state import LlmAnswer, LlmCall
from streams.llm import CallType, ChatMessage, LlmClient, LlmFailed, LlmOk
from streams.llm.lint import response_model

for _model in RESPONSE_MODELS.values():
    response_model(_model)

_ARG_SCHEMAS = frozenset(model.__name__ for model in TOOL_ARG_SCHEMAS.values())

_BY_NODE: dict[str, CallType] = {
    "INPUT_ASSEMBLY": CallType.AGENT_IMAGE,
    "INTENT_CLASSIFY": CallType.AGENT_INTENT,
    "RESULT_CLASSIFY": CallType.AGENT_RESULT,
    "ERROR_HANDLER": CallType.AGENT_RETRY,
    "SYNTHESIZE": CallType.AGENT_SYNTHESIS,
}


def call_type_of(call: LlmCall) -> CallType:
    """The call type of a graph request: by node, and for TOOL_SELECT by stage (stage 2 asks for a tool's
    argument schema)."""
    if call.node == "TOOL_SELECT":
        return CallType.AGENT_TOOL_ARGS if call.schema_name in _ARG_SCHEMAS else CallType.AGENT_TOOL_SELECT
    return _BY_NODE[call.node]


def image_url(ref: str) -> str:
    """The ``image_url`` of an image reference: an http(s) or data URL as is, a file as a data URL.

    Raises:
        OSError: the file cannot be read.
    """
    if ref.startswith(("http://", "https://", "data:")):
        return ref
    path = Path(ref)
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _with_image(text: str, ref: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": image_url(ref)}}]


def chat_messages(call: LlmCall) -> list[ChatMessage]:
    """The request's messages for the chat API (a message with ``image_ref`` becomes text and image
    parts)."""
    messages: list[ChatMessage] = []
    for message in call.messages:
        role: Any = message["role"]
        ref = message.get("image_ref")
        content = message["content"] if ref is None else _with_image(message["content"], ref)
        messages.append({"role": role, "content": content})
    return messages


async def analyze_image(client: LlmClient, query: str, image_ref: str) -> ImageFindings | None:
    """The vision model's findings on ``image_ref`` for ``query`` (the graph's image analysis, asked by
    the ``analyze_medical_image`` tool); None when the image cannot be read or the call failed."""
    try:
        user = _with_image(query, image_ref)
    except OSError:
        return None
    messages: list[ChatMessage] = [
        {"role": "system", "content": IMAGE_SYSTEM},
        {"role": "user", "content": user},
    ]
    result = await client.call(CallType.AGENT_IMAGE, ImageFindings, messages)
    return result.value if isinstance(result, LlmOk) else None


async def ask_model(client: LlmClient, call: LlmCall) -> tuple[LlmAnswer, LlmOk[Any] | LlmFailed | None]:
    """Make the graph's request: the answer for the graph (empty when the call failed) and the client's
    result (None: no call was made, the attached image could not be read)."""
    call_type = call_type_of(call)
    try:
        messages = chat_messages(call)
    except OSError:
        return LlmAnswer(text=""), None
    if call.response_model is None:
        result = await client.call_text(call_type, messages)
    else:
        result = await client.call(call_type, call.response_model, messages)
    if not isinstance(result, LlmOk):
        return LlmAnswer(text=""), result
    value = result.value
    text = value if isinstance(value, str) else value.model_dump_json()
    return LlmAnswer(text=text), result
