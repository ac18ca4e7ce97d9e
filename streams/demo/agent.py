"""Step 7: the clinician's agent through its worker, on the patients the run's clinical worker holds.

The demo's questions (:func:`streams.testing.agent_session.demo_questions`: one per path of the DocGemma
budget, about golden patient PT-TEST-010 and generated patients) go to ``clingate.agent.requests``;
``clingate agent worker`` answers them with its tools on this run's state (the clinical worker's patient
table from its changelog, the packaged drug data, local literature services) and a model server that
plays the scripted answers (``clingate llm serve --backend test --agent-script``): the model's part is
fixed, the code's decisions are what the step shows and checks.

Shown per question: the path kind, model calls against the budget, the tools and how they ended, the
answer (or the question asked back) and the proposals (a prescription with the clinical gates' light).
Checks: every turn takes its scripted path within the call budget and gives its scripted answer; every
turn replays exactly from its records on the trace topic (:func:`streams.agent.local.replay`); the
prescription's proposal carries the gates.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.table import Table

from schemas.agent import AgentProposal, AgentRequest, AgentResponse, AgentTrace
from schemas.serde import Serde
from streams.agent.local import replay
from streams.bench.agent import two_stage_budget
from streams.demo.errors import DemoError
from streams.demo.results import AgentRow, Results
from streams.demo.services import ServiceProcess, listening_url
from streams.llm.serve.testserver import DEFAULT_MODEL
from streams.replay.kafka import commit_end_offsets
from streams.runtime.kafka_clients import end_offsets, read_to_end, reader
from streams.testing.agent_session import Question, demo_questions
from streams.testing.broker import free_port
from streams.worker.dbpm import producer_config
from topics.catalog import AGENT_PROPOSALS, AGENT_REQUESTS, AGENT_RESPONSES, AGENT_TRACES

ANSWER_TIMEOUT_S = 120.0
"""Longest wait for every question's response (the worker joins its group, then ~15 calls each)."""


@dataclass(frozen=True)
class Asked:
    """A question as the demo sent it."""

    question: Question
    request: AgentRequest


def step_agent(
    console: Console,
    bootstrap: str,
    serde: Serde,
    app_id: str,
    workdir: Path,
    as_of: datetime,
    results: Results,
) -> None:
    """Ask the demo's questions through ``clingate agent worker`` and show and check the turns."""
    questions = demo_questions()
    script = workdir / "agent-script.json"
    script.write_text(json.dumps({q.query: q.answers for q in questions}), encoding="utf-8")
    group = f"{app_id}-agent"
    commit_end_offsets(bootstrap, group, [AGENT_REQUESTS])
    model = ServiceProcess(
        "agent model server (scripted answers)",
        ["llm", "serve", "--backend", "test", "--agent-script", str(script)],
        {}, bootstrap, workdir / "agent-model.log", (b"listening ",),
    )  # fmt: skip
    services = ServiceProcess(
        "literature services (PubMed and ClinicalTrials.gov shaped)", [], {}, bootstrap,
        workdir / "literature.log", (b"listening ",), module="streams.testing.fixture_services",
    )  # fmt: skip
    with model, services:
        model.wait_ready()
        services.wait_ready()
        literature = listening_url(services)
        env = {
            "CLINGATE_APP_ID": app_id, "CLINGATE_AGENT_GROUP_ID": group,
            "CLINGATE_LLM_URL": listening_url(model), "CLINGATE_LLM_MODEL": DEFAULT_MODEL,
            "CLINGATE_PUBMED_URL": f"{literature}/pubmed",
            "CLINGATE_CLINICALTRIALS_URL": f"{literature}/ctgov",
        }  # fmt: skip
        agent = ServiceProcess(
            "agent (clingate agent worker)", ["agent", "worker", "--metrics-port", str(free_port())], env,
            bootstrap, workdir / "agent.log", (),
        )  # fmt: skip
        consumer = reader(bootstrap, "demo-agent", **{"isolation.level": "read_committed"})
        try:
            topics = (AGENT_RESPONSES, AGENT_TRACES, AGENT_PROPOSALS)
            starts = {topic: end_offsets(consumer, topic) for topic in topics}
            with agent:
                asked = _ask(bootstrap, serde, questions, as_of, app_id)
                responses = _responses(consumer, serde, starts[AGENT_RESPONSES], asked, agent)
            traces = _records(consumer, serde, AGENT_TRACES, AgentTrace, starts[AGENT_TRACES])
            made = _records(consumer, serde, AGENT_PROPOSALS, AgentProposal, starts[AGENT_PROPOSALS])
        finally:
            consumer.close()
    rows = [_row(a, responses[a.request.conversation_id], traces, made) for a in asked]
    results.agent = rows
    _print(console, rows)
    results.check(
        "agent_budget", all(r.llm_calls == r.budget for r in rows), "an agent turn is over its call budget"
    )
    results.check(
        "agent_answers", all(r.scripted for r in rows), "an agent turn did not take its scripted path"
    )
    results.check(
        "agent_replay", all(r.replayed for r in rows), "an agent turn does not replay from its trace"
    )
    gated = [r for r in rows if r.tools and r.tools[0].startswith("prescribe_medication")]
    results.check(
        "agent_gates", all(r.lights for r in gated) and bool(gated), "a prescription carries no gates"
    )


