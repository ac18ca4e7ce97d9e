"""``clingate demo``: the README's main job, end to end on a real Kafka broker in a few minutes.

Steps (each prints what it did):

1. **Broker and topics.** ``KAFKA_BOOTSTRAP_SERVERS`` if set, else a native single-node KRaft broker
   in a temporary directory under ``CLINGATE_HOME`` (stopped at the end); ``ensure_topics`` over the
   catalog.
2. **Schemas.** One event of every registered top-level schema is encoded, produced to its catalog
   topic, read back at its exact offset and decoded (DeadLetter goes to a dead-letter topic).
3. **DBPM through Kafka.** A ``clingate worker`` subprocess (own app id, temporary data dir) gates a
   synthetic stream of ``--patients`` patients replayed with ``replay_via_kafka``; decisions per task,
   verifier calls saved (BLOCKs), channel population, QA lift with 95% CI, throughput, and a check
   that decisions and final memory equal the in-process engine's on the same stream.
4. **Clinical.** The four golden cases (with their published review inputs) and ``--clinical-patients``
   generated patients assessed in-process and published to ``clingate.clinical.assessments``.
5. **Docs.** The arbiter's example classifications verified rules-only; dispositions (and review
   packets of escalations) published.
6. **Dead letters.** Undecodable records sent to ``clingate.dbpm.candidates`` (the worker routes them)
   and to ``clingate.fhir.updates`` (routed here with the same DLQ step); DLQ counts per topic.
7. **Summary** and ``report.html``.

Choices recorded here:

* **Stream order.** The synthetic generator interleaves each candidate with its verdict; replayed
  through Kafka in lockstep, that is one broker round trip per candidate. The demo batches each
  patient stage instead, as a pipeline that verifies a stage's candidates together does: the stage's
  candidates first, stamped at the stage's first candidate time (a gate run waits for the memory to
  reach one watermark tick), then its verdicts, stamped at the stage's last candidate time (so
  event time never goes backwards). Both the worker and the in-process reference see this same stream.
* **Engine configuration.** The worker runs with cross-task propagation and maintenance off, the
  configuration in which the Faust runtime promises the in-process engine's decisions and state
  (docs/faust-runtime.md); the comparison in step 3 checks exactly that promise.
* **Counts on a shared broker.** With ``KAFKA_BOOTSTRAP_SERVERS`` the topics may hold other records;
  DLQ counts are the records added during this run (end offsets before and after).
* **Verifier calls saved** are the BLOCK decisions: a blocked candidate never reaches the verifier.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from schemas.base import AvroModel
from schemas.serde import Serde, make_serde
from streams import demo_report as report
from streams.broker import Broker, free_port, provide_broker
from streams.settings import Settings, get_settings
from topics.admin import admin_client, ensure_topics
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DOCS_DISPOSITIONS,
    DOCS_REVIEW_PACKETS,
    FHIR_UPDATES,
    Catalog,
    build_catalog,
    dlq_name,
)

app = typer.Typer(help="Run clingate end to end on a Kafka broker and write report.html.")

WORKER_FLAGS = {"CLINGATE_DBPM_CROSS_TASK": "false", "CLINGATE_DBPM_MAINTENANCE": "false"}
"""The worker's engine configuration (module docstring, "Engine configuration")."""

