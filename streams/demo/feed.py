"""Producing the run's inputs, as an upstream system would: the DBPM loop, FHIR updates, classifications.

The DBPM narratives go in two phases (docs/demo.md, "The DBPM loop"): the lockstep slice, one patient
at a time, each only once every candidate of the previous one is done; then the bulk phase, every
other narrative at once. FHIR updates and classifications are paced at a fixed rate. Each stream is
fed by a :class:`Feeder` thread, so the three run at once.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from confluent_kafka import Producer

from processors.dbpm import DBPMEngine, format_time
from schemas.dbpm import Candidate, Narrative, Verdict
from schemas.fhir import FhirUpdate
from schemas.serde import Serde
from streams.demo.calls import LlmCalls, Stall
from streams.demo.errors import DemoError
from streams.demo.kafka_io import demo_producer, demo_reader
from streams.demo.llm import LoopPlan
from streams.demo.plan import Document, Plan, last_time, loop_reference, streams_timeout
from streams.demo.results import DeadLettered, LoopRun
from streams.demo.tap import Flow, Tap
from streams.replay.kafka import CommitWatcher, ReplayTimeout, read_state
from streams.runtime.kafka_clients import partitions, producer_config
from streams.worker.keys import TICK_HEADER, memory_changelog
from topics.catalog import (
    CLINICAL_REVIEWS,
    DBPM_CANDIDATES,
    DBPM_NARRATIVES,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    FHIR_UPDATES,
)

T = TypeVar("T")

LOCKSTEP_TIMEOUT_S = 120.0
"""Longest wait for one lockstep patient's candidates to be done without progress (a slow model's
calls extend it: :class:`streams.demo.calls.Stall`)."""

STAGE_TIMEOUT_S = 60.0
"""Longest wait for the clinical loop to consume one stage of the golden runs."""

GENERATED_POLL_S = 5.0
"""How long one look for the generator's commit waits before the progress is checked again."""


class Feeder(threading.Thread):
    """A stream's producer in a thread; its result or error is kept for the main thread."""

    def __init__(self, name: str, body: Callable[[], object]) -> None:
        super().__init__(name=f"clingate-demo-{name}", daemon=True)
        self._body = body
        self.result: object = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self._body()
        except BaseException as error:  # re-raised in the main thread
            self.error = error


def paced(items: Sequence[T], rate: float, send: Callable[[T], None], producer: Producer) -> None:
    """Call ``send`` for each item at ``rate`` items per second (0: as fast as possible)."""
    started = time.perf_counter()
    for index, item in enumerate(items):
        if rate > 0:
            delay = started + index / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        send(item)
        producer.poll(0)


def feed_clinical(bootstrap: str, serde: Serde, plan: Plan, rate: float, group: str) -> None:
    """Produce the FHIR timeline (paced), then the golden bundles, then their reviews; once the clinical
    loop (consumer group ``group``) has consumed them, the golden runs, stage by stage
    (:mod:`streams.demo.runs`)."""
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 5}))

    def send(update: FhirUpdate) -> None:
        value = serde.encode(update, topic=FHIR_UPDATES)
        producer.produce(FHIR_UPDATES, key=update.patient_id.encode(), value=value)

    paced([*plan.fhir, *(u for u, _ in plan.golden)], rate, send, producer)
    if producer.flush(30):
        raise DemoError(f"FHIR updates not delivered to {FHIR_UPDATES}")
    for _, review in plan.golden:
        value = serde.encode(review, topic=CLINICAL_REVIEWS)
        producer.produce(CLINICAL_REVIEWS, key=review.patient_id.encode(), value=value)
    if producer.flush(30):
        raise DemoError(f"reviews not delivered to {CLINICAL_REVIEWS}")
    with CommitWatcher(bootstrap, group) as watcher:
        for topic in (FHIR_UPDATES, CLINICAL_REVIEWS):
            watcher.wait(topic, streams_timeout(0))  # the loop's backlog of the paced timeline
        for topic, records in plan.stages:
            for record in records:
                producer.produce(
                    topic, key=record.patient_id.encode(), value=serde.encode(record, topic=topic)
                )
            if producer.flush(30):
                raise DemoError(f"run records not delivered to {topic}")
            watcher.wait(topic, STAGE_TIMEOUT_S)


