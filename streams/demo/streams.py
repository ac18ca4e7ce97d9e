"""Step 3: the three streams through the workers at once, watched by the demo's tap.

The workers and groups are started (:mod:`streams.demo.services`), the tap (:mod:`streams.demo.tap`)
follows every watched topic from its current end, the feeders produce the inputs
(:mod:`streams.demo.feed`) and the progress bars run until every expected output has arrived.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, TypeVar

from rich.console import Console

from processors.dbpm import DBPMEngine
from processors.dbpm.config import RULE_BASED
from processors.dbpm.ontology import FILTER_ID_SUFFIX
from schemas.clinical import (
    AuditReport,
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    GatedDraft,
    RevisionRoute,
    SafetyAudit,
)
from schemas.common import DeadLetter
from schemas.dbpm import Candidate, GateDecision, Narrative, Verdict
from schemas.docs import ClassificationRequest, Disposition
from schemas.fhir import FhirUpdate
from schemas.serde import Serde
from streams.demo.calls import LlmCalls
from streams.demo.dead_letters import probe_worker_dead_letters
from streams.demo.errors import DemoError
from streams.demo.feed import Feeder, LoopFeeder, feed_clinical, feed_docs, published_verdicts, tick_memory
from streams.demo.plan import Plan, streams_timeout
from streams.demo.progress import StreamWatch
from streams.demo.results import DeadLettered, LoopRun, Results
from streams.demo.services import Groups, ServiceProcess, listening_url, llm_server, workers
from streams.demo.tap import Flow, Route, Tap
from streams.llm.serve.testserver import DEFAULT_MODEL
from streams.replay.kafka import wait_until_consumed
from streams.runtime.settings import get_settings
from streams.worker.clinical import clinical_group
from streams.worker.engine import in_process_engine
from streams.worker.keys import memory_changelog
from streams.worker.memory import memory_group
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_SAFETY_AUDITS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    FHIR_UPDATES,
    dlq_name,
)

FLOWS = ("generator", "dbpm", "verifier", "filter", "clinical", "gates", "docs")
"""The streams the tap measures (:class:`streams.demo.tap.Flow`), by name."""


def step_streams(
    console: Console,
    bootstrap: str,
    serde: Serde,
    plan: Plan,
    workdir: Path,
    rates: tuple[float, float],
    results: Results,
) -> tuple[DBPMEngine, str]:
    """Start the workers and groups, produce the streams at once and consume their outputs.

    Args:
        rates: FHIR updates and classifications produced per second (0: as fast as possible).

    Returns:
        The in-process engine configured as the workers are (caps whole), and the workers' app id.
    """
    # The workers inherit this environment: the production configuration unless the user set flags.
    engine = in_process_engine(get_settings())
    _print_inputs(console, plan)
    groups = Groups.fresh()
    groups.start_at_ends(bootstrap)
    results.flows = flows = {name: Flow(name) for name in FLOWS}
    flows["generator"].expected = flows["dbpm"].expected = plan.gates
    flows["clinical"].expected, flows["docs"].expected = plan.clinical_outputs, len(plan.documents)
    flows["gates"].expected = len(plan.gates_expected)
    results.dead = dead = DeadLettered()
    with ExitStack() as stack:
        services, server = _start_services(console, stack, plan, workdir, bootstrap, groups)
        tap = Tap(
            bootstrap, serde, routes(plan, flows, dead, serde), changelog=memory_changelog(groups.app_id)
        )
        tap.start()
        stack.callback(tap.stop)
        console.print(f"  workers ready (app id {groups.app_id}; groups {', '.join(groups.names)})")
        calls = LlmCalls(
            {s.log.stem: s.metrics_port for s in services if s.metrics_port is not None},
            get_settings().llm_timeout_s,
        )
        loop = LoopFeeder(
            bootstrap, serde, plan, flows, tap, dead, engine, (groups.app_id, groups.generator), calls
        )
        feeders = [
            Feeder("dbpm", loop.run),
            Feeder(
                "clinical",
                lambda: feed_clinical(bootstrap, serde, plan, rates[0], clinical_group(groups.app_id)),
            ),
            Feeder("docs", lambda: feed_docs(bootstrap, serde, plan, rates[1])),
        ]
        started = time.perf_counter()
        for feeder in feeders:
            feeder.start()
        watch = StreamWatch(
            plan, flows, dead, feeders, tap, [*services, *([server] if server else [])], calls
        )
        try:
            watch.run(console, streams_timeout(plan.dbpm_patients))
        except DemoError as error:
            tails = "\n".join(f"--- {s.name}, last lines:\n{s.tail(6)}" for s in services)
            raise DemoError(f"{error}\n{tails}") from error
        results.timings["streams (all at once)"] = time.perf_counter() - started
        results.loop = feeders[0].result if isinstance(feeders[0].result, LoopRun) else None
        with console.status("moving the memory's clock past its next maintenance boundary"):
            tick_memory(
                bootstrap, list(published_verdicts(flows).values()), engine.config.maintenance_interval_s
            )
        with console.status("waiting for the memory writers to commit every verdict"):
            wait_until_consumed(bootstrap, memory_group(groups.app_id), DBPM_VERDICTS, 60.0)
        probe_worker_dead_letters(console, bootstrap, results)
    return engine, groups.app_id


def _print_inputs(console: Console, plan: Plan) -> None:
    console.print(
        f"  DBPM: {plan.dbpm_patients} patients' narratives"
        + (f" ({plan.gates:,} candidates in the ground truth); " if plan.llm_url is None else "; ")
        + f"FHIR: {len({u.patient_id for u in plan.fhir})} generated + {len(plan.golden)} golden patients, "
        f"{len(plan.fhir) + len(plan.golden):,} updates over simulated weeks; "
        f"documents: {len(plan.documents)}"
    )


def _start_services(
    console: Console, stack: ExitStack, plan: Plan, workdir: Path, bootstrap: str, groups: Groups
) -> tuple[list[ServiceProcess], ServiceProcess | None]:
    """Start the LLM test server (unless the user names one), then the workers and group members, and
    wait until they are ready; every one is stopped when ``stack`` closes.

    Returns:
        The workers and group members, and the test server (None: the user's server).
    """
    server = llm_server(plan, workdir, bootstrap)
    llm_url = plan.llm_url or ""
    if server is not None:
        stack.enter_context(server)
        with console.status("starting the LLM test server"):
            server.wait_ready()
        llm_url = listening_url(server)
    # The user's server: the groups read its settings from the environment they inherit.
    llm_env = {} if server is None else {"CLINGATE_LLM_URL": llm_url, "CLINGATE_LLM_MODEL": DEFAULT_MODEL}
    console.print(
        f"  LLM for the generator and verifier: {llm_url}"
        + (" (the demo's test server: answers play the synthetic ground truth)" if server else "")
    )
    services = workers(groups, workdir, bootstrap, llm_env)
    for service in services:
        stack.enter_context(service)

    def terminate_all() -> None:
        for process in (*services, *([server] if server is not None else [])):
            process.terminate()

    # Entered last, so it runs first on the way out: every process stops at once, and the exits above
    # then only wait (one after the other, each stop took seconds).
    stack.callback(terminate_all)
    with console.status("starting the workers and groups (worker, docs worker, generator, verifier)"):
        for service in services:
            service.wait_ready()
    return services, server


def routes(plan: Plan, flows: dict[str, Flow], dead: DeadLettered, serde: Serde) -> list[Route]:
    """What the tap watches: per topic, the flow it feeds and how a record of this run is identified
    (records of other runs on a shared broker are ignored)."""
    candidates = {c.candidate_id for found in plan.loop.candidates.values() for c in found}
    narrated = set(plan.loop.candidates)
    patients = set(plan.clinical_expected)
    doc_ids = {d.request.doc_id for d in plan.documents}
    # With the demo's responder the candidates are the planned ones; with a model, any of the narrated
    # patients' candidates.
    in_run = (
        _among(candidates, _candidate, _candidate)
        if plan.llm_url is None
        else _among(narrated, _candidate, _patient)
    )

    def failed_verification(letter: DeadLetter) -> str | None:
        try:
            return in_run(serde.decode(letter.value, GateDecision, topic=DBPM_TO_VERIFY).candidate)
        except Exception:  # a to-verify record that never decoded: not one of this run's
            return None

    def failed_narrative(letter: DeadLetter) -> str | None:
        try:
            narrative = serde.decode(letter.value, Narrative, topic=DBPM_NARRATIVES)
        except Exception:  # a narrative that never decoded: not one of this run's
            return None
        return narrative.patient_id if narrative.patient_id in narrated else None

    of_patients, of_documents = (
        _among(patients, _clinical_id, _patient),
        _among(doc_ids, _document, _document),
    )
    of_runs = _among({r.run_id for r in plan.runs}, _run_step, _run)
    of_deliverables = _among({d.deliverable_id for d in plan.gates_expected if isinstance(d, SafetyAudit)},
                             _deliverable, _deliverable)  # fmt: skip
    return [
        Route(DBPM_NARRATIVES, Narrative, flows["generator"], True, _among(narrated, _patient, _patient)),
        Route(DBPM_CANDIDATES, Candidate, flows["generator"], False, _among(narrated, _patient, _patient)),
        Route(DBPM_CANDIDATES, Candidate, flows["dbpm"], True, in_run),
        Route(DBPM_DECISIONS, GateDecision, flows["dbpm"], False, in_run),
        Route(DBPM_TO_VERIFY, GateDecision, flows["verifier"], True, in_run),
        Route(DBPM_VERDICTS, Verdict, flows["verifier"], False, _unless_filtered(in_run)),
        Route(DBPM_CANDIDATES, Candidate, flows["filter"], True, in_run),
        Route(DBPM_VERDICTS, Verdict, flows["filter"], False, _if_filtered(in_run)),
        Route(FHIR_UPDATES, FhirUpdate, flows["clinical"], True, of_patients),
        Route(CLINICAL_ASSESSMENTS, ClinicalAssessment, flows["clinical"], False, of_patients),
        Route(CLINICAL_DRAFTS, ClinicalDraft, flows["gates"], True, of_runs),
        Route(CLINICAL_GATED_DRAFTS, GatedDraft, flows["gates"], False, of_runs),
        Route(CLINICAL_AUDIT_REPORTS, AuditReport, flows["gates"], True, of_runs),
        Route(CLINICAL_REVISION_ROUTES, RevisionRoute, flows["gates"], False, of_runs),
        Route(CLINICAL_DELIVERABLES, Deliverable, flows["gates"], True, of_deliverables),
        Route(CLINICAL_SAFETY_AUDITS, SafetyAudit, flows["gates"], False, of_deliverables),
        Route(DOCS_CLASSIFICATIONS, ClassificationRequest, flows["docs"], True, of_documents),
        Route(DOCS_DISPOSITIONS, Disposition, flows["docs"], False, of_documents),
        Route(dlq_name(DBPM_TO_VERIFY), DeadLetter, dead.verifications, False, failed_verification),
        Route(dlq_name(DBPM_NARRATIVES), DeadLetter, dead.narratives, False, failed_narrative),
    ]


class _OfCandidate(Protocol):
    candidate_id: str


class _OfPatient(Protocol):
    patient_id: str


class _OfDocument(Protocol):
    doc_id: str


M = TypeVar("M")


def _among(ids: set[str], ident: Callable[[M], str], owner: Callable[[M], str]) -> Callable[[M], str | None]:
    """A record's id when its owner is one of ``ids`` (else None: not this run's)."""
    return lambda value: ident(value) if owner(value) in ids else None


def _candidate(value: _OfCandidate) -> str:
    return value.candidate_id


def _unless_filtered(in_run: Callable[[Verdict], str | None]) -> Callable[[Verdict], str | None]:
    """The verifier's verdicts of this run, by candidate id (the Filter's are another flow)."""
    return lambda verdict: None if verdict.source == RULE_BASED else in_run(verdict)


def _if_filtered(in_run: Callable[[Verdict], str | None]) -> Callable[[Verdict], str | None]:
    """The Ontology-Violation Filter's verdicts of this run, by the id of the candidate they judge."""

    def ident(verdict: Verdict) -> str | None:
        cid = verdict.candidate_id or ""
        if verdict.source != RULE_BASED or not cid.endswith(FILTER_ID_SUFFIX):
            return None
        return in_run(verdict.model_copy(update={"candidate_id": cid.removesuffix(FILTER_ID_SUFFIX)}))

    return ident


def _patient(value: _OfPatient) -> str:
    return value.patient_id


def _document(value: _OfDocument) -> str:
    return value.doc_id


def _run(value: ClinicalDraft | GatedDraft | AuditReport | RevisionRoute) -> str:
    return value.run_id


def _run_step(value: ClinicalDraft | GatedDraft | AuditReport | RevisionRoute) -> str:
    """A draft and its gated draft share an id, an audit and its route another."""
    step = "draft" if isinstance(value, ClinicalDraft | GatedDraft) else "audit"
    return f"{value.run_id}|{value.revision}|{step}"


def _deliverable(value: Deliverable | SafetyAudit) -> str:
    return value.deliverable_id


def _clinical_id(value: FhirUpdate | ClinicalAssessment) -> str:
    """Patient id and event time: one FHIR update per patient and time, and its assessment's ``as_of``."""
    when = value.ts if isinstance(value, FhirUpdate) else value.as_of
    moment = datetime.fromisoformat(when.replace("Z", "+00:00")) if isinstance(when, str) else when
    return f"{value.patient_id}|{moment.astimezone(UTC).isoformat()}"
