"""``clingate demo`` under the option values that turn one of its parts off, and all of them at once.

The parts an option can take away: the generated clinical patients (``--clinical-patients 0``; fewer than
the agent's questions name), the lockstep slice (``--lockstep 0``), the bulk phase (``--lockstep`` at
least ``--patients``) and the real-model step (``--model-narratives 0``). Each combination's plan is
built as the demo builds it, and the agent step, the one whose inputs depend on another step's option,
runs in process on the plan's patients with the step's own selection, rows and checks: what it leaves out
it says, and what it asks passes. A broker run of the combination with every part off is in
``tests/integration/test_demo.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from rich.console import Console

from schemas.agent import AgentRequest
from streams.demo.agent import Asked, agent_row, askable, check_agent, run_patients
from streams.demo.plan import Plan, build_plan, golden_time
from streams.demo.results import AgentRow, Results
from streams.testing.agent_session import Question, scripted_agent


@dataclass(frozen=True)
class Options:
    """The demo's options that size its parts (``clingate demo --help``)."""

    patients: int
    lockstep: int
    clinical_patients: int
    documents: int = 1


COMBINATIONS = {
    "every part on": Options(patients=3, lockstep=1, clinical_patients=8),
    "no generated clinical patients": Options(patients=3, lockstep=1, clinical_patients=0),
    "fewer generated patients than the questions name": Options(patients=3, lockstep=1, clinical_patients=4),
    "no lockstep slice": Options(patients=3, lockstep=0, clinical_patients=8),
    "no bulk phase": Options(patients=2, lockstep=5, clinical_patients=8),
    "every part off at once": Options(patients=1, lockstep=0, clinical_patients=0),
}
"""The real-model step (``--model-narratives 0``) takes nothing from the plan: it is skipped before it
reads it (:func:`streams.demo.model.step_model`)."""

LEFT_OUT = {
    0: {"Prescribe warfarin 5 mg daily for PT-DEMO-0003", "Find patient Smith and review the chart"},
    4: {"Find patient Smith and review the chart"},
    8: set(),
}
"""The questions a number of generated patients leaves out: PT-DEMO-0003 is the fourth generated
patient, and every seventh is a Smith (the question that asks which one needs two)."""


def _agent_step(plan: Plan) -> tuple[Results, list[Question]]:
    """The agent step's selection, rows and checks, its turns answered in process on ``plan``'s patients."""
    as_of = golden_time()
    patients = run_patients(plan.clinical_updates, as_of)
    asked, left_out = askable(patients)
    results = Results(not_run=left_out)

    async def turns() -> list[AgentRow]:
        rows = []
        async with scripted_agent({q.query: q.answers for q in asked}, patients) as session:
            for number, question in enumerate(asked):
                conversation = f"session-{number}"
                turn, made = await session.ask(question.query, as_of, question.patient_id, conversation)
                # the request the session made of it (its request ids count from 0, one per question)
                request = AgentRequest(
                    conversation_id=conversation, request_id=f"request-{number}", event_time=as_of,
                    query=question.query, patient_id=question.patient_id,
                )  # fmt: skip
                rows.append(agent_row(Asked(question, request), turn.response(request), turn.traces, made))
        return rows

    check_agent(results, asked, asyncio.run(turns()))
    return results, asked


@pytest.mark.parametrize("options", COMBINATIONS.values(), ids=COMBINATIONS.keys())
def test_every_combination_of_parts_plans_and_the_agent_step_checks_what_the_run_holds(
    options: Options,
) -> None:
    plan = build_plan(options.patients, options.lockstep, options.clinical_patients, options.documents,
                      Console(quiet=True))  # fmt: skip
    assert len(plan.loop.narratives) == options.patients
    assert plan.lockstep == min(options.lockstep, options.patients)
    assert len({u.patient_id for u in plan.fhir}) == options.clinical_patients
    assert plan.documents and plan.golden, "the golden cases and one copy of each example always run"
    results, asked = _agent_step(plan)
    assert not results.failed, results.failed
    assert set(results.checks) == {"agent_budget", "agent_answers", "agent_replay", "agent_gates"}
    assert set(results.not_run) == LEFT_OUT[options.clinical_patients]
    assert all("--clinical-patients" in why for why in results.not_run.values()), "it says which option"
    assert {q.path for q in asked} >= {"direct", "single_tool", "multi_tool"}, "the rest is still asked"
