"""The clinician's agent in one process with scripted model answers: for the tests, the benchmark and the
demo.

:func:`scripted_agent` starts the local OpenAI-compatible test server answering from a
:class:`~streams.llm.serve.agent_script.ScriptedAgentModel`, the local literature services
(:class:`~streams.testing.fixture_services.FixtureServices`), the production LLM client and a
:class:`~streams.agent.tools.ToolBox` over the given patients; :meth:`AgentSession.ask` runs one turn
(:func:`streams.agent.runner.run_turn`) and returns it with the proposals its write tools made.

:func:`demo_questions` are the demo's questions (``streams/data/agent/questions.json``): one per
path of the DocGemma budget (direct, one tool, two and three tools, a write tool with clingate's gates, a
search that ends in a question), each with the answers a competent model gives at each call.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp

from processors.agent.drugs import default_drug_data, drug_dictionary
from processors.agent.proposals import Proposal
from processors.agent.state import AgentConfig, default_config
from processors.clinical.knowledge import GateFlags, default_knowledge
from schemas.agent import AgentProposal, AgentRequest
from streams.agent.runner import TurnResult, run_turn
from streams.agent.tools import PatientSource, ToolBox, TurnContext
from streams.agent.worker import agent_proposal
from streams.data import AGENT_QUESTIONS
from streams.llm import Endpoint, LlmClient, Role
from streams.llm.serve.agent_script import ScriptedAgentModel
from streams.llm.serve.testserver import DEFAULT_MODEL, OpenAiTestServer
from streams.testing.fixture_services import FixtureServices


@dataclass(frozen=True)
class Question:
    """A scripted question: what is asked, the path it takes, the model's answers, the patient in context."""

    query: str
    path: str
    answers: list[Any]
    patient_id: str | None = None


def demo_questions() -> list[Question]:
    """The demo's questions (module docstring)."""
    return [Question(**q) for q in json.loads(AGENT_QUESTIONS.read_text(encoding="utf-8"))]


def two_stage_budget(path: str, tools: int) -> int:
    """This implementation's calls per path (TOOL_SELECT is two calls). A clarification costs what the
    tools before it cost: SYNTHESIZE writes the question as it writes an answer."""
    if path == "direct":
        return 2
    return 5 + 3 * (tools - 1)


def prescription_script(patient_id: str, answer: str) -> tuple[str, dict[str, list[Any]]]:
    """A turn that prescribes warfarin 5 mg daily for ``patient_id`` through the write tool: its question,
    and the script of the answers a competent model gives at each of its five calls, ``answer`` the last
    (the graph's single-tool path, the proposal carrying the clinical gates' verdict)."""
    question = f"Prescribe warfarin 5 mg daily for {patient_id}"
    prescription = {
        "patient_id": patient_id, "medication_name": "warfarin", "dosage": "5 mg", "frequency": "daily",
    }  # fmt: skip
    return question, {
        question: [
            {"intent": "TOOL_NEEDED", "task_summary": "Prescribe.", "suggested_tool": "prescribe_medication"},
            {"tool_name": "prescribe_medication"},
            prescription,
            {"quality": "success_rich", "brief_summary": "A draft prescription was proposed."},
            answer,
        ]
    }


@dataclass
class AgentSession:
    """A running scripted agent (see :func:`scripted_agent`)."""

    client: LlmClient
    tools: ToolBox
    config: AgentConfig
    model: ScriptedAgentModel
    proposals: list[AgentProposal] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    async def ask(
        self, query: str, as_of: datetime, patient_id: str | None = None, conversation_id: str | None = None
    ) -> tuple[TurnResult, list[AgentProposal]]:
        """One turn of ``query`` at ``as_of``: its result and the proposals it made."""
        number = next(self._ids)
        request = AgentRequest(
            conversation_id=conversation_id or f"session-{number}", request_id=f"request-{number}",
            event_time=as_of, query=query, patient_id=patient_id,
        )  # fmt: skip
        before = len(self.proposals)
        result = await run_turn(request, client=self.client, tools=self.tools, config=self.config)
        return result, self.proposals[before:]


@asynccontextmanager
async def scripted_agent(
    scripts: Mapping[str, Sequence[Any]],
    patients: PatientSource,
    *,
    latency_s: float = 0.0,
    flags: GateFlags | None = None,
) -> AsyncIterator[AgentSession]:
    """A scripted agent over ``patients`` (module docstring); ``latency_s`` delays every model answer."""
    model = ScriptedAgentModel(scripts)
    drug_data = default_drug_data()
    with FixtureServices() as services:
        async with OpenAiTestServer(responder=model, latency_s=latency_s, record=False) as server:
            endpoints = {role: Endpoint(server.base_url, DEFAULT_MODEL) for role in Role}
            async with LlmClient(endpoints) as client, aiohttp.ClientSession() as http:
                made: list[AgentProposal] = []

                async def keep(proposal: Proposal, turn: TurnContext) -> None:
                    made.append(agent_proposal(proposal, turn))

                tools = ToolBox(
                    patients_source=patients, knowledge=default_knowledge(), flags=flags or GateFlags(),
                    drug_data=drug_data, client=client, http=http, pubmed_url=services.pubmed_url,
                    clinicaltrials_url=services.ctgov_url, sink=keep,
                )  # fmt: skip
                yield AgentSession(client, tools, default_config(drug_dictionary()), model, made)
