"""One agent turn end to end in process: the pure graph, the production client against the local test
server (scripted answers), the tools against clingate's own data and the local literature services."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from processors.agent.drugs import drug_dictionary
from processors.agent.state import default_config
from schemas.agent import AgentProposal, AgentRequest
from streams.agent.patients import BundlePatients
from streams.agent.runner import TurnResult, path_kind, replay_turn
from streams.data import CLINICAL
from streams.data.timeline import fhir_timeline
from streams.testing.agent_session import demo_questions, scripted_agent

AS_OF = datetime(2026, 3, 29, tzinfo=UTC)
QUESTIONS = {q.query: q for q in demo_questions()}


def _patients() -> BundlePatients:
    golden = [json.loads((CLINICAL / f"{case}.json").read_text("utf-8")) for case in ("PT-TEST-010",)]
    return BundlePatients([*golden, *(json.loads(u.resource_json()) for u in fhir_timeline(15)[:15])], AS_OF)


def _turns(queries: list[str]) -> list[tuple[TurnResult, list[AgentProposal]]]:
    async def main() -> list[tuple[TurnResult, list[AgentProposal]]]:
        scripts = {q.query: q.answers for q in QUESTIONS.values()}
        async with scripted_agent(scripts, _patients()) as session:
            return [await session.ask(q, AS_OF, QUESTIONS[q].patient_id) for q in queries]

    return asyncio.run(main())


def test_every_demo_question_takes_its_path_within_the_call_budget() -> None:
    for query, (turn, _) in zip(QUESTIONS, _turns(list(QUESTIONS)), strict=True):
        question, state = QUESTIONS[query], turn.state
        executed = len(state.executed)
        assert turn.respond.answer == question.answers[-1] and state.path[-1] == "SYNTHESIZE"
        if question.path == "clarification":
            # the question is synthesized: the turn costs what its tool path costs
            assert turn.respond.clarification is not None and path_kind(state) == "single_tool"
        else:
            assert turn.respond.clarification is None and path_kind(state) == question.path
        # two-stage tool selection: direct 2; a tool path 5, then 3 per further tool
        budget = 2 if question.path == "direct" else 5 + 3 * (executed - 1)
        assert state.llm_calls == budget, (query, state.llm_calls)
        assert all(e.outcome == "success" for e in state.executed)


def test_a_prescription_is_a_draft_proposal_carrying_the_clinical_gates() -> None:
    [(turn, [proposal])] = _turns(["Prescribe warfarin 5 mg daily for PT-DEMO-0003"])
    resource = json.loads(proposal.resource)
    assert (resource["resourceType"], resource["status"], resource["intent"]) == (
        "MedicationRequest", "draft", "proposal",
    )  # fmt: skip
    gates = json.loads(proposal.gates or "{}")
    assert "warfarin" in gates["nti_drugs"] and gates["after"]["traffic_light"] != "GREEN"
    [result] = turn.state.tool_results
    assert result.result is not None and "NTI" in result.result["clinical_gates"]
    request = AgentRequest(conversation_id="c", request_id="r", event_time=AS_OF, query="x")
    assert turn.response(request).proposals == [proposal.proposal_id]


def test_the_literature_tool_reads_the_configured_service() -> None:
    [(turn, _)] = _turns([next(q for q in QUESTIONS if "studies" in q)])
    literature: Any = next(r for r in turn.state.tool_results if r.tool_name == "search_medical_literature")
    assert literature.result["articles"] and literature.result["articles"][0]["pmid"]


@pytest.mark.parametrize("query", [q for q in QUESTIONS if QUESTIONS[q].path != "direct"])
def test_the_trace_replays_the_turn_exactly_with_no_call(query: str) -> None:
    [(turn, _)] = _turns([query])
    request = AgentRequest(conversation_id="session-0", request_id="request-0", event_time=AS_OF, query=query,
                           patient_id=QUESTIONS[query].patient_id)  # fmt: skip
    state, respond = replay_turn(request, turn.traces, default_config(drug_dictionary()))
    assert state == turn.state and respond == turn.respond
    assert [t.step for t in turn.traces] == list(range(len(turn.traces)))
    assert sum(t.event is not None for t in turn.traces) == turn.state.llm_calls + len(turn.state.executed)
