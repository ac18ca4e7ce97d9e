"""The LLM client of clingate: schema-constrained calls to OpenAI-compatible (vLLM) servers.

Public interface:

* :class:`LlmClient` (``call(call_type, response_model, messages) -> LlmOk[T] | LlmFailed``), built
  with :meth:`LlmClient.from_settings` (:func:`given_or_built`: a given client, or one built and closed);
* :class:`CallType` / :data:`CALL_PROFILES`: the one table of temperatures and token budgets;
* :func:`response_model`: declare (lint and register) a response model;
* :mod:`streams.llm.judge`: the one rule for accepting an answer, whatever backend produced it;
* the DBPM response models in :mod:`streams.llm.schemas`;
* :mod:`streams.llm.serve.http`: the local OpenAI-compatible HTTP front (request validation, faults) with a
  pluggable answer source (:class:`streams.testing.llm_server.ServerProcess` runs ``clingate llm serve``
  in a child process);
* answer sources: :mod:`streams.llm.serve.testserver` (scripted, schema-valid) and
  :mod:`streams.llm.serve.smollm2`
  (SmolLM2-135M under an Outlines constraint, ``smollm2`` extra);
* :mod:`streams.llm.serve.vllm_inprocess`: the same calls on vLLM's Python API (``gpu`` extra).
"""

from streams.llm.breaker import CircuitState
from streams.llm.calls import CALL_PROFILES, CallProfile, CallType, Role
from streams.llm.client import ChatMessage, ClientPolicy, LlmClient, given_or_built
from streams.llm.config import Endpoint, RoleConfig, resolve_role, resolve_roles
from streams.llm.lint import UnregisteredResponseModelError, response_model
from streams.llm.result import FailureKind, LlmFailed, LlmOk, LlmResult

__all__ = [
    "CALL_PROFILES",
    "CallProfile",
    "CallType",
    "ChatMessage",
    "CircuitState",
    "ClientPolicy",
    "Endpoint",
    "FailureKind",
    "LlmClient",
    "LlmFailed",
    "LlmOk",
    "LlmResult",
    "Role",
    "RoleConfig",
    "UnregisteredResponseModelError",
    "given_or_built",
    "resolve_role",
    "resolve_roles",
    "response_model",
]
