"""The scripted answer source of the local OpenAI-compatible server (no model, no GPU), for tests,
benchmarks and the demo.

The HTTP front (request validation, faults, latency, the envelope) is :mod:`streams.llm.serve.http`; this
module decides the *answers*: schema-valid JSON, deterministically. By default the minimal instance of
the request's schema; a pluggable *responder* may choose answers (e.g. :func:`hashed_responder` picks
enum values and spans by a hash of the prompt, for demos that need varied but reproducible verdicts).
Like vLLM, an answer longer than ``max_tokens`` (estimated at 4 characters per token) is cut and
reported with ``finish_reason = "length"``; compact JSON is returned when ``disable_any_whitespace``
is requested.

:class:`OpenAiTestServer` is the front with this source (``async with OpenAiTestServer() as server``).
As a process: ``clingate llm serve --backend test --port 0`` prints ``listening <base-url>`` once ready.
Request validation and faults (:class:`~streams.llm.serve.http.Fault`, ``FaultKind``, ``ChatRequest``)
belong to the front, :mod:`streams.llm.serve.http`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from streams.llm.serve.http import (
    ChatRequest,
    Completion,
    OpenAiServer,
    RequestRejectedError,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_MODEL",
    "OpenAiTestServer",
    "Responder",
    "ResponderSource",
    "UnsupportedSchemaError",
    "hashed_responder",
    "instance_from_schema",
    "minimal_responder",
]

DEFAULT_MODEL = "clingate-test"
CHARS_PER_TOKEN = 4


Responder = Callable[[ChatRequest], Any]


class UnsupportedSchemaError(RequestRejectedError):
    """The schema uses a keyword the instance generator cannot satisfy (e.g. ``pattern``)."""


class _Picker:
    """Choices the instance generator makes; the base class makes the minimal ones."""

    def choose(self, path: str, options: Sequence[Any]) -> Any:
        return options[0]

    def count(self, path: str, low: int, high: int) -> int:
        return low

    def text(self, path: str, low: int, high: int) -> str:
        return "x" * low


class _HashPicker(_Picker):
    """Choices derived from a hash of the prompt and the JSON path: varied, yet reproducible."""

    def __init__(self, prompt: str) -> None:
        self._prompt = prompt
        self._words = re.findall(r"[A-Za-z][A-Za-z0-9-]{2,}", prompt) or ["x"]

    def _number(self, path: str) -> int:
        return int.from_bytes(hashlib.sha256(f"{path}\x00{self._prompt}".encode()).digest()[:8], "big")

    def choose(self, path: str, options: Sequence[Any]) -> Any:
        return options[self._number(path) % len(options)]

    def count(self, path: str, low: int, high: int) -> int:
        return low + self._number(path) % (min(high, low + 3) - low + 1)

    def text(self, path: str, low: int, high: int) -> str:
        word = self._words[self._number(path) % len(self._words)][:high]
        return word.ljust(low, "x")

    def sentence(self, words: int) -> str:
        """``words`` prompt words picked by the hash, as a sentence."""
        picked = [self._words[self._number(f"w{i}") % len(self._words)] for i in range(words)]
        return " ".join(picked).capitalize() + "."


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return schema


def _instance(schema: dict[str, Any], root: dict[str, Any], path: str, picker: _Picker) -> Any:
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return picker.choose(path, schema["enum"])
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if alternatives:
        return _instance(picker.choose(path + "|", alternatives), root, path, picker)
    declared = schema.get("type")
    kind = declared[0] if isinstance(declared, list) else declared
    if kind == "object":
        required = schema.get("required", [])
        return {
            name: _instance(sub, root, f"{path}/{name}", picker)
            for name, sub in schema.get("properties", {}).items()
            if name in required
        }
    if kind == "array":
        low = schema.get("minItems", 0)
        n = picker.count(path, low, schema.get("maxItems", low + 3))
        return [_instance(schema.get("items", {}), root, f"{path}/{i}", picker) for i in range(n)]
    if kind == "string":
        if "pattern" in schema or "format" in schema:
            raise UnsupportedSchemaError(f"cannot generate a string for {path or '/'} with pattern/format")
        low = schema.get("minLength", 0)
        return picker.text(path, low, schema.get("maxLength", max(low, 16)))
    if kind == "integer":
        return int(schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1))
    if kind == "number":
        return float(schema.get("minimum", 0.0))
    if kind == "boolean":
        return picker.choose(path, [False, True])
    if kind == "null":
        return None
    raise UnsupportedSchemaError(f"cannot generate an instance for {path or '/'}: {schema}")


def instance_from_schema(schema: dict[str, Any]) -> Any:
    """The minimal instance of a JSON schema: required properties only, first enum value, shortest text.

    Args:
        schema: a JSON schema (local ``#/$defs`` references are followed).

    Returns:
        A JSON-serialisable value valid against the schema.

    Raises:
        UnsupportedSchemaError: the schema needs ``pattern``/``format`` or an unknown type.
    """
    return _instance(schema, schema, "", _Picker())


FREE_TEXT_ANSWER = "No further information."
"""The minimal responder's answer to a free-text request (no schema)."""


def minimal_responder(request: ChatRequest) -> Any:
    """The default responder: the minimal instance of the request's schema (free text: a fixed
    sentence)."""
    return FREE_TEXT_ANSWER if request.schema is None else instance_from_schema(request.schema)


def hashed_responder(request: ChatRequest) -> Any:
    """A responder whose choices depend on a hash of the prompt (same prompt, same answer).

    Enum values, list lengths (up to 3 above the minimum) and strings (a word of the prompt) are picked
    by SHA-256 of the prompt and the JSON path; a free-text answer is a sentence of prompt words.
    """
    picker = _HashPicker(request.prompt)
    if request.schema is None:
        return picker.sentence(12)
    return _instance(request.schema, request.schema, "", picker)


class ResponderSource:
    """An answer source that serialises a responder's value and applies the ``max_tokens`` budget.

    Attributes:
        responder: chooses the answer (replaceable between requests, e.g. in tests).
    """

    def __init__(self, responder: Responder = minimal_responder) -> None:
        """Wrap ``responder``."""
        self.responder = responder

    async def complete(self, request: ChatRequest) -> Completion:
        """The responder's value as JSON, cut at ``max_tokens`` (4 characters per token)."""
        value = self.responder(request)
        separators = (",", ":") if request.compact else (", ", ": ")
        if request.schema is None and isinstance(value, str):
            content = value  # a free-text answer is the text itself
        else:
            content = json.dumps(value, separators=separators)
        budget = None if request.max_tokens is None else request.max_tokens * CHARS_PER_TOKEN
        finish_reason: Literal["stop", "length"] = "stop"
        if budget is not None and len(content) > budget:
            content, finish_reason = content[:budget], "length"
        return Completion(
            content,
            finish_reason,
            prompt_tokens=math.ceil(len(request.prompt) / CHARS_PER_TOKEN),
            completion_tokens=math.ceil(len(content) / CHARS_PER_TOKEN),
        )


class OpenAiTestServer(OpenAiServer):
    """The HTTP front answering from a :class:`ResponderSource`.

    ``async with OpenAiTestServer() as server: server.base_url``; ``server.responder`` may be replaced
    between requests.
    """

    source: ResponderSource

    def __init__(
        self,
        *,
        models: Sequence[str] = (DEFAULT_MODEL,),
        latency_s: float = 0.0,
        responder: Responder = minimal_responder,
        hang_s: float = 30.0,
        record: bool = True,
    ) -> None:
        """Configure the server (start it with :meth:`start`).

        Args:
            models: served model names (others get 404, as from vLLM).
            latency_s: default delay before every answer.
            responder: chooses the answer of a successful request.
            hang_s: how long a ``Fault.hang()`` request waits before answering.
            record: keep every chat request body in :attr:`requests`.
        """
        super().__init__(
            ResponderSource(responder), models=models, latency_s=latency_s, hang_s=hang_s, record=record
        )

    @property
    def responder(self) -> Responder:
        """The responder answering successful requests."""
        return self.source.responder

    @responder.setter
    def responder(self, responder: Responder) -> None:
        self.source.responder = responder