_SNAPSHOTS = 40
"""Points of the memory-population and severity charts along the stream."""


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where to look."""


# --------------------------------------------------------------------------------------- plumbing


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})


def _consumer(bootstrap: str, group: str | None = None) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"clingate-demo-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def _end_offsets(consumer: Consumer, topics: Sequence[str]) -> dict[str, int]:
    """Sum of the end offsets of each topic's partitions (a partition still electing its leader just
    after creation is waited out for 30 s by :func:`streams.kafka_replay.end_offset`)."""
    from streams.kafka_replay import end_offset

    try:
        metadata = consumer.list_topics(timeout=30).topics
        return {
            topic: sum(end_offset(consumer, topic, p) for p in metadata[topic].partitions) for topic in topics
        }
    except KafkaException as error:
        raise DemoError(f"end offsets of {list(topics)} unavailable for 30 s: {error}") from error


def _produce(producer: Producer, topic: str, key: bytes | None, value: bytes) -> tuple[int, int]:
    """Produce one record and wait for its delivery; returns ``(partition, offset)``."""
    delivered: list[Any] = []
    producer.produce(topic, key=key, value=value, on_delivery=lambda err, msg: delivered.append((err, msg)))
    producer.flush(30)
    if not delivered or delivered[0][0] is not None:
        raise DemoError(f"delivery to {topic} failed: {delivered[0][0] if delivered else 'timeout'}")
    message = delivered[0][1]
    return message.partition(), message.offset()


def _read_at(consumer: Consumer, topic: str, partition: int, offset: int) -> Any:
    """The record at ``topic/partition/offset``."""
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error() and message.offset() == offset:
            return message
    raise DemoError(f"record {topic}/{partition}@{offset} not readable within 30 s")


class WorkerProcess:
    """A ``clingate worker`` subprocess of its own app, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, bootstrap: str, app_id: str, datadir: Path) -> None:
        self.app_id = app_id
        self.datadir = datadir
        self.log = datadir.with_suffix(".log")
        self._env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "CLINGATE_APP_ID": app_id,
            **WORKER_FLAGS,
        }
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> WorkerProcess:
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-W",
                    "ignore",
                    "-m",
                    "streams.cli",
                    "worker",
                    "-l",
                    "info",
                    "--web-port",
                    str(free_port()),
                    "--datadir",
                    str(self.datadir),
                ],
                env=self._env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while b"[^Worker]: Ready" not in self.log.read_bytes():
            if self._process.poll() is not None:
                raise DemoError(f"the DBPM worker exited (code {self._process.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise DemoError(f"the DBPM worker was not ready within 120 s:\n{self.tail()}")
            time.sleep(0.2)
        return self

    def tail(self, lines: int = 20) -> str:
        """The last lines of the worker's log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def __exit__(self, *_exc: object) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


@contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so every ``finally`` (worker, broker) runs."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------------------------------ the results


@dataclass
class Results:
    """Everything the summary and the report show."""

    topics: list[tuple[str, int, str]] = field(default_factory=list)
    round_trips: list[tuple[str, str, int, bool]] = field(default_factory=list)
    dbpm: dict[str, Any] = field(default_factory=dict)
    golden: list[dict[str, Any]] = field(default_factory=list)
    lights: Counter[str] = field(default_factory=Counter)
    dispositions: list[tuple[str, str, str, int]] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ steps


def step_topics(console: Console, bootstrap: str, catalog: Catalog, results: Results) -> None:
    """Step 1: ensure the catalog's topics and print what was created and found."""
    reports = ensure_topics(admin_client(bootstrap), catalog)
    results.topics = [(r.spec.name, r.spec.partitions, r.outcome.value) for r in reports]
    outcomes = Counter(r.outcome.value for r in reports)
    table = Table("topic", "partitions", "outcome", title="topics", title_justify="left")
    for name, partitions, outcome in results.topics:
        table.add_row(name, str(partitions), outcome)
    console.print(table)
    console.print("  " + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())))