def _ask(
    bootstrap: str, serde: Serde, questions: list[Question], as_of: datetime, app_id: str
) -> list[Asked]:
    producer = Producer(producer_config(bootstrap))
    asked = []
    for number, question in enumerate(questions):
        conversation = f"{app_id}-conversation-{number}"
        request = AgentRequest(
            conversation_id=conversation, request_id=f"{conversation}-1", event_time=as_of,
            query=question.query, patient_id=question.patient_id,
        )  # fmt: skip
        producer.produce(
            AGENT_REQUESTS, key=conversation.encode(), value=serde.encode(request, topic=AGENT_REQUESTS)
        )
        asked.append(Asked(question, request))
    if producer.flush(30):
        raise DemoError(f"questions not delivered to {AGENT_REQUESTS}")
    return asked


def _records(consumer: Consumer, serde: Serde, topic: str, model: Any, start: dict[int, int]) -> list[Any]:
    """The records of ``topic`` from ``start`` (per partition) to its current end."""
    return [serde.decode(m.value(), model, topic=topic) for m in read_to_end(consumer, {topic: start}, 30)]


def _responses(
    consumer: Consumer, serde: Serde, start: dict[int, int], asked: list[Asked], agent: ServiceProcess
) -> dict[str, AgentResponse]:
    """Each question's response (by conversation), once every one has come."""
    wanted = {a.request.conversation_id for a in asked}
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while True:
        found = {
            r.conversation_id: r
            for r in _records(consumer, serde, AGENT_RESPONSES, AgentResponse, start)
            if r.conversation_id in wanted
        }
        if len(found) == len(wanted):
            return found
        agent.check_running()
        if time.monotonic() > deadline:
            missing = sorted(wanted - set(found))
            raise DemoError(
                f"the agent did not answer within {ANSWER_TIMEOUT_S:.0f} s: {missing}\n{agent.tail()}"
            )
        time.sleep(0.5)


def _row(
    asked: Asked, response: AgentResponse, traces: list[AgentTrace], made: list[AgentProposal]
) -> AgentRow:
    question, request = asked.question, asked.request
    executed = len(response.tool_calls)
    kind = "clarification" if response.clarification is not None else question.path
    answer = response.answer or ""
    proposals = [p for p in made if p.proposal_id in response.proposals]
    mine = [t for t in traces if t.request_id == request.request_id]
    return AgentRow(
        question=question.query,
        path=kind,
        llm_calls=response.llm_calls,
        budget=two_stage_budget(question.path, executed),
        tools=[f"{c.tool}: {c.outcome}" for c in response.tool_calls],
        answer=f"(asks) {answer}" if kind == "clarification" else answer,
        proposals=[f"{p.resource_type} {p.proposal_id}" for p in proposals],
        lights=[json.loads(p.gates)["after"]["traffic_light"] for p in proposals if p.gates],
        scripted=answer == question.answers[-1] and kind == question.path,
        replayed=replay(request, mine, response).reproduced,
    )


def _print(console: Console, rows: list[AgentRow]) -> None:
    table = Table("question", "path", "calls", "tools", "answer / proposals", title="the clinician's agent",
                  title_justify="left")  # fmt: skip
    for row in rows:
        extra = "; ".join(f"{p} (light {light})" for p, light in zip(row.proposals, row.lights, strict=False))
        table.add_row(row.question, row.path, f"{row.llm_calls}/{row.budget}", "\n".join(row.tools),
                      row.answer[:160] + (f"\n{extra}" if extra else ""))  # fmt: skip
    console.print(table)
    console.print(
        f"  {sum(r.replayed for r in rows)} of {len(rows)} turns replayed exactly from the trace topic; "
        f"model calls within budget: {sum(r.llm_calls <= r.budget for r in rows)} of {len(rows)}"
    )
