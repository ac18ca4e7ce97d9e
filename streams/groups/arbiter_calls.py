"""The asynchronous driver of the classification arbiter's step machine.

:func:`arbitrate` runs one document: it starts the pure step machine, awaits each attempt's LLM
requests together (they are independent), resumes with the results, and repeats until the document
is decided. Many documents are driven by running many :func:`arbitrate` coroutines at once; the
concurrency bound on the model lives behind the :data:`LlmCall` the caller passes (the client's slots
per server, :mod:`streams.llm.limit`), never in the arbiter, so one slow document never holds up
another's calls.

A call that raises becomes a failed :class:`LlmResult` (the arbiter turns it into a MAJOR issue and
escalates): an LLM outage degrades to SME review, it does not drop or crash the document.

The project's LLM client plugs in through :func:`client_call`: every phase is an ``OPERATIONAL`` call
(greedy, T=0.0, from the client's call table) answered as :class:`~processors.docs.llm.LlmJudgement`.
That model is defined next to the pure arbiter (which must not import ``streams``) and is declared a
response model here, so the client's linter checks it when this module is imported and the schema the
arbiter puts in each request is exactly the one the client sends. An ``LlmFailed`` answer becomes the
failed result with the client's clinician-safe message, never the raw server error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from processors.docs.arbiter import ArbiterConfig, AwaitingLlm, Finished, resume, start
from processors.docs.llm import LlmJudgement, LlmRequest, LlmResult
from schemas.docs import ClassificationRequest
from streams.llm import CALL_PROFILES, CallType, LlmClient, LlmOk, response_model
from streams.llm.metrics import LlmMetrics

LlmCall = Callable[[LlmRequest], Awaitable[LlmResult]]
"""Answers one LLM request. The seam for the project's LLM client (streams/llm)."""


response_model(LlmJudgement)

LLM_ROLE = CALL_PROFILES[CallType.OPERATIONAL].role
"""The client role that answers the arbiter's phases (its URL turns the LLM phases on)."""


def configured_call(client: LlmClient, metrics: LlmMetrics | None = None) -> LlmCall | None:
    """The arbiter's :data:`LlmCall` through ``client``, or None when :data:`LLM_ROLE` has no server.

    None means rules-only: pass ``ArbiterConfig(llm_enabled=False)`` and the disposition says so.
    ``metrics``, when given, counts every call (see :func:`client_call`).
    """
    return client_call(client, metrics) if client.enabled(LLM_ROLE) else None


def client_call(client: LlmClient, metrics: LlmMetrics | None = None) -> LlmCall:
    """The :data:`LlmCall` that answers the arbiter's requests through ``client``.

    Args:
        client: the process's LLM client; it bounds the calls in flight and retries transient failures.
        metrics: counts every answer (calls by outcome, retries, latency); None counts nothing.

    Returns:
        A call that never raises for server, network or output problems: they come back as a failed
        :class:`LlmResult` naming the failure kind and the clinician-safe message.
    """

    async def call(request: LlmRequest) -> LlmResult:
        answer = await client.call(
            CallType.OPERATIONAL,
            LlmJudgement,
            [{"role": "system", "content": request.system}, {"role": "user", "content": request.user}],
        )
        if metrics is not None:
            metrics.observe("docs", answer)
        if isinstance(answer, LlmOk):
            return LlmResult(request_id=request.request_id, judgement=answer.value)
        return LlmResult(request_id=request.request_id, error=f"{answer.kind.value}: {answer.message}")

    return call


async def _answer(call: LlmCall, request: LlmRequest) -> LlmResult:
    try:
        return await call(request)
    except Exception as error:  # any failure of the model is data for the arbiter, see module doc
        return LlmResult(request_id=request.request_id, error=f"{type(error).__name__}: {error}")


async def arbitrate(request: ClassificationRequest, config: ArbiterConfig, call: LlmCall | None) -> Finished:
    """Decide one document, awaiting its LLM phases through ``call``.

    Raises:
        ValueError: when ``config`` enables the LLM but ``call`` is None.
    """
    if config.llm_enabled and call is None:
        raise ValueError("llm_enabled needs an LlmCall; pass llm_enabled=False to run rules-only")
    step = start(request, config)
    while isinstance(step, AwaitingLlm):
        assert call is not None  # requests are only emitted when the LLM is enabled
        results = await asyncio.gather(*(_answer(call, r) for r in step.requests))
        step = resume(step.state, results)
    return step
