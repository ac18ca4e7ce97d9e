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
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.table import Table

from processors.agent.patients import patient_resource, search_patients
from schemas.agent import AgentProposal, AgentRequest, AgentResponse, AgentTrace
from schemas.fhir import FhirUpdate
from schemas.serde import Serde
from streams.agent.local import replay
from streams.agent.patients import BundlePatients
from streams.agent.tools import PatientSource
from streams.demo.errors import DemoError
from streams.demo.results import AgentRow, Results
from streams.demo.services import ServiceProcess, listening_url
from streams.llm.serve.testserver import DEFAULT_MODEL
from streams.local.broker import free_port
from streams.replay.kafka import commit_end_offsets
from streams.runtime.kafka_clients import end_offsets, producer_config, read_to_end, reader
from streams.testing.agent_session import Question, demo_questions, two_stage_budget
from topics.catalog import AGENT_PROPOSALS, AGENT_REQUESTS, AGENT_RESPONSES, AGENT_TRACES

ANSWER_TIMEOUT_S = 120.0
"""Longest wait for every question's response (the worker joins its group, then ~15 calls each)."""


GATED_TOOLS = ("prescribe_medication",)
"""The write tools whose proposal carries the clinical gates' light (``agent_gates``)."""


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
    fhir: list[FhirUpdate],
    as_of: datetime,
    results: Results,
) -> None:
    """Ask the demo's questions through ``clingate agent worker`` and show and check the turns; ``fhir``
    is every FHIR update the run gave the clinical worker (what the agent's patient tools find)."""
    questions, left_out = askable(run_patients(fhir, as_of))
    for query, why in left_out.items():
        results.not_run[f"agent: {query}"] = why
        console.print(f"  not asked: {query!r}: {why}")
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
    rows = [agent_row(a, responses[a.request.conversation_id], traces, made) for a in asked]
    results.agent = rows
    _print(console, rows)
    check_agent(results, [a.question for a in asked], rows)


def run_patients(fhir: list[FhirUpdate], as_of: datetime) -> BundlePatients:
    """The patients the run's clinical worker holds once ``fhir`` is applied, as the agent's tools read
    them (ids and names are what a question's inputs need; the updates' times do not change them)."""
    return BundlePatients([json.loads(u.resource) for u in fhir], as_of)


def askable(patients: PatientSource) -> tuple[list[Question], dict[str, str]]:
    """The demo's questions whose inputs ``patients`` hold, in order, and why each other one is not
    asked, by its query (:func:`missing_inputs`)."""
    asked, left_out = [], {}
    for question in demo_questions():
        missing = missing_inputs(question, patients)
        if missing is None:
            asked.append(question)
        else:
            left_out[question.query] = missing
    return asked, left_out


def _tool_calls(question: Question) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls ``question``'s script makes: each ``{"tool_name": ...}`` answer with the arguments
    the model gives next."""
    answers = question.answers
    return [
        (str(chosen["tool_name"]), cast(dict[str, Any], args))
        for chosen, args in pairwise(answers)
        if isinstance(chosen, dict) and set(chosen) == {"tool_name"} and isinstance(args, dict)
    ]


def missing_inputs(question: Question, patients: PatientSource) -> str | None:
    """What ``question``'s script needs that ``patients`` lack (None: it can be asked): every patient id
    its tool calls name, and for each name search at least one match, two when the turn ends in a question
    back (it asks which of several patients was meant)."""
    wanted = 2 if question.path == "clarification" else 1
    for tool, args in _tool_calls(question):
        patient = args.get("patient_id")
        if isinstance(patient, str) and patients.state(patient) is None:
            return f"patient {patient} is not among this run's patients (--clinical-patients)"
        if tool == "search_patient":
            found = search_patients((patient_resource(s) for s in patients.states()), str(args["name"]))
            matches = len(found["matches"]) + int(found.get("omitted", 0))
            if matches < wanted:
                return (
                    f"its search for {args['name']!r} needs {wanted} matching patients, this run has "
                    f"{matches} (--clinical-patients)"
                )
    return None


def check_agent(results: Results, questions: list[Question], rows: list[AgentRow]) -> None:
    """The step's checks over the turns of ``questions`` (one row each, in order): within the call
    budget, the scripted path and answer, replayed from the trace, and a proposal with the clinical
    gates' light for every turn whose script calls a tool of :data:`GATED_TOOLS`."""
    results.check(
        "agent_budget", all(r.llm_calls == r.budget for r in rows), "an agent turn is over its call budget"
    )
    results.check(
        "agent_answers", all(r.scripted for r in rows), "an agent turn did not take its scripted path"
    )
    results.check(
        "agent_replay", all(r.replayed for r in rows), "an agent turn does not replay from its trace"
    )
    writes = [
        row
        for question, row in zip(questions, rows, strict=True)
        if any(tool in GATED_TOOLS for tool, _ in _tool_calls(question))
    ]
    results.check("agent_gates", all(r.lights for r in writes), "a prescription carries no gates")


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


def agent_row(
    asked: Asked, response: AgentResponse, traces: list[AgentTrace], made: list[AgentProposal]
) -> AgentRow:
    """The row of ``asked``'s turn from its response, the trace records and the proposals made."""
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
