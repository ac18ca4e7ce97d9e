"""Step 2: one event of every registered schema encoded, produced to its topic, read back and decoded.

The events are the serde benchmark's samples plus one of every other schema, from the demo's own data
where it has one (a golden patient's assessment and safety audit, an escalated document's disposition
and review packet).
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from processors.clinical.assess import ClinicalStreamState, RunEvent, assess, process_event
from processors.clinical.fhir_input import parse_document
from processors.clinical.knowledge import default_knowledge
from processors.clinical.safety_patterns import audit_deliverable
from processors.clinical.state import PatientState, PatientUpdate, reduce_update
from processors.clinical.traffic_light import ReviewInputs
from processors.clinical.view import PatientView
from processors.docs.arbiter import Finished
from schemas.agent import AgentProposal, AgentRequest, AgentResponse, AgentToolCall, AgentTrace
from schemas.base import AvroModel
from schemas.clinical import (
    AdversarialReview,
    AuditReport,
    ClinicalAssessment,
    ClinicalDraft,
    Deliverable,
    EvidenceBundle,
    EvidencePacket,
    EvidenceRequest,
    EvidenceReview,
    EvidenceVerdict,
    GatedDraft,
    QueryDecision,
    QueryProposal,
    QueryVerdict,
    ReviewedPacket,
    RevisionRoute,
    SafetyAudit,
)
from schemas.console import ConsoleAction, ConsoleRequest, ConsoleRequestOutcome
from schemas.dbpm import Dispatch, Narrative, Propagation
from schemas.docs import ClassificationRequest, GroundTruth, GroundTruthSource, Review, ReviewDecision
from schemas.registry import load_registry
from schemas.serde import Serde
from streams.data import CLINICAL, GOLDEN_REVIEWS
from streams.demo.errors import DemoError
from streams.demo.kafka_io import demo_producer, demo_reader, produce_all, read_all
from streams.demo.plan import golden_time, verify_example
from streams.demo.results import Results, RoundTrip
from streams.runtime.settings import get_settings
from streams.testing.schema_samples import TS, samples
from streams.worker.clinical import gate_flags
from topics.catalog import FHIR_UPDATES, Catalog, dlq_name

GOLDEN_CASE = "PT-TEST-010"
"""The golden patient whose assessment and safety audit are the samples."""

ESCALATED_CASE = "fabricated"
"""The arbiter example whose disposition (escalated) and review packet are the samples."""


def step_schemas(console: Console, bootstrap: str, serde: Serde, catalog: Catalog, results: Results) -> None:
    """Encode, produce, read back and decode one event of each schema; print a table.

    Raises:
        DemoError: a schema has no sample, or a round trip changed a byte or a field.
    """
    registry = load_registry()
    by_schema: dict[str, str] = {}
    for spec in catalog:  # the first declared topic of a schema is its home (Candidate: candidates)
        if not spec.name.endswith(".dlq"):
            by_schema.setdefault(spec.value_schema, spec.name)
    events = schema_samples(golden_assessment(), *verify_example(ESCALATED_CASE))
    records = []
    for event in events:
        topic = by_schema.get(registry.for_model(type(event)).full_name, dlq_name(FHIR_UPDATES))
        records.append((topic, b"demo", serde.encode(event, topic=topic)))
    consumer = demo_reader(bootstrap)
    try:
        coordinates = produce_all(demo_producer(bootstrap), records)
        at = [(topic, p, o) for (topic, _, _), (p, o) in zip(records, coordinates, strict=True)]
        messages = read_all(consumer, at)
    finally:
        consumer.close()
    table = Table(
        "schema", "topic", "bytes", "round trip", title="one event per schema", title_justify="left"
    )
    for event, (topic, _, data), message in zip(events, records, messages, strict=True):
        name = registry.for_model(type(event)).full_name
        ok = message.value() == data and serde.decode(message.value(), type(event), topic=topic) == event
        results.round_trips.append(RoundTrip(name, topic, len(data), ok))
        table.add_row(name, topic, str(len(data)), "[green]OK[/]" if ok else "[red]FAILED[/]")
    console.print(table)
    missing = {e.full_name for e in registry.events()} - {r.schema for r in results.round_trips}
    if missing or not all(r.ok for r in results.round_trips):
        raise DemoError(f"schema round trip failed (missing: {sorted(missing)})")


def schema_samples(
    assessment: ClinicalAssessment, request: ClassificationRequest, finished: Finished
) -> list[AvroModel]:
    """One event per registered top-level schema, from the demo's own data where it has one."""
    disposition, packet = finished.disposition, finished.packet
    pid = assessment.patient_id
    deliverable = Deliverable(
        patient_id=pid,
        deliverable_id=f"{pid}-care-plan",
        event_time=TS.isoformat(),
        text="Hold digoxin; repeat level and potassium in 24 h.",
    )
    return [
        *samples(),
        Narrative(ts=TS, patient_id="p-000123", text="Admitted with dyspnea; started on furosemide."),
        Propagation(
            ts=TS,
            task="ner",
            signature="TREATMENT",
            weight=0.5,
            source="cross_task_re",
            origin_task="re",
            origin_signature="TREATMENT|TREATS|DIAGNOSIS",
            patient_id="p-000123",
            origin_partition=0,
            origin_offset=42,
            origin_index=0,
        ),
        Dispatch(ts=TS, task="re", patient_id="p-000123", candidate_id="c-000123-re-0007"),
        assessment,
        AdversarialReview(
            patient_id=pid,
            review_id=f"{pid}-r1",
            event_time=TS.isoformat(),
            disposition="CONCUR",
            automation_bias_risk="LOW",
            revision_count=2,
            audit_verdict="APPROVED",
        ),
        deliverable,
        _safety_audit(assessment, deliverable),
        *_output_gate_events(pid),
        *_agent_events(pid),
        ConsoleAction(
            action_id="demo-action-1",
            event_time=TS,
            user="pharmacist-demo",
            role="pharmacist",
            action="sign-in",
            target="/login",
            detail="{}",
            outcome="ok",
        ),
        ConsoleRequest(
            request_id="demo-action-2",
            event_time=TS,
            user="operator-demo",
            role="operator",
            action="redrive",
            target="clingate.dbpm.candidates.dlq[0]@42",
            topic="clingate.dbpm.candidates",
            note="fixed upstream",
        ),
        ConsoleRequestOutcome(
            request_id="demo-action-2",
            event_time=TS,
            user="operator-demo",
            action="redrive",
            target="clingate.dbpm.candidates.dlq[0]@42",
            topic="clingate.dbpm.candidates",
            partition=0,
            outcome="ok",
            reason="",
        ),
        EvidenceRequest(
            patient_id=pid,
            run_id=f"{pid}-run-1",
            event_time=TS.isoformat(),
            revision=1,
            nti_severity="CRITICAL",
            drugs=["digoxin"],
            must_retrieve=["digoxin_tdm.md", "potassium_interaction.md"],
            missing=["potassium_interaction.md"],
        ),
        *_touchpoint_events(pid),
        request,
        disposition,
        *([packet] if packet is not None else []),
        Review(
            doc_id=disposition.doc_id, ts=disposition.ts, reviewer="sme-demo", decision=ReviewDecision.AGREES
        ),
        GroundTruth(
            doc_id=disposition.doc_id,
            ts=disposition.ts,
            ground_truth_source=GroundTruthSource.SME_VALIDATED,
            ground_truth_classification=disposition.final_classification,
            primary_dominant_type=disposition.final_classification.dominant_type_overall,
            reviewer="sme-demo",
        ),
    ]


