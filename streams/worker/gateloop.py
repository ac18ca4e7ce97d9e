"""The DBPM gate as a confluent-kafka consumer group: :class:`GateLoop`.

The gate keeps no state of its own that must be written (its engine transaction is aborted): it reads
the memory's replicated view and decides. This loop consumes
candidates in batches (:func:`~streams.runtime.kafka_clients.consume_batch`), decides them with the
unchanged engine and commits a batch's outputs, dead letters and progress in one Kafka transaction.

Topology::

    <app>-dbpm-memory-changelog --(every partition, no group)--> MemoryFollower (RocksDB per partition)
                                                                      | MergedView: the whole memory
    clingate.dbpm.candidates --(group <app>-gate, batches)--> GateLoop -+-> clingate.dbpm.dispatches
                                                   one transaction      +-> clingate.dbpm.decisions
                                                   per batch            +-> clingate.dbpm.to-verify
                                                                        |   (ALLOW, DOWNGRADE)
                                                                        +-> clingate.dbpm.verdicts
                                                                        |   (the Filter's, on violations)
                                                                        +-> clingate.dbpm.candidates.dlq
                                                                        '-> <app>-gate-progress


The per-candidate work is :class:`~streams.worker.gate.Gate`, the logic on batches (coverage join,
barrier, progress) :class:`~streams.worker.gatesteps.GateSteps`, and the memory view
:class:`~streams.worker.gateview.MemoryFollower`; this module adds Kafka: the consumer, the
transactional producer and the progress log.

Consistency model of the gate (the memory side is in :mod:`streams.worker.memory`).

* Ordered: the candidates of one patient (one key, one candidates partition, one member of the gate
  group, decided in offset order; their decisions are produced in that order with an idempotent
  producer, keyed by patient).
* Ordered by the barrier: a candidate with the ``clingate-barrier`` header (the replay publisher,
  :mod:`streams.replay.kafka`) is decided only when this process's view has reached its barrier
  (:func:`~streams.worker.keys.barrier_reached`: every memory partition applied the tick of the
  candidate's replay run, or, for a header that names no run, a watermark at least its event time),
  or after ``barrier_timeout`` (then ``barrier_timeout`` is in the provenance). Live candidates never
  wait.
* May race: a gate and verdicts published after its candidate; a gate and a memory group still in
  flight to this follower (the view lags the memory writer by the changelog round trip).
* Delivery, exactly once as a ``read_committed`` consumer sees it: a batch's dispatches, decisions,
  to-verify records, Filter verdicts and dead letters are committed in one transaction with the
  gate's progress on each candidates partition it read (:mod:`streams.runtime.progress`: where reading
  resumes, how far it read, which QA candidates the coverage join still holds). A member that gets a
  partition (after a SIGKILL, a rebalance or a clean stop) starts where the last committed progress
  resumes and sends nothing for the candidates that progress covers: it reads them only to rebuild
  the coverage join (``clingate_dbpm_gate_redelivered_total``). A transaction that fails is aborted,
  and the loop rewinds to the last committed progress. The group's offsets follow the progress
  (committed after each transaction) for lag and tools; the progress decides where reading starts.
  Zombies are fenced as in the memory writer (:mod:`streams.worker.tableloop`): a restarted member's
  stable transactional id fences its predecessor's open transaction, and a member that lost its
  partitions learns it at its next ``consume``.
* Bad records (undecodable, or valid Avro that is not a DBPM event) go to
  ``clingate.dbpm.candidates.dlq`` in the batch's transaction; so does a candidate whose decision
  would not fit the decisions topic (stage ``produce``: a decision holds its candidate, so a candidate
  near the topic's limit cannot have one).
* Stopping never waits out a barrier: a candidate still at its barrier when the loop is stopped
  abandons its batch (no transaction is open yet: nothing of the batch is sent) and the group's next
  owner decides it. Deciding it as timed out would publish a ``barrier_timeout``
  decision a replay does not make; waiting held a SIGTERMed worker for a barrier timeout per
  candidate of the batch (its process was SIGKILLed after a minute).

Process layout (``clingate worker --role``, :mod:`streams.cli.worker`): ``all`` runs the memory writer,
this loop and the clinical loop in one process (each in a thread: librdkafka releases the GIL while
it polls and flushes); ``gate`` runs only this loop. Each gate process is a member of the
consumer group :func:`~streams.worker.gate.gate_group`; scale the gate by starting more of them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from confluent_kafka import Message, TopicPartition

from processors.dbpm import DBPMConfig, DBPMEngine
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.runtime.core import Abandoned, BatchCore, Step
from streams.runtime.dlq import PRODUCER_LIMITS, SourceRecord
from streams.runtime.kafka_clients import producer_config
from streams.runtime.kafka_config import client_config, liveness_config
from streams.runtime.metrics import LoopMetrics
from streams.runtime.progress import ProgressLog
from streams.runtime.settings import Settings
from streams.runtime.transactions import TransactionalProducer
from streams.worker.engine import dbpm_engine
from streams.worker.gate import Gate, gate_group
from streams.worker.gatesteps import GateSteps
from streams.worker.gateview import ConfigWatch, MemoryFollower, MergedView
from streams.worker.metrics import DbpmMetrics
from streams.worker.tableloop import transactional_id
from topics.catalog import DBPM_CANDIDATES

log = logging.getLogger(__name__)


class GateLoop:
    """The gate consumer: candidates in; dispatches, decisions, to-verify records, the Filter's verdicts,
    dead letters and the gate's progress out, one step per batch on a
    :class:`~streams.runtime.core.BatchCore`, decided by :class:`~streams.worker.gatesteps.GateSteps`.

    Args:
        bootstrap: Kafka bootstrap servers.
        app_id: the workers' application id (:func:`~streams.worker.gate.gate_group`, the memory changelog,
            the progress topic).
        engine: the worker's engine (the gate only decides with it).
        serde: the process's serde.
        follower: the memory view (the loop owns it and closes it when it stops).
        directory: where the loop keeps its transactional id (the process MUST own it).
        barrier_timeout_s: see :attr:`streams.runtime.settings.Settings.dbpm_barrier_timeout_s`.
        session_timeout_s: the group's session timeout.
        metrics: where decisions, latencies and dead letters are counted.
        loops: the process's loop metrics (batches, records read and produced, transactions).
        coverage_wait_s: see :attr:`streams.runtime.settings.Settings.dbpm_coverage_wait_s` (0: the
            coverage join is off).
    """

    def __init__(
        self,
        bootstrap: str,
        app_id: str,
        engine: DBPMEngine,
        serde: Serde,
        follower: MemoryFollower,
        directory: Path,
        barrier_timeout_s: float,
        session_timeout_s: float,
        metrics: DbpmMetrics,
        loops: LoopMetrics,
        coverage_wait_s: float = 0.0,
    ) -> None:
        gate = Gate(engine, serde, follower.view, metrics)
        self._follower = follower
        follower.judged.on = bool(coverage_wait_s)
        self._steps = GateSteps(gate, coverage_wait_s, self._barrier, follower.judged.take, metrics)
        self._barrier_timeout_s = barrier_timeout_s
        self._metrics = metrics
        group = gate_group(app_id)
        self._progress_log = ProgressLog(bootstrap, group, [DBPM_CANDIDATES])
        # Decisions leave in batches: 2 ms linger is enough to fill them, the commit sends at once. It
        # admits decisions as large as the decisions topic does (librdkafka's own limit is ~1 MB: a
        # 2 MB candidate's decision raised in produce() and stopped the gate).
        self.core = BatchCore(
            "gate",
            client_config(bootstrap, **{
                "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "enable.partition.eof": False,
                **liveness_config(session_timeout_s),
            }),
            TransactionalProducer(producer_config(bootstrap, **{
                "transactional.id": transactional_id(directory, group),
                "linger.ms": 2, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
                **PRODUCER_LIMITS,
            }), group),
            serde, loops, on_dead_letter=gate.dead_lettered,
        )  # fmt: skip
        self._config_watch = ConfigWatch(engine.config.fingerprint(), app_id, metrics.config_mismatch)
        self._stop = threading.Event()  # run()'s, once it runs
        self.core.subscribe([DBPM_CANDIDATES], self.assigned, self.revoked)

    @property
    def view(self) -> MergedView:
        """The replicated memory view the gate decides on."""
        return self._follower.view

    @property
    def config(self) -> DBPMConfig:
        """The configuration the gate decides with (:func:`~streams.worker.engine.dbpm_engine`'s)."""
        return self._steps.gate.engine.config

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, high watermark - committed offset) of the assigned candidate partitions."""
        return self.core.lag()

    def run(self, stop: threading.Event) -> None:
        """Decide batches until ``stop`` is set; then leave the group and close the clients."""
        self._stop = stop
        self.core.run(stop, self)

    def prepare(self) -> None:
        """Follow the memory changelog after the read: the batch is decided on the freshest view."""
        if self._follower.poll(0):
            self.check_config()

    def check_config(self) -> None:
        """Compare the memory writers' configurations with this gate's (:class:`ConfigWatch`)."""
        self._config_watch.observe(self._follower.configs())

    def step(self, messages: list[Message]) -> Step | None:
        """Decide one batch and what the coverage join releases: the outputs, dead letters and progress
        of one step (never resuming past a candidate the join may need read again); None when there is
        nothing to read or release.

        Raises:
            Abandoned: the loop was stopped while a candidate waited at its barrier (module docstring).
        """
        steps = self._steps
        if not messages and not steps.pending():
            return None
        started = time.perf_counter()
        try:
            batch = steps.decide([SourceRecord.from_message(m) for m in messages], time.monotonic())
        except Abandoned:
            log.info("stopping at a barrier: %d candidates left to the group's next owner", len(messages))
            raise
        if batch.read:  # past the transaction markers after the batch's last records (a generator's commits)
            read = {(DBPM_CANDIDATES, p): steps.position[p] for p in batch.read}
            steps.position.update((tp.partition, tp.offset) for tp in self.core.positions(read))
        progress = steps.next_progress()
        decided = batch.decided
        # Dispatches go first: a ``read_committed`` reader sees none of the batch before the commit, and
        # then the dispatch of every candidate the batch sends to be verified.
        outputs = [o for d in decided for o in d.dispatches] + [o for d in decided for o in d.outputs()]

        def done(_tracked: Mapping[int, int]) -> None:
            steps.committed(progress, decided)
            elapsed = time.perf_counter() - started
            for _ in decided:
                self._metrics.gate_latency.observe(elapsed)

        return Step(
            batch.failed, outputs,
            [self._progress_log.record(DBPM_CANDIDATES, p, moved) for p, moved in progress.items()],
            [TopicPartition(DBPM_CANDIDATES, p, moved.resume) for p, moved in progress.items()],
            done=done, aborted=self._rewound,
        )  # fmt: skip

    def _rewound(self) -> None:
        """After an aborted step (the core sought every partition back to its last commit): decide again
        from there."""
        core = self.core
        steps = self._steps
        steps.rewound({
            p: core.resume.get((DBPM_CANDIDATES, p), core.started.get((DBPM_CANDIDATES, p), 0))
            for p in steps.position
        })  # fmt: skip

    def assigned(self, partitions: list[TopicPartition]) -> Mapping[tuple[str, int], int]:
        """Start each assigned partition where its last committed progress resumes.

        The group's offsets are not taken as the progress's resume: the previous owner's last
        asynchronous commit may have been refused by the very rebalance that moved the partition, and
        a gate with nothing left to decide would then never commit them (lag and replay barriers read
        them). Unknown until this gate commits, they are committed once it is idle."""
        found = self._progress_log.assigned(partitions)
        self._steps.progress.update((partition, done) for (_, partition), done in found.items())
        return {key: done.resume for key, done in found.items()}

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """Forget the revoked partitions' progress and the join's state on them."""
        for tp in partitions:
            self._steps.progress.pop(tp.partition, None)
            self._steps.position.pop(tp.partition, None)
        self._steps.drop(tp.partition for tp in partitions)

    def close(self) -> None:
        """Close the progress reader and the memory view."""
        self._progress_log.close()
        self._follower.close()

    def _barrier(self, ts: float, run: bytes) -> bool:
        """Follow the changelog until the view reached the barrier
        (:func:`~streams.worker.keys.barrier_reached`); True if timed out (counted).

        Raises:
            Abandoned: the loop was stopped meanwhile (module docstring, "Stopping").
        """
        if self._follower.reached(ts, run):
            return False
        deadline = time.monotonic() + self._barrier_timeout_s
        with self._metrics.barrier_waiting.track_inprogress():
            while not self._follower.reached(ts, run):
                if self._stop.is_set():
                    raise Abandoned
                if time.monotonic() >= deadline:
                    self._metrics.barrier_timeouts.inc()
                    return True
                self._follower.poll(0.001)
        return False


def build_gate(settings: Settings, bootstrap: str, metrics: DbpmMetrics, loops: LoopMetrics) -> GateLoop:
    """The gate loop of a worker, its memory view (``<worker datadir>/gate-view``) and its transactional
    id (``<worker datadir>/gate``), from settings; ``loops`` are the process's loop metrics."""
    engine = dbpm_engine(settings)
    follower = MemoryFollower(
        bootstrap, settings.app_id, settings.topic_partitions, settings.worker_dir / "gate-view",
        settings.store_cache_bytes,
    )  # fmt: skip
    return GateLoop(
        bootstrap, settings.app_id, engine, make_serde(settings.schema_registry_url), follower,
        settings.worker_dir / "gate", settings.dbpm_barrier_timeout_s, settings.consumer_session_timeout_s,
        metrics, loops, settings.dbpm_coverage_wait_s,
    )  # fmt: skip
