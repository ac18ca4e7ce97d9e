"""The agent in one process: ``clingate agent ask`` (a turn against CLINGATE_LLM_URL, patients from FHIR
bundles, proposals printed rather than published) and ``clingate agent replay`` (a recorded turn re-run
from its trace, with no call, checked against the record).

``--json`` of ``ask`` is ``{"answer", "clarification", "path", "tool_calls": [{"tool", "args", "outcome"}],
"llm_calls"}``: ``answer`` the synthesized text (after an ask_user, the question to the clinician),
``clarification`` the ask_user message it was written from or null, ``path`` one node name per visit,
``tool_calls`` one entry per execution (a call stopped as a duplicate is not executed), ``llm_calls`` the
model requests the graph made (client retries not counted).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from processors.agent.drugs import default_drug_data, drug_dictionary
from processors.agent.proposals import Proposal
from processors.agent.state import AgentState, Respond, default_config
from processors.clinical.knowledge import default_knowledge
from schemas.agent import AgentProposal, AgentRequest, AgentResponse, AgentTrace
from schemas.serde import Serde
from streams.agent.patients import BundlePatients
from streams.agent.runner import TurnResult, replay_turn, run_turn
from streams.agent.tools import ToolBox, TurnContext
from streams.agent.worker import M, agent_proposal, conversation_records
from streams.llm import LlmClient
from streams.runtime.kafka_clients import reader
from streams.runtime.settings import Settings
from streams.worker.clinical import gate_flags
from topics.catalog import AGENT_REQUESTS, AGENT_RESPONSES, AGENT_TRACES


def turn_summary(state: AgentState, respond: Respond) -> dict[str, Any]:
    """The ``--json`` document of a turn (module docstring)."""
    return {
        "answer": respond.answer,
        "clarification": respond.clarification,
        "path": list(state.path),
        "tool_calls": [{"tool": e.tool, "args": e.args, "outcome": e.outcome} for e in state.executed],
        "llm_calls": state.llm_calls,
    }


def turn_text(state: AgentState, respond: Respond) -> str:
    """A turn for a person: the answer (after an ask_user, the synthesized question and the message it
    was written from), the path, each decision."""
    lines = [f"answer: {respond.answer}"]
    if respond.clarification is not None:
        lines.append(f"clarification asked for: {respond.clarification}")
    lines.append("path: " + " -> ".join(state.path))
    lines.append(f"model calls: {state.llm_calls}")
    lines += [f"  {d.node}: {d.decision}" for d in state.trace]
    lines += [f"tool {e.tool}({json.dumps(e.args, sort_keys=True)}): {e.outcome}" for e in state.executed]
    return "\n".join(lines)


@dataclass
class LocalTurn:
    """A turn answered in this process, with the proposals its write tools made."""

    result: TurnResult
    proposals: list[AgentProposal] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return turn_summary(self.result.state, self.result.respond)

    def text(self) -> str:
        shown = [
            f"proposal {p.proposal_id}: {p.resource_type} (draft) for {p.patient_id}" for p in self.proposals
        ]
        return "\n".join([turn_text(self.result.state, self.result.respond), *shown])


async def answer_locally(request: AgentRequest, settings: Settings, bundles: Sequence[Path]) -> LocalTurn:
    """One turn against the settings' model server, the patients of ``bundles`` (as of the request).

    Raises:
        OSError, ValueError: a bundle cannot be read or is not JSON.
    """
    patients = BundlePatients.from_files(bundles, request.event_time)
    made: list[AgentProposal] = []

    async def keep(proposal: Proposal, turn: TurnContext) -> None:
        made.append(agent_proposal(proposal, turn))

    drug_data = default_drug_data()
    async with LlmClient.from_settings(settings) as client, aiohttp.ClientSession() as http:
        tools = ToolBox(
            patients_source=patients, knowledge=default_knowledge(), flags=gate_flags(settings),
            drug_data=drug_data, client=client, http=http, pubmed_url=settings.pubmed_url,
            clinicaltrials_url=settings.clinicaltrials_url, sink=keep,
        )  # fmt: skip
        result = await run_turn(request, client=client, tools=tools, config=default_config(drug_dictionary()))
    return LocalTurn(result, made)


@dataclass(frozen=True)
class Replayed:
    """A turn re-run from its trace, and whether it reproduced the recorded decisions and answer."""

    state: AgentState
    respond: Respond
    reproduced: bool
    differences: list[str]

    def summary(self) -> dict[str, Any]:
        return {**turn_summary(self.state, self.respond), "reproduced": self.reproduced,
                "differences": self.differences}  # fmt: skip

    def text(self) -> str:
        verdict = "reproduced" if self.reproduced else "NOT reproduced: " + "; ".join(self.differences)
        return turn_text(self.state, self.respond) + f"\nreplay: {verdict}"


def replay(request: AgentRequest, traces: Sequence[AgentTrace], response: AgentResponse | None) -> Replayed:
    """Re-run ``request`` from ``traces``; compare the decisions with the trace and, when given, the
    answer, path and calls with ``response``."""
    state, respond = replay_turn(request, traces, default_config(drug_dictionary()))
    differences = []
    recorded = [(t.node, t.decision) for t in sorted(traces, key=lambda t: t.step)]
    replayed = [(d.node, d.decision) for d in state.trace]
    if recorded != replayed:
        differences.append(f"decisions differ ({len(recorded)} recorded, {len(replayed)} replayed)")
    if response is not None:
        if (response.answer, response.clarification) != (respond.answer, respond.clarification):
            differences.append("the answer differs")
        if response.path != list(state.path) or response.llm_calls != state.llm_calls:
            differences.append("the path or the model-call count differs")
    return Replayed(state, respond, not differences, differences)


def replay_recording(recording: dict[str, Any]) -> Replayed:
    """Replay a recording of ``clingate agent ask --record``."""
    request = AgentRequest.model_validate(recording["request"])
    traces = [AgentTrace.model_validate(t) for t in recording["traces"]]
    return replay(request, traces, None)


def replay_from_kafka(bootstrap: str, serde: Serde, conversation: str, request_id: str) -> Replayed:
    """Replay a request the agent worker answered, from the requests, traces and responses topics.

    Raises:
        LookupError: the request is not on the requests topic.
    """
    consumer = reader(bootstrap, "agent-replay", **{"isolation.level": "read_committed"})
    try:

        def of_request(topic: str, model: type[M]) -> list[M]:
            found = conversation_records(consumer, serde, topic, model, conversation, None)
            return [r for r in found if r.request_id == request_id]  # type: ignore[attr-defined]

        requests = of_request(AGENT_REQUESTS, AgentRequest)
        if not requests:
            raise LookupError(f"no request {request_id} of conversation {conversation} on {AGENT_REQUESTS}")
        traces = of_request(AGENT_TRACES, AgentTrace)
        responses = of_request(AGENT_RESPONSES, AgentResponse)
    finally:
        consumer.close()
    return replay(requests[-1], traces, responses[-1] if responses else None)
