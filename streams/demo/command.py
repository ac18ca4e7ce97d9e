"""``clingate demo``: the main job of the README, the product end to end on a real Kafka broker.

Every part runs as the product runs it, as a process of its own reading and writing topics; the demo
only produces inputs and consumes outputs, as an upstream and a downstream system would.

Steps (each prints what it did):

1. **Broker and topics.** ``KAFKA_BOOTSTRAP_SERVERS`` if set, else a native single-node KRaft broker
   in a temporary directory under ``CLINGATE_HOME`` (stopped at the end); ``ensure_topics`` over the
   catalog.
2. **Schemas.** One event of every registered top-level schema is encoded, produced to its catalog
   topic, read back at its exact offset and decoded (DeadLetter goes to a dead-letter topic).
3. **The streams through the workers, all at once**, with a progress bar per stream:

   * processes started: ``clingate worker --role memory`` (DBPM memory agents, clinical agent) and
     ``clingate worker --role gate`` (the DBPM gate), ``clingate arbiter worker`` (arbiter), ``clingate
     generator`` and ``clingate verifier`` (the LLM groups, one member each), and, unless
     ``CLINGATE_LLM_URL`` (or ``CLINGATE_GENERATOR_URL``) names a server, the LLM test server of
     :mod:`streams.demo.llm`, whose answers play the synthetic ground truth;
   * DBPM: one narrative per patient of the synthetic stream of :mod:`streams.testing.dbpm_stream` (the
     paper's proportions) -> generator -> candidates -> gate -> to-verify -> verifier -> verdicts ->
     memory;
   * clinical: ``--clinical-patients`` generated patients whose FHIR records change over simulated
     weeks (:mod:`streams.demo.data.timeline`), then the four golden cases with their published
     review inputs, as ``FhirUpdate`` / ``AdversarialReview`` records; assessments consumed;
   * documents: ``--documents`` classification requests (copies of the arbiter examples, trap cases
     included); dispositions consumed.

4. **DBPM results**: decisions per task, verifier calls saved (BLOCKs), LLM work dead-lettered,
   channel population with the inert-blocklist check, QA lift with 95% CI per category, the check that
   the lockstep slice's decisions and memory equal the in-process engine's, and the bulk phase's
   throughput, latency and differences from the in-process engine (reported, not checked).
5. **Clinical results**: traffic lights at the end of every simulated week, golden and RED patients
   with NTI severity and red sources, and the check that each patient's last assessment equals the
   pure stream processor's.
6. **Arbiter results**: decision and rule per example, checked against the in-process arbiter (when
   rules-only).
7. **Dead letters**: undecodable records sent to ``clingate.dbpm.candidates`` (the worker routes them)
   and ``clingate.fhir.updates`` (routed here with the same DLQ step); DLQ counts per topic.
8. **A real model** (:mod:`streams.demo.model`): with the ``smollm2`` extra installed and no
   ``CLINGATE_LLM_URL``, ``--model-narratives`` narratives through the production client against
   SmolLM2, validity and latency per call; otherwise one line saying why not.
9. **Summary**, throughput and latency per stream (``streams.demo.tap``), and ``report.html``.

The exit code is 1 when a check fails (the summary's "checks" row names it), 130 on Ctrl-C; every
process the demo started is stopped in all cases (also on SIGTERM).

Choices recorded here:

* **The DBPM loop: a lockstep slice, then a bulk phase.** The first ``--lockstep`` patients run one
  at a time: the next narrative is produced only once every candidate of the previous one is decided,
  every candidate it let through has its verdict, and the memory agents have applied those verdicts
  (the memory changelog's group boundaries, followed by the tap). A gate then sees exactly the
  verdicts of the earlier patients, as the in-process engine does on the sequence "each patient's
  candidates, then their verdicts", so the decisions and the memory (read from the changelog at the
  end of the slice) are compared one for one: a check. The rest of the patients are then produced at
  once (the bulk phase), as an upstream with a backlog would send them; the groups bound their own
  work in flight (``CLINGATE_GENERATOR_MAX_IN_FLIGHT``, ``CLINGATE_VERIFIER_MAX_IN_FLIGHT``). Its
  decisions are compared with the in-process engine on the same sequence and the differences are
  reported, not failed: with many patients in flight a gate decides on the memory it has at that
  moment, which may already hold verdicts of later patients or not yet those of earlier ones. Bulk
  latency is from a narrative's production to the last output of its candidates, so it includes the
  queue of the backlog; throughput is patients and candidates per second of the phase.
* **Done, with failure.** A candidate whose verification was dead-lettered
  (``clingate.dbpm.to-verify.dlq``: the verifier's LLM calls failed), or that never came because its
  narrative was dead-lettered (``clingate.dbpm.narratives.dlq``: the generator published only the
  candidates of the calls that succeeded), counts as done and is reported; the loop never waits out
  its timeout for it, and the progress bars count it as done (saying how much was dead-lettered), so
  they reach their totals. The verdict check allows for them (verdicts = let through - dead-lettered).
* **Stream size.** The paper's proportions give about 49 candidates per patient through the loop (at
  most one QA answer per question template). ``--patients`` defaults to 2,000 (about 98,000
  candidates) with a lockstep slice of 40; every blocklist channel is populated from about 40 patients
  on. The memory agents and the gate run as two ``clingate worker`` processes (``--role memory``,
  ``--role gate``): in one process the memory agent, GIL-bound beside the gate thread, fell behind the
  verdicts. The verifier group has one member here (a second cost CPU on two cores and gained
  nothing; a deployment scales the group across machines). What a patient costs in every process,
  and the profiles behind these choices: docs/performance.md. Smaller runs: ``--patients 1000``.
* **Selectivity** (lift per QA category) pairs every gate decision with the candidate's planned
  verdict when the demo's responder plays the ground truth, so BLOCKed candidates are measured too;
  with a real model (``CLINGATE_LLM_URL``) only the verdicts the verifier published are paired.
* **Engine configuration.** The worker runs with cross-task propagation and maintenance off, the
  configuration in which the Kafka runtime promises the in-process engine's decisions and state
  (docs/faust-runtime.md); the comparison in step 4 checks exactly that promise.
* **Pacing.** FHIR updates (``--fhir-rate``) and classifications (``--docs-rate``) are produced at a
  fixed rate, as an upstream would send them, so their latency is processing time rather than the
  queue of a burst; 0 sends as fast as possible. The FHIR default, 20 updates/s, is below what the
  one worker sustained for bundles while it also gates the DBPM loop on a busy 2-core machine (about
  27/s measured; at 100/s the queue put p50 at 16 s) and still ends well before the loop.
* **Counts on a shared broker.** With ``KAFKA_BOOTSTRAP_SERVERS`` the topics may hold other records:
  every group of the run starts at the topics' current ends, the tap reads from the ends it found,
  and DLQ counts are the records added during this run.
* **Verifier calls saved** are the BLOCK decisions: a blocked candidate never reaches the verifier
  (checked: the verifier published exactly one verdict per candidate let through and not
  dead-lettered).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
from streams.bench.stats import percentile
from streams.demo import report
from streams.demo.data import DOCS_EXAMPLES
from streams.demo.llm import LoopPlan, loop_plan
from streams.demo.tap import Flow, Route, Tap
from streams.runtime.kafka_clients import end_offsets, producer, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings, get_settings
from streams.testing.broker import Broker, free_port, provide_broker
from streams.testing.process import ProcessError, ProcessHandle, python_module
from topics.admin import ensure_topics
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_REVIEWS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_REVIEWS,
    FHIR_UPDATES,
    Catalog,
    build_catalog,
    dlq_name,
)

app = typer.Typer(help="Run clingate end to end on a Kafka broker and write report.html.")

WORKER_FLAGS = {"CLINGATE_DBPM_CROSS_TASK": "false", "CLINGATE_DBPM_MAINTENANCE": "false"}
"""The worker's engine configuration (module docstring, "Engine configuration")."""

INERT_CHECK_MIN_PATIENTS = 50
"""Smallest DBPM stream whose inert blocklist channel fails the run. A tiny stream (the tests use three
patients) has too few fail events per signature to clear the BLOCK threshold, so its channels are
honestly inert; through the loop, the paper's proportions populate every channel from about 40
patients on (measured in process on the loop's sequence: 40, 60, 80 and 100 patients), so from 50 on
an inert one is a defect."""

STREAMS_TIMEOUT_S = 900.0
"""Longest the three streams may take together, plus :data:`STREAMS_TIMEOUT_PER_PATIENT_S` per DBPM
patient (a stuck DBPM gate run fails sooner, after 120 s per lockstep patient)."""

STREAMS_TIMEOUT_PER_PATIENT_S = 0.5
"""Allowance per DBPM patient on top of :data:`STREAMS_TIMEOUT_S`: a bulk phase of a few thousand
patients on a loaded 2-core machine runs at 3-4 patients/s (module docstring, "Stream size")."""

DEFAULT_PATIENTS = 2000
"""DBPM patients of a default run (module docstring, "Stream size")."""

DEFAULT_LOCKSTEP = 40
"""Patients of the default lockstep slice (module docstring, "The DBPM loop")."""

VERIFIERS = 1
"""Members of the demo's verifier group (module docstring, "Stream size")."""

_SNAPSHOTS = 40
"""Points of the memory-population and severity charts along the stream."""


def streams_timeout(patients: int) -> float:
    """Seconds the streams of a run with ``patients`` DBPM patients may take."""
    return STREAMS_TIMEOUT_S + STREAMS_TIMEOUT_PER_PATIENT_S * patients