def feed_docs(bootstrap: str, serde: Serde, plan: Plan, rate: float) -> None:
    """Produce the classification requests (paced)."""
    producer = demo_producer(bootstrap)

    def send(document: Document) -> None:
        value = serde.encode(document.request, topic=DOCS_CLASSIFICATIONS)
        producer.produce(DOCS_CLASSIFICATIONS, key=document.request.doc_id.encode(), value=value)

    paced(plan.documents, rate, send, producer)
    if producer.flush(30):
        raise DemoError(f"classifications not delivered to {DOCS_CLASSIFICATIONS}")


def emitted_candidates(plan: Plan, flows: dict[str, Flow]) -> dict[str, list[Candidate]]:
    """Per patient, the candidates of the loop in the generator's order: the planned ones when the
    demo's responder answers (known before the generator publishes them), else those the generator
    published (the model's)."""
    return plan.loop.candidates if plan.llm_url is None else published_candidates(flows)


def published_candidates(flows: dict[str, Flow]) -> dict[str, list[Candidate]]:
    """Per patient, the candidates the generator published, in its order, each once: with the event
    time it gave them (its clock when it extracted them), which the in-process reference must use."""
    emitted: dict[str, dict[str, Candidate]] = {}
    for c in list(flows["generator"].outputs):
        emitted.setdefault(c.patient_id, {}).setdefault(c.candidate_id, c)
    return {patient: list(found.values()) for patient, found in emitted.items()}


def published_verdicts(flows: dict[str, Flow]) -> dict[str, Verdict]:
    """The verifier's and the Ontology-Violation Filter's verdicts, by their ids."""
    return {v.candidate_id: v for v in (*flows["verifier"].outputs, *flows["filter"].outputs)}


def tick_memory(bootstrap: str, verdicts: Sequence[Verdict], interval_s: float) -> None:
    """Publish one watermark tick per verdict partition at the first maintenance boundary after the
    last of ``verdicts`` (waiting for the wall clock to pass it); no verdicts, no tick.

    The memory prunes and caps at the boundaries of its event-time grid, and its time is its verdicts'
    (when they were judged): once the last verdict is in, each partition holds up to one interval of
    learning beyond its cap until time moves on. A deployment's next verdicts move it within an
    interval; the demo's stream has ended, so the tick does, and the memory read afterwards is the one
    maintained as the paper's caps say.
    """
    if not verdicts:
        return
    last = max(v.ts.timestamp() for v in verdicts)
    boundary = (math.floor(last / interval_s) + 1) * interval_s
    time.sleep(max(0.0, boundary - time.time()))
    client = demo_reader(bootstrap)
    try:
        verdict_partitions = partitions(client, DBPM_VERDICTS)
    finally:
        client.close()
    producer = demo_producer(bootstrap)
    tick = [(TICK_HEADER, format_time(boundary).encode())]
    for partition in verdict_partitions:
        producer.produce(DBPM_VERDICTS, value=b"", headers=tick, partition=partition)
    if producer.flush(30):
        raise DemoError(f"watermark ticks not delivered to {DBPM_VERDICTS}")


