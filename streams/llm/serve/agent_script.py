"""Scripted model answers for the clinician's agent, served by the local OpenAI-compatible test server.

The graph's model calls are classification and extraction (DocGemma §1): a test, the benchmark and the
demo fix what the model answers and check what the code decides. :class:`ScriptedAgentModel` is a
responder for :class:`~streams.llm.serve.testserver.OpenAiTestServer`: per question, the answers in the
order the graph asks for them (an object for a schema-constrained call, a string for SYNTHESIZE's free
text). A request belongs to the question its prompt contains last (every node's prompt ends with the
clinician's question or its results, after the system prompt, whose examples may be scripted questions
too), the longest of those found at the same place. Answers are
checked against the request: an object where free text is asked (or the reverse), or a question with
no answer left, is a :class:`ScriptError` (the server answers 400 and the test fails loudly), never a
silently wrong answer. A request asked again word for word gets the answer it got before without
taking another (as greedy decoding would): a worker that resumes a turn after a restart re-asks the call
it was waiting for. Conversations with different questions may run at once.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from streams.llm.serve.http import ChatRequest, RequestRejectedError


class ScriptError(RequestRejectedError):
    """A request the script has no (fitting) answer for."""


class ScriptedAgentModel:
    """The responder (module docstring); ``asked`` counts requests per question."""

    def __init__(self, scripts: Mapping[str, Sequence[Any]]) -> None:
        self._answers = {question: deque(answers) for question, answers in scripts.items()}
        self._lock = threading.Lock()
        self._given: dict[str, Any] = {}
        self.asked: dict[str, int] = dict.fromkeys(scripts, 0)
        self.schemas: dict[str, list[str | None]] = {q: [] for q in scripts}

    def __call__(self, request: ChatRequest) -> Any:
        prompt = request.prompt
        found = [(prompt.rfind(q), len(q), q) for q in self._answers if q in prompt]
        question = max(found)[2] if found else None
        if question is None:
            raise ScriptError(f"no scripted question in the prompt: {prompt[:120]!r}")
        seen = json.dumps([request.messages, request.schema_name], sort_keys=True)
        with self._lock:
            if seen in self._given:
                return self._given[seen]
            answers = self._answers[question]
            if not answers:
                raise ScriptError(f"no answer left for {question!r} (asked {request.schema_name})")
            answer = answers.popleft()
            if (request.schema is None) != isinstance(answer, str):
                wanted = "free text" if request.schema is None else f"a {request.schema_name} object"
                raise ScriptError(f"{question!r}: the graph asked for {wanted}, the script has {answer!r}")
            self._given[seen] = answer
            self.asked[question] += 1
            self.schemas[question].append(request.schema_name)
        return answer

    def left(self) -> dict[str, int]:
        """Answers not asked for, per question (all zero once every scripted turn ran to its end)."""
        with self._lock:
            return {q: len(a) for q, a in self._answers.items()}