class DemoError(RuntimeError):
    """A demo step failed; the message says which and where to look."""


# --------------------------------------------------------------------------------------- plumbing


def _producer(bootstrap: str) -> Producer:
    return producer(bootstrap, **{"linger.ms": 5})


def _consumer(bootstrap: str) -> Consumer:
    return reader(bootstrap, "demo", **{"auto.offset.reset": "earliest"})


def _end_offsets(consumer: Consumer, topics: Sequence[str]) -> dict[str, int]:
    """Sum of the end offsets of each topic's partitions (a partition still electing its leader just
    after creation is waited out for 30 s by :func:`streams.runtime.kafka_clients.end_offset`)."""
    try:
        return {topic: sum(end_offsets(consumer, topic).values()) for topic in topics}
    except KafkaException as error:
        raise DemoError(f"end offsets of {list(topics)} unavailable for 30 s: {error}") from error


def _produce_all(
    producer: Producer, records: Sequence[tuple[str, bytes | None, bytes]]
) -> list[tuple[int, int]]:
    """Produce ``(topic, key, value)`` records, wait for their delivery (one flush); their
    ``(partition, offset)`` in order."""
    delivered: list[tuple[Any, Any] | None] = [None] * len(records)

    def report(index: int) -> Callable[[Any, Any], None]:
        return lambda err, msg: delivered.__setitem__(index, (err, msg))

    for index, (topic, key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=report(index))
    producer.flush(30)
    coordinates = []
    for (topic, _, _), outcome in zip(records, delivered, strict=True):
        if outcome is None or outcome[0] is not None:
            raise DemoError(f"delivery to {topic} failed: {outcome[0] if outcome else 'timeout'}")
        coordinates.append((outcome[1].partition(), outcome[1].offset()))
    return coordinates


def _produce(producer: Producer, topic: str, key: bytes | None, value: bytes) -> tuple[int, int]:
    """Produce one record and wait for its delivery; returns ``(partition, offset)``."""
    return _produce_all(producer, [(topic, key, value)])[0]


def _read_all(consumer: Consumer, coordinates: Sequence[tuple[str, int, int]]) -> list[Any]:
    """The records at ``(topic, partition, offset)``, in order, fetched together (one assignment: a
    fresh assignment costs up to a second before its first fetch, so one per record added up)."""
    first: dict[tuple[str, int], int] = {}
    for topic, partition, offset in coordinates:  # one assignment per partition, from its lowest offset
        first[(topic, partition)] = min(offset, first.get((topic, partition), offset))
    consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in first.items()])
    wanted = set(coordinates)
    found: dict[tuple[str, int, int], Any] = {}
    deadline = time.monotonic() + 30
    while len(found) < len(wanted) and time.monotonic() < deadline:
        for message in consumer.consume(num_messages=100, timeout=0.2):
            coordinate = (message.topic(), message.partition(), message.offset())
            if not message.error() and coordinate in wanted:
                found[coordinate] = message
    missing = [c for c in coordinates if c not in found]
    if missing:
        topic, partition, offset = missing[0]
        raise DemoError(f"record {topic}/{partition}@{offset} not readable within 30 s")
    return [found[c] for c in coordinates]


def _read_at(consumer: Consumer, topic: str, partition: int, offset: int) -> Any:
    """The record at ``topic/partition/offset``."""
    return _read_all(consumer, [(topic, partition, offset)])[0]


