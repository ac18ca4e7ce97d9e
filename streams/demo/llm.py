"""The demo's LLM loop input: narratives, and a test-server responder that plays the synthetic truth.

Without ``CLINGATE_LLM_URL`` the demo runs the OpenAI-compatible test server
(:mod:`streams.llm.serve.testserver`) with the responder of this module, in a process of its own
(``python -m streams.demo.llm --script FILE``), so that its CPU does not compete with the demo's
consumer for one interpreter lock. The generator's extraction answer for a patient's narrative is the
patient's planned candidates, and the verifier's verdict on a candidate is its planned outcome in the
synthetic stream (:mod:`streams.testing.dbpm_stream`): the paper's proportions hold in the loop and the
answers are deterministic. With ``CLINGATE_LLM_URL`` set the same narratives go to that server and
the results are the model's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from processors.dbpm.config import RULE_BASED
from processors.dbpm.extraction import QA_TEMPLATES, candidates, qa_payload
from processors.dbpm.verification import ENSEMBLE_VARIANTS, verdict_messages
from schemas.dbpm import Candidate, Narrative
from streams.llm.serve.http import ChatRequest
from streams.llm.serve.testserver import DEFAULT_MODEL, OpenAiTestServer, Responder, instance_from_schema
from streams.testing.dbpm_stream import StreamEvent

_VERDICT = {
    "ner": {"success": "PASS", "soft_downgrade": "PASS", "hard_fail": "FAIL"},
    "re": {"success": "PASS_STRONG", "soft_downgrade": "PASS_WEAK", "hard_fail": "FAIL"},
    "qa": {"success": "PASS", "soft_downgrade": "PASS", "hard_fail": "FAIL"},
}


Json = dict[str, Any]
"""A JSON object: a payload of the synthetic stream, an answer of the responder."""


def _key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


@dataclass
class LoopPlan:
    """The narratives of the run, the candidates the generator will emit for them, and the answers.

    * **One narrative per patient**, at the patient's first event time; its text names the patient and
      lists the spans of the planned candidates on one line (the generator's prompts put the narrative
      before a blank line, which is how the responder finds it again).
    * **What the generator can express**: one NER call, one RE call and one QA call per question
      template; so a patient's QA candidates are at most one per category (the first planned one), and
      payloads are deduplicated as the generator does. The plan keeps exactly the candidates the
      generator will emit.
    * **Verdicts**: NER PASS/FAIL (a planned soft downgrade is a PASS: the NER verdict is binary), RE
      PASS_STRONG / PASS_WEAK / FAIL for success / soft_downgrade / hard_fail, QA PASS/FAIL with the
      planned error class (default ``unsupported``). A relation whose synthetic verdict is the
      Ontology-Violation Filter's is passed by the verifier (:attr:`violations`): the gate's Filter
      fails it. A verdict call is recognised by its narrative and
      its claim text, which the responder derives with :func:`processors.dbpm.verification.verdict_messages`
      for every planned candidate (and every ensemble variant for QA, the only task with an ensemble).
    * **Lookup keys** are SHA-256 digests of the narrative and the task / question / claim, so the
      script file the server process loads stays small.
    """

    narratives: list[Narrative] = field(default_factory=list)
    candidates: dict[str, list[Candidate]] = field(default_factory=dict)
    """Per patient id, in the generator's order (NER, RE, QA)."""
    truth: dict[str, str] = field(default_factory=dict)
    """Per candidate id, the planned memory label (the synthetic verdict)."""
    violations: set[str] = field(default_factory=set)
    """Ids of the relation candidates whose synthetic verdict is the Ontology-Violation Filter's: the
    verifier passes them (PASS_STRONG: the narrative states the relation; only the Filter knows the
    type triple is inadmissible), so the RE channel is fed by the verifier-independent source, as in
    the paper (§4.7, §6.2)."""
    answers: dict[str, Json] = field(default_factory=dict)
    """Lookup key -> answer JSON (the responder's script)."""

    def write(self, path: Path) -> None:
        """Write the responder's script (the answers) as JSON."""
        path.write_text(json.dumps(self.answers), encoding="utf-8")


def _narrative_text(patient: str, spans: list[str]) -> str:
    return f"Patient {patient}. Findings: " + "; ".join(dict.fromkeys(spans)) + "."


Truths = dict[tuple[str, str, str], StreamEvent]
"""(patient id, task, payload JSON without the error class) -> the synthetic verdict event."""


def loop_plan(events: list[StreamEvent]) -> LoopPlan:
    """The loop's inputs and answers from the synthetic stream (gate and verdict events, any order)."""
    truths: Truths = {}
    gates: dict[str, dict[str, list[Json]]] = defaultdict(lambda: defaultdict(list))
    first_ts: dict[str, str] = {}
    for e in events:
        first_ts.setdefault(e["patient_id"], e["ts"])
        if e["kind"] == "gate":
            gates[e["patient_id"]][e["task"]].append(e["payload"])
        else:
            payload = {k: v for k, v in e["payload"].items() if k != "error_class"}
            truths[(e["patient_id"], e["task"], json.dumps(payload, sort_keys=True))] = e
    plan = LoopPlan()
    for patient, tasks in gates.items():
        ts = datetime.fromisoformat(first_ts[patient].replace("Z", "+00:00"))
        _plan_patient(plan, patient, ts, tasks, truths)
    return plan


