"""The inputs of a demo run, built before anything is produced, and their in-process references.

:func:`build_plan` draws every input (the DBPM narratives and the candidates the generator will emit,
the FHIR timeline and the golden cases, copies of the arbiter examples) and computes what the pure
processors make of them; the run's outputs are compared with these (:mod:`streams.demo.checks`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby

from rich.console import Console

from processors.dbpm import DBPMEngine, GateRuling
from processors.dbpm.events import Event
from processors.dbpm.ontology import FILTER_ID_SUFFIX
from processors.docs.arbiter import ArbiterConfig, Finished, run
from processors.docs.v3 import load_trap_rules
from schemas.clinical import (
    AdversarialReview,
    ClinicalAssessment,
    EvidenceRequest,
    GatedDraft,
    RevisionRoute,
    SafetyAudit,
)
from schemas.dbpm import Candidate, Verdict
from schemas.docs import ClassificationOutput, ClassificationRequest, DocumentBundle
from schemas.fhir import FhirUpdate
from state.ram import RamStore
from streams.data import CLINICAL, DOCS, DOCS_EXAMPLES, GOLDEN_AS_OF, GOLDEN_REVIEWS
from streams.data.timeline import fhir_timeline
from streams.demo.errors import DemoError
from streams.demo.llm import LoopPlan, loop_plan
from streams.demo.results import MemoryPoint, State
from streams.demo.runs import GoldenRun, Stage, deliverable, golden_runs, run_stages, with_retrieved
from streams.groups.arbiter_calls import LLM_ROLE
from streams.llm.config import resolve_role
from streams.runtime.settings import get_settings
from streams.testing.clinical_reference import pure_outputs
from streams.testing.dbpm_stream import StreamEvent, StreamShape, generate_events
from streams.worker.wire import contract_event

DEFAULT_PATIENTS = 2000
"""DBPM patients of a default run: about 98,000 candidates (docs/demo.md, "Stream size")."""

RULE_B_FIELDS = ("revision_count", "audit_verdict")
"""The review inputs the golden runs' routes give the traffic light (the demo's reviews leave them out)."""

GateOutput = GatedDraft | RevisionRoute | SafetyAudit
"""What the clinical loop publishes for a run through the output gates and its deliverable."""

DEFAULT_LOCKSTEP = 40
"""Patients of the default lockstep slice (docs/demo.md, "The DBPM loop")."""

STREAMS_TIMEOUT_S = 900.0
"""Longest the three streams may take together, plus :data:`STREAMS_TIMEOUT_PER_PATIENT_S` per DBPM
patient (a stuck DBPM gate run fails sooner, after 120 s per lockstep patient)."""

STREAMS_TIMEOUT_PER_PATIENT_S = 0.5
"""Allowance per DBPM patient on top of :data:`STREAMS_TIMEOUT_S`: a bulk phase of a few thousand
patients on a loaded 2-core machine runs at 3-4 patients/s."""

SNAPSHOTS = 40
"""Points of the memory-population and severity charts along the stream."""


def streams_timeout(patients: int) -> float:
    """Seconds the streams of a run with ``patients`` DBPM patients may take."""
    return STREAMS_TIMEOUT_S + STREAMS_TIMEOUT_PER_PATIENT_S * patients


@dataclass(frozen=True)
class Document:
    """A classification request of the run: a copy of an arbiter example, with its own doc id."""

    case: str
    request: ClassificationRequest
    expected: Finished
    """The in-process arbiter's rules-only outcome."""