class ServiceProcess:
    """A clingate subprocess (a worker of some group), stopped (SIGTERM, then SIGKILL) on exit.

    Args:
        name: what it is, for messages.
        args: the ``clingate`` command line after ``python -m streams.cli``.
        env: settings of this process on top of the demo's environment.
        bootstrap: the broker (``KAFKA_BOOTSTRAP_SERVERS``).
        log: file of its stdout and stderr.
        ready: log lines of which any says it is ready (none: ready once started).
        module: the Python module it runs.
    """

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        bootstrap: str,
        log: Path,
        ready: tuple[bytes, ...],
        module: str = "streams.cli",
    ) -> None:
        self.name = name
        self.log = log
        self._ready = ready
        self._process = ProcessHandle(
            name,
            python_module(module, *args),
            env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, **env},
            log=log,
            new_session=True,
        )

    def __enter__(self) -> ServiceProcess:
        self._process.start()
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the log says the process is ready.

        Raises:
            DemoError: it exited or was not ready within ``timeout_s``.
        """
        try:
            self._process.wait_for_output(*self._ready, timeout_s=timeout_s, poll_s=0.2)
        except ProcessError as error:
            self.check_running()  # it exited
            message = f"the {self.name} was not ready within {timeout_s:.0f} s:\n{self.tail()}"
            raise DemoError(message) from error

    def check_running(self) -> None:
        """Raise :class:`DemoError` (with its log's tail) if the process has exited: the streams would
        otherwise wait out their timeout for outputs it will never produce."""
        code = self._process.returncode
        if code is not None:
            raise DemoError(f"the {self.name} exited (code {code}):\n{self.tail()}")

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self._process.running

    def tail(self, lines: int = 20) -> str:
        """The last lines of the process's log."""
        return self._process.tail(lines)

    def terminate(self) -> None:
        """Ask the process to stop (SIGTERM) without waiting; :meth:`__exit__` waits for it."""
        self._process.terminate()

    def __exit__(self, *_exc: object) -> None:
        self._process.stop(grace_s=30)


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
    dispositions: list[tuple[str, int, str, str, int]] = field(default_factory=list)
    dead_letters: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    flows: dict[str, Flow] = field(default_factory=dict)
    lights_by_week: list[tuple[int, Counter[str], int]] = field(default_factory=list)
    red_patients: list[dict[str, Any]] = field(default_factory=list)
    clinical_same: bool = False
    loop: LoopRun | None = None
    dead: DeadLettered | None = None
    model_calls: list[Any] = field(default_factory=list)
    """The real-model step's calls (:class:`streams.demo.model.ProbeCall`)."""
    failed: list[str] = field(default_factory=list)
    """Checks that failed (the command then exits non-zero)."""


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
    from schemas.dbpm import Narrative, Propagation
    from schemas.docs import GroundTruth, GroundTruthSource, Review, ReviewDecision
    from streams.testing.schema_samples import TS, samples

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
    from streams.demo.data import CLINICAL, GOLDEN_AS_OF

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
    records = []
    for event in events:
        topic = by_schema.get(registry.for_model(type(event)).full_name, dlq_name(FHIR_UPDATES))
        records.append((topic, b"demo", serde.encode(event, topic=topic)))
    try:
        coordinates = _produce_all(producer, records)
        at = [(topic, p, o) for (topic, _, _), (p, o) in zip(records, coordinates, strict=True)]
        messages = _read_all(consumer, at)
    finally:
        consumer.close()
    for event, (topic, _, data), message in zip(events, records, messages, strict=True):
        name = registry.for_model(type(event)).full_name
        ok = message.value() == data and serde.decode(message.value(), type(event), topic=topic) == event
        results.round_trips.append((name, topic, len(data), ok))
        table.add_row(name, topic, str(len(data)), "[green]OK[/]" if ok else "[red]FAILED[/]")
    console.print(table)
    missing = {e.full_name for e in registry.events()} - {r[0] for r in results.round_trips}
    if missing or not all(r[3] for r in results.round_trips):
        raise DemoError(f"schema round trip failed (missing: {sorted(missing)})")


def demo_stream(patients: int, seed: int = 0) -> list[dict[str, Any]]:
    """The synthetic DBPM stream of ``patients`` patients, each stage's candidates stamped at its first
    candidate time and its verdicts at its last (event time never goes backwards); the plan of the
    loop (:func:`streams.demo.llm.loop_plan`) is built from it."""
    from streams.testing.dbpm_stream import StreamShape, generate_events

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


def _in_process(engine: Any, events: list[Any], mark: int) -> tuple[dict[str, str], Any, list[Any], Any]:
    """Decisions (by candidate id) and final state of the in-process engine, snapshots along the way,
    and the state after the first ``mark`` events (as of the last of them)."""
    from state.memory import MemoryStore

    store = MemoryStore()
    decisions: dict[str, str] = {}
    snapshots: list[Any] = []
    marked = engine.snapshot(store.transaction()) if mark == 0 else None
    every = max(1, len(events) // _SNAPSHOTS)
    for index, event in enumerate(events, start=1):
        with store.transaction() as txn:
            _, out = engine.process(txn, event, event.time)
        decisions.update((d.candidate_id, d.decision) for d in out)
        if index % every == 0 or index == len(events):
            snapshots.append((event.time, engine.snapshot(store.transaction())))
        if index == mark:
            marked = engine.snapshot(store.transaction())
    return decisions, engine.snapshot(store.transaction()), snapshots, marked


def loop_reference(loop: LoopPlan, emitted: dict[str, list[Any]], verdicts: dict[str, Any]) -> list[Any]:
    """The loop's events as the in-process engine sees them: per narrative, its candidates' gate events
    in the generator's order, then the verdicts the verifier published for them, in the same order."""
    from streams.worker.dbpm import contract_event

    events: list[Any] = []
    for narrative in loop.narratives:
        found = emitted.get(narrative.patient_id, [])
        events += [contract_event(c) for c in found]
        events += [contract_event(verdicts[c.candidate_id]) for c in found if c.candidate_id in verdicts]
    return events


def _measure(
    loop: LoopPlan,
    emitted: dict[str, list[Any]],
    decisions: dict[str, str],
    verdicts: dict[str, Any],
    truth: bool,
) -> tuple[Any, Counter[str]]:
    """Selectivity counts and the fail events the memory consumed, per task.

    Selectivity pairs each gate decision with the candidate's verdict: the planned (ground-truth)
    verdict when the responder plays the synthetic stream (``truth``), so BLOCKed candidates, which
    the verifier never sees, are measured too; else the verdicts the verifier published.
    """
    from processors.dbpm.measurement import SelectivityTracker

    measured, consumed = SelectivityTracker(), SelectivityTracker()
    for found in emitted.values():
        for c in found:
            payload = c.payload.model_dump(mode="json", exclude_none=True)
            decision = decisions[c.candidate_id]
            measured.gate(c.task, c.patient_id, payload, decision)
            consumed.gate(c.task, c.patient_id, payload, decision)
            verdict = verdicts.get(c.candidate_id)
            if verdict is not None:
                consumed.verdict(c.task, c.patient_id, payload, verdict.verdict, verdict.source)
            label = loop.truth[c.candidate_id] if truth else (verdict.verdict if verdict else None)
            if label is not None:
                measured.verdict(c.task, c.patient_id, payload, label, "verifier_mmed")
    return measured.counts(), Counter(consumed.fail_events)


@dataclass
class Plan:
    """The inputs of one run, built before anything is produced, with the in-process expectations."""

    dbpm_patients: int
    lockstep: int
    """Patients of the lockstep slice (the first ones); the rest run in the bulk phase."""
    loop: LoopPlan
    llm_url: str | None
    """The LLM server the user configured for the loop (None: the demo runs its own test server)."""
    fhir: list[Any]
    golden: list[tuple[Any, Any]]
    clinical_expected: dict[str, Any]
    clinical_outputs: int
    documents: list[tuple[str, Any, Any]]
    docs_rules_only: bool

    @property
    def gates(self) -> int:
        """Candidates the generator emits for the narratives (with the demo's responder)."""
        return sum(len(c) for c in self.loop.candidates.values())


def _utc_iso(when: datetime | str) -> str:
    moment = datetime.fromisoformat(when.replace("Z", "+00:00")) if isinstance(when, str) else when
    return moment.astimezone(UTC).isoformat()


def clinical_inputs(generated: int) -> tuple[list[Any], list[tuple[Any, Any]]]:
    """The FHIR updates of the generated timeline, and the golden cases' (bundle update, review) pairs."""
    from schemas.clinical import AdversarialReview
    from schemas.fhir import FhirUpdate
    from streams.demo.data import CLINICAL, GOLDEN_AS_OF, GOLDEN_REVIEWS
    from streams.demo.data.timeline import fhir_timeline

    fhir = [
        FhirUpdate(ts=u.ts, patient_id=u.patient_id, resource_type="Bundle", resource=u.resource_json())
        for u in fhir_timeline(generated)
    ]
    when = datetime.fromisoformat(GOLDEN_AS_OF.replace("Z", "+00:00"))
    golden = []
    for case, review in GOLDEN_REVIEWS.items():
        update = FhirUpdate(
            ts=when, patient_id=case, resource_type="Bundle",
            resource=(CLINICAL / f"{case}.json").read_text("utf-8"),
        )  # fmt: skip
        golden.append((update, AdversarialReview(
            patient_id=case, review_id=f"{case}-demo-review", event_time=when, **review,  # type: ignore[arg-type]
        )))  # fmt: skip
    return fhir, golden


def clinical_reference(fhir: list[Any], golden: list[tuple[Any, Any]]) -> tuple[dict[str, Any], int]:
    """The pure stream processor over the same events: each patient's final assessment, and the count."""
    from processors.clinical.assess import process_event
    from processors.clinical.knowledge import default_knowledge
    from schemas.clinical import ClinicalAssessment
    from streams.worker.clinical import fhir_input, gate_flags

    knowledge, flags = default_knowledge(), gate_flags(get_settings())
    states: dict[str, Any] = {}
    final: dict[str, Any] = {}
    count = 0
    events = [*fhir, *(u for u, _ in golden), *(r for _, r in golden)]
    for event in events:
        if hasattr(event, "resource"):
            item, now = fhir_input(event)[0], event.ts
        else:
            item, now = event, event.event_time
        if item is None:
            continue
        states[event.patient_id], outputs = process_event(
            states.get(event.patient_id), item, now, knowledge, flags
        )
        for out in outputs:
            if isinstance(out, ClinicalAssessment):
                final[out.patient_id] = out
                count += 1
    return final, count


def docs_inputs(copies: int) -> list[tuple[str, Any, Any]]:
    """``copies`` of every arbiter example as (case, request with its own doc id, rules-only outcome)."""
    documents = []
    for case in DOCS_EXAMPLES:
        request, finished = verify_example(case)
        for copy in range(copies):
            doc_id = f"{request.doc_id}-{copy:03d}"
            documents.append((case, request.model_copy(update={"doc_id": doc_id}), finished))
    return documents


def build_plan(
    patients: int, lockstep: int, clinical_patients: int, documents: int, console: Console
) -> Plan:
    """Every input of the run and the in-process expectations the streams are checked against."""
    from streams.groups.arbiter_calls import LLM_ROLE
    from streams.llm.config import resolve_role

    settings = get_settings()
    with console.status("building the inputs and the in-process expectations"):
        loop = loop_plan(demo_stream(patients))
        fhir, golden = clinical_inputs(clinical_patients)
        expected, outputs = clinical_reference(fhir, golden)
        docs = docs_inputs(max(1, -(-documents // len(DOCS_EXAMPLES))))
    return Plan(
        dbpm_patients=patients, lockstep=min(lockstep, len(loop.narratives)), loop=loop,
        llm_url=settings.generator_url or settings.llm_url,
        fhir=fhir, golden=golden, clinical_expected=expected, clinical_outputs=outputs, documents=docs,
        docs_rules_only=resolve_role(settings, LLM_ROLE).endpoint is None,
    )  # fmt: skip


def _paced(items: Sequence[Any], rate: float, send: Any, producer: Producer) -> None:
    """Call ``send`` for each item at ``rate`` items per second (0: as fast as possible)."""
    started = time.perf_counter()
    for index, item in enumerate(items):
        if rate > 0:
            delay = started + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        send(item)
        producer.poll(0)


def feed_clinical(bootstrap: str, serde: Serde, plan: Plan, rate: float) -> None:
    """Produce the FHIR timeline (paced), then the golden bundles, then their reviews."""
    from streams.worker.dbpm import producer_config

    producer = Producer(producer_config(bootstrap, **{"linger.ms": 5}))

    def send(update: Any) -> None:
        value = serde.encode(update, topic=FHIR_UPDATES)
        producer.produce(FHIR_UPDATES, key=update.patient_id.encode(), value=value)

    _paced([*plan.fhir, *(u for u, _ in plan.golden)], rate, send, producer)
    if producer.flush(30):
        raise DemoError(f"FHIR updates not delivered to {FHIR_UPDATES}")
    for _, review in plan.golden:
        value = serde.encode(review, topic=CLINICAL_REVIEWS)
        producer.produce(CLINICAL_REVIEWS, key=review.patient_id.encode(), value=value)
    if producer.flush(30):
        raise DemoError(f"reviews not delivered to {CLINICAL_REVIEWS}")


def feed_docs(bootstrap: str, serde: Serde, plan: Plan, rate: float) -> None:
    """Produce the classification requests (paced)."""
    producer = _producer(bootstrap)

    def send(document: tuple[str, Any, Any]) -> None:
        request = document[1]
        value = serde.encode(request, topic=DOCS_CLASSIFICATIONS)
        producer.produce(DOCS_CLASSIFICATIONS, key=request.doc_id.encode(), value=value)

    _paced(plan.documents, rate, send, producer)
    if producer.flush(30):
        raise DemoError(f"classifications not delivered to {DOCS_CLASSIFICATIONS}")


def _clinical_id(value: Any) -> str:
    when = value.ts if hasattr(value, "ts") else value.as_of
    return f"{value.patient_id}|{_utc_iso(when)}"


def _routes(plan: Plan, flows: dict[str, Flow], dead: DeadLettered, serde: Serde) -> list[Route]:
    from schemas.clinical import ClinicalAssessment
    from schemas.common import DeadLetter
    from schemas.dbpm import Candidate, GateDecision, Narrative, Verdict
    from schemas.docs import ClassificationRequest, Disposition
    from schemas.fhir import FhirUpdate

    candidates = {c.candidate_id for found in plan.loop.candidates.values() for c in found}
    narrated = set(plan.loop.candidates)
    planned = plan.llm_url is None  # else the model's candidates: any of the narrated patients
    patients = set(plan.clinical_expected)
    doc_ids = {request.doc_id for _, request, _ in plan.documents}

    def among(
        ids: set[str], ident: Callable[[Any], str], owner: Callable[[Any], str]
    ) -> Callable[[Any], str | None]:
        return lambda value: ident(value) if owner(value) in ids else None

    def candidate(value: Any) -> str:
        return value.candidate_id

    def patient(value: Any) -> str:
        return value.patient_id

    def document(value: Any) -> str:
        return value.doc_id

    in_run = among(candidates, candidate, candidate) if planned else among(narrated, candidate, patient)

    def failed_verification(letter: Any) -> str | None:
        try:
            return in_run(serde.decode(letter.value, GateDecision, topic=DBPM_TO_VERIFY).candidate)
        except Exception:  # a to-verify record that never decoded: not one of this run's
            return None

    def failed_narrative(letter: Any) -> str | None:
        try:
            narrative = serde.decode(letter.value, Narrative, topic=DBPM_NARRATIVES)
        except Exception:  # a narrative that never decoded: not one of this run's
            return None
        return narrative.patient_id if narrative.patient_id in narrated else None

    return [
        Route(DBPM_NARRATIVES, Narrative, flows["generator"], True, among(narrated, patient, patient)),
        Route(DBPM_CANDIDATES, Candidate, flows["generator"], False, among(narrated, patient, patient)),
        Route(DBPM_CANDIDATES, Candidate, flows["dbpm"], True, in_run),
        Route(DBPM_DECISIONS, GateDecision, flows["dbpm"], False, in_run),
        Route(DBPM_TO_VERIFY, GateDecision, flows["verifier"], True, in_run),
        Route(DBPM_VERDICTS, Verdict, flows["verifier"], False, in_run),
        Route(FHIR_UPDATES, FhirUpdate, flows["clinical"], True, among(patients, _clinical_id, patient)),
        Route(CLINICAL_ASSESSMENTS, ClinicalAssessment, flows["clinical"], False,
              among(patients, _clinical_id, patient)),
        Route(DOCS_CLASSIFICATIONS, ClassificationRequest, flows["docs"], True,
              among(doc_ids, document, document)),
        Route(DOCS_DISPOSITIONS, Disposition, flows["docs"], False, among(doc_ids, document, document)),
        Route(dlq_name(DBPM_TO_VERIFY), DeadLetter, dead.verifications, False, failed_verification),
        Route(dlq_name(DBPM_NARRATIVES), DeadLetter, dead.narratives, False, failed_narrative),
    ]  # fmt: skip


def _last_per_patient(outputs: Sequence[Any]) -> dict[str, Any]:
    return {a.patient_id: a for a in outputs}


class _Feeder(threading.Thread):
    """A stream's producer in a thread; its result or error is kept for the main thread."""

    def __init__(self, name: str, body: Callable[[], Any]) -> None:
        super().__init__(name=f"clingate-demo-{name}", daemon=True)
        self._body = body
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._body()
        except BaseException as error:  # re-raised in the main thread
            self.error = error


def emitted_candidates(plan: Plan, flows: dict[str, Flow]) -> dict[str, list[Any]]:
    """Per patient, the candidates of the loop in the generator's order: the planned ones when the
    demo's responder answers, else those the generator published (the model's)."""
    if plan.llm_url is None:
        return plan.loop.candidates
    emitted: dict[str, dict[str, Any]] = {}
    for c in list(flows["generator"].outputs):
        emitted.setdefault(c.patient_id, {}).setdefault(c.candidate_id, c)
    return {patient: list(found.values()) for patient, found in emitted.items()}


def _decisions(flow: Flow) -> dict[str, str]:
    return {cid: str(d.decision) for cid, d in list(flow.latest.items())}


@dataclass
class LoopRun:
    """What the DBPM feeder observed: the lockstep slice's memory, the bulk phase's timing, failures."""

    lockstep_state: Any = None
    """The memory read from its changelog once the lockstep slice was applied (None: no slice)."""
    lockstep_s: float = 0.0
    """Seconds the lockstep slice took (first narrative produced to last candidate done)."""
    bulk_started: float | None = None
    """Wall clock (``time.time``) when the bulk phase's narratives were produced (None: no bulk phase)."""
    bulk_finished: float | None = None
    """Wall clock when every bulk candidate was done (decided and verified, or dead-lettered)."""


@dataclass
class DeadLettered:
    """The loop's dead letters as the tap sees them: verifications and narratives whose LLM work failed."""

    verifications: Flow = field(default_factory=lambda: Flow("to-verify dead letters"))
    """Ids: candidate ids of ``clingate.dbpm.to-verify.dlq`` records."""
    narratives: Flow = field(default_factory=lambda: Flow("narrative dead letters"))
    """Ids: patient ids of ``clingate.dbpm.narratives.dlq`` records."""


def loop_pending(
    ids: Sequence[tuple[str, str]], flows: dict[str, Flow], tap: Tap, dead: DeadLettered
) -> list[tuple[str, str]]:
    """The (patient id, candidate id) pairs of ``ids`` whose candidate is not yet done.

    A candidate is done when it was decided and either BLOCKed, or its verdict was published and
    applied by the memory agents, or its verification was dead-lettered (a failure, counted); a
    candidate of a dead-lettered narrative that never came is done too (the generator published only
    the candidates of the calls that succeeded).
    """
    return [pair for pair in ids if _pending(pair, flows, tap, dead)]


def first_pending(
    ids: Sequence[tuple[str, str]], flows: dict[str, Flow], tap: Tap, dead: DeadLettered
) -> int:
    """The index of the first pair of ``ids`` not yet done (``len(ids)``: all done; see
    :func:`loop_pending`). Being done never reverts, so a wait drops the done prefix and checks again
    from the first pending pair: a check per second then costs what finished since the last one, not a
    walk over every pending candidate of the bulk phase (that walk was most of the demo's CPU)."""
    for index, pair in enumerate(ids):
        if _pending(pair, flows, tap, dead):
            return index
    return len(ids)


def _pending(pair: tuple[str, str], flows: dict[str, Flow], tap: Tap, dead: DeadLettered) -> bool:
    patient, cid = pair
    if cid not in flows["dbpm"].consumed:
        return patient not in dead.narratives.consumed
    found = flows["dbpm"].latest.get(cid)  # None: the tap is still taking the record in
    if found is None:
        return True
    if found.decision == "BLOCK" or cid in dead.verifications.consumed:
        return False
    verified = flows["verifier"].positions.get(cid)
    return verified is None or tap.applied.get(verified[0], -1) < verified[1]


def feed_loop(
    bootstrap: str,
    serde: Serde,
    plan: Plan,
    flows: dict[str, Flow],
    tap: Tap,
    dead: DeadLettered,
    engine: Any,
    groups: tuple[str, str],
    timeout_s: float = 120.0,
) -> LoopRun:
    """Produce the lockstep slice one patient at a time (the next narrative only once every candidate of
    the previous one is done: module docstring, "The DBPM loop"), read the memory, then produce the
    rest at once and wait until every candidate is done.

    Args:
        engine: an engine configured as the worker's (for reading the memory).
        groups: the worker's app id and the generator's group id.
    """
    from streams.replay.kafka import CommitWatcher, read_state
    from streams.worker.dbpm import memory_changelog, producer_config

    app_id, generator_group = groups
    run = LoopRun()
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 0}))
    narratives = plan.loop.narratives
    # The model's candidates are known once the generator committed their narrative and the tap read
    # what it published: one client for every wait (a client per wait cost ~45 ms a patient).
    generator = CommitWatcher(bootstrap, generator_group) if plan.llm_url is not None else None

    def send(batch: Sequence[Any]) -> None:
        for narrative in batch:
            value = serde.encode(narrative, topic=DBPM_NARRATIVES)
            producer.produce(DBPM_NARRATIVES, key=narrative.patient_id.encode(), value=value)
        if producer.flush(30):
            raise DemoError(f"narratives not delivered to {DBPM_NARRATIVES}")

    def wait_done(batch: Sequence[Any], limit_s: float) -> None:
        if generator is not None:
            generator.wait(DBPM_NARRATIVES, limit_s)
            tap.wait_read(DBPM_CANDIDATES, generator.ends(DBPM_CANDIDATES), limit_s)
        emitted = emitted_candidates(plan, flows)
        ids = [(c.patient_id, c.candidate_id) for n in batch for c in emitted.get(n.patient_id, [])]
        deadline = time.monotonic() + limit_s
        while ids:
            ids = ids[first_pending(ids, flows, tap, dead) :]
            if not ids:
                break
            if time.monotonic() > deadline:
                ids = loop_pending(ids, flows, tap, dead)
                raise DemoError(
                    f"{len(ids)} candidates of {len(batch)} narratives (first: {ids[0][1]}) not decided and "
                    f"verified (or dead-lettered) within {limit_s:.0f} s"
                )
            time.sleep(0.002 if len(batch) == 1 else 0.1)  # a check costs only what finished since the last

    try:
        started = time.perf_counter()
        for narrative in narratives[: plan.lockstep]:
            send([narrative])
            wait_done([narrative], timeout_s)
        run.lockstep_s = time.perf_counter() - started
        if plan.lockstep:
            as_of = narratives[plan.lockstep - 1].ts.timestamp()
            run.lockstep_state = read_state(bootstrap, memory_changelog(app_id), engine, as_of)
        bulk = narratives[plan.lockstep :]
        if bulk:
            run.bulk_started = time.time()
            send(bulk)
            wait_done(bulk, streams_timeout(len(narratives)))
            run.bulk_finished = time.time()
    finally:
        if generator is not None:
            generator.close()
    return run


@dataclass(frozen=True)
class LoopProgress:
    """Where one DBPM progress bar stands: work done (dead-lettered work included), its total, and how
    much of the done work was dead-lettered (None total: not known in advance, a real model's)."""

    done: int
    total: int | None
    dead_lettered: int


def loop_progress(plan: Plan, flows: dict[str, Flow], dead: DeadLettered) -> dict[str, LoopProgress]:
    """The DBPM bars (generator, gate, verifier), counting dead-lettered LLM work as done with failure,
    as the loop and the report do (module docstring, "Done, with failure").

    A planned candidate of a dead-lettered narrative that has not come (the generator published only
    the candidates of the calls that succeeded) is done for the generator and the gate bars; a
    dead-lettered verification is done for the verifier bar, whose total is the candidates let through
    (counted on ``clingate.dbpm.to-verify``, the verifier's input: no walk over every decision per tick).
    """
    planned = plan.llm_url is None
    never = (
        sum(
            1
            for patient in list(dead.narratives.consumed)
            for c in plan.loop.candidates.get(patient, [])
            if c.candidate_id not in flows["dbpm"].produced
        )
        if planned
        else 0
    )
    total = plan.gates if planned else None
    failed_narratives = len(dead.narratives.consumed)
    let_through = len(flows["verifier"].produced)  # the to-verify records: the gate's ALLOW and DOWNGRADE
    failed = len(dead.verifications.consumed)
    return {
        "generator": LoopProgress(len(flows["generator"].outputs) + never, total, failed_narratives),
        "dbpm": LoopProgress(len(flows["dbpm"].consumed) + never, total, failed_narratives),
        "verifier": LoopProgress(len(flows["verifier"].consumed) + failed, let_through, failed),
    }


def _stream_progress(
    console: Console,
    plan: Plan,
    flows: dict[str, Flow],
    dead: DeadLettered,
    feeders: list[_Feeder],
    tap: Tap,
    timeout_s: float,
    services: Sequence[ServiceProcess],
) -> None:
    """Progress bars per stream until every feeder finished and every expected output arrived; fails
    at once when one of ``services`` exited."""
    columns = (TextColumn("{task.description:<46}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    deadline = time.monotonic() + timeout_s

    def clinical_done() -> bool:
        last = _last_per_patient(flows["clinical"].outputs)
        return all(last.get(pid) == a for pid, a in plan.clinical_expected.items())

    titles = {
        "generator": f"candidates ({DBPM_CANDIDATES})",
        "dbpm": f"DBPM gate decisions ({DBPM_DECISIONS})",
        "verifier": f"verdicts on let-through ({DBPM_VERDICTS})",
    }
    failure = {"generator": "narratives", "dbpm": "narratives", "verifier": "verifications"}

    with Progress(*columns, console=console) as progress:
        bars = {
            **{name: progress.add_task(title, total=None) for name, title in titles.items()},
            "clinical": progress.add_task(
                f"assessments ({CLINICAL_ASSESSMENTS})", total=plan.clinical_outputs
            ),
            "docs": progress.add_task(f"documents ({DOCS_DISPOSITIONS})", total=len(plan.documents)),
        }  # fmt: skip
        while True:
            for name, at in loop_progress(plan, flows, dead).items():
                title = titles[name] + (
                    f" [{at.dead_lettered} {failure[name]} dead-lettered]" if at.dead_lettered else ""
                )
                progress.update(bars[name], completed=at.done, total=at.total, description=title)
            progress.update(bars["clinical"], completed=len(flows["clinical"].outputs))
            progress.update(bars["docs"], completed=len(flows["docs"].consumed))
            failed = [f for f in feeders if f.error is not None]
            if failed:
                raise failed[0].error  # type: ignore[misc]
            if tap.error is not None:
                raise DemoError(f"the demo's consumer failed: {tap.error}")
            for service in services:
                service.check_running()
            finished = not any(f.is_alive() for f in feeders)
            if finished and clinical_done() and len(flows["docs"].consumed) == len(plan.documents):
                break
            if time.monotonic() > deadline:
                state = {
                    "producers running": [f.name for f in feeders if f.is_alive()],
                    "patients without their final assessment": len(plan.clinical_expected)
                    - sum(1 for p, a in _last_per_patient(flows["clinical"].outputs).items()
                          if plan.clinical_expected.get(p) == a),
                    "documents without a disposition": len(plan.documents) - len(flows["docs"].consumed),
                }  # fmt: skip
                raise DemoError(f"streams not complete within {timeout_s:.0f} s: {state}")
            time.sleep(0.3)


def _llm_server(plan: Plan, workdir: Path, bootstrap: str) -> tuple[ServiceProcess | None, str]:
    """The loop's LLM server: the user's (``CLINGATE_LLM_URL``), else the demo's test server process."""
    if plan.llm_url is not None:
        return None, plan.llm_url
    script = workdir / "llm-script.json"
    plan.loop.write(script)
    server = ServiceProcess(
        "LLM test server (synthetic ground truth)", ["--script", str(script)], {}, bootstrap,
        workdir / "llm-server.log", (b"listening ",), module="streams.demo.llm",
    )  # fmt: skip
    return server, ""


def step_streams(
    console: Console,
    bootstrap: str,
    serde: Serde,
    plan: Plan,
    workdir: Path,
    rates: tuple[float, float],
    results: Results,
) -> tuple[Any, str]:
    """Step 3: the workers and groups started, the streams produced at once, their outputs consumed.

    Returns:
        The engine configured as the worker is, and the worker's app id.
    """
    from streams.llm.serve.testserver import DEFAULT_MODEL
    from streams.replay.kafka import commit_end_offsets, commit_worker_end_offsets, wait_until_consumed
    from streams.worker.dbpm import dbpm_engines, memory_changelog

    engine, _ = dbpm_engines(Settings(CLINGATE_DBPM_CROSS_TASK=False, CLINGATE_DBPM_MAINTENANCE=False))
    console.print(
        f"  DBPM: {plan.dbpm_patients} patients' narratives"
        + (f" ({plan.gates:,} candidates in the ground truth); " if plan.llm_url is None else "; ")
        + f"FHIR: {len({u.patient_id for u in plan.fhir})} generated + {len(plan.golden)} golden patients, "
        f"{len(plan.fhir) + len(plan.golden):,} updates over simulated weeks; "
        f"documents: {len(plan.documents)}"
    )
    app_id = f"clingate-demo-{uuid.uuid4().hex[:8]}"
    groups = {name: f"{app_id}-{name}" for name in ("docs", "generator", "verifier")}
    commit_worker_end_offsets(bootstrap, app_id)
    commit_end_offsets(bootstrap, groups["docs"], [DOCS_CLASSIFICATIONS, DOCS_REVIEWS])
    commit_end_offsets(bootstrap, groups["generator"], [DBPM_NARRATIVES])
    commit_end_offsets(bootstrap, groups["verifier"], [DBPM_TO_VERIFY, DBPM_DECISIONS])
    flows = {name: Flow(name) for name in ("generator", "dbpm", "verifier", "clinical", "docs")}
    flows["generator"].expected = flows["dbpm"].expected = plan.gates
    flows["clinical"].expected, flows["docs"].expected = plan.clinical_outputs, len(plan.documents)
    results.flows = flows
    results.dead = dead = DeadLettered()
    server, llm_url = _llm_server(plan, workdir, bootstrap)
    with ExitStack() as stack:
        if server is not None:
            stack.enter_context(server)
            with console.status("starting the LLM test server"):
                server.wait_ready()
            llm_url = server.log.read_text().split("listening ", 1)[1].split()[0]
        # The user's server: the groups read its settings from the environment they inherit.
        llm_env = {} if server is None else {"CLINGATE_LLM_URL": llm_url, "CLINGATE_LLM_MODEL": DEFAULT_MODEL}
        console.print(
            f"  LLM for the generator and verifier: {llm_url}"
            + (" (the demo's test server: answers play the synthetic ground truth)" if server else "")
        )
        services = [
            # The gate and the memory agents as two processes, a core each (module docstring,
            # "Stream size"): in one process the memory agent fell behind the verdicts.
            ServiceProcess(
                "DBPM memory + clinical worker (clingate worker --role memory)",
                ["worker", "--role", "memory", "-l", "info", "--web-port", str(free_port()),
                 "--datadir", str(workdir / app_id)],
                {"CLINGATE_APP_ID": app_id, **WORKER_FLAGS}, bootstrap, workdir / f"{app_id}.log",
                (b"[^Worker]: Ready",),
            ),
            ServiceProcess(
                "DBPM gate (clingate worker --role gate)",
                # Its own data directory: the gate keeps its view of the memory there and resumes it
                # (the default one may hold another app's view: wrong decisions from the start).
                ["worker", "--role", "gate", "--web-port", str(free_port()),
                 "--datadir", str(workdir / f"{app_id}-gate")],
                {"CLINGATE_APP_ID": app_id, **WORKER_FLAGS}, bootstrap, workdir / f"{app_id}-gate.log",
                (b"DBPM gate ready",),
            ),
            ServiceProcess(
                # A free metrics port, as for the groups: the default one may be taken (another demo,
                # a deployed docs worker), and the worker would exit.
                "arbiter (clingate arbiter worker)", ["arbiter", "worker", "--metrics-port", "0"],
                {"CLINGATE_DOCS_GROUP_ID": groups["docs"]},
                bootstrap, workdir / "docs.log", (b"rules-only", b"LLM phases on"),
            ),
            ServiceProcess(
                "generator group (clingate generator)", ["generator", "--metrics-port", "0"],
                {"CLINGATE_GENERATOR_GROUP_ID": groups["generator"], **llm_env}, bootstrap,
                workdir / "generator.log", (),
            ),
            *(ServiceProcess(
                f"verifier group member {member} (clingate verifier)", ["verifier", "--metrics-port", "0"],
                {"CLINGATE_VERIFIER_GROUP_ID": groups["verifier"], **llm_env}, bootstrap,
                workdir / f"verifier-{member}.log", (),
            ) for member in range(1, VERIFIERS + 1)),
        ]  # fmt: skip
        for service in services:
            stack.enter_context(service)

        def terminate_all() -> None:
            for process in (*services, *([server] if server is not None else [])):
                process.terminate()

        # Entered last, so it runs first on the way out: every process stops at once, and the exits
        # above then only wait (one after the other, each stop took seconds).
        stack.callback(terminate_all)
        with console.status("starting the workers and groups (worker, docs worker, generator, verifier)"):
            for service in services:
                service.wait_ready()
        tap = Tap(bootstrap, serde, _routes(plan, flows, dead, serde), changelog=memory_changelog(app_id))
        tap.start()
        stack.callback(tap.stop)
        console.print(f"  workers ready (app id {app_id}; groups {', '.join(groups.values())})")
        feeders = [
            _Feeder(
                "dbpm",
                lambda: feed_loop(
                    bootstrap, serde, plan, flows, tap, dead, engine, (app_id, groups["generator"])
                ),
            ),
            _Feeder("clinical", lambda: feed_clinical(bootstrap, serde, plan, rates[0])),
            _Feeder("docs", lambda: feed_docs(bootstrap, serde, plan, rates[1])),
        ]
        started = time.perf_counter()
        for feeder in feeders:
            feeder.start()
        try:
            _stream_progress(console, plan, flows, dead, feeders, tap,
                             timeout_s=streams_timeout(plan.dbpm_patients),
                             services=[*services, *([server] if server is not None else [])])  # fmt: skip
        except DemoError as error:
            tails = "\n".join(f"--- {s.name}, last lines:\n{s.tail(6)}" for s in services)
            raise DemoError(f"{error}\n{tails}") from error
        results.timings["streams (all at once)"] = time.perf_counter() - started
        results.loop = feeders[0].result
        with console.status("waiting for the memory agents to commit every verdict"):
            wait_until_consumed(bootstrap, app_id, DBPM_VERDICTS, 60.0)
        step_dead_letters_worker(console, bootstrap, results)
    return engine, app_id


def step_dbpm(
    console: Console, bootstrap: str, plan: Plan, engine: Any, app_id: str, results: Results
) -> None:
    """Step 4: the loop's results: decisions, memory, selectivity, the lockstep slice vs the in-process
    engine (a check), the bulk phase vs the in-process engine (reported), the bulk phase's figures."""
    from processors.dbpm.measurement import channel_population
    from streams.replay.kafka import read_state
    from streams.worker.dbpm import memory_changelog

    loop, run, dead = plan.loop, results.loop or LoopRun(), results.dead or DeadLettered()
    decisions = _decisions(results.flows["dbpm"])
    emitted = {
        patient: [c for c in found if c.candidate_id in decisions]
        for patient, found in emitted_candidates(plan, results.flows).items()
    }
    verdicts = {v.candidate_id: v for v in results.flows["verifier"].outputs}
    last_ts = loop.narratives[-1].ts.timestamp() if loop.narratives else None
    state = read_state(bootstrap, memory_changelog(app_id), engine, last_ts)
    lockstep_patients = [n.patient_id for n in loop.narratives[: plan.lockstep]]
    lockstep_ids = {c.candidate_id for p in lockstep_patients for c in emitted.get(p, [])}
    reference = loop_reference(loop, emitted, verdicts)
    mark = len(loop_reference(LoopPlan(narratives=loop.narratives[: plan.lockstep]), emitted, verdicts))
    with console.status("in-process reference run"):
        expected, expected_state, snapshots, mark_state = _in_process(engine, reference, mark)
    differing = Counter(
        (expected.get(cid), d)
        for cid, d in decisions.items()
        if cid in lockstep_ids and expected.get(cid) != d
    )
    bulk_differing = Counter(
        (expected.get(cid), d)
        for cid, d in decisions.items()
        if cid not in lockstep_ids and expected.get(cid) != d
    )
    same = not differing and (run.lockstep_state == mark_state if plan.lockstep else True)
    selectivity, fail_events = _measure(loop, emitted, decisions, verdicts, truth=plan.llm_url is None)
    population = channel_population(state, engine.config, fail_events)
    per_task = Counter((c.task, decisions[c.candidate_id]) for found in emitted.values() for c in found)
    let_through = sum(1 for d in decisions.values() if d != "BLOCK")
    failed_verifications, failed_narratives = len(dead.verifications.consumed), len(dead.narratives.consumed)
    results.dbpm.update(
        patients=plan.dbpm_patients, narratives=len(loop.narratives), gates=len(decisions), same=same,
        per_task=per_task, population=population, selectivity=selectivity, snapshots=snapshots,
        differing=sum(differing.values()), lockstep=plan.lockstep, lockstep_gates=len(lockstep_ids),
        same_state=run.lockstep_state == mark_state, verdicts=len(verdicts), lockstep_s=run.lockstep_s,
        blocks=sum(n for (_, d), n in per_task.items() if d == "BLOCK"), let_through=let_through,
        failed_verifications=failed_verifications, failed_narratives=failed_narratives,
        bulk=_bulk_figures(plan, results, lockstep_ids, decisions, bulk_differing, state == expected_state),
    )  # fmt: skip
    _print_dbpm(console, results.dbpm)
    if not same:
        results.failed.append("DBPM lockstep decisions or memory differ from the in-process engine")
    if len(verdicts) != let_through - failed_verifications:
        results.failed.append(
            f"{let_through} candidates let through, {failed_verifications} verifications dead-lettered, "
            f"but {len(verdicts)} verdicts"
        )
    if population.inert_channels() and plan.dbpm_patients >= INERT_CHECK_MIN_PATIENTS:
        results.failed.append(f"inert blocklist channels: {', '.join(population.inert_channels())}")


def _bulk_figures(
    plan: Plan,
    results: Results,
    lockstep_ids: set[str],
    decisions: dict[str, str],
    differing: Counter[tuple[str | None, str]],
    same_state: bool,
) -> dict[str, Any] | None:
    """The bulk phase: patients, candidates, BLOCKs, throughput, latency, and the in-process differences.

    Latency per patient runs from its narrative's production to the last of its candidates' outputs
    consumed (decision, or verdict when let through); per candidate, from its production to its
    decision consumed.
    """
    run = results.loop
    if run is None or run.bulk_started is None or run.bulk_finished is None:
        return None
    flows = results.flows
    bulk = [n.patient_id for n in plan.loop.narratives[plan.lockstep :]]
    ids = [cid for cid in decisions if cid not in lockstep_ids]
    outputs = {**flows["dbpm"].consumed}
    outputs.update(flows["verifier"].consumed)
    emitted = emitted_candidates(plan, flows)
    per_patient = []
    for patient in bulk:
        done = [outputs[c.candidate_id] for c in emitted.get(patient, []) if c.candidate_id in outputs]
        if done and patient in flows["generator"].produced:
            per_patient.append(max(done) - flows["generator"].produced[patient])
    per_candidate = [
        flows["dbpm"].consumed[c] - flows["dbpm"].produced[c]
        for c in ids if c in flows["dbpm"].produced
    ]  # fmt: skip
    span = run.bulk_finished - run.bulk_started
    return {
        "patients": len(bulk), "candidates": len(ids), "span": span,
        "blocks": sum(1 for c in ids if decisions[c] == "BLOCK"),
        "patients_per_s": len(bulk) / span if span > 0 else 0.0,
        "candidates_per_s": len(ids) / span if span > 0 else 0.0,
        "patient_p50": percentile(per_patient, 0.5), "patient_p99": percentile(per_patient, 0.99),
        "candidate_p50": percentile(per_candidate, 0.5), "candidate_p99": percentile(per_candidate, 0.99),
        "differing": differing, "same_state": same_state,
    }  # fmt: skip


def _print_dbpm(console: Console, dbpm: dict[str, Any]) -> None:
    table = Table("task", "ALLOW", "DOWNGRADE", "BLOCK", title="decisions per task", title_justify="left")
    for task in sorted({t for t, _ in dbpm["per_task"]}):
        table.add_row(task, *(str(dbpm["per_task"][(task, d)]) for d in ("ALLOW", "DOWNGRADE", "BLOCK")))
    console.print(table)
    console.print(
        f"  verifier calls saved (BLOCKs): {dbpm['blocks']:,} of {dbpm['gates']:,} candidates; "
        f"{dbpm['let_through']:,} let through, {dbpm['verdicts']:,} verdicts published by the verifier group"
    )
    console.print(
        f"  dead-lettered (LLM failures, done with failure): {dbpm['failed_verifications']} verifications, "
        f"{dbpm['failed_narratives']} narratives"
    )
    console.print(dbpm["population"].render())
    lifts = Table("QA category", "pairs", "lift [95% CI]", title="QA lift per category", title_justify="left")
    for cell in dbpm["selectivity"].cells:
        if cell.task == "qa":
            counts = cell.counts
            lifts.add_row(cell.category, str(counts.fail_total + counts.pass_total), str(counts.lift()))
    console.print(lifts)
    verdict = (
        "[green]equal[/]"
        if dbpm["same"]
        else (
            f"[red]DIFFERENT[/] ({dbpm['differing']} of {dbpm['lockstep_gates']} decisions differ; "
            f"memory {'equal' if dbpm['same_state'] else 'differs'})"
        )
    )
    console.print(
        f"  lockstep slice ({dbpm['lockstep']} patients, {dbpm['lockstep_gates']:,} candidates, one patient "
        f"at a time, {dbpm['lockstep_s']:.1f} s = {dbpm['lockstep_s'] / max(1, dbpm['lockstep']):.2f} s per "
        f"patient): decisions and memory vs the in-process engine: {verdict}"
    )
    bulk = dbpm["bulk"]
    if bulk is None:
        return
    console.print(
        f"  bulk phase ({bulk['patients']:,} patients in flight at once, {bulk['candidates']:,} candidates, "
        f"{bulk['blocks']:,} BLOCKed): {bulk['span']:.1f} s, {bulk['patients_per_s']:.1f} patients/s, "
        f"{bulk['candidates_per_s']:,.0f} candidates/s; latency p50 / p99 narrative -> last output "
        f"{bulk['patient_p50']:.1f} / {bulk['patient_p99']:.1f} s, candidate -> decision "
        f"{bulk['candidate_p50']:.2f} / {bulk['candidate_p99']:.2f} s"
    )
    changes = ", ".join(f"{a} -> {b}: {n}" for (a, b), n in sorted(bulk["differing"].items(), key=str))
    console.print(
        f"  bulk phase vs the in-process engine (reported, not checked): "
        f"{sum(bulk['differing'].values()):,} of {bulk['candidates']:,} decisions differ"
        + (f" ({changes})" if changes else "")
        + f"; final memory {'equal' if bulk['same_state'] else 'differs'}. With many patients in flight "
        "a gate decides on the memory it has at that moment, which may hold verdicts of later patients "
        "or lack those of earlier ones; the in-process engine applies each patient's verdicts before "
        "the next patient's candidates."
    )


def step_dead_letters_worker(console: Console, bootstrap: str, results: Results) -> None:
    """Undecodable candidates, routed to the DLQ by the running worker."""
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


def _golden_row(a: Any) -> dict[str, Any]:
    light = a.traffic_light
    return {
        "patient": a.patient_id,
        "age": a.age,
        "severity": str(a.nti.severity),
        "drugs": a.nti.drugs,
        "light": str(light.light),
        "shadow": str(light.shadow),
        "sources": light.sources,
    }


def step_clinical(console: Console, plan: Plan, results: Results) -> None:
    """Step 5: the assessments the worker published: lights over the weeks, per patient, vs in process."""
    from streams.demo.data.timeline import week_of

    flow = results.flows["clinical"]
    final = _last_per_patient(flow.outputs)
    by_week: dict[int, dict[str, str]] = {}
    for a in flow.outputs:
        by_week.setdefault(week_of(datetime.fromisoformat(a.as_of.replace("Z", "+00:00"))), {})[
            a.patient_id
        ] = str(a.traffic_light.light)
    current: dict[str, str] = {}
    weeks = Table("week", "RED", "YELLOW", "GREEN", "patients changed",
                  title="traffic lights at the end of each "
                  "simulated week", title_justify="left")  # fmt: skip
    for week in sorted(by_week):
        changed = sum(1 for pid, light in by_week[week].items() if current.get(pid, light) != light)
        current.update(by_week[week])
        counts = Counter(current.values())
        results.lights_by_week.append((week, counts, changed))
        weeks.add_row(str(week), *(str(counts[k]) for k in ("RED", "YELLOW", "GREEN")), str(changed))
    console.print(weeks)
    results.lights = Counter(str(a.traffic_light.light) for a in final.values())
    golden_ids = {u.patient_id for u, _ in plan.golden}
    red = [
        a for pid, a in sorted(final.items()) if pid not in golden_ids and str(a.traffic_light.light) == "RED"
    ]
    results.golden = [_golden_row(final[pid]) for pid in sorted(golden_ids) if pid in final]
    results.red_patients = [_golden_row(a) for a in red]
    table = Table(
        "patient",
        "age",
        "NTI severity",
        "NTI drugs",
        "light",
        "shadow",
        "red sources",
        title="golden patients, then generated patients whose light is RED (first 10)",
        title_justify="left",
    )
    for row in [*results.golden, *results.red_patients[:10]]:
        table.add_row(row["patient"], str(row["age"]), row["severity"], ", ".join(row["drugs"]), row["light"],
                      row["shadow"], "; ".join(row["sources"]))  # fmt: skip
    console.print(table)
    severities = Counter(str(a.nti.severity) for a in final.values())
    console.print(f"  final lights: {_lights(results.lights)}; NTI severities: "
                  + ", ".join(f"{k} {v}" for k, v in sorted(severities.items())))  # fmt: skip
    same = final == plan.clinical_expected
    results.clinical_same = same
    console.print(
        f"  {len(flow.outputs)} assessments from the worker; final assessment per patient vs the in-process "
        f"stream processor: {'[green]equal[/]' if same else '[red]DIFFERENT[/]'}"
    )
    if not same:
        results.failed.append("clinical assessments differ from the in-process stream processor")


def step_docs(console: Console, plan: Plan, results: Results) -> None:
    """Step 6: the dispositions the docs worker published, per example, vs the in-process arbiter."""
    flow = results.flows["docs"]
    by_doc = {d.doc_id: d for d in flow.outputs}
    table = Table("case", "documents", "decision", "rule", "issues", "= in process",
                  title="classification arbiter (clingate arbiter worker)", title_justify="left")  # fmt: skip
    mismatches = 0
    for case, group in groupby(plan.documents, key=lambda d: d[0]):
        docs = list(group)
        got = [by_doc[r.doc_id] for _, r, _ in docs]
        expected = docs[0][2].disposition
        want = (expected.decision, expected.rule, len(expected.issues))
        equal = all((d.decision, d.rule, len(d.issues)) == want
                    for d in got)  # fmt: skip
        mismatches += not equal
        first = got[0]
        results.dispositions.append((case, len(got), str(first.decision), first.rule, len(first.issues)))
        table.add_row(case, str(len(got)), str(first.decision), first.rule, str(len(first.issues)),
                      "yes" if equal else "[red]NO[/]")  # fmt: skip
    console.print(table)
    decisions = Counter(str(d.decision) for d in flow.outputs)
    console.print(
        f"  {len(flow.outputs)} dispositions: " + ", ".join(f"{k} {v}" for k, v in sorted(decisions.items()))
    )
    if plan.docs_rules_only and mismatches:
        results.failed.append(f"{mismatches} arbiter examples differ from the in-process arbiter")
    if not plan.docs_rules_only:
        console.print("  (the docs worker used the configured LLM; the in-process comparison is rules-only)")


def verify_example(case: str) -> tuple[Any, Any]:
    """A docs example as a request, and the arbiter's rules-only outcome for it."""
    from processors.docs.arbiter import ArbiterConfig, run
    from processors.docs.v3 import load_trap_rules
    from schemas.docs import ClassificationOutput, ClassificationRequest, DocumentBundle
    from streams.demo.data import DOCS

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
    from processors.clinical.assess import assess
    from processors.clinical.fhir_input import parse_document
    from processors.clinical.knowledge import default_knowledge
    from processors.clinical.state import PatientUpdate, reduce_update
    from processors.clinical.traffic_light import ReviewInputs
    from streams.demo.data import CLINICAL, GOLDEN_AS_OF, GOLDEN_REVIEWS
    from streams.worker.clinical import gate_flags

    when = datetime.fromisoformat(GOLDEN_AS_OF.replace("Z", "+00:00"))
    case = "PT-TEST-010"
    parsed = parse_document(json.loads((CLINICAL / f"{case}.json").read_text("utf-8")))
    state, _ = reduce_update(None, PatientUpdate(patient_id=case, changes=tuple(parsed.changes[case])), when)
    review = ReviewInputs(**GOLDEN_REVIEWS[case])  # type: ignore[arg-type]
    return assess(state, when, review, default_knowledge(), gate_flags(get_settings()))


def step_dead_letters_fhir(console: Console, bootstrap: str, serde: Serde) -> None:
    """Step 6b: an undecodable FHIR update read back and routed with the DLQ step of streams.runtime.dlq."""
    from schemas.fhir import FhirUpdate
    from streams.runtime.dlq import DeadLetterRouter, SourceRecord

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


def step_model(console: Console, plan: Plan, narratives: int, results: Results) -> None:
    """Step 8: a few narratives through the production client against SmolLM2 (:mod:`streams.demo.model`),
    when the ``smollm2`` extra is installed and no LLM server is configured; one line otherwise."""
    import importlib.util

    from streams.demo.model import probe
    from streams.testing.llm_server import ServerProcess, ServerProcessError

    if narratives == 0:
        console.print("  skipped (--model-narratives 0)")
        return
    if plan.llm_url is not None:
        console.print(f"  skipped: the loop already ran on the configured model ({plan.llm_url})")
        return
    if importlib.util.find_spec("llama_cpp") is None:
        console.print("  skipped: the smollm2 extra is not installed (`make smollm2` installs it)")
        return
    sent = plan.loop.narratives[:narratives]
    logging.getLogger("httpx").setLevel(logging.WARNING)  # an INFO line per request would break the table
    try:
        with console.status("starting SmolLM2 (clingate llm serve --backend smollm2)"):
            server = ServerProcess.start("smollm2")
    except ServerProcessError as error:
        console.print(f"  skipped: the SmolLM2 server did not start ({error})")
        return
    with (
        server,
        console.status(f"{len(sent)} narratives through the production client, one call at a time"),
    ):
        results.model_calls = probe(server.base_url, server.model, sent, plan.loop.candidates)
    table = Table("patient", "call", "outcome", "latency", "answer (not used)", title_justify="left",
                  title=f"real model: {server.model} behind the production client")  # fmt: skip
    for call in results.model_calls:
        table.add_row(
            call.patient_id, call.call_type, call.outcome, f"{call.latency_s:.1f} s", call.answer[:60]
        )
    console.print(table)
    console.print("  nothing depends on these answers being right; validity is the client's schema check")


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
            report.bar_chart("traffic-light distribution (final)", lights, "patients")
            + report.line_chart(
                "traffic lights at the end of each simulated week",
                [
                    report.Series(k, [(float(w), float(c[k])) for w, c, _ in results.lights_by_week])
                    for k in ("RED", "YELLOW", "GREEN")
                ],
                "patients",
                "simulated week",
            )
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
                    for g in [*results.golden, *results.red_patients]
                ],
            ),
        ),
        (
            "Arbiter dispositions",
            report.table(["case", "documents", "decision", "rule", "issues"], results.dispositions),
        ),
        ("Throughput and latency per stream", _stream_charts(results)),
        (
            "Dead letters",
            report.table(["topic", "records added"], sorted(results.dead_letters["added"].items())),
        ),
        ("Schemas", report.table(["schema", "topic", "bytes", "round trip OK"], results.round_trips)),
    ]
    path.write_text(report.page("clingate demo report", sections), encoding="utf-8")


