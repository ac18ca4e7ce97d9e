"""In-process vLLM backend (``gpu`` extra): the same call types, schemas and results as :class:`LlmClient`,
on vLLM's Python API instead of its HTTP server.

Why it exists: a GPU node that runs the verifier next to its consumer can skip HTTP and hand whole
batches to vLLM's continuous batching (``LLM.chat`` with a list of conversations). Everything that
decides what a call is stays shared with the HTTP client, so the two cannot drift:

* temperature and ``max_tokens`` come from the call-type table (:data:`streams.llm.calls.CALL_PROFILES`);
* the schema is the registered response model's linted JSON schema (:func:`streams.llm.lint.json_schema_of`);
  an unregistered model is refused (:func:`streams.llm.lint.require_registered`);
* the constraint is ``SamplingParams(structured_outputs=StructuredOutputsParams(json=schema,
  disable_any_whitespace=True))``, the current API (vLLM docs, "Structured Outputs", offline
  inference). Never the ``guided_decoding`` / ``GuidedDecodingParams`` API that vLLM v0.12 removed;
* every answer is judged by :func:`streams.llm.judge.judge_answer` (``length`` -> TRUNCATED, not valid
  -> INVALID_OUTPUT) into ``LlmOk | LlmFailed``, a failure reported like the client's
  (:class:`streams.llm.result.AttemptContext`: the same clinician-safe messages).

Engine defaults follow the DBPM paper's serving set-up (Table 14: TP=2, ``max_model_len`` 8192,
``max_num_seqs`` 256, ``gpu_memory_utilization`` 0.90, bfloat16, chunked prefill) and the structured
outputs engine config that ``deploy/vllm`` passes to ``vllm serve``
(:func:`structured_outputs_config`: xgrammar by default, Outlines selectable).

``clingate llm vllm-check --model M`` loads the engine and runs :func:`self_check` (one constrained call
of each verdict type, judged by the client's rule): what an operator runs on a GPU node before a
consumer relies on the backend. Without a GPU the command, the engine arguments and the judging are
tested with a stand-in engine; the engine itself is not.

vllm is imported lazily (only :meth:`VllmInProcess.load` and :func:`sampling_params` import it), so
this module imports, and its request building is unit-tested, on machines without vllm or a GPU.
Failures inside the engine (an exception from ``LLM.chat``) become ``LlmFailed(UNAVAILABLE)`` for every
call of the batch; retries and circuit breaking are HTTP concerns and do not apply in process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar, get_args

from pydantic import BaseModel

from streams.llm.calls import CALL_PROFILES, CallType
from streams.llm.client import ChatMessage
from streams.llm.judge import AnswerRejected, judge_answer
from streams.llm.lint import json_schema_of, require_registered
from streams.llm.result import AttemptContext, FailureKind, LlmFailed, LlmOk
from streams.llm.schemas import NerVerdict, QaVerdict, ReVerdict

M = TypeVar("M", bound=BaseModel)

IN_PROCESS = "in-process"
"""What the results of this backend name as their server (it has no URL)."""

INSTALL_HINT = "the in-process vLLM backend needs the gpu extra (pip install 'clingate[gpu]') on a GPU host"

StructuredOutputsBackend = Literal["xgrammar", "outlines"]
"""The grammar engines clingate serves with (vLLM's ``StructuredOutputsConfig.backend`` values it uses)."""
STRUCTURED_OUTPUTS_BACKENDS: Final[tuple[StructuredOutputsBackend, ...]] = get_args(StructuredOutputsBackend)
DEFAULT_STRUCTURED_OUTPUTS_BACKEND: Final[StructuredOutputsBackend] = "xgrammar"
"""xgrammar: docs/llm-serving.md says why it is the default and when Outlines is the choice."""


def structured_outputs_config(backend: StructuredOutputsBackend) -> dict[str, Any]:
    """vLLM's engine-level structured-outputs config for ``backend``: what ``deploy/vllm/serve.sh`` passes
    as ``--structured-outputs-config`` and :class:`EngineConfig` as ``structured_outputs_config``.

    xgrammar gets ``disable_any_whitespace``: vLLM's xgrammar backend reads compact JSON from the engine
    config, not from the request, and without it a constrained model can emit whitespace until its token
    budget. vLLM refuses that flag for Outlines (its ``StructuredOutputsConfig`` accepts it for xgrammar
    and guidance only), and needs none: the JSON regex Outlines builds allows at most one space between
    tokens (outlines-core's whitespace pattern ``[ ]?``).

    Raises:
        ValueError: ``backend`` is not one of :data:`STRUCTURED_OUTPUTS_BACKENDS`.
    """
    if backend == "xgrammar":
        return {"backend": "xgrammar", "disable_any_whitespace": True}
    if backend == "outlines":
        return {"backend": "outlines"}
    raise ValueError(f"structured outputs backend {backend!r}: one of {list(STRUCTURED_OUTPUTS_BACKENDS)}")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Arguments of ``vllm.LLM`` (defaults: DBPM paper Table 14 and the deploy/vllm server config).

    Attributes:
        model: Hugging Face model id or local path.
        served_name: the name results report as their model (defaults to ``model``).
        tensor_parallel_size: GPUs per model.
        max_model_len: context window.
        max_num_seqs: sequences batched at once.
        gpu_memory_utilization: fraction of GPU memory vLLM may take.
        dtype: weight and activation precision.
        structured_outputs_backend: the grammar engine (:func:`structured_outputs_config`).
    """

    model: str
    served_name: str | None = None
    tensor_parallel_size: int = 2
    max_model_len: int = 8192
    max_num_seqs: int = 256
    gpu_memory_utilization: float = 0.90
    dtype: str = "bfloat16"
    structured_outputs_backend: StructuredOutputsBackend = DEFAULT_STRUCTURED_OUTPUTS_BACKEND

    def __post_init__(self) -> None:
        structured_outputs_config(self.structured_outputs_backend)  # refuses an unknown backend here

    @property
    def disable_any_whitespace(self) -> bool:
        """Whether the engine and the requests ask for compact JSON (xgrammar only)."""
        return bool(structured_outputs_config(self.structured_outputs_backend).get("disable_any_whitespace"))

    def llm_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``vllm.LLM(**kwargs)``."""
        return {
            "model": self.model,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "dtype": self.dtype,
            "enable_chunked_prefill": True,
            "structured_outputs_config": structured_outputs_config(self.structured_outputs_backend),
        }


def sampling_kwargs(
    call_type: CallType, response_model: type[BaseModel], *, disable_any_whitespace: bool = True
) -> dict[str, Any]:
    """The sampling settings of a call, as plain data (what :func:`sampling_params` builds from).

    Args:
        call_type: selects temperature and ``max_tokens`` from the call-type table.
        response_model: a registered response model; its linted JSON schema is the constraint.
        disable_any_whitespace: request compact JSON.

    Returns:
        ``{"temperature", "max_tokens", "structured_outputs": {"json", "disable_any_whitespace"}}``.

    Raises:
        UnregisteredResponseModelError: ``response_model`` was not declared with ``@response_model``.
    """
    require_registered(response_model)
    profile = CALL_PROFILES[call_type]
    return {
        "temperature": profile.temperature,
        "max_tokens": profile.max_tokens,
        "structured_outputs": {
            "json": json_schema_of(response_model),
            "disable_any_whitespace": disable_any_whitespace,
        },
    }


def sampling_params(
    call_type: CallType, response_model: type[BaseModel], *, disable_any_whitespace: bool = True
) -> Any:
    """``vllm.SamplingParams`` of a call, with ``StructuredOutputsParams`` (imports vllm).

    Args:
        call_type: selects temperature and ``max_tokens``.
        response_model: a registered response model.
        disable_any_whitespace: request compact JSON.

    Returns:
        A ``vllm.SamplingParams``.
    """
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    kwargs = sampling_kwargs(call_type, response_model, disable_any_whitespace=disable_any_whitespace)
    return SamplingParams(
        temperature=kwargs["temperature"],
        max_tokens=kwargs["max_tokens"],
        structured_outputs=StructuredOutputsParams(**kwargs["structured_outputs"]),
    )


class VllmInProcess:
    """Schema-constrained calls on an in-process ``vllm.LLM``; results as from :class:`LlmClient`.

    ``call_batch`` hands a whole batch to vLLM (continuous batching); ``call`` has the client's
    signature so a consumer can take either. The engine is driven from one worker thread: ``LLM`` is
    not meant for concurrent callers.
    """

    def __init__(self, llm: Any, *, model_name: str, disable_any_whitespace: bool = True) -> None:
        """Wrap an engine (use :meth:`load` to build one).

        Args:
            llm: a ``vllm.LLM`` (or any object with its ``chat(conversations, sampling_params,
                use_tqdm=...)`` method and output shape).
            model_name: reported as the model of every result.
            disable_any_whitespace: request compact JSON.
        """
        self._llm = llm
        self._model_name = model_name
        self._compact = disable_any_whitespace
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm")

    @classmethod
    def load(cls, config: EngineConfig) -> VllmInProcess:
        """Start a vLLM engine in this process.

        Raises:
            RuntimeError: vllm is not installed (the message says how to install it).
        """
        try:
            from vllm import LLM
        except ImportError as exc:
            raise RuntimeError(INSTALL_HINT) from exc
        return cls(
            LLM(**config.llm_kwargs()),
            model_name=config.served_name or config.model,
            disable_any_whitespace=config.disable_any_whitespace,
        )

    def call_batch(
        self,
        call_type: CallType,
        response_model: type[M],
        conversations: Sequence[Sequence[ChatMessage]],
    ) -> list[LlmOk[M] | LlmFailed]:
        """Run one call per conversation in a single engine batch; results in input order.

        Args:
            call_type: what kind of call these are.
            response_model: a registered response model.
            conversations: the chat messages of each call.

        Returns:
            One ``LlmOk`` or ``LlmFailed`` per conversation, in order. Never raises for engine or
            output problems.
        """
        params = sampling_params(call_type, response_model, disable_any_whitespace=self._compact)
        started = time.monotonic()
        try:
            outputs = self._llm.chat([list(c) for c in conversations], params, use_tqdm=False)
        except Exception as exc:  # the engine's failure modes are many; callers get typed results
            elapsed = time.monotonic() - started
            detail = f"in-process vLLM failed: {type(exc).__name__}"
            failed = _attempt(call_type, elapsed).failed(FailureKind.UNAVAILABLE, detail)
            return [failed for _ in conversations]
        elapsed = time.monotonic() - started
        return [self._result(output, response_model, call_type, elapsed) for output in outputs]

    async def call(
        self, call_type: CallType, response_model: type[M], messages: Sequence[ChatMessage]
    ) -> LlmOk[M] | LlmFailed:
        """One call, with :meth:`LlmClient.call`'s signature, run on the engine's worker thread."""
        loop = asyncio.get_running_loop()
        results = await loop.run_in_executor(
            self._worker, self.call_batch, call_type, response_model, [messages]
        )
        return results[0]

    def _result(
        self, output: Any, response_model: type[M], call_type: CallType, elapsed: float
    ) -> LlmOk[M] | LlmFailed:
        completion = output.outputs[0]
        judged = judge_answer(completion.text, completion.finish_reason, response_model, call_type)
        if isinstance(judged, AnswerRejected):
            return _attempt(call_type, elapsed).failed(judged.kind, judged.detail)
        return LlmOk(
            value=judged,
            call_type=call_type,
            server=IN_PROCESS,
            model=self._model_name,
            attempts=1,
            latency_s=elapsed,
            prompt_tokens=len(output.prompt_token_ids or ()),
            completion_tokens=len(completion.token_ids or ()),
        )


def _attempt(call_type: CallType, elapsed: float) -> AttemptContext:
    """The context of a call on the engine: one attempt (retries are HTTP concerns), server ``in-process``."""
    return AttemptContext(call_type, IN_PROCESS, 1, elapsed)


SELF_CHECK_NOTE = (
    "Clinical note: the patient takes aspirin 100 mg daily for secondary prevention after a myocardial "
    "infarction in 2019."
)
"""The note every self-check call asks about."""

SELF_CHECK_CALLS: Final[tuple[tuple[CallType, type[BaseModel], str], ...]] = (
    (CallType.NER_VERDICT, NerVerdict, "Is 'aspirin' a medication mentioned in the note?"),
    (CallType.RE_VERDICT, ReVerdict, "Does the note support 'aspirin treats myocardial infarction'?"),
    (CallType.QA_VERDICT, QaVerdict, "Is 'aspirin 100 mg daily' the dose the note states?"),
)
"""One call of each verdict type (the calls a verifier next to its consumer makes)."""


def self_check(backend: VllmInProcess) -> list[LlmOk[Any] | LlmFailed]:
    """One constrained call of each of :data:`SELF_CHECK_CALLS` on ``backend``, judged by the client's
    rule; the results in that order (each ``LlmOk`` is a schema-valid answer, whatever it says)."""
    results: list[LlmOk[Any] | LlmFailed] = []
    for call_type, model, question in SELF_CHECK_CALLS:
        messages: list[ChatMessage] = [
            {"role": "system", "content": "Answer with the JSON object the schema describes."},
            {"role": "user", "content": f"{SELF_CHECK_NOTE}\n\n{question}"},
        ]
        results += backend.call_batch(call_type, model, [messages])
    return results
