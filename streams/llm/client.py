"""The one LLM client: vLLM's OpenAI-compatible chat completions with schema-constrained output.

Every LLM call in clingate goes through :meth:`LlmClient.call`. It sends a chat completion whose answer
is constrained to a registered pydantic response model, validates the answer against that model, and
returns ``LlmOk[T] | LlmFailed``; it never raises for a server, network or output problem. The one
exception to the constraint is :meth:`LlmClient.call_text`, the free-text answer of the agent's
SYNTHESIZE node (DocGemma §7: free-form at T=0.5): no schema is sent and the text is the answer, also
when the token budget ended it (the budget is the spec's; a cut answer is still what the model said).

This module is the call policy: what is sent, and when to retry, wait or give up. Whether an answer is
accepted is :mod:`streams.llm.judge` (shared with the in-process backend), the per-server circuit is
:mod:`streams.llm.breaker`, and a result is reported through :class:`streams.llm.result.AttemptContext`.

Request shape (checked against vLLM's sources and docs, current as of the v0.12+ API):

* The schema travels as ``response_format = {"type": "json_schema", "json_schema": {"name", "schema"}}``
  (no ``strict``: vLLM ignores it and OpenAI's strict mode forbids optional fields), the OpenAI-standard
  key that every OpenAI-compatible server honours or rejects loudly, AND as
  ``structured_outputs = {"json": schema, "disable_any_whitespace": true}``, vLLM's own extra-body
  field. vLLM's ``ChatCompletionRequest.to_sampling_params`` merges the two (it replaces
  ``structured_outputs.json`` with the ``response_format`` schema, which is the same schema), so the
  server compiles exactly one grammar. Source: vllm ``entrypoints/openai`` chat protocol,
  ``to_sampling_params``; ``sampling_params.StructuredOutputsParams`` (fields ``json``, ``regex``,
  ``choice``, ``grammar``, ``json_object``, ``disable_any_whitespace``, ``disable_additional_properties``,
  ``whitespace_pattern``, ``structural_tag``; exactly one constraint per request).
* Never ``guided_json`` / ``guided_*`` / ``guided_decoding_backend``: vLLM removed them in v0.12.0
  (docs.vllm.ai "Structured Outputs" warning box) and, because the request model accepts unknown
  fields, a server that receives them answers 200 *unconstrained* (reported in dottxt-ai/outlines#1887
  and fixed in outlines PR #1888; noonghunna/club-3090 PR #551 verified it live on 0.24.0). The test
  server answers 400 to them so a regression is loud.
* ``disable_any_whitespace`` is requested per call, but current vLLM's xgrammar and guidance backends
  read it from the *server* config (``StructuredOutputsConfig.disable_any_whitespace``, set with
  ``--structured-outputs-config``), not from the request. The serving configuration MUST therefore set
  it on the server too: ``vllm serve MODEL --structured-outputs-config
  '{"backend": "xgrammar", "disable_any_whitespace": true}'``; the request field documents intent and
  is honoured wherever the engine reads it.
  Compact JSON matters: with whitespace allowed, constrained models have been seen emitting thousands
  of whitespace tokens until the token limit.
* ``temperature`` and ``max_tokens`` come from the call-type table (:mod:`streams.llm.calls`).

Failure semantics:

* A 200 whose ``finish_reason`` is ``length`` is TRUNCATED, any other non-``stop`` reason or an answer
  that does not validate is INVALID_OUTPUT (:mod:`streams.llm.judge`, the rule every backend applies).
  Neither is retried: most call types decode greedily (:mod:`streams.llm.calls`), and a greedy request
  sent again gives the same answer.
* Timeouts (per attempt, default 180 s, paper Table 14), connection errors, 5xx and 429 are transient:
  retried up to ``max_retries`` times (default 3, paper A.3 "three retry attempts", read as three
  retries after the first attempt) with full-jitter exponential backoff; a numeric ``Retry-After`` on
  a 429 is honoured up to the backoff cap. Other 4xx are REJECTED at once (a configuration error).
* A circuit breaker per server (:mod:`streams.llm.breaker`; keyed by base URL, so roles sharing a
  server share it) opens after ``breaker_threshold`` consecutive failed attempts (timeouts, connection
  errors, 5xx; a 429 or any other answer proves the server alive), fails calls fast while open, and
  after ``breaker_reset_s`` lets one probe through (half-open): success closes it, failure re-opens it.
* Concurrency: each server has at most ``max_in_flight`` slots (default 64, paper A.3), adapted to
  what it answers within the timeout (:mod:`streams.llm.limit`: halved by an attempt that times out,
  raised again by answers), so a model on a CPU gets the requests it can answer instead of a queue
  the timeout expires in; a call holds a slot from its first attempt to its result, so an overloaded
  server gets fewer requests, not more (the slot is held across retries and backoff). Callers may
  start any number of calls; the excess waits for a slot, in the client. Per-key ordering is the
  caller's job: the client completes calls in whatever order the server answers.
* Transport (choice): one aiohttp ``ClientSession`` per client, whose connector keeps at most
  ``max_in_flight`` keep-alive connections per server, opened lazily on the event loop of the first
  call. aiohttp parses HTTP in C: measured against the local test server, 0.25 ms of client CPU per
  call against 1.2-1.4 ms with httpx (one keep-alive httpx client per slot), whose per-request cost
  (request building, URL quoting, httpcore's pool and h11 in Python) was over half the CPU of the
  generator and verifier groups in the demo's profile. (A single shared httpx pool was worse still:
  httpcore re-scans every connection for every queued request, O(N^2 + N*M), encode/httpcore#1035,
  encode/httpx#3215.) Only the messages are serialised per call (:meth:`LlmClient.encoded_body`), with
  the standard ``json`` module, and sent as bytes; the answer is parsed and judged in full.

Numbers the sources do not give are this project's choices: backoff ceiling 0.5 s doubling to 8 s,
breaker threshold 5 consecutive failed attempts, 30 s before a probe.

Testability: the backoff's randomness (``rng``), the sleep and the clock are injectable.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, TypeVar

import aiohttp
import certifi
from pydantic import BaseModel

from streams.llm.breaker import CircuitBreaker, CircuitState
from streams.llm.calls import CALL_PROFILES, CallType, Role
from streams.llm.config import Endpoint, enabling_variables, resolve_roles
from streams.llm.judge import AnswerRejected, judge_completion
from streams.llm.limit import AdaptiveLimit
from streams.llm.lint import json_schema_of, require_registered
from streams.llm.result import AttemptContext, FailureKind, LlmFailed, LlmOk
from streams.runtime.settings import Settings

M = TypeVar("M", bound=BaseModel)


class ChatMessage(TypedDict):
    """One chat message, as the OpenAI chat API takes it: ``content`` is the text, or a list of
    ``{"type": "text", "text": ...}`` and ``{"type": "image_url", "image_url": {"url": ...}}`` parts for a
    vision model."""

    role: Literal["system", "user", "assistant"]
    content: str | list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ClientPolicy:
    """Timeouts, retries, breaker and concurrency of one client.

    Attributes:
        timeout_s: deadline of one attempt (request sent to answer read).
        max_retries: retries after the first attempt, for transient failures only.
        backoff_base_s: first backoff ceiling; it doubles per retry (full jitter below it).
        backoff_max_s: backoff ceiling, also the cap on an honoured ``Retry-After``.
        breaker_threshold: consecutive failed attempts that open a server's circuit.
        breaker_reset_s: how long a circuit stays open before one probe is let through.
        max_in_flight: the most requests in flight per server (fewer while it times out: streams.llm.limit).
        disable_any_whitespace: request compact JSON (see the module docstring).
    """

    timeout_s: float = 180.0
    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    breaker_threshold: int = 5
    breaker_reset_s: float = 30.0
    max_in_flight: int = 64
    disable_any_whitespace: bool = True


@dataclass(slots=True)
class _Server:
    base_url: str
    slots: AdaptiveLimit
    breaker: CircuitBreaker


@dataclass(frozen=True, slots=True)
class _Transient:
    kind: FailureKind
    detail: str
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class _Final:
    kind: FailureKind
    detail: str


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # One per process: building one (loading the CA bundle) costs ~0.1 s. certifi's bundle, as httpx
    # used; the environment (SSL_CERT_FILE) is read in streams.runtime.settings only.
    return ssl.create_default_context(cafile=certifi.where())


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


class LlmClient:
    """Async client for schema-constrained LLM calls; use one per process (it pools connections).

    Shaped for consumer groups that keep many calls in flight and publish in per-key order: start one
    task per record, then await the tasks in the order the records arrived (awaiting in order preserves
    order; the slots bound what is actually on the wire)::

        async with LlmClient.from_settings(get_settings()) as llm:
            tasks = [asyncio.create_task(llm.call(CallType.NER_VERDICT, NerVerdict, m)) for m in batch]
            for task in tasks:
                result = await task  # LlmOk[NerVerdict] | LlmFailed, in input order
    """

    def __init__(
        self,
        endpoints: Mapping[Role, Endpoint],
        *,
        policy: ClientPolicy | None = None,
        api_key: str | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create a client.

        Args:
            endpoints: the server of each enabled role; a role not in the mapping is off.
            policy: timeouts, retries, breaker and concurrency; defaults per paper Table 14.
            api_key: bearer token for servers that require one.
            rng: randomness of the backoff jitter (seed it in tests).
            sleep: the backoff sleep (replace it in tests).
            clock: monotonic clock for latency and the breakers.
        """
        self._policy = policy or ClientPolicy()
        self._endpoints = dict(endpoints)
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._clock = clock
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self._frames: dict[tuple[CallType, type[BaseModel], str], tuple[bytes, bytes]] = {}
        self._servers: dict[str, _Server] = {}
        for endpoint in self._endpoints.values():
            if endpoint.base_url not in self._servers:
                self._servers[endpoint.base_url] = _Server(
                    endpoint.base_url,
                    AdaptiveLimit(self._policy.max_in_flight, endpoint.base_url),
                    CircuitBreaker(self._policy.breaker_threshold, self._policy.breaker_reset_s, clock),
                )

    def _http(self) -> aiohttp.ClientSession:
        """The session, opened on the running loop at the first call (aiohttp binds it to that loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=self._policy.max_in_flight,
                                               ssl=_ssl_context()),
                # asyncio.timeout in _attempt is the per-attempt deadline; aiohttp only bounds connecting.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, self._policy.timeout_s)),
                # The environment is read in streams.runtime.settings only: no HTTP(S)_PROXY here.
                trust_env=False,
                headers=self._headers,
            )  # fmt: skip
        return self._session

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> LlmClient:
        """Build the client the settings describe (roles resolved by :mod:`streams.llm.config`).

        Args:
            settings: the process settings.
            **overrides: keyword arguments passed to the constructor (``rng``, ``sleep``, ...).

        Returns:
            A client whose unconfigured roles answer ``LlmFailed(kind=DISABLED)``.
        """
        endpoints = {
            role: config.endpoint
            for role, config in resolve_roles(settings).items()
            if config.endpoint is not None
        }
        policy = ClientPolicy(
            timeout_s=settings.llm_timeout_s,
            max_retries=settings.llm_max_retries,
            max_in_flight=settings.llm_max_in_flight,
        )
        api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(endpoints, policy=policy, api_key=api_key, **overrides)

    async def __aenter__(self) -> LlmClient:
        """Use the client as an async context manager (closes the connection pool on exit)."""
        return self

    async def __aexit__(self, *_exc: object) -> None:
        """Close the connection pool."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close every connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def enabled(self, role: Role) -> bool:
        """Whether ``role`` has a server (its LLM phases are on)."""
        return role in self._endpoints

    def circuit_state(self, role: Role) -> CircuitState | None:
        """The circuit state of ``role``'s server, None when the role is off."""
        endpoint = self._endpoints.get(role)
        return None if endpoint is None else self._servers[endpoint.base_url].breaker.state

    def request_body(
        self,
        call_type: CallType,
        response_model: type[BaseModel] | None,
        messages: Sequence[ChatMessage],
        model: str,
    ) -> dict[str, Any]:
        """The exact JSON body sent for a call (public so tests and audits can inspect it).

        Args:
            call_type: the call type (temperature and budget come from its profile).
            response_model: the registered response model; None for a free-text call (no schema).
            messages: the chat messages.
            model: the served model name.

        Returns:
            The chat-completions request body.
        """
        profile = CALL_PROFILES[call_type]
        body: dict[str, Any] = {
            "model": model,
            "messages": list(messages),
            "temperature": profile.temperature,
            "max_tokens": profile.max_tokens,
        }
        if response_model is None:
            return body
        schema = json_schema_of(response_model)
        return {
            **body,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": response_model.__name__, "schema": schema},
            },
            "structured_outputs": {
                "json": schema,
                "disable_any_whitespace": self._policy.disable_any_whitespace,
            },
        }

    def encoded_body(
        self,
        call_type: CallType,
        response_model: type[BaseModel] | None,
        messages: Sequence[ChatMessage],
        model: str,
    ) -> bytes:
        """:meth:`request_body` as the JSON bytes sent; only the messages are serialised per call.

        Everything but the messages (the schema twice, temperature, budget) is the same for every call of
        a call type, response model and served model, so its JSON is built once and the messages are
        spliced in: serialising the schema was the largest share of a call's client CPU after the HTTP
        exchange itself.
        """
        key = (call_type, response_model, model)
        frame = self._frames.get(key)
        if frame is None:
            body = self.request_body(call_type, response_model, [], model)
            rest = {k: v for k, v in body.items() if k not in ("model", "messages")}
            head = json.dumps({"model": model})[:-1] + ', "messages": '
            frame = self._frames[key] = (head.encode(), (", " + json.dumps(rest)[1:]).encode())
        return frame[0] + json.dumps(list(messages)).encode() + frame[1]

    async def call(
        self, call_type: CallType, response_model: type[M], messages: Sequence[ChatMessage]
    ) -> LlmOk[M] | LlmFailed:
        """Make one schema-constrained call and validate the answer.

        Args:
            call_type: what kind of call this is; selects role, temperature and token budget.
            response_model: a model declared with ``@response_model``.
            messages: the chat messages (system prompt first, if any).

        Returns:
            ``LlmOk`` with the validated model instance, or ``LlmFailed`` with a typed kind and a
            clinician-safe message. Never raises for server, network or output problems.

        Raises:
            UnregisteredResponseModelError: ``response_model`` was not declared with ``@response_model``
                (a programming error: the schema would bypass the linter).
        """
        require_registered(response_model)
        return await self._call(call_type, response_model, messages)

    async def call_text(self, call_type: CallType, messages: Sequence[ChatMessage]) -> LlmOk[str] | LlmFailed:
        """Make one free-text call (no schema; module docstring): ``LlmOk`` carries the text."""
        return await self._call(call_type, None, messages)

    async def _call(
        self, call_type: CallType, response_model: type[M] | None, messages: Sequence[ChatMessage]
    ) -> LlmOk[Any] | LlmFailed:
        role = CALL_PROFILES[call_type].role
        endpoint = self._endpoints.get(role)
        if endpoint is None:
            detail = f"no LLM server for role {role}: set {enabling_variables(role)}"
            return AttemptContext(call_type, None, 0, 0.0).failed(FailureKind.DISABLED, detail)
        server = self._servers[endpoint.base_url]
        body = self.encoded_body(call_type, response_model, messages, endpoint.model)
        async with server.slots.slot():
            return await self._call_with_retries(server, endpoint, call_type, response_model, body)

    async def _call_with_retries(
        self,
        server: _Server,
        endpoint: Endpoint,
        call_type: CallType,
        response_model: type[M] | None,
        body: bytes,
    ) -> LlmOk[Any] | LlmFailed:
        started = self._clock()
        attempts = 0
        while True:
            if not server.breaker.allow():
                context = AttemptContext(call_type, server.base_url, attempts, self._clock() - started)
                detail = (
                    f"circuit open for {server.base_url} after repeated failures; "
                    f"next probe within {self._policy.breaker_reset_s:g} s"
                )
                return context.failed(FailureKind.CIRCUIT_OPEN, detail)
            attempts += 1
            outcome = await self._attempt(server, body)
            context = AttemptContext(call_type, server.base_url, attempts, self._clock() - started)
            if isinstance(outcome, _Final):
                return context.failed(outcome.kind, outcome.detail)
            if isinstance(outcome, _Transient):
                if attempts > self._policy.max_retries:
                    return context.failed(outcome.kind, f"{outcome.detail} (after {attempts} attempts)")
                await self._sleep(self._backoff(attempts, outcome.retry_after_s))
                continue
            return self._answer(outcome, response_model, endpoint, context)

    async def _attempt(self, server: _Server, body: bytes) -> dict[str, Any] | _Transient | _Final:
        """Send one request; judge the server for the breaker; classify the outcome."""
        url = f"{server.base_url}/chat/completions"
        try:
            async with asyncio.timeout(self._policy.timeout_s):
                async with self._http().post(url, data=body) as response:
                    status, payload = response.status, await response.read()
                    retry_after = _retry_after(response) if status == 429 else None
        except TimeoutError:  # also aiohttp's ServerTimeoutError, a TimeoutError and a ClientError
            server.breaker.record_failure()
            server.slots.timed_out()
            detail = f"no answer from {url} within {self._policy.timeout_s:g} s"
            return _Transient(FailureKind.TIMEOUT, detail)
        except aiohttp.ClientError as exc:  # connection, protocol and payload errors
            server.breaker.record_failure()
            return _Transient(FailureKind.UNAVAILABLE, f"{type(exc).__name__} talking to {url}")
        except asyncio.CancelledError:
            server.breaker.record_abandoned()
            raise
        if status >= 500:
            server.breaker.record_failure()
            return _Transient(FailureKind.UNAVAILABLE, f"HTTP {status} from {url}")
        server.breaker.record_success()
        server.slots.answered()
        if status == 429:
            return _Transient(FailureKind.RATE_LIMITED, f"HTTP 429 from {url}", retry_after)
        if status != 200:
            text = payload.decode("utf-8", errors="replace")[:300]
            return _Final(FailureKind.REJECTED, f"HTTP {status} from {url}: {text}")
        try:
            envelope = json.loads(payload)
        except ValueError:
            return _Final(FailureKind.INVALID_OUTPUT, f"HTTP 200 from {url} with a body that is not JSON")
        if not isinstance(envelope, dict):
            return _Final(FailureKind.INVALID_OUTPUT, f"HTTP 200 from {url} with a non-object body")
        return envelope

    def _backoff(self, attempts: int, retry_after_s: float | None) -> float:
        ceiling = min(self._policy.backoff_max_s, self._policy.backoff_base_s * 2 ** (attempts - 1))
        delay = self._rng.uniform(0.0, ceiling)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self._policy.backoff_max_s))
        return delay

    @staticmethod
    def _answer(
        envelope: dict[str, Any],
        response_model: type[M] | None,
        endpoint: Endpoint,
        context: AttemptContext,
    ) -> LlmOk[Any] | LlmFailed:
        """The call's result from the server's answer, judged by the one rule (:mod:`streams.llm.judge`)."""
        judged = judge_completion(envelope, response_model, context.call_type)
        if isinstance(judged, AnswerRejected):
            return context.failed(judged.kind, judged.detail)
        usage = envelope.get("usage") if isinstance(envelope.get("usage"), dict) else {}
        return LlmOk(
            value=judged,
            call_type=context.call_type,
            server=endpoint.base_url,
            model=endpoint.model,
            attempts=context.attempts,
            latency_s=context.latency_s,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )


@asynccontextmanager
async def given_or_built(client: LlmClient | None, settings: Settings) -> AsyncIterator[LlmClient]:
    """``client`` as it is, or, when None, the client the settings describe, closed on exit: whoever made
    a client closes it, so a group member given one (a test's, a shared one) leaves it open."""
    if client is not None:
        yield client
        return
    async with LlmClient.from_settings(settings) as built:
        yield built