def _lights(lights: Counter[str]) -> str:
    return ", ".join(f"{light} {lights[light]}" for light in ("RED", "YELLOW", "GREEN"))


def _stream_rows(results: Results) -> list[tuple[str, str, str, str, str]]:
    """Per stream: outputs, throughput, latency p50 and p99 (produced -> output consumed)."""
    names = {
        "generator": "generator (narrative -> first candidate)",
        "dbpm": "DBPM gate (candidate -> decision)",
        "verifier": "verifier (to-verify -> verdict)",
        "clinical": "clinical (FHIR update -> assessment)",
        "docs": "arbiter (classification -> disposition)",
    }
    rows = []
    for name, flow in results.flows.items():
        st = flow.stats()
        rows.append((names[name], f"{len(flow.outputs):,}", f"{st['rate']:,.0f}/s",
                     f"{1000 * st['p50']:,.0f} ms", f"{1000 * st['p99']:,.0f} ms"))  # fmt: skip
    return rows


def _stream_charts(results: Results) -> str:
    rows = _stream_rows(results)
    stats = {name: flow.stats() for name, flow in results.flows.items()}
    return (
        report.bar_chart(
            "throughput (outputs/s)", {n: round(s["rate"]) for n, s in stats.items()}, "outputs/s"
        )
        + report.bar_chart(
            "latency p50 (ms, produced -> output consumed)",
            {n: round(1000 * s["p50"]) for n, s in stats.items()},
            "ms",
        )
        + report.bar_chart(
            "latency p99 (ms, produced -> output consumed)",
            {n: round(1000 * s["p99"]) for n, s in stats.items()},
            "ms",
        )
        + report.table(["stream", "outputs", "throughput", "latency p50", "latency p99"], rows)
    )


