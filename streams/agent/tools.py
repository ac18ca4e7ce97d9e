"""TOOL_EXECUTE's I/O: the ten tools run against clingate's own state and the configured services.

The graph (:mod:`processors.agent`) validates a call's arguments and formats what comes back; this module
runs the call and returns a :class:`~processors.agent.state.ToolOutcome`, never raising for a tool's
failure. Each call runs under its deadline (§4.4: 10 s); one that overruns is a ``timeout``.

* ``search_patient`` / ``get_patient_chart``: the clinical worker's patient states (a
  :class:`PatientSource`), through :mod:`processors.agent.patients`. No match is ``not_found``; several
  matches are a result the graph turns into a question.
* ``check_drug_safety`` / ``check_drug_interactions``: the packaged drug data and the NTI maps
  (:mod:`processors.agent.drugs`). An unknown drug is ``drug_not_in_database``.
* ``prescribe_medication`` / ``add_allergy`` / ``save_clinical_note``: never written to an EHR. Each
  becomes a draft FHIR resource (:mod:`processors.agent.proposals`; a prescription carries clingate's
  clinical gates on the patient with the drug added) handed to the proposal sink (the worker publishes
  it on ``clingate.agent.proposals``); the result names the proposal and the gates' verdict. The
  proposal id is the request's id and the step's, so a call repeated after a restart proposes the same
  resource again, not a second one.
* ``search_medical_literature`` / ``find_clinical_trials``: the services at ``CLINGATE_PUBMED_URL`` and
  ``CLINGATE_CLINICALTRIALS_URL`` (:mod:`streams.agent.literature`).
* ``analyze_medical_image``: the request's attached image to the vision model (the same call as the
  graph's image analysis), its findings as the result; no image attached is ``invalid_args``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import aiohttp

from processors.agent import drugs, patients, proposals
from processors.agent.state import ToolCall, ToolOutcome
from processors.clinical.knowledge import ClinicalKnowledge, GateFlags
from processors.clinical.records import PatientState
from streams.agent.literature import ServiceError, find_trials, search_literature
from streams.agent.llm import analyze_image
from streams.llm import LlmClient

log = logging.getLogger(__name__)


class PatientSource(Protocol):
    """The clinical worker's patient states, as the agent reads them."""

    def refresh(self) -> None:
        """Catch up with the worker (blocking; the tool box calls it off the event loop)."""
        ...

    def states(self) -> Iterable[PatientState]:
        """Every patient's state."""
        ...

    def state(self, patient_id: str) -> PatientState | None:
        """One patient's state (None: unknown to clingate)."""
        ...


@dataclass(frozen=True)
class TurnContext:
    """What a tool needs of the request it serves."""

    request_id: str
    conversation_id: str
    as_of: datetime
    """The request's event time: charts and gates are assessed as of it."""
    image_ref: str | None


ProposalSink = Callable[[proposals.Proposal, TurnContext], Awaitable[None]]
"""Where a write tool's proposal goes (the worker: the proposals topic)."""


def _error(error_type: str, message: str) -> ToolOutcome:
    return ToolOutcome(error=message, error_type=error_type)  # type: ignore[arg-type]


class ToolBox:
    """Runs the graph's tool calls (module docstring)."""

    def __init__(
        self,
        *,
        patients_source: PatientSource,
        knowledge: ClinicalKnowledge,
        flags: GateFlags,
        drug_data: drugs.DrugData,
        client: LlmClient,
        http: aiohttp.ClientSession,
        pubmed_url: str,
        clinicaltrials_url: str,
        sink: ProposalSink,
    ) -> None:
        self._patients = patients_source
        self._knowledge = knowledge
        self._flags = flags
        self._drugs = drug_data
        self._client = client
        self._http = http
        self._pubmed = pubmed_url
        self._trials = clinicaltrials_url
        self._sink = sink

    async def execute(self, call: ToolCall, turn: TurnContext, step: int) -> ToolOutcome:
        """Run ``call`` (the ``step``-th decision of ``turn``) within its deadline."""
        try:
            async with asyncio.timeout(call.deadline_s):
                return await self._run(call, turn, step)
        except TimeoutError:
            return _error("timeout", f"{call.tool} did not answer within {call.deadline_s:g} s")
        except ServiceError as error:
            return _error(error.error_type, error.message)

    async def _run(self, call: ToolCall, turn: TurnContext, step: int) -> ToolOutcome:
        args = call.args
        if "patient_id" in args or call.tool == "search_patient":
            await asyncio.to_thread(self._patients.refresh)
        match call.tool:
            case "search_patient":
                found = patients.search_patients(
                    (patients.patient_resource(s) for s in self._patients.states()), args["name"]
                )
                if not found["matches"]:
                    return _error("not_found", f"no patient matches {args['name']!r}")
                return ToolOutcome(result=found)
            case "get_patient_chart":
                state = self._patients.state(args["patient_id"])
                if state is None:
                    return _error("not_found", f"patient {args['patient_id']} is not in clingate's records")
                chart = patients.patient_chart(
                    state, self._knowledge, turn.as_of, self._flags, patients.patient_resource(state)
                )
                return ToolOutcome(result=chart)
            case "check_drug_safety":
                report = drugs.drug_safety(args["drug_name"], self._drugs, self._knowledge)
                if report is None:
                    return _error("drug_not_in_database", f"{args['drug_name']} is not in the drug data")
                return ToolOutcome(result=report)
            case "check_drug_interactions":
                report = drugs.drug_interactions(args["drug_names"], self._drugs, self._knowledge)
                if report["unknown"]:
                    return _error(
                        "drug_not_in_database", f"not in the drug data: {', '.join(report['unknown'])}"
                    )
                return ToolOutcome(result=report)
            case "search_medical_literature":
                return ToolOutcome(result=await search_literature(self._http, self._pubmed, args["query"]))
            case "find_clinical_trials":
                found = await find_trials(self._http, self._trials, args["condition"], args.get("status"))
                return ToolOutcome(result=found)
            case "prescribe_medication" | "add_allergy" | "save_clinical_note":
                return await self._propose(call, turn, step)
            case "analyze_medical_image":
                return await self._image(args["query"], turn)
        raise AssertionError(f"a tool the catalog does not hold: {call.tool}")

    async def _propose(self, call: ToolCall, turn: TurnContext, step: int) -> ToolOutcome:
        state = self._patients.state(call.args["patient_id"])
        proposal_id = f"{turn.request_id}-{step}"
        if call.tool == "prescribe_medication":
            proposal = proposals.prescription_proposal(
                state, call.args, proposal_id, turn.as_of, self._knowledge, self._flags
            )
        elif call.tool == "add_allergy":
            proposal = proposals.allergy_proposal(state, call.args, proposal_id, turn.as_of)
        else:
            proposal = proposals.note_proposal(state, call.args, proposal_id, turn.as_of)
        await self._sink(proposal, turn)
        result: dict[str, Any] = {
            "proposal_id": proposal.proposal_id,
            "status": "draft proposal, not written to the record; a clinician confirms it",
            "resource_type": proposal.resource_type,
        }
        if proposal.verdict is not None:
            result["clinical_gates"] = proposal.verdict
        return ToolOutcome(result=result)

    async def _image(self, query: str, turn: TurnContext) -> ToolOutcome:
        if turn.image_ref is None:
            return _error("invalid_args", "no image is attached to the request")
        findings = await analyze_image(self._client, query, turn.image_ref)
        if findings is None:
            return _error("service_unavailable", "the image model did not answer")
        return ToolOutcome(result=findings.model_dump(mode="json"))