def _touchpoint_events(pid: str) -> list[AvroModel]:
    """A run's proposed queries, the pharmacist's edit of them and their review of its evidence."""
    run_id = f"{pid}-run-1"
    proposed = ["digoxin toxicity management", "electrolyte correction with cardiac glycoside toxicity"]
    return [
        QueryProposal(patient_id=pid, run_id=run_id, event_time=TS, queries=proposed),
        QueryDecision(
            patient_id=pid, run_id=run_id, event_time=TS, proposed_at=TS, pharmacist="pharmacist-demo",
            decision_id="demo-action-3", decision=QueryVerdict.EDITED, proposed=proposed,
            queries=[*proposed, "renal dosing of digoxin in CKD stage 3b"], note="the eGFR is 36",
        ),
        EvidenceReview(
            patient_id=pid, run_id=run_id, event_time=TS, bundle_time=TS, pharmacist="pharmacist-demo",
            review_id="demo-action-4", decision=EvidenceVerdict.ACCEPTED,
            packets=[ReviewedPacket(source="digoxin_tdm.md", accepted=True)],
        ),
    ]  # fmt: skip


def _golden_state(case: str) -> PatientState:
    """The state of golden patient ``case`` after its bundle, at the golden time."""
    parsed = parse_document(json.loads((CLINICAL / f"{case}.json").read_text("utf-8")))
    update = PatientUpdate(patient_id=case, changes=tuple(parsed.changes[case]))
    state, _ = reduce_update(None, update, golden_time())
    return state


