"""The OpenAI-compatible HTTP front shared by every local LLM server (test responder or real model).

One piece speaks the subset of vLLM's API the client uses (``POST /v1/chat/completions``,
``GET /v1/models``, ``GET /health``); what answers a request is pluggable (an :class:`AnswerSource`):
the scripted / hashed responders of :mod:`streams.llm.serve.testserver`, or the SmolLM2 model under an
Outlines constraint (:mod:`streams.llm.serve.smollm2`). So the tests, the benchmark and the demo exercise
the production client against exactly the same request validation whichever source answers.

The front is strict where a real server would be silently lenient:

* it validates the request shape: ``model`` is served, ``messages`` is a non-empty list of
  ``{role, content}`` (content a string, or a list of ``text`` and ``image_url`` parts as vLLM's
  multimodal chat takes), ``temperature`` is present, and a JSON schema, when sent, is the same via
  ``response_format`` (type ``json_schema``) and ``structured_outputs.json``; a request without one is
  free text (the agent's synthesis, DocGemma §7);
* it answers 400 to any removed ``guided_*`` key, which current vLLM would ignore while answering 200
  unconstrained, so a regression in the client is loud;
* ``max_tokens`` is the source's budget: a source that reaches it reports ``finish_reason = "length"``
  (as vLLM does), and ``disable_any_whitespace`` asks it for compact JSON.

Faults are injected here, on top of any source, so a real model can be made to misbehave too:
:meth:`OpenAiServer.script` queues :class:`Fault` values consumed in arrival order, and
:attr:`OpenAiServer.fault_hook` may pick a fault per request (e.g. by prompt). Faults: fixed latency,
any HTTP status (429 with ``Retry-After``, 500, ...), a hang (the client times out), invalid JSON,
schema-invalid JSON and a truncated answer.

It is an asyncio (aiohttp) server; one process handles hundreds of concurrent requests, as the
Little's-law benchmark needs (a source that computes, like the model, serialises its own work).
:func:`serve_forever` prints ``listening <base-url>`` once ready, and
:class:`streams.testing.llm_server.ServerProcess` runs ``clingate llm serve`` in a child process and reads
that line back, for the demo and the tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol

from aiohttp import web

REMOVED_KEYS = re.compile(r"^guided_")


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
        schema: the JSON schema the answer must match; None for a free-text answer.
        schema_name: ``response_format.json_schema.name``, when sent.
        temperature: requested temperature.
        max_tokens: requested budget, if any.
        compact: whether compact JSON was requested (``disable_any_whitespace``).
    """

    model: str
    messages: list[dict[str, Any]]
    schema: dict[str, Any] | None
    temperature: float
    max_tokens: int | None
    compact: bool
    schema_name: str | None = None

    @property
    def prompt(self) -> str:
        """The text of every message, in order (a multimodal message's text parts)."""
        return "\n".join(message_text(m) for m in self.messages)


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text: its content string, or its ``text`` parts joined."""
    content = message.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if part.get("type") == "text")


def _valid_content(content: Any) -> bool:
    """A string, or a non-empty list of ``{"type": "text", "text": str}`` and
    ``{"type": "image_url", "image_url": {"url": str}}`` parts."""
    if isinstance(content, str):
        return True
    if not isinstance(content, list) or not content:
        return False
    for part in content:
        if not isinstance(part, dict):
            return False
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            continue
        image = part.get("image_url")
        if part.get("type") == "image_url" and isinstance(image, dict) and isinstance(image.get("url"), str):
            continue
        return False
    return True


@dataclass(frozen=True, slots=True)
class Completion:
    """What an answer source produced for one request.

    Attributes:
        content: the answer text (JSON, unless the source misbehaves).
        finish_reason: ``stop``, or ``length`` when the ``max_tokens`` budget ended the answer.
        prompt_tokens: prompt size in the source's tokens (an estimate for sources without a tokenizer).
        completion_tokens: answer size in the source's tokens.
    """

    content: str
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int


class AnswerSource(Protocol):
    """Produces the answer of a validated request; the HTTP front does everything else.

    An implementation MUST honour ``max_tokens`` (``finish_reason = "length"`` when it is reached) and
    SHOULD constrain its answer to ``request.schema``; it MAY raise :class:`RequestRejectedError` for
    a request it cannot serve (answered with HTTP 400, as vLLM answers an unsupported schema).
    """

    async def complete(self, request: ChatRequest) -> Completion:
        """Answer one request."""
        ...


class RequestRejectedError(ValueError):
    """The request is malformed or cannot be served; the message is returned with HTTP 400."""


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
            and _valid_content(message.get("content"))
        ):
            raise RequestRejectedError(
                "each message must be {'role': system|user|assistant, 'content': str or a list of text "
                "and image_url parts}"
            )
    temperature = body.get("temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise RequestRejectedError("'temperature' must be present and a number")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestRejectedError("'max_tokens' must be a positive integer")
    schemas: list[dict[str, Any]] = []
    schema_name = None
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
        schema_name = json_schema.get("name") if isinstance(json_schema.get("name"), str) else None
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
    if any(s != schemas[0] for s in schemas):
        raise RequestRejectedError("response_format and structured_outputs carry different schemas")
    schema = schemas[0] if schemas else None
    return ChatRequest(model, messages, schema, float(temperature), max_tokens, compact, schema_name)


def _error(status: int, message: str, error_type: str = "BadRequestError") -> web.Response:
    # vLLM's error body shape.
    body = {"object": "error", "message": message, "type": error_type, "param": None, "code": status}
    return web.json_response(body, status=status)


class OpenAiServer:
    """The HTTP front; ``async with OpenAiServer(source, models=...) as server: server.base_url``."""

    def __init__(
        self,
        source: AnswerSource,
        *,
        models: Sequence[str],
        latency_s: float = 0.0,
        hang_s: float = 30.0,
        record: bool = True,
    ) -> None:
        """Configure the server (start it with :meth:`start`).

        Args:
            source: answers validated requests.
            models: served model names (others get 404, as from vLLM).
            latency_s: default delay before every answer.
            hang_s: how long a ``Fault.hang()`` request waits before answering.
            record: keep every chat request body in :attr:`requests`.

        Attributes:
            in_flight: chat requests being handled now; ``peak_in_flight`` is its maximum so far.
        """
        self.source = source
        self.models = tuple(models)
        self.latency_s = latency_s
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

    async def __aenter__(self) -> OpenAiServer:
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
        try:
            completion = await self.source.complete(chat)
        except RequestRejectedError as exc:
            return _error(400, str(exc))
        return self._answer(chat, _with_fault(completion, fault.kind))

    @staticmethod
    def _answer(chat: ChatRequest, completion: Completion) -> web.Response:
        return web.json_response(
            {
                "id": f"chatcmpl-{hashlib.sha256(chat.prompt.encode()).hexdigest()[:16]}",
                "object": "chat.completion",
                "created": 0,
                "model": chat.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": completion.content},
                        "finish_reason": completion.finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": completion.prompt_tokens,
                    "completion_tokens": completion.completion_tokens,
                    "total_tokens": completion.prompt_tokens + completion.completion_tokens,
                },
            }
        )


def _with_fault(completion: Completion, kind: FaultKind) -> Completion:
    content = completion.content
    if kind is FaultKind.INVALID_JSON:
        content = content[: max(1, len(content) // 2)] + "<not json"
    elif kind is FaultKind.SCHEMA_INVALID:
        content = json.dumps(["not", "the", "schema"])
    elif kind is FaultKind.TRUNCATED:
        return Completion(
            content[: len(content) // 2], "length", completion.prompt_tokens, completion.completion_tokens
        )
    else:
        return completion
    return Completion(
        content, completion.finish_reason, completion.prompt_tokens, completion.completion_tokens
    )


async def serve_forever(server: OpenAiServer, host: str, port: int) -> None:
    """Run ``server`` until cancelled, printing ``listening <base-url>`` on stdout once it listens.

    Args:
        server: the configured server.
        host: interface to bind.
        port: TCP port; 0 picks a free one.
    """
    base_url = await server.start(host, port)
    print(f"listening {base_url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()
