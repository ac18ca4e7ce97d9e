"""A small OpenAI-compatible server for tests, benchmarks and the local demo (no model, no GPU).

It speaks the subset of vLLM's API the client uses (``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /health``) and is strict where a real server would be silently lenient:

* it validates the request shape: ``model`` is served, ``messages`` is a non-empty list of
  ``{role, content}``, ``temperature`` is present, and a JSON schema is present via ``response_format``
  (type ``json_schema``) and/or ``structured_outputs.json`` (the same schema when both are sent);
* it answers 400 to any removed ``guided_*`` key, which current vLLM would ignore while answering 200
  unconstrained, so a regression in the client is loud;
* it answers schema-valid JSON deterministically: by default the minimal instance of the schema; a
  pluggable *responder* may choose answers (e.g. :func:`hashed_responder` picks enum values and spans
  by a hash of the prompt, for demos that need varied but reproducible verdicts);
* like vLLM, it truncates an answer longer than ``max_tokens`` (estimated at 4 characters per token)
  and reports ``finish_reason = "length"``; compact JSON is returned when ``disable_any_whitespace``
  is requested.

Faults are scripted per request: :meth:`OpenAiTestServer.script` queues :class:`Fault` values consumed
in arrival order, and :attr:`OpenAiTestServer.fault_hook` may pick a fault per request (e.g. by prompt).
Faults: fixed latency, any HTTP status (429 with ``Retry-After``, 500, ...), a hang (the client times
out), invalid JSON, schema-invalid JSON and a truncated answer.

It is an asyncio (aiohttp) server; one process handles hundreds of concurrent requests, as the
Little's-law benchmark needs. Run it with ``python -m streams.llm.testserver --port 0``: it prints
``listening <base-url>`` on stdout once ready.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer
from aiohttp import web

REMOVED_KEYS = re.compile(r"^guided_")
DEFAULT_MODEL = "clingate-test"
CHARS_PER_TOKEN = 4


class FaultKind(StrEnum):
    """What the server does with one request."""

    OK = "ok"
    STATUS = "status"
    HANG = "hang"
    INVALID_JSON = "invalid_json"
    SCHEMA_INVALID = "schema_invalid"
    TRUNCATED = "truncated"


@dataclass(frozen=True, slots=True)
class Fault:
    """One scripted behaviour; build it with the class methods.

    Attributes:
        kind: the behaviour.
        status: HTTP status for ``STATUS``.
        latency_s: delay before answering (None: the server's default latency).
        retry_after_s: ``Retry-After`` header value for ``STATUS``.
    """

    kind: FaultKind = FaultKind.OK
    status: int = 200
    latency_s: float | None = None
    retry_after_s: float | None = None

    @classmethod
    def ok(cls, latency_s: float | None = None) -> Fault:
        """A normal answer, optionally after ``latency_s``."""
        return cls(FaultKind.OK, latency_s=latency_s)

    @classmethod
    def http(cls, status: int, retry_after_s: float | None = None) -> Fault:
        """An error status (e.g. 429, 500) with a vLLM-style error body."""
        return cls(FaultKind.STATUS, status=status, retry_after_s=retry_after_s)

    @classmethod
    def hang(cls) -> Fault:
        """Answer only after the server's ``hang_s`` (longer than any client timeout in tests)."""
        return cls(FaultKind.HANG)

    @classmethod
    def invalid_json(cls) -> Fault:
        """A 200 whose content is not JSON."""
        return cls(FaultKind.INVALID_JSON)

    @classmethod
    def schema_invalid(cls) -> Fault:
        """A 200 whose content is JSON that does not match the schema."""
        return cls(FaultKind.SCHEMA_INVALID)

    @classmethod
    def truncated(cls) -> Fault:
        """A 200 with half of a valid answer and ``finish_reason = "length"``."""
        return cls(FaultKind.TRUNCATED)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A validated chat-completions request.

    Attributes:
        model: served model name.
        messages: the chat messages.
        schema: the JSON schema the answer must match.
        temperature: requested temperature.
        max_tokens: requested budget, if any.
        compact: whether compact JSON was requested (``disable_any_whitespace``).
    """

    model: str
    messages: list[dict[str, Any]]
    schema: dict[str, Any]
    temperature: float
    max_tokens: int | None
    compact: bool

    @property
    def prompt(self) -> str:
        """All message contents joined, in order."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


Responder = Callable[[ChatRequest], Any]


class UnsupportedSchemaError(ValueError):
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


def minimal_responder(request: ChatRequest) -> Any:
    """The default responder: the minimal instance of the request's schema."""
    return instance_from_schema(request.schema)


def hashed_responder(request: ChatRequest) -> Any:
    """A responder whose choices depend on a hash of the prompt (same prompt, same answer).

    Enum values, list lengths (up to 3 above the minimum) and strings (a word of the prompt) are picked
    by SHA-256 of the prompt and the JSON path.
    """
    return _instance(request.schema, request.schema, "", _HashPicker(request.prompt))


def _error(status: int, message: str, error_type: str = "BadRequestError") -> web.Response:
    # vLLM's error body shape.
    body = {"object": "error", "message": message, "type": error_type, "param": None, "code": status}
    return web.json_response(body, status=status)


class RequestRejectedError(ValueError):
    """The request is malformed; the message is returned with HTTP 400."""


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a chat-completions body the way this server requires.

    Args:
        body: the decoded JSON body.

    Returns:
        The validated request.

    Raises:
        RequestRejectedError: with a message naming the first problem.
    """
    if not isinstance(body, dict):
        raise RequestRejectedError("request body must be a JSON object")
    removed = sorted(key for key in body if REMOVED_KEYS.match(key))
    if removed:
        raise RequestRejectedError(
            f"removed vLLM request key(s) {removed}: vLLM >= 0.12 ignores them and answers unconstrained; "
            "send response_format (json_schema) and/or structured_outputs instead"
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestRejectedError("'model' must be a non-empty string")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestRejectedError("'messages' must be a non-empty list")
    for message in messages:
        if not (
            isinstance(message, dict)
            and message.get("role") in {"system", "user", "assistant"}
            and isinstance(message.get("content"), str)
        ):
            raise RequestRejectedError("each message must be {'role': system|user|assistant, 'content': str}")
    temperature = body.get("temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise RequestRejectedError("'temperature' must be present and a number")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestRejectedError("'max_tokens' must be a positive integer")
    schemas: list[dict[str, Any]] = []
    response_format = body.get("response_format")
    if response_format is not None:
        json_schema = response_format.get("json_schema") if isinstance(response_format, dict) else None
        if (
            response_format.get("type") != "json_schema"
            or not isinstance(json_schema, dict)
            or not isinstance(json_schema.get("schema"), dict)
        ):
            raise RequestRejectedError(
                "response_format must be {'type': 'json_schema', 'json_schema': "
                "{'name': ..., 'schema': {...}}}"
            )
        schemas.append(json_schema["schema"])
    structured = body.get("structured_outputs")
    compact = False
    if structured is not None:
        if not isinstance(structured, dict):
            raise RequestRejectedError("structured_outputs must be an object")
        others = sorted(
            k
            for k in ("regex", "choice", "grammar", "json_object", "structural_tag")
            if structured.get(k) is not None
        )
        if others:
            raise RequestRejectedError(f"this server only serves JSON-schema constraints, got {others}")
        if structured.get("json") is not None:
            if not isinstance(structured["json"], dict):
                raise RequestRejectedError("structured_outputs.json must be a JSON schema object")
            schemas.append(structured["json"])
        compact = structured.get("disable_any_whitespace") is True
    if not schemas:
        raise RequestRejectedError(
            "no JSON schema: send response_format json_schema or structured_outputs.json"
        )
    if any(s != schemas[0] for s in schemas):
        raise RequestRejectedError("response_format and structured_outputs carry different schemas")
    return ChatRequest(model, messages, schemas[0], float(temperature), max_tokens, compact)


class OpenAiTestServer:
    """The in-process test server; ``async with OpenAiTestServer() as server: server.base_url``."""

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

        Attributes:
            in_flight: chat requests being handled now; ``peak_in_flight`` is its maximum so far.
        """
        self.models = tuple(models)
        self.latency_s = latency_s
        self.responder = responder
        self.hang_s = hang_s
        self.fault_hook: Callable[[ChatRequest], Fault | None] | None = None
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._record = record
        self._script: deque[Fault] = deque()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def script(self, *faults: Fault) -> None:
        """Queue faults for the next requests, consumed in arrival order (then normal answers)."""
        self._script.extend(faults)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start listening.

        Args:
            host: interface to bind.
            port: TCP port; 0 picks a free one.

        Returns:
            The OpenAI base URL, e.g. ``http://127.0.0.1:40123/v1``.
        """
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        # handler_cancellation: a client that gives up (timeout) cancels its hanging handler.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.base_url = f"http://{bound_host}:{bound_port}/v1"
        return self.base_url

    async def stop(self) -> None:
        """Stop listening and cancel pending handlers."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> OpenAiTestServer:
        """Start on a free loopback port."""
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        """Stop."""
        await self.stop()

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _models(self, _request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "clingate"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._handle_chat(request)
        finally:
            self.in_flight -= 1

    async def _handle_chat(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        if self._record:
            self.requests.append(body)
        try:
            chat = parse_chat_request(body)
        except RequestRejectedError as exc:
            return _error(400, str(exc))
        if chat.model not in self.models:
            return _error(404, f"The model `{chat.model}` does not exist.", "NotFoundError")
        fault = self._script.popleft() if self._script else None
        if fault is None and self.fault_hook is not None:
            fault = self.fault_hook(chat)
        fault = fault or Fault.ok()
        latency = self.latency_s if fault.latency_s is None else fault.latency_s
        if latency > 0:
            await asyncio.sleep(latency)
        if fault.kind is FaultKind.STATUS:
            response = _error(fault.status, f"scripted HTTP {fault.status}", "ScriptedFault")
            if fault.retry_after_s is not None:
                response.headers["Retry-After"] = f"{fault.retry_after_s:g}"
            return response
        if fault.kind is FaultKind.HANG:
            await asyncio.sleep(self.hang_s)
        return self._answer(chat, fault.kind)

    def _answer(self, chat: ChatRequest, kind: FaultKind) -> web.Response:
        try:
            value = self.responder(chat)
        except UnsupportedSchemaError as exc:
            return _error(400, str(exc))
        separators = (",", ":") if chat.compact else (", ", ": ")
        content = json.dumps(value, separators=separators)
        finish_reason = "stop"
        if kind is FaultKind.INVALID_JSON:
            content = content[: max(1, len(content) // 2)] + "<not json"
        elif kind is FaultKind.SCHEMA_INVALID:
            content = json.dumps(["not", "the", "schema"])
        elif kind is FaultKind.TRUNCATED:
            content, finish_reason = content[: len(content) // 2], "length"
        if chat.max_tokens is not None and len(content) > chat.max_tokens * CHARS_PER_TOKEN:
            content, finish_reason = content[: chat.max_tokens * CHARS_PER_TOKEN], "length"
        completion_tokens = math.ceil(len(content) / CHARS_PER_TOKEN)
        prompt_tokens = math.ceil(len(chat.prompt) / CHARS_PER_TOKEN)
        return web.json_response(
            {
                "id": f"chatcmpl-{hashlib.sha256(chat.prompt.encode()).hexdigest()[:16]}",
                "object": "chat.completion",
                "created": 0,
                "model": chat.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )


def main(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")] = 0,
    latency_ms: Annotated[float, typer.Option(help="Fixed delay before every answer, in ms.")] = 0.0,
    model: Annotated[list[str] | None, typer.Option(help="Served model name (repeatable).")] = None,
    hashed: Annotated[bool, typer.Option(help="Choose answers by a hash of the prompt.")] = False,
) -> None:
    """Serve the OpenAI-compatible test API until interrupted; prints ``listening <base-url>``."""

    async def serve() -> None:
        server = OpenAiTestServer(
            models=model or [DEFAULT_MODEL],
            latency_s=latency_ms / 1000.0,
            responder=hashed_responder if hashed else minimal_responder,
            record=False,
        )
        base_url = await server.start(host, port)
        print(f"listening {base_url}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    asyncio.run(serve())


if __name__ == "__main__":
    typer.run(main)