def golden_assessment(case: str = GOLDEN_CASE, *, reviewed: bool = True) -> ClinicalAssessment:
    """The assessment of golden patient ``case`` at the golden time, with its published review or (not
    ``reviewed``) on its FHIR bundle alone."""
    review = ReviewInputs(**GOLDEN_REVIEWS[case]) if reviewed else None  # type: ignore[arg-type]
    state = _golden_state(case)
    return assess(state, golden_time(), review, default_knowledge(), gate_flags(get_settings()))


def _safety_audit(assessment: ClinicalAssessment, deliverable: Deliverable) -> SafetyAudit:
    knowledge = default_knowledge()
    view = PatientView(_golden_state(assessment.patient_id), knowledge)
    return audit_deliverable(assessment, view, deliverable, knowledge)


def _agent_events(pid: str) -> list[AvroModel]:
    """A clinician's question to the agent, a decision of its trace, its proposal and its response."""
    conversation, request_id = "demo-conversation", "demo-conversation-1"
    ids = {"conversation_id": conversation, "request_id": request_id}
    args = {"patient_id": pid, "medication_name": "warfarin", "dosage": "5 mg", "frequency": "daily"}
    resource = {"resourceType": "MedicationRequest", "id": f"{request_id}-5", "status": "draft",
                "intent": "proposal", "subject": {"reference": f"Patient/{pid}"},
                "medicationCodeableConcept": {"text": "warfarin"}}  # fmt: skip
    return [
        AgentRequest(**ids, event_time=TS, query=f"Prescribe warfarin 5 mg daily for {pid}", patient_id=pid),
        AgentTrace(**ids, step=0, node="INPUT_ASSEMBLY", decision=f"patient_ids=['{pid}']", latency_ms=0.0),
        AgentProposal(
            **ids,
            proposal_id=resource["id"],
            patient_id=pid,
            event_time=TS,
            tool="prescribe_medication",
            resource_type="MedicationRequest",
            resource=json.dumps(resource),
        ),
        AgentResponse(
            **ids,
            event_time=TS,
            answer="A draft warfarin prescription was proposed.",
            path=[
                "INPUT_ASSEMBLY",
                "INTENT_CLASSIFY",
                "TOOL_SELECT",
                "TOOL_EXECUTE",
                "RESULT_CLASSIFY",
                "DETERMINISTIC_ROUTER",
                "SYNTHESIZE",
            ],
            tool_calls=[AgentToolCall(tool="prescribe_medication", args=json.dumps(args), outcome="success")],
            llm_calls=5,
            proposals=[resource["id"]],
        ),
    ]


def _output_gate_events(pid: str) -> list[AvroModel]:
    """A run through the output gates as the clinical loop publishes it: its evidence, a draft and an
    audit report in, and the gated draft and route :func:`process_event` gives for them out."""
    label = "Digoxin toxicity is more likely with hypokalemia."
    run = f"{pid}-run-1"
    report = json.dumps(
        {"violations": ["Rule 4.9: imperative language in the care plan"], "cds_compliant": True}
    )
    inputs: list[RunEvent] = [
        EvidenceBundle(patient_id=pid, run_id=run, event_time=TS,
                       packets=[EvidencePacket(source="digoxin label", text=label)]),
        ClinicalDraft(patient_id=pid, run_id=run, revision=0, event_time=TS,
                      text=f'## HOLD DIGOXIN\nHold digoxin. [CRG: digoxin label — "{label}"]'),
        AuditReport(patient_id=pid, run_id=run, revision=0, event_time=TS, report=report),
    ]  # fmt: skip
    state: ClinicalStreamState | None = None
    published: list[AvroModel] = []
    for event in inputs:
        state, outputs = process_event(state, event, TS, default_knowledge())
        published += [o for o in outputs if isinstance(o, GatedDraft | RevisionRoute)]
    return [*inputs, *published]
