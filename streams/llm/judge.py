"""The one rule for accepting a model's answer, shared by every backend (HTTP client, in-process vLLM).

A generation is an answer only when it ended normally and, for a schema-constrained call, validates
against the call's response model. One that ended at the token budget (``finish_reason == "length"``)
is TRUNCATED; one that ended any other way than ``stop``, or whose text does not validate, is
INVALID_OUTPUT. Nothing is repaired or partially accepted, so model output reaches the deterministic
parts only as a validated record; what a rejection leads to is the caller's rule (the client does not
retry it, the verifier applies its conservative defaults, the generator dead-letters its record).

A free-text call (no schema) accepts any non-empty text that ended with ``stop`` or at its budget: the
budget is the call type's, and a cut answer is still what the model said.

The rejection's detail is for operators and never quotes the answer text, which may quote patient data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from streams.llm.calls import CALL_PROFILES, CallType
from streams.llm.result import FailureKind

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class AnswerRejected:
    """Why a finished generation is not an answer.

    Attributes:
        kind: ``TRUNCATED`` or ``INVALID_OUTPUT``.
        detail: operator detail; never the answer text.
    """

    kind: FailureKind
    detail: str


def judge_text(content: Any, finish_reason: Any) -> str | AnswerRejected:
    """The rule for a free-text answer: a non-empty string that ended with ``stop`` or at the budget."""
    if finish_reason not in ("stop", "length"):
        return AnswerRejected(FailureKind.INVALID_OUTPUT, f"finish_reason={finish_reason!r}, expected 'stop'")
    if not isinstance(content, str) or not content.strip():
        return AnswerRejected(FailureKind.INVALID_OUTPUT, "answer content is not a non-empty string")
    return content


def judge_answer(
    content: Any, finish_reason: Any, response_model: type[M], call_type: CallType
) -> M | AnswerRejected:
    """The rule for a schema-constrained answer (module docstring).

    Args:
        content: the generated text.
        finish_reason: the engine's finish reason.
        response_model: the model the text must validate against.
        call_type: the call type (its budget is named in the detail).

    Returns:
        The validated model instance, or why the generation was rejected.
    """
    if finish_reason == "length":
        return AnswerRejected(
            FailureKind.TRUNCATED,
            f"finish_reason=length: the answer hit max_tokens={CALL_PROFILES[call_type].max_tokens}",
        )
    if finish_reason != "stop":
        return AnswerRejected(FailureKind.INVALID_OUTPUT, f"finish_reason={finish_reason!r}, expected 'stop'")
    if not isinstance(content, str):
        return AnswerRejected(FailureKind.INVALID_OUTPUT, "answer content is not a string")
    try:
        return response_model.model_validate_json(content)
    except ValidationError as exc:
        problems = ", ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '/'}:{err['type']}" for err in exc.errors()[:5]
        )
        detail = f"answer does not validate against {response_model.__name__}: {problems}"
        return AnswerRejected(FailureKind.INVALID_OUTPUT, detail)


def judge_completion(
    envelope: dict[str, Any], response_model: type[M] | None, call_type: CallType
) -> M | str | AnswerRejected:
    """Judge the first choice of a chat-completions answer: :func:`judge_answer` for a schema-constrained
    call, :func:`judge_text` for a free-text one (``response_model`` None); INVALID_OUTPUT when the
    answer has no ``choices[0].message.content``."""
    try:
        choice = envelope["choices"][0]
        finish_reason = choice.get("finish_reason")
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError, AttributeError):
        return AnswerRejected(FailureKind.INVALID_OUTPUT, "answer envelope has no choices[0].message.content")
    if response_model is None:
        return judge_text(content, finish_reason)
    return judge_answer(content, finish_reason, response_model, call_type)
