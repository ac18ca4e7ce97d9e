"""The asynchronous driver of the classification arbiter's step machine.

:func:`arbitrate` runs one document: it starts the pure step machine, awaits each attempt's LLM
requests together (they are independent), resumes with the results, and repeats until the document
is decided. Many documents are driven by running many :func:`arbitrate` coroutines at once; the
concurrency bound on the model lives in the :data:`LlmCall` the caller passes (a semaphore around
the client), never in the arbiter, so one slow document never holds up another's calls.

A call that raises becomes a failed :class:`LlmResult` (the arbiter turns it into a MAJOR issue and
escalates): an LLM outage degrades to SME review, it does not drop or crash the document.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from processors.docs.arbiter import ArbiterConfig, AwaitingLlm, Finished, resume, start
from processors.docs.llm import LlmRequest, LlmResult
from schemas.docs import ClassificationRequest

LlmCall = Callable[[LlmRequest], Awaitable[LlmResult]]
"""Answers one LLM request. The seam for the project's LLM client (streams/llm)."""


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
