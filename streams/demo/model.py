"""The demo's real-model step: a few narratives through the production LLM client against SmolLM2.

The demo's loop answers from a script (:mod:`streams.demo.llm`), so that its figures are the paper's
proportions and its decisions can be compared with the in-process engine. This step shows the same
client talking to a real constrained decoder: ``streams.testing.llm_server.ServerProcess.start("smollm2")``
(SmolLM2-135M on llama.cpp, every answer constrained to the request's JSON schema), the calls the
groups make, validity and latency per call.

Choices:

* **Which calls**: per narrative, the generator's QA extraction call for the first question template
  (the shortest extraction answer; a greedy 135M model may run an NER extraction to its 50-entity cap,
  minutes on a loaded machine) and the verifier's verdict call on the narrative's first candidate,
  with exactly the messages, call types and answer models the groups use
  (:func:`processors.dbpm.extraction.extraction_messages`,
  :func:`processors.dbpm.verification.verdict_messages`).
* **Nothing depends on the answers**: a 135M model's clinical judgement is poor. What is reported is
  whether each answer was valid against its schema (or which failure the client reported) and how long
  it took. The step never fails the demo.
* **One call at a time**, no retries, 120 s per call: the server computes serially, and the per-call
  latency is the figure shown.
* **Only without** ``CLINGATE_LLM_URL``: with a configured server the loop already ran on that model.
  Without the ``smollm2`` extra the step says so in one line.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from processors.clinical.vocabulary import DrugVocabulary
from processors.dbpm.extraction import QA_TEMPLATES, extraction_messages, hints_for
from processors.dbpm.verification import verdict_messages
from schemas.dbpm import Candidate, Narrative
from streams.llm import CallType, ClientPolicy, Endpoint, LlmClient, LlmOk, Role
from streams.llm.schemas import NerVerdict, QaExtraction, QaVerdict, ReVerdict

_VERDICT_CALLS = {
    "ner": (CallType.NER_VERDICT, NerVerdict),
    "re": (CallType.RE_VERDICT, ReVerdict),
    "qa": (CallType.QA_VERDICT, QaVerdict),
}
"""The verifier's call type and answer model per task (``streams.groups.verifier``)."""

CALL_TIMEOUT_S = 120.0
"""Deadline of one call (see the module docstring)."""


@dataclass(frozen=True)
class ProbeCall:
    """One call of the step: what was asked, whether the answer was valid, how long it took."""

    patient_id: str
    call_type: str
    outcome: str
    """``valid`` or the client's failure kind."""
    latency_s: float
    answer: str
    """The answer's JSON (valid answers only; shown, never used)."""


def probe(
    base_url: str, model: str, narratives: Sequence[Narrative], candidates: dict[str, list[Candidate]]
) -> list[ProbeCall]:
    """Per narrative, the generator's first QA extraction call and the verifier's verdict call on its
    first candidate, one at a time, against the server at ``base_url``.

    Args:
        base_url: the OpenAI base URL of the server.
        model: the served model name.
        narratives: the narratives to send.
        candidates: per patient id, the candidates whose first one is judged.

    Returns:
        One entry per call, in the order made.
    """
    vocabulary = DrugVocabulary.full()
    question = next(iter(QA_TEMPLATES.values()))[0]

    async def main() -> list[ProbeCall]:
        endpoints = {role: Endpoint(base_url, model) for role in Role}
        calls: list[ProbeCall] = []
        policy = ClientPolicy(timeout_s=CALL_TIMEOUT_S, max_retries=0)
        async with LlmClient(endpoints, policy=policy) as client:
            for narrative in narratives:
                text = narrative.text
                asks = [(CallType.QA_EXTRACTION, QaExtraction,
                         extraction_messages("qa", text, hints_for(text, vocabulary), question))]  # fmt: skip
                first = candidates.get(narrative.patient_id, [])[:1]
                for candidate in first:
                    call_type, answer_model = _VERDICT_CALLS[candidate.task]
                    asks.append((call_type, answer_model, verdict_messages(candidate, text)))
                for call_type, answer_model, messages in asks:
                    result = await client.call(call_type, answer_model, messages)  # type: ignore[arg-type]
                    valid = isinstance(result, LlmOk)
                    calls.append(ProbeCall(
                        narrative.patient_id, str(call_type), "valid" if valid else str(result.kind),
                        result.latency_s, result.value.model_dump_json() if valid else "",
                    ))  # fmt: skip
        return calls

    return asyncio.run(main())