def loop_pending(
    ids: Sequence[tuple[str, str]], flows: dict[str, Flow], tap: Tap, dead: DeadLettered
) -> list[tuple[str, str]]:
    """The (patient id, candidate id) pairs of ``ids`` whose candidate is not yet done.

    A candidate is done when it was decided and either BLOCKed, or its verdict was published and
    applied by the memory writers, or its verification was dead-lettered (a failure, counted); a
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
        # Not decided yet: pending, unless its narrative was dead-lettered before publishing it (a
        # narrative some of whose calls failed publishes the candidates of the others, which count).
        return cid in flows["dbpm"].produced or patient not in dead.narratives.consumed
    found = flows["dbpm"].latest.get(cid)  # None: the tap is still taking the record in
    if found is None:
        return True
    if found.decision == "BLOCK" or cid in dead.verifications.consumed:
        return False
    verified = flows["verifier"].positions.get(cid)
    return verified is None or tap.applied.get(verified[0], -1) < verified[1]


class LoopFeeder:
    """Produces the DBPM narratives: the lockstep slice one patient at a time, then the bulk phase.

    Args:
        engine: an engine configured as the worker's (for reading the memory).
        groups: the worker's app id and the generator's group id.
    """

    def __init__(
        self,
        bootstrap: str,
        serde: Serde,
        plan: Plan,
        flows: dict[str, Flow],
        tap: Tap,
        dead: DeadLettered,
        engine: DBPMEngine,
        groups: tuple[str, str],
        calls: LlmCalls,
    ) -> None:
        self._bootstrap, self._serde, self._plan = bootstrap, serde, plan
        self._flows, self._tap, self._dead, self._engine = flows, tap, dead, engine
        self._app_id, self._generator_group = groups
        self._calls = calls
        self._producer = Producer(producer_config(bootstrap, **{"linger.ms": 0}))
        self._generator: CommitWatcher | None = None

    def run(self) -> LoopRun:
        """Feed both phases; returns what was observed (the lockstep memory, the bulk phase's times)."""
        run = LoopRun()
        narratives, lockstep = self._plan.loop.narratives, self._plan.lockstep
        # The model's candidates are known once the generator committed their narrative and the tap
        # read what it published: one client for every wait (a client per wait cost ~45 ms a patient).
        if self._plan.llm_url is not None:
            self._generator = CommitWatcher(self._bootstrap, self._generator_group)
        try:
            started = time.perf_counter()
            for narrative in narratives[:lockstep]:
                self._send([narrative])
                self._wait_done([narrative], LOCKSTEP_TIMEOUT_S)
            run.lockstep_s = time.perf_counter() - started
            if lockstep:
                slice_plan = LoopPlan(narratives=narratives[:lockstep])
                events = loop_reference(
                    slice_plan, published_candidates(self._flows), published_verdicts(self._flows)
                )
                as_of = last_time(events)
                changelog = memory_changelog(self._app_id)
                run.lockstep_state = read_state(self._bootstrap, changelog, self._engine, as_of)
            bulk = narratives[lockstep:]
            if bulk:
                run.bulk_started = time.time()
                self._send(bulk)
                self._wait_done(bulk, streams_timeout(len(narratives)))
                run.bulk_finished = time.time()
        finally:
            if self._generator is not None:
                self._generator.close()
        return run

    def _send(self, batch: Sequence[Narrative]) -> None:
        for narrative in batch:
            value = self._serde.encode(narrative, topic=DBPM_NARRATIVES)
            self._producer.produce(DBPM_NARRATIVES, key=narrative.patient_id.encode(), value=value)
        if self._producer.flush(30):
            raise DemoError(f"narratives not delivered to {DBPM_NARRATIVES}")

    def _wait_generated(self, generator: CommitWatcher, stall: Stall) -> None:
        """Wait until the generator group committed every narrative produced, while its calls progress."""
        while True:
            try:
                generator.wait(DBPM_NARRATIVES, GENERATED_POLL_S)
                return
            except ReplayTimeout as error:
                if stall.expired(None):
                    raise DemoError(
                        f"{error}: no progress for {stall.window_s:.0f} s ({self._calls.text()})"
                    ) from error

    def _wait_done(self, batch: Sequence[Narrative], limit_s: float) -> None:
        """Wait until every candidate of ``batch`` is done (see :func:`loop_pending`)."""
        stall = Stall(self._calls, limit_s)
        if self._generator is not None:
            self._wait_generated(self._generator, stall)
            self._tap.wait_read(DBPM_CANDIDATES, self._generator.ends(DBPM_CANDIDATES), limit_s)
        emitted = emitted_candidates(self._plan, self._flows)
        ids = [(c.patient_id, c.candidate_id) for n in batch for c in emitted.get(n.patient_id, [])]
        while ids:
            ids = ids[first_pending(ids, self._flows, self._tap, self._dead) :]
            if not ids:
                break
            if stall.expired(len(ids)):
                ids = loop_pending(ids, self._flows, self._tap, self._dead)
                raise DemoError(
                    f"{len(ids)} candidates of {len(batch)} narratives (first: {ids[0][1]}) not decided and "
                    f"verified (or dead-lettered): no progress for {stall.window_s:.0f} s "
                    f"({self._calls.text()})"
                )
            time.sleep(0.002 if len(batch) == 1 else 0.1)  # a check costs only what finished since the last
