"""Typed outcomes of an LLM call: ``LlmOk[T] | LlmFailed``; callers never see a raw exception.

Every failure carries two texts with two audiences (DocGemma §10, "error message pre-formatting"):

* ``message``: a pre-formatted, clinician-safe sentence from a fixed template. It is the only failure
  text that may reach a clinician, a review packet or another LLM prompt; raw server errors never do,
  because a model shown a raw error answers from its pretrained knowledge instead (DocGemma §10:
  raw 4.8/10 vs pre-formatted 10/10).
* ``operator_detail``: what an operator needs to act (status code, exception name, validation error
  locations). It never contains the model's output text, which may quote patient data.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from streams.llm.calls import CALL_PROFILES, CallType, Role

T = TypeVar("T")


class FailureKind(StrEnum):
    """Why a call produced no usable answer."""

    DISABLED = "disabled"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    REJECTED = "rejected"
    TRUNCATED = "truncated"
    INVALID_OUTPUT = "invalid_output"
    CIRCUIT_OPEN = "circuit_open"

    @property
    def transient(self) -> bool:
        """True when the same call may succeed later (server state), False when it will not."""
        return self in _TRANSIENT


_TRANSIENT = frozenset(
    {FailureKind.TIMEOUT, FailureKind.UNAVAILABLE, FailureKind.RATE_LIMITED, FailureKind.CIRCUIT_OPEN}
)

_ROLE_LABELS = {
    Role.GENERATOR: "extraction model",
    Role.VERIFIER: "verification model",
    Role.VISION: "image model",
    Role.DEFAULT: "language model",
}

_NOT_ASSESSED = "This item was not assessed by it."
MESSAGE_TEMPLATES: dict[FailureKind, str] = {
    FailureKind.DISABLED: "The {label} is not configured, so this step was skipped. "
    "Only the rule-based checks were applied.",
    FailureKind.TIMEOUT: "The {label} did not respond in time. " + _NOT_ASSESSED,
    FailureKind.UNAVAILABLE: "The {label} is temporarily unavailable. " + _NOT_ASSESSED,
    FailureKind.RATE_LIMITED: "The {label} is temporarily busy. " + _NOT_ASSESSED,
    FailureKind.REJECTED: "The {label} could not process this request. " + _NOT_ASSESSED,
    FailureKind.TRUNCATED: "The {label} returned an incomplete answer, which was discarded. " + _NOT_ASSESSED,
    FailureKind.INVALID_OUTPUT: "The {label} returned an answer in an unexpected format, which was "
    "discarded. " + _NOT_ASSESSED,
    FailureKind.CIRCUIT_OPEN: "The {label} has been failing repeatedly and is paused for a short time. "
    + _NOT_ASSESSED,
}


def clinician_message(kind: FailureKind, role: Role) -> str:
    """The pre-formatted, clinician-safe sentence for a failure.

    Args:
        kind: the failure kind.
        role: the role whose server failed.

    Returns:
        A fixed template filled with the role's plain-language label.
    """
    return MESSAGE_TEMPLATES[kind].format(label=_ROLE_LABELS[role])


@dataclass(frozen=True, slots=True)
class LlmOk(Generic[T]):
    """A validated answer.

    Attributes:
        value: the response model instance (or the text, for free-form synthesis).
        call_type: the call type that produced it.
        server: base URL of the answering server.
        model: served model name.
        attempts: HTTP attempts made (1 = first try).
        latency_s: wall time of the call including retries and backoff, excluding queueing for a slot.
        prompt_tokens: as reported by the server, if it did.
        completion_tokens: as reported by the server, if it did.
    """

    value: T
    call_type: CallType
    server: str
    model: str
    attempts: int
    latency_s: float
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class LlmFailed:
    """A call that produced no usable answer.

    Attributes:
        kind: why.
        message: clinician-safe, pre-formatted sentence (the only text that may leave the system).
        operator_detail: what an operator needs; never the model's output text.
        call_type: the call type.
        server: base URL of the server, None when the role is off.
        attempts: HTTP attempts made (0 when none was: disabled or circuit open).
        latency_s: wall time spent, excluding queueing for a slot.
    """

    kind: FailureKind
    message: str
    operator_detail: str
    call_type: CallType
    server: str | None
    attempts: int
    latency_s: float


LlmResult = LlmOk[T] | LlmFailed


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """Where a call stands after its latest attempt: everything a result reports besides the outcome.

    Built once per attempt (and once for a call that makes none), so a failure is reported from one
    value, :meth:`failed`, the same way by every backend.

    Attributes:
        call_type: the call type (its profile names the role whose label the message uses).
        server: base URL of the server (``"in-process"`` for the in-process engine), None when the role
            is off.
        attempts: attempts made so far (0 when none was: disabled, or the circuit open at the first).
        latency_s: wall time since the first attempt, excluding queueing for a slot.
    """

    call_type: CallType
    server: str | None
    attempts: int
    latency_s: float

    def failed(self, kind: FailureKind, detail: str) -> LlmFailed:
        """The call failed with ``kind``: its result, with the clinician-safe message of its role.

        Args:
            kind: why.
            detail: what an operator needs; never the model's output text.
        """
        return LlmFailed(
            kind=kind,
            message=clinician_message(kind, CALL_PROFILES[self.call_type].role),
            operator_detail=detail,
            call_type=self.call_type,
            server=self.server,
            attempts=self.attempts,
            latency_s=self.latency_s,
        )