@dataclass
class Plan:
    """The inputs of one run, built before anything is produced, with the in-process expectations."""

    dbpm_patients: int
    lockstep: int
    """Patients of the lockstep slice (the first ones); the rest run in the bulk phase."""
    loop: LoopPlan
    llm_url: str | None
    """The LLM server the user configured for the loop (None: the demo runs its own test server)."""
    fhir: list[FhirUpdate]
    golden: list[tuple[FhirUpdate, AdversarialReview]]
    runs: list[GoldenRun]
    """The golden cases' runs through the output gates."""
    stages: list[Stage]
    """The runs' records (and the deliverables) in the order they are produced."""
    clinical_expected: dict[str, ClinicalAssessment]
    """Per patient, the last assessment of the pure stream processor."""
    clinical_outputs: int
    gates_expected: list[GateOutput]
    """What the pure stream processor publishes for the runs and deliverables, in order."""
    published: dict[str, ClinicalAssessment]
    """Per golden case, its assessment under its published run's review inputs (Rule B's included)."""
    documents: list[Document]
    docs_rules_only: bool

    @property
    def clinical_updates(self) -> list[FhirUpdate]:
        """Every FHIR update the run gives the clinical worker: the generated timeline, then the golden
        cases' bundles."""
        return [*self.fhir, *(update for update, _ in self.golden)]

    @property
    def gates(self) -> int:
        """Candidates the generator emits for the narratives (with the demo's responder)."""
        return sum(len(c) for c in self.loop.candidates.values())