def schema_samples(assessment: AvroModel, request: AvroModel, finished: Any) -> list[AvroModel]:
    """One event per registered top-level schema, from the demo's own data where it has one."""
    from schemas.clinical import AdversarialReview, Deliverable
    from schemas.dbpm import Narrative
    from schemas.docs import GroundTruth, GroundTruthSource, Review, ReviewDecision
    from streams.bench.schemas import TS, samples

    disposition, packet = finished.disposition, finished.packet
    pid = assessment.patient_id  # type: ignore[attr-defined]
    deliverable = Deliverable(
        patient_id=pid,
        deliverable_id=f"{pid}-care-plan",
        event_time=TS.isoformat(),
        text="Hold digoxin; repeat level and potassium in 24 h.",
    )
    audit = _safety_audit(assessment, deliverable)
    return [
        *samples(),
        Narrative(ts=TS, patient_id="p-000123", text="Admitted with dyspnea; started on furosemide."),
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
        audit,
        request,
        disposition,
        *([packet] if packet is not None else []),
        Review(
            doc_id=disposition.doc_id,
            ts=disposition.ts,
            reviewer="sme-demo",
            decision=ReviewDecision.AGREES,
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


def _safety_audit(assessment: Any, deliverable: Any) -> AvroModel:
    from processors.clinical.fhir_input import parse_document
    from processors.clinical.knowledge import default_knowledge
    from processors.clinical.safety_patterns import audit_deliverable
    from processors.clinical.state import PatientUpdate, reduce_update
    from processors.clinical.view import PatientView
    from streams.demo_data import CLINICAL, GOLDEN_AS_OF

    when = datetime.fromisoformat(GOLDEN_AS_OF.replace("Z", "+00:00"))
    parsed = parse_document(json.loads((CLINICAL / f"{assessment.patient_id}.json").read_text("utf-8")))
    changes = tuple(parsed.changes[assessment.patient_id])
    state, _ = reduce_update(None, PatientUpdate(patient_id=assessment.patient_id, changes=changes), when)
    knowledge = default_knowledge()
    return audit_deliverable(assessment, PatientView(state, knowledge), deliverable, knowledge)


def step_schemas(
    console: Console,
    bootstrap: str,
    serde: Serde,
    catalog: Catalog,
    events: list[AvroModel],
    results: Results,
) -> None:
    """Step 2: encode, produce, read back and decode one event of each schema; print a table."""
    from schemas.registry import load_registry

    registry = load_registry()
    by_schema: dict[str, str] = {}
    for spec in catalog:  # the first declared topic of a schema is its home (Candidate: candidates)
        if not spec.name.endswith(".dlq"):
            by_schema.setdefault(spec.value_schema, spec.name)
    producer, consumer = _producer(bootstrap), _consumer(bootstrap)
    table = Table(
        "schema", "topic", "bytes", "round trip", title="one event per schema", title_justify="left"
    )
    try:
        for event in events:
            name = registry.for_model(type(event)).full_name
            topic = by_schema.get(name, dlq_name(FHIR_UPDATES))
            data = serde.encode(event, topic=topic)
            partition, offset = _produce(producer, topic, b"demo", data)
            message = _read_at(consumer, topic, partition, offset)
            ok = message.value() == data and serde.decode(message.value(), type(event), topic=topic) == event
            results.round_trips.append((name, topic, len(data), ok))
            table.add_row(name, topic, str(len(data)), "[green]OK[/]" if ok else "[red]FAILED[/]")
    finally:
        consumer.close()
    console.print(table)
    missing = {e.full_name for e in registry.events()} - {r[0] for r in results.round_trips}
    if missing or not all(r[3] for r in results.round_trips):
        raise DemoError(f"schema round trip failed (missing: {sorted(missing)})")


def demo_stream(patients: int, seed: int = 0) -> list[dict[str, Any]]:
    """The synthetic DBPM stream of ``patients`` patients, stage-batched (module docstring)."""
    from streams.bench.dbpm import StreamShape, generate_events

    seen: set[str] = set()
    events: list[dict[str, Any]] = []
    for event in generate_events(sys.maxsize, StreamShape(seed=seed)):
        seen.add(event["patient_id"])
        if len(seen) > patients:
            break
        events.append(event)
    stream: list[dict[str, Any]] = []
    for _, stage in groupby(events, key=lambda e: (e["patient_id"], e["task"])):
        batch = list(stage)
        first, last = min(e["ts"] for e in batch), max(e["ts"] for e in batch)
        stream += [{**e, "ts": first} for e in batch if e["kind"] == "gate"]
        stream += [{**e, "ts": last} for e in batch if e["kind"] == "verdict"]
    return stream


def _in_process(engine: Any, events: list[dict[str, Any]]) -> tuple[list[dict[str, object]], Any, list[Any]]:
    """Decisions and final state of the in-process engine, and snapshots along the stream."""
    from processors.dbpm import parse_event
    from state.memory import MemoryStore

    store = MemoryStore()
    decisions: list[dict[str, object]] = []
    snapshots: list[Any] = []
    every = max(1, len(events) // _SNAPSHOTS)
    for index, obj in enumerate(events, start=1):
        event = parse_event(obj)
        with store.transaction() as txn:
            _, out = engine.process(txn, event, event.time)
        decisions += [d.to_json() for d in out]
        if index % every == 0 or index == len(events):
            snapshots.append((event.time, engine.snapshot(store.transaction())))
    return decisions, engine.snapshot(store.transaction()), snapshots


def _measure(events: list[dict[str, Any]], decisions: list[dict[str, Any]]) -> tuple[Any, Counter[str]]:
    """Selectivity counts (gate decision paired with its verdict) and fail events per task."""
    from processors.dbpm.measurement import SelectivityTracker

    by_candidate = {d["candidate_id"]: d["decision"] for d in decisions}
    tracker = SelectivityTracker()
    for e in events:
        if e["kind"] == "gate":
            tracker.gate(e["task"], e["patient_id"], e["payload"], by_candidate[e["candidate_id"]])
        else:
            tracker.verdict(e["task"], e["patient_id"], e["payload"], e["verdict"], e["source"])
    return tracker.counts(), Counter(tracker.fail_events)


def _replay_with_progress(
    console: Console, bootstrap: str, events: list[dict[str, Any]], engine: Any, serde: Serde, app_id: str
) -> tuple[Any, float]:
    """``replay_via_kafka`` in a thread; a progress bar follows the decisions topic's end offsets."""
    from streams.kafka_replay import replay_via_kafka

    gates = sum(1 for e in events if e["kind"] == "gate")
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = replay_via_kafka(
                bootstrap, events, engine, serde, app_id, timeout_s=60.0
            )
        except BaseException as error:  # re-raised in the main thread
            outcome["error"] = error

    probe = _consumer(bootstrap)
    base = _end_offsets(probe, [DBPM_DECISIONS])[DBPM_DECISIONS]
    started = time.perf_counter()
    thread = threading.Thread(target=run, name="clingate-demo-replay", daemon=True)
    thread.start()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task(f"DBPM decisions via {DBPM_DECISIONS}", total=gates)
            while thread.is_alive():
                thread.join(0.5)
                done = _end_offsets(probe, [DBPM_DECISIONS])[DBPM_DECISIONS] - base
                progress.update(bar, completed=min(done, gates))
            progress.update(bar, completed=gates if "result" in outcome else progress.tasks[0].completed)
    finally:
        probe.close()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"], time.perf_counter() - started


def step_dbpm(
    console: Console, bootstrap: str, serde: Serde, patients: int, workdir: Path, results: Results
) -> None:
    """Step 3: DBPM through a worker, measured, compared with the in-process engine."""
    from processors.dbpm.measurement import channel_population
    from streams.app import dbpm_engines
    from streams.kafka_replay import commit_worker_end_offsets

    engine, _ = dbpm_engines(Settings(CLINGATE_DBPM_CROSS_TASK=False, CLINGATE_DBPM_MAINTENANCE=False))
    with console.status(f"generating the synthetic stream of {patients} patients"):
        events = demo_stream(patients)
    gates = sum(1 for e in events if e["kind"] == "gate")
    console.print(f"  stream: {patients} patients, {len(events):,} events ({gates:,} candidates)")
    app_id = f"clingate-demo-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(bootstrap, app_id)
    console.print("  starting a DBPM worker (clingate worker) ...")
    with WorkerProcess(bootstrap, app_id, workdir / app_id):
        console.print(f"  worker ready (app id {app_id})")
        result, wall = _replay_with_progress(console, bootstrap, events, engine, serde, app_id)
        state = result.state
        step_dead_letters_worker(console, bootstrap, results)
    with console.status("in-process reference run"):
        expected, expected_state, snapshots = _in_process(engine, events)
    contract = [{"candidate_id": d["candidate_id"], "decision": d["decision"]} for d in result.decisions]
    differing = sum(1 for a, b in zip(contract, expected, strict=True) if a != b)
    same = contract == expected and state == expected_state
    selectivity, fail_events = _measure(events, result.decisions)
    population = channel_population(state, engine.config, fail_events)
    per_task = Counter(
        (e["task"], d["decision"])
        for e, d in zip((e for e in events if e["kind"] == "gate"), result.decisions, strict=True)
    )
    results.dbpm.update(
        patients=patients,
        events=len(events),
        gates=gates,
        wall_s=wall,
        same=same,
        per_task=per_task,
        population=population,
        selectivity=selectivity,
        snapshots=snapshots,
        differing=differing,
        same_state=state == expected_state,
        blocks=sum(n for (_, d), n in per_task.items() if d == "BLOCK"),
    )
    _print_dbpm(console, results.dbpm)


def _print_dbpm(console: Console, dbpm: dict[str, Any]) -> None:
    table = Table("task", "ALLOW", "DOWNGRADE", "BLOCK", title="decisions per task", title_justify="left")
    for task in sorted({t for t, _ in dbpm["per_task"]}):
        table.add_row(task, *(str(dbpm["per_task"][(task, d)]) for d in ("ALLOW", "DOWNGRADE", "BLOCK")))
    console.print(table)
    console.print(f"  verifier calls saved (BLOCKs): {dbpm['blocks']:,} of {dbpm['gates']:,} candidates")
    console.print(dbpm["population"].render())
    lifts = Table("QA category", "pairs", "lift [95% CI]", title="QA lift per category", title_justify="left")
    for cell in dbpm["selectivity"].cells:
        if cell.task == "qa":
            counts = cell.counts
            lifts.add_row(cell.category, str(counts.fail_total + counts.pass_total), str(counts.lift()))
    console.print(lifts)
    rate = dbpm["events"] / dbpm["wall_s"]
    console.print(
        f"  throughput through Kafka: {dbpm['events']:,} events in {dbpm['wall_s']:.1f} s "
        f"({rate:,.0f} events/s, {dbpm['gates'] / dbpm['wall_s']:,.0f} candidates/s, lockstep replay)"
    )
    verdict = (
        "[green]equal[/]"
        if dbpm["same"]
        else (
            f"[red]DIFFERENT[/] ({dbpm['differing']} of {dbpm['gates']} decisions differ; "
            f"final memory {'equal' if dbpm['same_state'] else 'differs'})"
        )
    )
    console.print(f"  decisions and final memory vs the in-process engine: {verdict}")


def step_dead_letters_worker(console: Console, bootstrap: str, results: Results) -> None:
    """Step 6a: undecodable candidates, routed to the DLQ by the running worker."""
    producer = _producer(bootstrap)
    for value in (b'{"not": "avro"}', b"\x00\x01garbage"):
        _produce(producer, DBPM_CANDIDATES, b"p-demo-bad", value)
    console.print(f"  sent 2 undecodable records to {DBPM_CANDIDATES} (the worker dead-letters them)")
    consumer = _consumer(bootstrap)
    target = results.dead_letters.get("base", {}).get(dlq_name(DBPM_CANDIDATES), 0) + 2
    deadline = time.monotonic() + 30
    try:
        while _end_offsets(consumer, [dlq_name(DBPM_CANDIDATES)])[dlq_name(DBPM_CANDIDATES)] < target:
            if time.monotonic() > deadline:
                raise DemoError("the worker did not dead-letter the bad candidates within 30 s")
            time.sleep(0.2)
    finally:
        consumer.close()


def assessments(bundle: dict[str, Any], when: datetime, review: Any) -> list[Any]:
    """The in-process assessment of every patient of a FHIR bundle at ``when``."""
    from processors.clinical.assess import assess
    from processors.clinical.fhir_input import parse_document
    from processors.clinical.knowledge import default_knowledge
    from processors.clinical.state import PatientUpdate, reduce_update
    from streams.clinical import gate_flags

    knowledge, flags = default_knowledge(), gate_flags(get_settings())
    parsed = parse_document(bundle)
    out = []
    for pid in sorted(parsed.changes):
        update = PatientUpdate(patient_id=pid, changes=tuple(parsed.changes[pid]))
        state, _ = reduce_update(None, update, when)
        out.append(assess(state, when, review, knowledge, flags))
    return out


def step_clinical(console: Console, bootstrap: str, serde: Serde, generated: int, results: Results) -> None:
    """Step 4: golden cases and generated patients assessed and published."""
    from processors.clinical.traffic_light import ReviewInputs
    from streams.bench.clinical import AS_OF, _patient_bundle
    from streams.demo_data import CLINICAL, GOLDEN_AS_OF, GOLDEN_REVIEWS

    golden_when = datetime.fromisoformat(GOLDEN_AS_OF.replace("Z", "+00:00"))
    produced: list[Any] = []
    table = Table(
        "patient",
        "age",
        "NTI severity",
        "NTI drugs",
        "light",
        "shadow",
        "red sources",
        title="golden patients",
        title_justify="left",
    )
    for case, review in GOLDEN_REVIEWS.items():
        bundle = json.loads((CLINICAL / f"{case}.json").read_text("utf-8"))
        for a in assessments(bundle, golden_when, ReviewInputs(**review)):  # type: ignore[arg-type]
            produced.append(a)
            light = a.traffic_light
            results.golden.append(
                {
                    "patient": a.patient_id,
                    "age": a.age,
                    "severity": str(a.nti.severity),
                    "drugs": a.nti.drugs,
                    "light": str(light.light),
                    "shadow": str(light.shadow),
                    "sources": light.sources,
                }
            )
            table.add_row(
                a.patient_id,
                str(a.age),
                str(a.nti.severity),
                ", ".join(a.nti.drugs),
                str(light.light),
                str(light.shadow),
                "; ".join(light.sources),
            )
    console.print(table)
    rng = random.Random(0)
    for index in range(generated):
        produced += assessments(_patient_bundle(rng, index), AS_OF, None)
    producer = _producer(bootstrap)
    for a in produced:
        producer.produce(
            CLINICAL_ASSESSMENTS, key=a.patient_id.encode(), value=serde.encode(a, topic=CLINICAL_ASSESSMENTS)
        )
        producer.poll(0)
    if producer.flush(30):
        raise DemoError(f"assessments not delivered to {CLINICAL_ASSESSMENTS}")
    results.lights = Counter(str(a.traffic_light.light) for a in produced)
    distribution = _lights(results.lights)
    console.print(
        f"  {len(produced)} assessments published to {CLINICAL_ASSESSMENTS}; lights: {distribution}"
    )


def verify_example(case: str) -> tuple[Any, Any]:
    """A docs example as a request, and the arbiter's rules-only outcome for it."""
    from processors.docs.arbiter import ArbiterConfig, run
    from processors.docs.v3 import load_trap_rules
    from schemas.docs import ClassificationOutput, ClassificationRequest, DocumentBundle
    from streams.demo_data import DOCS, DOCS_EXAMPLES

    classification, bundle_name = DOCS_EXAMPLES[case]
    config = ArbiterConfig(trap_rules=load_trap_rules(get_settings().docs_trap_rules), llm_enabled=False)
    bundle = DocumentBundle.model_validate_json((DOCS / f"{bundle_name}.json").read_bytes())
    output = ClassificationOutput.model_validate_json((DOCS / f"{classification}.json").read_bytes())
    when = datetime.fromisoformat(bundle.processing_timestamp.replace("Z", "+00:00"))
    request = ClassificationRequest(
        doc_id=f"{bundle.doc_id}-{case}",
        ts=when,
        classification=output,
        bundle=bundle,
    )
    return request, run(request, config)


def _escalated_document() -> tuple[Any, Any]:
    return verify_example("fabricated")


def _golden_assessment() -> Any:
    from processors.clinical.traffic_light import ReviewInputs
    from streams.demo_data import CLINICAL, GOLDEN_AS_OF, GOLDEN_REVIEWS

    bundle = json.loads((CLINICAL / "PT-TEST-010.json").read_text("utf-8"))
    when = datetime.fromisoformat(GOLDEN_AS_OF.replace("Z", "+00:00"))
    return assessments(bundle, when, ReviewInputs(**GOLDEN_REVIEWS["PT-TEST-010"]))[0]  # type: ignore[arg-type]


def step_docs(console: Console, bootstrap: str, serde: Serde, results: Results) -> None:
    """Step 5: the arbiter's examples verified rules-only; dispositions (and packets) published."""
    from streams.demo_data import DOCS_EXAMPLES

    producer = _producer(bootstrap)
    table = Table(
        "case",
        "document",
        "decision",
        "rule",
        "issues",
        title="classification arbiter (rules-only)",
        title_justify="left",
    )
    for case in DOCS_EXAMPLES:
        _, finished = verify_example(case)
        d = finished.disposition
        producer.produce(
            DOCS_DISPOSITIONS, key=d.doc_id.encode(), value=serde.encode(d, topic=DOCS_DISPOSITIONS)
        )
        if finished.packet is not None:
            producer.produce(
                DOCS_REVIEW_PACKETS,
                key=d.doc_id.encode(),
                value=serde.encode(finished.packet, topic=DOCS_REVIEW_PACKETS),
            )
        results.dispositions.append((case, str(d.decision), d.rule, len(d.issues)))
        table.add_row(case, d.doc_id, str(d.decision), d.rule, str(len(d.issues)))
    if producer.flush(30):
        raise DemoError(f"dispositions not delivered to {DOCS_DISPOSITIONS}")
    console.print(table)
    console.print(f"  {len(results.dispositions)} dispositions published to {DOCS_DISPOSITIONS}")


def step_dead_letters_fhir(console: Console, bootstrap: str, serde: Serde) -> None:
    """Step 6b: an undecodable FHIR update read back and routed with the DLQ step of streams.dlq."""
    from schemas.fhir import FhirUpdate
    from streams.dlq import DeadLetterRouter, SourceRecord

    producer = _producer(bootstrap)
    partition, offset = _produce(producer, FHIR_UPDATES, b"PT-DEMO", b'{"resourceType": "Observation"}')
    consumer = _consumer(bootstrap)
    try:
        message = _read_at(consumer, FHIR_UPDATES, partition, offset)
    finally:
        consumer.close()
    if DeadLetterRouter(producer, serde).route(SourceRecord.from_message(message), FhirUpdate) is not None:
        raise DemoError("a JSON record decoded as an Avro FhirUpdate")
    console.print(f"  sent 1 undecodable record to {FHIR_UPDATES}; the DLQ step routed it")


def dlq_counts(bootstrap: str, catalog: Catalog) -> dict[str, int]:
    """End offsets of every dead-letter topic of the catalog."""
    consumer = _consumer(bootstrap)
    try:
        return _end_offsets(consumer, [s.name for s in catalog if s.name.endswith(".dlq")])
    finally:
        consumer.close()


# ----------------------------------------------------------------------------------------- report


def write_report(path: Path, results: Results) -> None:
    """Write the self-contained report.html of the run."""
    dbpm = results.dbpm
    start = dbpm["snapshots"][0][0] if dbpm["snapshots"] else 0.0
    hours = [(t - start) / 3600 for t, _ in dbpm["snapshots"]]
    population = {
        side: [
            report.Series(
                task,
                [
                    (h, len(snap[side].get(task, [])))
                    for h, (_, snap) in zip(hours, dbpm["snapshots"], strict=True)
                ],
            )
            for task in ("ner", "re", "qa")
        ]
        for side in ("blocklist", "whitelist")
    }
    final = dbpm["snapshots"][-1][1] if dbpm["snapshots"] else {"blocklist": {}}
    ranked = sorted(
        (
            (p["severity"] * p["count"], task, p["signature"])
            for task, ps in final["blocklist"].items()
            for p in ps
        ),
        reverse=True,
    )[:5]
    trajectories = []
    for _, task, signature in ranked:
        points = []
        for h, (_, s) in zip(hours, dbpm["snapshots"], strict=True):
            found = [p["severity"] for p in s["blocklist"].get(task, []) if p["signature"] == signature]
            if found:
                points.append((h, found[0]))
        trajectories.append(report.Series(f"{task} {signature}", points))
    qa = [c for c in dbpm["selectivity"].cells if c.task == "qa"]
    bars = []
    for cell in qa:
        lift = cell.counts.lift()
        bars.append(report.Interval(cell.category, lift.value, lift.ci_low, lift.ci_high, str(lift)))
    lights = {k: results.lights[k] for k in ("RED", "YELLOW", "GREEN")}
    sections = [
        ("Summary", report.table(["measure", "value"], _summary_rows(results))),
        (
            "DBPM memory population",
            report.line_chart(
                "blocklist signatures held over event time", population["blocklist"], "patterns"
            )
            + report.line_chart(
                "whitelist signatures held over event time", population["whitelist"], "signatures"
            ),
        ),
        (
            "Severity trajectories",
            report.line_chart(
                "severity of the top 5 blocklist signatures (severity x count at the end)",
                trajectories,
                "severity",
            ),
        ),
        (
            "QA lift per category",
            report.interval_chart("lift with 95% CI (dashed: 1, no selectivity)", bars, "lift")
            + report.table(["category", "lift [95% CI]"], [(b.label, b.text) for b in bars]),
        ),
        (
            "Channel population",
            report.table(
                [
                    "task",
                    "fail events",
                    "patterns",
                    "BLOCK-clearing",
                    "DOWNGRADE band",
                    "whitelist",
                    "status",
                ],
                [
                    (
                        c.task,
                        c.fail_events,
                        c.patterns,
                        c.block_eligible,
                        c.downgrade_band,
                        c.whitelist,
                        c.status.value,
                    )
                    for c in dbpm["population"].channels
                ],
            ),
        ),
        (
            "Traffic lights",
            report.bar_chart("traffic-light distribution", lights, "patients")
            + report.table(
                ["patient", "age", "NTI", "drugs", "light", "shadow", "red sources"],
                [
                    (
                        g["patient"],
                        g["age"],
                        g["severity"],
                        ", ".join(g["drugs"]),
                        g["light"],
                        g["shadow"],
                        "; ".join(g["sources"]),
                    )
                    for g in results.golden
                ],
            ),
        ),
        ("Arbiter dispositions", report.table(["case", "decision", "rule", "issues"], results.dispositions)),
        (
            "Dead letters",
            report.table(["topic", "records added"], sorted(results.dead_letters["added"].items())),
        ),
        ("Schemas", report.table(["schema", "topic", "bytes", "round trip OK"], results.round_trips)),
    ]
    path.write_text(report.page("clingate demo report", sections), encoding="utf-8")


def _lights(lights: Counter[str]) -> str:
    return ", ".join(f"{light} {lights[light]}" for light in ("RED", "YELLOW", "GREEN"))


def _summary_rows(results: Results) -> list[tuple[str, str]]:
    dbpm = results.dbpm
    return [
        ("topics", ", ".join(f"{n} {o}" for o, n in sorted(Counter(t[2] for t in results.topics).items()))),
        ("schemas round-tripped", f"{sum(r[3] for r in results.round_trips)}/{len(results.round_trips)}"),
        (
            "DBPM patients / events / candidates",
            f"{dbpm['patients']} / {dbpm['events']:,} / {dbpm['gates']:,}",
        ),
        ("verifier calls saved (BLOCKs)", f"{dbpm['blocks']:,}"),
        ("DBPM throughput via Kafka", f"{dbpm['events'] / dbpm['wall_s']:,.0f} events/s"),
        ("Kafka decisions = in-process", "yes" if dbpm["same"] else "NO"),
        ("inert channels", ", ".join(dbpm["population"].inert_channels()) or "none"),
        ("clinical assessments", f"{sum(results.lights.values())}: " + _lights(results.lights)),
        ("docs dispositions", str(len(results.dispositions))),
        ("dead letters added", str(sum(results.dead_letters["added"].values()))),
        *((f"time: {k}", f"{v:.1f} s") for k, v in results.timings.items()),
    ]


# ---------------------------------------------------------------------------------------- command


@contextmanager
def _step(console: Console, results: Results, number: int, title: str) -> Iterator[None]:
    console.rule(f"[bold]{number}. {title}")
    started = time.perf_counter()
    yield
    results.timings[title] = time.perf_counter() - started


def _broker(stack: ExitStack, settings: Settings, console: Console) -> Broker:
    settings.home.mkdir(parents=True, exist_ok=True)
    directory = Path(
        stack.enter_context(tempfile.TemporaryDirectory(prefix="demo-broker-", dir=settings.home))
    )
    with console.status("starting the Kafka broker (first run: fetching the Kafka jars)"):
        broker = stack.enter_context(provide_broker(settings, directory))
    console.print(f"  broker: {broker.bootstrap} ({broker.origin})")
    return broker


def _run_steps(
    console: Console,
    settings: Settings,
    serde: Serde,
    catalog: Catalog,
    results: Results,
    patients: int,
    clinical_patients: int,
) -> None:
    """Steps 1-6; everything started here (broker, worker, temporary directories) is stopped on exit."""
    with _terminate_as_exit(), ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clingate-demo-")))
        try:
            with _step(console, results, 1, "broker and topics"):
                bootstrap = _broker(stack, settings, console).bootstrap
                step_topics(console, bootstrap, catalog, results)
                results.dead_letters["base"] = dlq_counts(bootstrap, catalog)
            with _step(console, results, 2, "one event of every schema"):
                events = schema_samples(_golden_assessment(), *_escalated_document())
                step_schemas(console, bootstrap, serde, catalog, events, results)
            with _step(console, results, 3, "DBPM through Kafka"):
                step_dbpm(console, bootstrap, serde, patients, workdir, results)
            with _step(console, results, 4, "clinical gates"):
                step_clinical(console, bootstrap, serde, clinical_patients, results)
            with _step(console, results, 5, "classification arbiter"):
                step_docs(console, bootstrap, serde, results)
            with _step(console, results, 6, "dead letters"):
                step_dead_letters_fhir(console, bootstrap, serde)
                after = dlq_counts(bootstrap, catalog)
                base = results.dead_letters["base"]
                results.dead_letters["added"] = {
                    t: n - base.get(t, 0) for t, n in after.items() if n > base.get(t, 0)
                }
                table = Table("dead-letter topic", "records added", title="DLQ counts", title_justify="left")
                for topic, count in sorted(results.dead_letters["added"].items()):
                    table.add_row(topic, str(count))
                console.print(table)
                console.print(f"  ({dlq_name(FHIR_UPDATES)} also holds the DeadLetter sample of step 2)")
        except DemoError as error:
            console.print(f"[red]demo failed:[/] {error}")
            raise typer.Exit(1) from error


@app.callback(invoke_without_command=True)
def demo(
    patients: Annotated[int, typer.Option(min=1, help="Patients in the synthetic DBPM stream.")] = 150,
    clinical_patients: Annotated[
        int, typer.Option(min=0, help="Generated patients for the clinical gates.")
    ] = 100,
    report_path: Annotated[Path, typer.Option("--report", help="Where to write the HTML report.")] = Path(
        "report.html"
    ),
) -> None:
    """Run clingate end to end on Kafka (KAFKA_BOOTSTRAP_SERVERS, else a broker of its own) and report."""
    console = Console()
    settings = get_settings()
    serde = make_serde(settings.schema_registry_url)
    catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
    results = Results()
    started = time.perf_counter()
    try:
        _run_steps(console, settings, serde, catalog, results, patients, clinical_patients)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted:[/] the worker and broker this demo started are stopped")
        raise typer.Exit(130) from None
    results.timings["total"] = time.perf_counter() - started
    console.rule("[bold]7. summary")
    summary = Table("measure", "value", title="clingate demo summary", title_justify="left")
    for name, value in _summary_rows(results):
        summary.add_row(name, value)
    console.print(summary)
    write_report(report_path, results)
    console.print(f"report written to {report_path}")