def _summary_rows(results: Results) -> list[tuple[str, str]]:
    dbpm = results.dbpm
    return [
        ("topics", ", ".join(f"{n} {o}" for o, n in sorted(Counter(t[2] for t in results.topics).items()))),
        ("schemas round-tripped", f"{sum(r[3] for r in results.round_trips)}/{len(results.round_trips)}"),
        (
            "DBPM narratives / candidates / let through / verdicts",
            f"{dbpm['narratives']} / {dbpm['gates']:,} / {dbpm['let_through']:,} / {dbpm['verdicts']:,}",
        ),
        ("verifier calls saved (BLOCKs)", f"{dbpm['blocks']:,}"),
        (
            "LLM failures, dead-lettered (verifications / narratives)",
            f"{dbpm['failed_verifications']} / {dbpm['failed_narratives']}",
        ),
        (
            f"lockstep slice ({dbpm['lockstep']} patients): Kafka = in-process",
            "yes" if dbpm["same"] else "NO",
        ),
        *_bulk_rows(dbpm["bulk"]),
        ("inert channels", ", ".join(dbpm["population"].inert_channels()) or "none"),
        (
            "clinical assessments (final lights)",
            f"{sum(results.lights.values())}: " + _lights(results.lights),
        ),
        ("clinical worker = in-process", "yes" if results.clinical_same else "NO"),
        ("docs dispositions", str(sum(d[1] for d in results.dispositions))),
        ("dead letters added", str(sum(results.dead_letters["added"].values()))),
        *(
            (f"{name}: throughput, p50, p99", f"{rate}, {p50}, {p99}")
            for name, _, rate, p50, p99 in _stream_rows(results)
        ),
        *_model_rows(results.model_calls),
        *((f"time: {k}", f"{v:.1f} s") for k, v in results.timings.items()),
        ("checks", "all passed" if not results.failed else "FAILED: " + "; ".join(results.failed)),
    ]