def build_plan(
    patients: int, lockstep: int, clinical_patients: int, documents: int, console: Console
) -> Plan:
    """Every input of the run and the in-process expectations the streams are checked against."""
    settings = get_settings()
    with console.status("building the inputs and the in-process expectations"):
        loop = loop_plan(demo_stream(patients))
        fhir, golden = clinical_inputs(clinical_patients)
        runs, stages = gate_runs(golden)
        expected, outputs, gates = clinical_reference(fhir, golden, stages)
        docs = docs_inputs(max(1, -(-documents // len(DOCS_EXAMPLES))))
    return Plan(
        dbpm_patients=patients,
        lockstep=min(lockstep, len(loop.narratives)),
        loop=loop,
        llm_url=settings.generator_url or settings.llm_url,
        fhir=fhir,
        golden=golden,
        runs=runs,
        stages=stages,
        clinical_expected=expected,
        clinical_outputs=outputs,
        gates_expected=gates,
        published=published_assessments(golden),
        documents=docs,
        docs_rules_only=resolve_role(settings, LLM_ROLE).endpoint is None,
    )


def demo_stream(patients: int, seed: int = 0) -> list[StreamEvent]:
    """The synthetic DBPM stream (replay-contract objects) of ``patients`` patients, each stage's
    candidates stamped at its first candidate time and its verdicts at its last (event time never goes
    backwards); the plan of the loop (:func:`streams.demo.llm.loop_plan`) is built from it."""
    seen: set[str] = set()
    events: list[StreamEvent] = []
    for event in generate_events(sys.maxsize, StreamShape(seed=seed)):
        seen.add(event["patient_id"])
        if len(seen) > patients:
            break
        events.append(event)
    stream: list[StreamEvent] = []
    for _, stage in groupby(events, key=lambda e: (e["patient_id"], e["task"])):
        batch = list(stage)
        first, last = min(e["ts"] for e in batch), max(e["ts"] for e in batch)
        stream += [{**e, "ts": first} for e in batch if e["kind"] == "gate"]
        stream += [{**e, "ts": last} for e in batch if e["kind"] == "verdict"]
    return stream


def golden_time() -> datetime:
    """The event time of the golden cases (their published ``as_of``)."""
    return datetime.fromisoformat(GOLDEN_AS_OF.replace("Z", "+00:00"))


def clinical_inputs(generated: int) -> tuple[list[FhirUpdate], list[tuple[FhirUpdate, AdversarialReview]]]:
    """The FHIR updates of the generated timeline, and the golden cases' (bundle update, review) pairs;
    the reviews leave Rule B's inputs to the golden runs (:data:`RULE_B_FIELDS`)."""
    fhir = [
        FhirUpdate(ts=u.ts, patient_id=u.patient_id, resource_type="Bundle", resource=u.resource_json())
        for u in fhir_timeline(generated)
    ]
    golden = []
    for case, published in GOLDEN_REVIEWS.items():
        update, review = _golden_inputs(case, published)
        golden.append((update, review.model_copy(update=dict.fromkeys(RULE_B_FIELDS))))
    return fhir, golden


def _golden_inputs(case: str, review: dict[str, str | int | None]) -> tuple[FhirUpdate, AdversarialReview]:
    """A golden case's bundle update and its review with ``review``'s inputs, at the golden time."""
    when = golden_time()
    bundle = (CLINICAL / f"{case}.json").read_text("utf-8")
    update = FhirUpdate(ts=when, patient_id=case, resource_type="Bundle", resource=bundle)
    return update, AdversarialReview(
        patient_id=case, review_id=f"{case}-demo-review", event_time=when, **review
    )  # type: ignore[arg-type]


def published_assessments(
    golden: list[tuple[FhirUpdate, AdversarialReview]],
) -> dict[str, ClinicalAssessment]:
    """Each golden case's assessment under its published review (Rule B's inputs included): what its run's
    routes must bring the light to."""
    events = [e for u, _ in golden for e in _golden_inputs(u.patient_id, GOLDEN_REVIEWS[u.patient_id])]
    return last_per_patient(
        [o for o in pure_outputs(events, get_settings()) if isinstance(o, ClinicalAssessment)]
    )


def gate_runs(golden: list[tuple[FhirUpdate, AdversarialReview]]) -> tuple[list[GoldenRun], list[Stage]]:
    """The golden cases' runs and their stages, the last one the deliverables: each run's final gated
    draft, as the pure gates make it."""
    runs = golden_runs([u.patient_id for u, _ in golden], golden_time())
    evidence = [*(u for u, _ in golden), *(r.evidence for r in runs)]
    requests = {o.patient_id: o.missing for o in pure_outputs(evidence, get_settings())
                if isinstance(o, EvidenceRequest)}  # fmt: skip
    runs = [with_retrieved(r, requests[r.case]) if r.case in requests else r for r in runs]
    events = [*(u for u, _ in golden), *(e for _, stage in run_stages(runs, []) for e in stage)]
    finals = {
        o.patient_id: o.draft for o in pure_outputs(events, get_settings()) if isinstance(o, GatedDraft)
    }
    return runs, run_stages(runs, [deliverable(r, finals[r.case]) for r in runs])


def clinical_reference(
    fhir: list[FhirUpdate], golden: list[tuple[FhirUpdate, AdversarialReview]], stages: list[Stage]
) -> tuple[dict[str, ClinicalAssessment], int, list[GateOutput]]:
    """The pure stream processor over the same events in the same order: each patient's final
    assessment, the number of assessments, and what it publishes for the runs."""
    events = [*fhir, *(u for u, _ in golden), *(r for _, r in golden), *(e for _, s in stages for e in s)]
    outputs = pure_outputs(events, get_settings())
    assessments = [o for o in outputs if isinstance(o, ClinicalAssessment)]
    gates = [o for o in outputs if isinstance(o, GateOutput)]
    return last_per_patient(assessments), len(assessments), gates


def last_per_patient(outputs: Sequence[ClinicalAssessment]) -> dict[str, ClinicalAssessment]:
    """Each patient's last assessment among ``outputs`` (what a consumer keeping the latest ends with)."""
    return {a.patient_id: a for a in outputs}


def verify_example(case: str) -> tuple[ClassificationRequest, Finished]:
    """A docs example as a request, and the arbiter's rules-only outcome for it."""
    classification, bundle_name = DOCS_EXAMPLES[case]
    config = ArbiterConfig(trap_rules=load_trap_rules(get_settings().docs_trap_rules), llm_enabled=False)
    bundle = DocumentBundle.model_validate_json((DOCS / f"{bundle_name}.json").read_bytes())
    output = ClassificationOutput.model_validate_json((DOCS / f"{classification}.json").read_bytes())
    when = datetime.fromisoformat(bundle.processing_timestamp.replace("Z", "+00:00"))
    request = ClassificationRequest(
        doc_id=f"{bundle.doc_id}-{case}", ts=when, classification=output, bundle=bundle
    )
    finished = run(request, config)
    if not isinstance(finished, Finished):  # rules-only: the arbiter never waits for an LLM
        raise DemoError(f"the rules-only arbiter did not decide the example {case}")
    return request, finished


def docs_inputs(copies: int) -> list[Document]:
    """``copies`` of every arbiter example, each request with its own doc id."""
    documents = []
    for case in DOCS_EXAMPLES:
        request, finished = verify_example(case)
        for copy in range(copies):
            doc_id = f"{request.doc_id}-{copy:03d}"
            documents.append(Document(case, request.model_copy(update={"doc_id": doc_id}), finished))
    return documents


def loop_reference(
    loop: LoopPlan, emitted: dict[str, list[Candidate]], verdicts: dict[str, Verdict]
) -> list[Event]:
    """The loop's events as the in-process engine sees them: per narrative, its candidates' gate events
    in the generator's order, then the Filter's verdicts on them (the gate publishes each as it decides
    its candidate, before the verifier can judge it), then the verifier's, in the same order.

    ``verdicts`` holds both kinds by their ids (the Filter's: the candidate's with
    :data:`~processors.dbpm.ontology.FILTER_ID_SUFFIX`)."""
    events: list[Event] = []
    for narrative in loop.narratives:
        found = emitted.get(narrative.patient_id, [])
        events += [contract_event(c) for c in found]
        for suffix in (FILTER_ID_SUFFIX, ""):
            ids = (c.candidate_id + suffix for c in found)
            events += [contract_event(verdicts[cid]) for cid in ids if cid in verdicts]
    return events


def last_time(events: Sequence[Event]) -> float | None:
    """The latest event time of ``events`` (the in-process memory's clock after them), None if empty.

    The memory a Kafka runtime holds never saw the gate events (a gate writes nothing), so its
    snapshot is taken as of this time to compare with the in-process engine's."""
    return max((e.time for e in events), default=None)


@dataclass(frozen=True)
class EngineRun:
    """The in-process engine over a sequence of events."""

    decisions: dict[str, str]
    """Decision by candidate id."""
    state: State
    """The final memory."""
    marked: State | None
    """The memory after the first ``mark`` events (as of the last of them)."""


def _apply(engine: DBPMEngine, store: RamStore, events: Iterable[Event]) -> Iterator[list[GateRuling]]:
    """Apply ``events`` one by one to ``store``, each at its own event time; yields each one's decisions
    once it is applied."""
    for event in events:
        with store.transaction() as txn:
            _, out = engine.process(txn, event, event.time)
        yield out


def engine_run(engine: DBPMEngine, events: list[Event], mark: int) -> EngineRun:
    """Run ``engine`` over ``events`` on a fresh in-memory store (see :class:`EngineRun`)."""
    store = RamStore()
    decisions: dict[str, str] = {}
    marked = engine.snapshot(store.transaction()) if mark == 0 else None
    for index, out in enumerate(_apply(engine, store, events), start=1):
        decisions.update((d.candidate_id, d.decision) for d in out)
        if index == mark:
            marked = engine.snapshot(store.transaction())
    return EngineRun(decisions, engine.snapshot(store.transaction()), marked)


def memory_over_time(engine: DBPMEngine, events: Sequence[Event]) -> list[MemoryPoint]:
    """The memory at about :data:`SNAPSHOTS` points along event time, in time order: ``events`` applied
    in event-time order on a fresh in-memory store (events of the same time keep their order), a
    snapshot after every ``len(events) // SNAPSHOTS`` of them and after the last, each at the time of
    the event it follows.

    Not the reference run's order (:func:`loop_reference`): that one applies the loop's events narrative
    by narrative, as the lockstep slice is compared, and their times, stamped by the generator and the
    verifier while they serve many narratives at once, go back and forth in it; a snapshot taken in that
    order can hold verdicts later than the snapshot after it. In event-time order each snapshot holds
    what happened up to its time, so a chart of them over event time is a line forward in time.
    """
    ordered = sorted(events, key=lambda e: e.time)
    store = RamStore()
    every = max(1, len(ordered) // SNAPSHOTS)
    snapshots = []
    for index, (event, _) in enumerate(zip(ordered, _apply(engine, store, ordered), strict=True), start=1):
        if index % every == 0 or index == len(ordered):
            snapshots.append(MemoryPoint.of(event.time, engine.snapshot(store.transaction())))
    return snapshots
