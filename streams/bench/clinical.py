"""``clingate bench clinical``: throughput of the deterministic clinical gates, in process.

Builds a seeded population of realistic patient bundles (10-30 resources each: a Patient, 3-10
medications drawn from a pool that includes the NTI drugs and their interactors, 4-12 laboratory /
vital-sign observations in mixed units, 1-4 conditions, 0-2 encounters with symptom text) and reports
separately:

* FHIR parsing: sanitise + validate (fhir.resources R4B) + normalise, per bundle and per resource;
* assessment: reduce the validated changes into patient state and run every gate
  (:func:`processors.clinical.assess.assess`), assessments per second;
* stream path: the pure stream processor fed one resource per event (re-assess on every update, emit on
  change), assessing every part anew (:func:`processors.clinical.assess.process_event`) and
  incrementally, on the parts of the patient's previous assessment its resource does not feed
  (:func:`processors.clinical.assess.process_event_reusing`, as the clinical loop runs it).

Knowledge loading (YAML, pint registry, drug vocabulary) is done once before timing and reported.

With ``--through-kafka`` (a broker and at least one running ``clingate worker`` needed, as for
``clingate bench dbpm-kafka``) it also measures the path through the stream: the same population, one
resource per ``clingate.fhir.updates`` record (patient ids fresh per run, so the workers' patient
state starts empty), produced as fast as possible; rate = FHIR updates / time from the first produce
to the last assessment consumed from ``clingate.clinical.assessments``. The number of assessments to
wait for is known in advance: the pure stream processor run on the same events emits exactly as many
(assessments are emitted only on change).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from streams.runtime.kafka_clients import producer_config

AS_OF = datetime(2026, 3, 29, tzinfo=UTC)
MEDICATIONS = (
    "warfarin 5 mg po daily",
    "digoxin 0.125 mg po daily",
    "Lanoxin 125 mcg po daily",
    "amiodarone 200 mg po daily",
    "carvedilol 12.5 mg po bid",
    "furosemide 40 mg po daily",
    "hydrochlorothiazide 25 mg po daily",
    "lisinopril 10 mg po daily",
    "atorvastatin 40 mg po daily",
    "metformin 500 mg po bid",
    "trimethoprim-sulfamethoxazole 800-160 mg po bid",
    "potassium chloride 20 mEq po daily",
    "omeprazole 20 mg po daily",
    "gabapentin 300 mg po bid",
    "ondansetron 4 mg po prn nausea",
)
LABS = (
    ("6301-6", "INR in Platelet poor plasma by Coagulation assay", (1.0, 5.0), "{INR}", "laboratory"),
    ("10535-3", "Digoxin [Mass/volume] in Serum or Plasma", (0.4, 2.6), "ng/mL", "laboratory"),
    ("10535-3", "Digoxin [Moles/volume] in Serum or Plasma", (0.5, 3.3), "nmol/L", "laboratory"),
    ("2823-3", "Potassium [Moles/volume] in Serum or Plasma", (2.9, 5.6), "mmol/L", "laboratory"),
    ("19123-9", "Magnesium [Mass/volume] in Serum or Plasma", (1.2, 2.6), "mg/dL", "laboratory"),
    ("2160-0", "Creatinine [Mass/volume] in Serum or Plasma", (0.6, 3.5), "mg/dL", "laboratory"),
    ("14682-9", "Creatinine [Moles/volume] in Serum or Plasma", (50, 300), "umol/L", "laboratory"),
    ("17861-6", "Calcium [Mass/volume] in Serum or Plasma", (8.0, 11.5), "mg/dL", "laboratory"),
    ("5902-2", "Prothrombin time (PT)", (10.0, 40.0), "s", "laboratory"),
    ("8867-4", "Heart rate", (45, 110), "/min", "vital-signs"),
)
CONDITIONS = (
    "Atrial fibrillation",
    "Heart failure with reduced ejection fraction",
    "Chronic kidney disease stage 3b",
    "Essential hypertension",
    "Mechanical aortic valve",
    "Bioprosthetic mitral valve",
    "Type 2 diabetes mellitus",
)
REASONS = (
    "Nausea and yellow-tinted vision",
    "Routine follow-up",
    "Confusion after a fall",
    "Epistaxis",
    "Palpitations",
)


def _patient_bundle(rng: random.Random, index: int, prefix: str = "bench") -> dict[str, Any]:
    pid = f"{prefix}-{index:05d}"
    subject = {"reference": f"Patient/{pid}"}
    resources: list[dict[str, Any]] = [
        {
            "resourceType": "Patient",
            "id": pid,
            "birthDate": f"{rng.randint(1930, 1990)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
        }
    ]
    for j, text in enumerate(rng.sample(MEDICATIONS, rng.randint(3, 10))):
        resources.append(
            {
                "resourceType": "MedicationStatement",
                "id": f"{pid}-m{j}",
                "status": "active",
                "medicationCodeableConcept": {"text": text},
                "subject": subject,
            }
        )
    for j in range(rng.randint(4, 12)):
        code, display, (lo, hi), unit, category = rng.choice(LABS)
        when = AS_OF - timedelta(hours=rng.randint(1, 24 * 60))
        resources.append(
            {
                "resourceType": "Observation",
                "id": f"{pid}-o{j}",
                "status": "final",
                "category": [
                    {
                        "coding": [
                            {
                                "system": "http://terminology.hl7.org/CodeSystem/observation-category",
                                "code": category,
                            }
                        ]
                    }
                ],
                "code": {
                    "coding": [{"system": "http://loinc.org", "code": code, "display": display}],
                    "text": display,
                },
                "subject": subject,
                "effectiveDateTime": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "valueQuantity": {
                    "value": round(rng.uniform(lo, hi), 2),
                    "unit": unit,
                    "system": "http://unitsofmeasure.org",
                    "code": unit,
                },
            }
        )
    for j, text in enumerate(rng.sample(CONDITIONS, rng.randint(1, 4))):
        resources.append(
            {
                "resourceType": "Condition",
                "id": f"{pid}-c{j}",
                "code": {"text": text},
                "subject": subject,
                "clinicalStatus": {
                    "coding": [
                        {
                            "system": "http://terminology.hl7.org/CodeSystem/condition-clinical",
                            "code": "active",
                        }
                    ]
                },
            }
        )
    for j in range(rng.randint(0, 2)):
        resources.append(
            {
                "resourceType": "Encounter",
                "id": f"{pid}-e{j}",
                "status": "finished",
                "subject": subject,
                "class": {"system": "http://terminology.hl7.org/CodeSystem/v3-ActCode", "code": "AMB"},
                "reasonCode": [{"text": rng.choice(REASONS)}],
            }
        )
    return {"resourceType": "Bundle", "type": "collection", "entry": [{"resource": r} for r in resources]}


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s" if seconds > 0 else "inf"


def clinical(
    patients: Annotated[int, typer.Option(help="Patients in the generated population.")] = 200,
    seed: Annotated[int, typer.Option(help="Population seed (same seed, same bundles).")] = 7,
    repeat: Annotated[int, typer.Option(help="Timed passes over the population (best is reported).")] = 3,
    through_kafka: Annotated[
        bool,
        typer.Option(help="Also measure through the broker and running workers (clingate worker)."),
    ] = False,
) -> None:
    """Benchmark FHIR parsing, in-process assessment and the pure stream path of the clinical gates."""
    from processors.clinical.assess import assess, process_event, process_event_reusing
    from processors.clinical.fhir_input import parse_document
    from processors.clinical.knowledge import load_knowledge
    from processors.clinical.state import PatientUpdate, reduce_update

    rng = random.Random(seed)
    bundles = [_patient_bundle(rng, i) for i in range(patients)]
    resources = sum(len(b["entry"]) for b in bundles)
    started = time.perf_counter()
    knowledge = load_knowledge()
    load_s = time.perf_counter() - started

    def best(fn: Any) -> float:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    parsed = [parse_document(json.loads(json.dumps(b))) for b in bundles]  # warm-up (model compilation)
    parse_s = best(lambda: [parse_document(b) for b in bundles])
    states = [
        reduce_update(None, PatientUpdate(patient_id=pid, changes=tuple(ch)), AS_OF)[0]
        for p in parsed
        for pid, ch in p.changes.items()
    ]
    assess_s = best(lambda: [assess(s, AS_OF, None, knowledge) for s in states])
    events = [
        [PatientUpdate(patient_id=pid, changes=(c,)) for pid, ch in p.changes.items() for c in ch]
        for p in parsed
    ]

    def stream() -> None:
        for patient_events in events:
            state = None
            for event in patient_events:
                state, _ = process_event(state, event, AS_OF, knowledge)

    def incremental() -> None:
        for patient_events in events:
            state, parts = None, None
            for event in patient_events:
                state, _, parts = process_event_reusing(state, parts, event, AS_OF, knowledge)

    stream_s = best(stream)
    incremental_s = best(incremental)
    per_patient = resources / patients
    typer.echo(f"population: {patients} patients, {resources} resources ({per_patient:.1f}/patient)")
    typer.echo(f"seed: {seed}")
    typer.echo(f"knowledge load (once): {load_s:.2f} s")
    typer.echo(
        f"FHIR parse+validate: {_rate(patients, parse_s)} bundles, {_rate(resources, parse_s)} resources "
        f"({1000 * parse_s / resources:.2f} ms/resource)"
    )
    each_ms = 1000 * assess_s / len(states)
    typer.echo(f"assessment (in process): {_rate(len(states), assess_s)} assessments ({each_ms:.2f} ms each)")
    typer.echo(f"stream path (one resource per event, re-assess each): {_rate(resources, stream_s)} events")
    typer.echo(
        f"  incrementally (what its resource does not feed taken over): {_rate(resources, incremental_s)}"
    )
    if through_kafka:
        from streams.local.bootstrap import require_bootstrap
        from streams.runtime.settings import get_settings

        bootstrap = require_bootstrap(get_settings())
        rate, seconds, updates, expected = through_kafka_rate(bootstrap, patients, seed, knowledge)
        typer.echo(
            f"through the stream (broker + workers): {rate:,.0f} FHIR updates/s "
            f"({updates} updates, {expected} assessments in {seconds:.1f} s)"
        )


def through_kafka_rate(
    bootstrap: str, patients: int, seed: int, knowledge: Any
) -> tuple[float, float, int, int]:
    """The seeded population under fresh patient ids through ``bootstrap`` and the running workers:
    (FHIR updates/s, seconds, updates, assessments awaited)."""
    run = uuid.uuid4().hex[:8]
    rng = random.Random(seed)
    fresh = [_patient_bundle(rng, i, f"bench-{run}") for i in range(patients)]
    updates, expected = _stream_events(fresh, knowledge)
    rate, seconds = _through_kafka(bootstrap, updates, expected)
    return rate, seconds, len(updates), expected


def _stream_events(bundles: list[dict[str, Any]], knowledge: Any) -> tuple[list[Any], int]:
    """One FHIR update per resource, and the number of assessments the stream emits for them."""
    from processors.clinical.assess import process_event
    from schemas.clinical import ClinicalAssessment
    from schemas.fhir import FhirUpdate
    from streams.worker.clinical import fhir_input

    updates = []
    expected = 0
    for bundle in bundles:
        patient = bundle["entry"][0]["resource"]["id"]
        state = None
        for entry in bundle["entry"]:
            resource = entry["resource"]
            update = FhirUpdate(
                ts=AS_OF, patient_id=patient, resource_type=resource["resourceType"],
                resource=json.dumps(resource),
            )  # fmt: skip
            updates.append(update)
            change, _ = fhir_input(update)
            if change is not None:
                state, outputs = process_event(state, change, AS_OF, knowledge)
                expected += sum(isinstance(o, ClinicalAssessment) for o in outputs)
    return updates, expected


def _through_kafka(
    bootstrap: str, updates: list[Any], expected: int, timeout_s: float = 600.0
) -> tuple[float, float]:
    """Produce ``updates``, consume until ``expected`` of their assessments arrived: (updates/s, seconds)."""
    from confluent_kafka import Producer

    from schemas.wire import make_serde
    from streams.runtime.kafka_clients import assign_at_ends, reader
    from streams.runtime.settings import get_settings
    from topics.catalog import CLINICAL_ASSESSMENTS, FHIR_UPDATES

    serde = make_serde(get_settings().schema_registry_url)
    patients = {u.patient_id.encode() for u in updates}
    consumer = reader(bootstrap, "bench")
    assign_at_ends(consumer, [CLINICAL_ASSESSMENTS])
    producer = Producer(
        producer_config(bootstrap, **{"linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    )
    try:
        started = time.perf_counter()
        for update in updates:
            value = serde.encode(update, topic=FHIR_UPDATES)
            producer.produce(FHIR_UPDATES, key=update.patient_id.encode(), value=value)
            producer.poll(0)
        producer.flush(60)
        received = 0
        while received < expected:
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(
                    f"only {received} of {expected} assessments in {timeout_s:.0f} s: workers?"
                )
            for message in consumer.consume(num_messages=10_000, timeout=0.1):
                received += message.error() is None and message.key() in patients
        seconds = time.perf_counter() - started
    finally:
        consumer.close()
    return len(updates) / seconds, seconds