def _plan_patient(
    plan: LoopPlan, patient: str, ts: datetime, tasks: dict[str, list[Json]], truths: Truths
) -> None:
    """Add a patient's narrative, the generator's extraction answers and candidates, and the verdicts."""
    ner = [{"entity": p["entity"], "category": p["category"]} for p in tasks["ner"]]
    rel = [{k: p[k] for k in ("head", "head_type", "relation", "tail", "tail_type")} for p in tasks["re"]]
    qa: dict[str, Json] = {}
    for p in tasks["qa"]:
        qa.setdefault(p["category"], p)
    spans = [p["entity"] for p in ner] + [s for p in rel for s in (p["head"], p["tail"])]
    spans += [p["answer"] for p in qa.values()]
    narrative = Narrative(ts=ts, patient_id=patient, text=_narrative_text(patient, spans))
    text = narrative.text
    plan.narratives.append(narrative)
    plan.answers[_key(text, "ner")] = {"entities": ner}
    plan.answers[_key(text, "re")] = {"relations": rel}
    found = candidates(narrative, "ner", ner, ts) + candidates(narrative, "re", rel, ts)
    for category, (question, _) in QA_TEMPLATES.items():
        planned = qa.get(category)
        answer = planned["answer"].strip() if planned else ""
        status = "ANSWERED" if answer else "NOT_IN_NARRATIVE"
        plan.answers[_key(text, "qa", question)] = {"status": status, "answer": answer}
        if answer:
            found += candidates(narrative, "qa", [qa_payload(category, answer)], ts)
    plan.candidates[patient] = found
    for candidate in found:
        _plan_verdict(plan, candidate, text, qa, truths)


def _plan_verdict(
    plan: LoopPlan, candidate: Candidate, text: str, qa: dict[str, Json], truths: Truths
) -> None:
    """The planned label of ``candidate`` and the verifier's answer to each of its verdict calls."""
    if candidate.task == "qa":
        source = qa[candidate.payload.category]  # type: ignore[union-attr]
        payload = {k: source[k] for k in ("question", "answer", "category")}
    else:
        payload = candidate.payload.model_dump()
    truth = truths.get((candidate.patient_id, candidate.task, json.dumps(payload, sort_keys=True)))
    label = truth["verdict"] if truth else "success"
    plan.truth[candidate.candidate_id] = label
    answer_json: Json = {"verdict": _VERDICT[candidate.task][label]}
    if truth is not None and truth["source"] == RULE_BASED:
        plan.violations.add(candidate.candidate_id)
        answer_json["verdict"] = _VERDICT[candidate.task]["success"]
    if candidate.task == "qa":
        failed = label == "hard_fail"
        answer_json["error_class"] = (
            (truth or {}).get("payload", {}).get("error_class") or "unsupported" if failed else None
        )
    for variant in ("primary", *(ENSEMBLE_VARIANTS if candidate.task == "qa" else ())):
        user = verdict_messages(candidate, text, variant)[1]["content"]
        plan.answers[_key(_narrative_of(user), "verdict", _claim_of(user))] = answer_json


def _narrative_of(user: str) -> str:
    return user.split("Narrative:\n", 1)[1].split("\n\n", 1)[0]


def _claim_of(user: str) -> str:
    return user.split("Claim:\n", 1)[1].split("\n\n", 1)[0]


def script_responder(answers: dict[str, Json]) -> Responder:
    """A test-server responder answering from ``answers`` (a :class:`LoopPlan`'s), else minimally."""

    def respond(request: ChatRequest) -> object:
        user = next((str(m.get("content", "")) for m in request.messages if m.get("role") == "user"), "")
        if "Narrative:\n" not in user:
            return instance_from_schema(request.schema)
        narrative = _narrative_of(user)
        if "Claim:\n" in user:
            key = _key(narrative, "verdict", _claim_of(user))
        elif "Question: " in user:
            key = _key(narrative, "qa", user.rsplit("Question: ", 1)[1].strip())
        elif "relations" in json.dumps(request.schema.get("properties", {})):
            key = _key(narrative, "re")
        else:
            key = _key(narrative, "ner")
        found = answers.get(key)
        return found if found is not None else instance_from_schema(request.schema)

    return respond


def main(
    script: Annotated[Path, typer.Option(help="The responder's script (LoopPlan.write).")],
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")] = 0,
) -> None:
    """Serve the test API with the script responder until interrupted; prints ``listening <base-url>``."""
    answers = json.loads(script.read_text(encoding="utf-8"))

    async def serve() -> None:
        server = OpenAiTestServer(models=[DEFAULT_MODEL], responder=script_responder(answers), record=False)
        base_url = await server.start(host, port)
        print(f"listening {base_url}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    asyncio.run(serve())


if __name__ == "__main__":
    typer.run(main)
