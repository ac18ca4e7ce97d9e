"""A topology test driver: clingate's runtimes, topic to topic, in memory, without a broker.

The role Kafka Streams' ``TopologyTestDriver`` plays for a Streams topology. A test pipes records into
catalog topics; every runtime subscribed to a topic processes them, and their outputs, dead letters
and changelog groups land on in-memory topics (:mod:`streams.testing.driver_topics`) the test reads
back. Nothing runs in a thread and nothing reads the clock, so the same pipes give the same bytes on
every run.

What is the deployed code, unchanged:

* the logic of every runtime: :class:`~streams.worker.memory.MemoryHandler` (the memory writer),
  :class:`~streams.worker.gatesteps.GateSteps` (the gate loop, its NER-coverage join included, on the
  driver's own clock: :meth:`TopologyDriver.advance`), :class:`~streams.worker.clinical.ClinicalHandler`
  (the clinical patients), :class:`~streams.groups.arbiter.DocsWorker` (the arbiter group) and any
  :data:`~streams.groups.ordered.Handler` of an LLM group (:meth:`TopologyDriver.add_group`), run
  under the rules of their loops (:func:`~streams.worker.tablestore.apply_batch`: re-delivered input
  skipped, a batch's dead letters, outputs and changelog group together;
  :func:`~streams.groups.ordered.handle_record`: a handler's exception or an oversized output is a
  dead letter);
* the serde (:func:`schemas.wire.make_serde`), keys (the handlers' own), partitions (the catalog's
  counts, :func:`topics.catalog.build_catalog`; Java's murmur2 partitioner,
  :func:`topics.partitioner.partition_for`), headers, and dead-letter routing
  (:func:`streams.runtime.dlq.dead_letter_record` to ``<topic>.dlq``);
* the engines and flags of the settings (:func:`streams.worker.engine.dbpm_engine`,
  :func:`streams.worker.clinical.gate_flags`, the trap rules), and the tables' changelog format:
  every group a table handler returns goes to the table's changelog topic closed by its boundary and
  is applied whole (:class:`~streams.worker.tablestore.ChangelogFollower`), the way a restore and
  the gate's follower read it; the memory state is read from that changelog the way
  ``replay --via-kafka`` reads it (:func:`streams.replay.kafka.changelog_state`).

What it is not: a broker. There is one consumer per runtime and no group, no rebalance, no crash,
no transaction, no security, no commit; records are delivered exactly once and in the order they were
produced (a global order that respects every partition's offset order and every output's cause). So
it proves what equals what on a stream (worker = in-process engine, clinical loop = pure processor,
arbiter group = in-process arbiter, every bad record in its DLQ), not what survives a SIGKILL or a
rebalance: those stay integration tests on a real broker.

Ordering. :meth:`TopologyDriver.pipe` appends a record and then processes everything it causes before
it returns: records are taken from one queue in production order and each is handed to every runtime
subscribed to its topic. A verdict's propagation records are therefore applied before the next piped
record, as the in-process engine applies them inline; a gate sees exactly the verdicts piped before
it. A candidate with the barrier header finds its memory at its event time when ticks were piped
(:meth:`TopologyDriver.replay` pipes them as ``replay --via-kafka`` does); otherwise nothing more can
arrive while it waits, so it is decided as the gate decides after its barrier timeout.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from processors.clinical.knowledge import default_knowledge
from processors.clinical.vocabulary import DrugVocabulary
from processors.dbpm import parse_event
from processors.docs.v3 import load_trap_rules
from schemas.base import AvroModel
from schemas.common import DeadLetter
from schemas.dbpm import GateDecision, Narrative
from schemas.docs import ClassificationRequest
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.groups.arbiter import DocsWorker
from streams.groups.arbiter_calls import LlmCall
from streams.groups.generator import GROUP as GENERATOR
from streams.groups.generator import Generator
from streams.groups.llm import MeteredLlm
from streams.groups.metrics import DocsMetrics, LlmGroupMetrics
from streams.groups.ordered import Handler, handle_record
from streams.groups.verifier import GROUP as VERIFIER
from streams.groups.verifier import Verifier
from streams.llm import LlmClient
from streams.replay.kafka import KafkaReplayResult, changelog_state, read_decision, replay_runs
from streams.runtime.core import Output
from streams.runtime.dlq import (
    Rejected,
    SourceRecord,
    dead_letter_record,
    header_map,
)
from streams.runtime.settings import Settings
from streams.testing.driver_topics import (
    ChangelogTable,
    DeadLetterRecord,
    Topic,
    TopicNarratives,
    TopicPackets,
)
from streams.worker.clinical import INPUTS as CLINICAL_INPUTS
from streams.worker.clinical import ClinicalHandler, gate_flags, patients_changelog
from streams.worker.engine import dbpm_engine
from streams.worker.gate import Gate
from streams.worker.gatesteps import GateSteps
from streams.worker.gateview import JudgedTracker, MergedView
from streams.worker.keys import MEMORY_INPUTS, barrier_reached, memory_changelog, min_watermark
from streams.worker.memory import MemoryHandler
from streams.worker.metrics import ClinicalMetrics, DbpmMetrics
from streams.worker.tablestore import TableHandler, apply_batch
from topics.catalog import (
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
    build_catalog,
    dlq_name,
    max_message_bytes,
)

M = TypeVar("M", bound=AvroModel)

DRIVER_APP_ID = "clingate-driver"
"""The application id the driver's workers have (it names their tables' changelog topics)."""

DeadLettered = Callable[[Rejected], None]
"""Logs and counts a dead letter its runtime routes."""


class TopologyDriver:
    """clingate's runtimes over in-memory topics (module docstring).

    Runs the worker's memory writer, gate and clinical agent, and the docs worker (rules only unless
    ``docs_call`` is given), configured from ``settings`` as ``clingate worker`` and ``clingate docs
    worker`` are; the generator and verifier groups join with :meth:`add_llm_groups`, any other
    group's handler with :meth:`add_group`. Use it as a context manager, or
    :meth:`close` it (it owns an event loop for handlers that return awaitables).

    Args:
        settings: the process settings (partitions, DBPM flags, clinical flags, trap rules).
        serde: the process serde (default: the settings').
        docs_call: the arbiter's LLM call (None: rules only).
        app_id: the workers' application id (names the tables' changelog topics).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        serde: Serde | None = None,
        docs_call: LlmCall | None = None,
        app_id: str = DRIVER_APP_ID,
    ) -> None:
        settings = settings or Settings()
        self.settings = settings
        self.serde = serde or make_serde(settings.schema_registry_url)
        partitions = settings.topic_partitions
        self.topics: dict[str, Topic] = {
            spec.name: Topic(
                spec.name, spec.partitions, spec.max_message_bytes or max_message_bytes(spec.name)
            )
            for spec in build_catalog(partitions)
        }
        self._subscribers: dict[str, list[Callable[[SourceRecord], None]]] = {}
        self._queue: deque[SourceRecord] = deque()
        self._history: list[SourceRecord] = []
        self._loop: asyncio.AbstractEventLoop | None = None

        self.engine = dbpm_engine(settings)
        self.dbpm_metrics = DbpmMetrics(CollectorRegistry())
        judged = JudgedTracker(partitions)
        judged.on = bool(settings.dbpm_coverage_wait_s)
        self.memory = ChangelogTable(self._topic(memory_changelog(app_id), partitions), judged.observe)
        self.memory_view = MergedView(self.memory.stores)
        memory = MemoryHandler(self.engine, self.serde, self.dbpm_metrics)
        self._subscribe(MEMORY_INPUTS, self._table_runtime(memory, self.memory))
        self.gate = Gate(self.engine, self.serde, self.memory_view, self.dbpm_metrics)
        self.gate_steps = GateSteps(
            self.gate, settings.dbpm_coverage_wait_s, self._barrier, judged.take, self.dbpm_metrics
        )
        self.clock = 0.0
        """The gate's clock in seconds (production's monotonic clock): the coverage join's waits run on
        it; :meth:`advance` moves it."""
        self._subscribe([DBPM_CANDIDATES], self._gate_runtime)

        self.clinical_metrics = ClinicalMetrics(self.dbpm_metrics.registry)
        self.patients = ChangelogTable(self._topic(patients_changelog(app_id), partitions))
        clinical = ClinicalHandler(
            self.serde, default_knowledge(), gate_flags(settings), self.clinical_metrics,
            settings.clinical_patient_retention_days,
        )  # fmt: skip
        self._subscribe(CLINICAL_INPUTS, self._table_runtime(clinical, self.patients))

        self.docs_metrics = DocsMetrics(CollectorRegistry())
        self.packets = TopicPackets(self.serde, self.topics[DOCS_REVIEW_PACKETS])
        docs = DocsWorker(self.serde, self.packets, load_trap_rules(settings.docs_trap_rules), docs_call,
                          self.docs_metrics)  # fmt: skip
        self.docs = docs
        inputs = [DOCS_CLASSIFICATIONS, DOCS_REVIEWS]
        self.add_group(inputs, docs, ClassificationRequest.avro_name, docs.dead_lettered)

    # -- set-up -----------------------------------------------------------------------------------

    def add_group(
        self,
        topics: Sequence[str],
        handler: Handler,
        expected_schema: str,
        dead_lettered: DeadLettered | None = None,
    ) -> None:
        """Subscribe a consumer group's handler (an :class:`~streams.groups.ordered.OrderedLoop` handler).

        Each record's outputs and dead letters are what the loop would publish for it
        (:func:`~streams.groups.ordered.handle_record`), routed in the handler's order. A handler that
        returns an awaitable runs on the driver's event loop, to completion, before the next record.

        Args:
            topics: the group's input topics.
            handler: its per-record handler.
            expected_schema: Avro name of its input model (dead letters of handler failures).
            dead_lettered: called with every dead letter routed (to log and count it).
        """

        def process(record: SourceRecord) -> None:
            handled = self.run(handle_record(handler, record, expected_schema))
            self._route(record.timestamp_ms, handled, dead_lettered)

        self._subscribe(topics, process)

    def add_llm_groups(self, client: LlmClient, vocabulary: DrugVocabulary | None = None) -> LlmGroupMetrics:
        """Subscribe the generator and verifier groups' handlers, their calls made through ``client``.

        As ``clingate generator`` and ``clingate verifier`` build them (the verifier with the memory
        engine's configuration, for verdict keys), except where they find narratives
        (:class:`TopicNarratives`). ``client`` is used on the driver's event loop (:meth:`run`).

        Args:
            client: the LLM client (e.g. to an :class:`~streams.llm.serve.testserver.OpenAiTestServer`
                started with :meth:`run`); the caller closes it.
            vocabulary: the generator's drug dictionary for prompt hints (default: empty).

        Returns:
            The groups' metrics (calls, verdicts, calls saved).
        """
        metrics = LlmGroupMetrics(CollectorRegistry())
        generator = Generator(MeteredLlm(client, metrics, GENERATOR), self.serde,
                              vocabulary or DrugVocabulary.empty())  # fmt: skip
        self.add_group([DBPM_NARRATIVES], generator, Narrative.avro_name)
        narratives = TopicNarratives(self.serde, self.topics[DBPM_NARRATIVES])
        verifier = Verifier(MeteredLlm(client, metrics, VERIFIER), self.serde, self.engine, narratives)
        self.add_group([DBPM_TO_VERIFY, DBPM_DECISIONS], verifier, GateDecision.avro_name)
        return metrics

    def run(self, awaitable: Any) -> Any:
        """Run ``awaitable`` to completion on the driver's event loop (e.g. to start a test server)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(awaitable)

    def close(self) -> None:
        """Close the driver's event loop."""
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def __enter__(self) -> TopologyDriver:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- input ------------------------------------------------------------------------------------

    def pipe(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | AvroModel | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = 0,
        partition: int | None = None,
    ) -> SourceRecord:
        """Produce one record and process everything it causes; returns the record as stored.

        Args:
            topic: a catalog topic.
            key: the record key (its partition, by murmur2, unless ``partition`` is given).
            value: bytes as they are, None (a tombstone), or a model encoded with the driver's serde.
            headers: the record's headers.
            timestamp_ms: its Kafka timestamp (every output of it carries the same).
            partition: an explicit partition (required without a key).

        Raises:
            RecordTooLargeError: the record, or an output of it, exceeds its topic's limit (the
                broker would refuse it).
        """
        if isinstance(value, AvroModel):
            value = self.serde.encode(value, topic=topic)
        record = self._append(topic, key, value, headers, timestamp_ms, partition)
        self._drain()
        return record

    def redeliver(self, record: SourceRecord) -> None:
        """Hand a stored record to its subscribers again and process what it causes.

        What a consumer does after a crash between processing a record and committing its offset:
        the same record, at the same offset, once more.
        """
        self._queue.append(record)
        self._drain()

    def advance(self, seconds: float) -> None:
        """Move the gate's clock on by ``seconds`` and process what that releases (QA candidates whose
        coverage wait ran out)."""
        self.clock += seconds
        self._drain()

    def replay(self, events: Sequence[dict[str, Any]]) -> KafkaReplayResult:
        """Pipe a DBPM replay stream as ``replay --via-kafka`` publishes it; its decisions and state.

        The records are :func:`streams.replay.kafka.replay_runs`' (verdicts keyed by signature, a
        watermark tick per verdict partition before each run of gates, candidates with the barrier
        header), the decisions are read back as that command reads them (first per candidate, in
        input order) and the state from the memory changelog with ``as_of`` the last event's time.
        """
        verdict_partitions = range(len(self.topics[DBPM_VERDICTS].partitions))
        order: list[str] = []
        start = len(self.topics[DBPM_DECISIONS].log)
        # One replay per driver call: a fresh id per call, derived from what the driver has seen so far
        # (the same pipes give the same bytes).
        replay = f"driver-{len(self._history)}"
        for run in replay_runs(events, self.engine, self.serde, verdict_partitions, replay):
            for record in run.records:
                self.pipe(record.topic, record.key, record.value, record.headers, partition=record.partition)
            order += run.candidate_ids
        seen: dict[str, dict[str, Any]] = {}
        for record in self.topics[DBPM_DECISIONS].log[start:]:
            decision = read_decision(self.serde, record.value)  # type: ignore[arg-type]
            seen.setdefault(decision["candidate_id"], decision)
        last = parse_event(events[-1]).time if events else None
        return KafkaReplayResult([seen[c] for c in order], self.memory_state(last))

    # -- output -----------------------------------------------------------------------------------

    def records(self, *topics: str) -> list[SourceRecord]:
        """Every record of ``topics``, in the order it was produced (across topics too)."""
        wanted = set(topics)
        return [record for record in self._history if record.topic in wanted]

    def values(self, topic: str, model: type[M]) -> list[M]:
        """Every record of ``topic`` decoded as ``model`` with the driver's serde, in production order."""
        return [self.serde.decode(r.value, model, topic=topic) for r in self.topics[topic].log]  # type: ignore[arg-type]

    def dead_letters(self, topic: str) -> list[DeadLetterRecord]:
        """The dead letters of ``topic`` (the records of ``<topic>.dlq``), decoded, in production order."""
        name = dlq_name(topic)
        return [
            DeadLetterRecord(self.serde.decode(r.value, DeadLetter, topic=name), header_map(r.headers), r)  # type: ignore[arg-type]
            for r in self.topics[name].log
        ]

    def memory_state(self, as_of: float | None = None) -> dict[str, object]:
        """The memory's state document, read from the memory changelog as ``replay --via-kafka`` reads it.

        Args:
            as_of: the stream's last event time (None: the memory's own clock).
        """
        changelog = ((r.partition, r.key or b"", r.value, r.offset) for r in self.memory.changelog.log)
        return changelog_state(changelog, self.engine, as_of)

    def memory_watermark(self) -> float:
        """The event time every memory partition has applied (``-inf`` while one has none)."""
        return min_watermark(self.memory.stores())

    # -- internals --------------------------------------------------------------------------------

    def _topic(self, name: str, partitions: int) -> Topic:
        topic = self.topics[name] = Topic(name, partitions, max_message_bytes(name))
        return topic

    def _subscribe(self, topics: Iterable[str], process: Callable[[SourceRecord], None]) -> None:
        for topic in topics:
            self._subscribers.setdefault(topic, []).append(process)

    def _append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp_ms: int | None,
        partition: int | None = None,
    ) -> SourceRecord:
        record = self.topics[topic].append(key, value, headers, timestamp_ms, partition)
        self._history.append(record)
        if topic in self._subscribers:
            self._queue.append(record)
        return record

    def _drain(self) -> None:
        """Hand every queued record to its subscribers, oldest first, until nothing is left; then let the
        gate release what the coverage join holds and can let go (as the gate loop does while the join
        holds candidates), and go on until neither sends anything."""
        while True:
            while self._queue:
                record = self._queue.popleft()
                for process in self._subscribers[record.topic]:
                    process(record)
            if not (self.gate_steps.pending() and self._gate_step([], None)):
                return

    def _route(
        self,
        timestamp_ms: int | None,
        items: Iterable[Output | Rejected],
        dead_lettered: DeadLettered | None,
    ) -> None:
        """Produce a runtime's outputs and dead letters, in order, with the timestamp of their input."""
        for item in items:
            if isinstance(item, Output):
                self._append(item.topic, item.key, item.value, item.headers, timestamp_ms)
                continue
            out = dead_letter_record(self.serde, item)
            self._append(out.topic, out.key, out.value, out.headers, timestamp_ms)
            if dead_lettered is not None:
                dead_lettered(item)

    def _table_runtime(self, handler: TableHandler, table: ChangelogTable) -> Callable[[SourceRecord], None]:
        """A table writer over ``handler`` and ``table``, one record per batch."""

        def process(record: SourceRecord) -> None:
            applied = apply_batch(handler, table, record.partition, [record])
            self._route(record.timestamp_ms, [*applied.dead_letters, *applied.outputs], handler.dead_lettered)
            if applied.group is not None:
                table.stage(record.partition, applied.group)

        return process

    def _barrier(self, ts: float, run: bytes) -> bool:
        """The gate's barrier here: nothing can arrive while it waits, so a memory short of it times out."""
        timed_out = not barrier_reached(self.memory.stores(), ts, run)
        if timed_out:
            self.dbpm_metrics.barrier_timeouts.inc()
        return timed_out

    def _gate_runtime(self, record: SourceRecord) -> None:
        """The gate loop on one candidate."""
        self._gate_step([record], record.timestamp_ms)

    def _gate_step(self, records: Sequence[SourceRecord], timestamp_ms: int | None) -> bool:
        """One step of the gate loop (:class:`~streams.worker.gatesteps.GateSteps`, committed at once): what
        ``records`` and the coverage join's releases at :attr:`clock` send; True if it sent anything."""
        steps = self.gate_steps
        batch = steps.decide(records, self.clock)
        steps.committed(steps.next_progress(), batch.decided)
        items: list[Output | Rejected] = [*batch.failed]
        items += [o for d in batch.decided for o in d.dispatches] + [
            o for d in batch.decided for o in d.outputs()
        ]
        self._route(timestamp_ms, items, self.gate.dead_lettered)
        return bool(items)