def _bulk_rows(bulk: dict[str, Any] | None) -> list[tuple[str, str]]:
    if bulk is None:
        return []
    differing = sum(bulk["differing"].values())
    return [
        (f"bulk phase ({bulk['patients']:,} patients): throughput",
         f"{bulk['patients_per_s']:.1f} patients/s, {bulk['candidates_per_s']:,.0f} candidates/s "
         f"({bulk['span']:.1f} s)"),
        ("bulk phase: latency p50 / p99 (narrative -> last output)",
         f"{bulk['patient_p50']:.1f} / {bulk['patient_p99']:.1f} s"),
        ("bulk phase vs in-process (reported)",
         f"{differing:,} of {bulk['candidates']:,} decisions differ; memory "
         + ("equal" if bulk["same_state"] else "differs")),
    ]  # fmt: skip


def _model_rows(calls: list[Any]) -> list[tuple[str, str]]:
    if not calls:
        return []
    valid = sum(1 for c in calls if c.outcome == "valid")
    latencies = sorted(c.latency_s for c in calls)
    return [("real model (SmolLM2): valid calls, latency p50 / max",
             f"{valid}/{len(calls)}, {percentile(latencies, 0.5):.1f} / {latencies[-1]:.1f} s")]  # fmt: skip


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
    plan: Plan,
    rates: tuple[float, float],
    model_narratives: int,
) -> None:
    """Steps 1-8; everything started here (broker, workers, temporary directories) is stopped on exit."""
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
            with _step(console, results, 3, "the streams through the workers"):
                engine, app_id = step_streams(console, bootstrap, serde, plan, workdir, rates, results)
            with _step(console, results, 4, "DBPM: narratives -> generator -> gate -> verifier -> memory"):
                step_dbpm(console, bootstrap, plan, engine, app_id, results)
            with _step(console, results, 5, "clinical gates"):
                step_clinical(console, plan, results)
            with _step(console, results, 6, "classification arbiter"):
                step_docs(console, plan, results)
            with _step(console, results, 7, "dead letters"):
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
            with _step(console, results, 8, "a real model (SmolLM2) through the production client"):
                step_model(console, plan, model_narratives, results)
        except DemoError as error:
            console.print(f"[red]demo failed:[/] {error}")
            raise typer.Exit(1) from error


@app.callback(invoke_without_command=True)
def demo(
    patients: Annotated[
        int, typer.Option(min=1, help="Patients (narratives) of the DBPM loop.")
    ] = DEFAULT_PATIENTS,
    lockstep: Annotated[
        int,
        typer.Option(
            min=0,
            help="Of those, patients run one at a time and compared exactly with the in-process "
            "engine; the rest run in flight at once (the bulk phase).",
        ),
    ] = DEFAULT_LOCKSTEP,
    clinical_patients: Annotated[
        int,
        typer.Option(min=0, help="Generated patients in the FHIR stream (besides the four golden cases)."),
    ] = 300,
    documents: Annotated[
        int, typer.Option(min=1, help="Classifications sent to the arbiter (copies of the examples).")
    ] = 70,
    fhir_rate: Annotated[
        float, typer.Option(min=0, help="FHIR updates produced per second (0: as fast as possible).")
    ] = 20.0,
    docs_rate: Annotated[
        float, typer.Option(min=0, help="Classifications produced per second (0: as fast as possible).")
    ] = 20.0,
    model_narratives: Annotated[
        int, typer.Option(min=0, help="Narratives of the real-model step (SmolLM2; 0: skip the step).")
    ] = 3,
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
    plan = build_plan(patients, lockstep, clinical_patients, documents, console)
    try:
        _run_steps(console, settings, serde, catalog, results, plan, (fhir_rate, docs_rate), model_narratives)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted:[/] the workers and broker this demo started are stopped")
        raise typer.Exit(130) from None
    results.timings["total"] = time.perf_counter() - started
    console.rule("[bold]9. summary")
    streams = Table("stream", "outputs", "throughput", "latency p50", "latency p99", title_justify="left",
                    title="throughput and latency (produced -> output consumed)")  # fmt: skip
    for row in _stream_rows(results):
        streams.add_row(*row)
    console.print(streams)
    summary = Table("measure", "value", title="clingate demo summary", title_justify="left")
    for name, value in _summary_rows(results):
        summary.add_row(name, value)
    console.print(summary)
    write_report(report_path, results)
    console.print(f"report written to {report_path}")
    if results.failed:
        console.print("[red]checks failed:[/] " + "; ".join(results.failed))
        raise typer.Exit(1)
