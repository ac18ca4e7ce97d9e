"""``clingate worker`` as a child process, what its decisions and memory are compared with, and live
candidates decided by it (:class:`LiveGate`).

:class:`WorkerProcess` runs a worker for the chaos soak, the benchmarks and the tests. A worker started
with :data:`COMPARISON_ENV` promises the in-process engine's decisions and memory
(:func:`comparison_engine`, :func:`in_process`) on a stream such as :func:`soak_stream`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from io import StringIO
from itertools import islice
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from processors.dbpm import DBPMEngine
from processors.dbpm.config import NER
from schemas.dbpm import Candidate, GateDecision, Verdict
from schemas.wire import make_serde
from state.ram import RamStore
from streams.local.broker import free_port
from streams.local.process import SOURCE_ROOT, ProcessError, ProcessHandle, python_module
from streams.replay.engine import replay_stream
from streams.runtime.kafka_clients import assign_at_ends, producer_config, reader
from streams.runtime.settings import Settings
from streams.testing.dbpm_stream import generate_events
from streams.testing.metrics import scraped_by
from streams.worker import READY
from streams.worker.engine import dbpm_engine
from streams.worker.keys import verdict_key
from streams.worker.wire import contract_event
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_VERDICTS

#: Worker environment for an event-for-event comparison with the in-process engine. A SIGKILLed
#: worker's partitions move after the session timeout: the broker's minimum, 6 s.
COMPARISON_ENV: dict[str, str] = {
    "CLINGATE_DBPM_CROSS_TASK": "false",
    "CLINGATE_DBPM_MAINTENANCE": "false",
    "CLINGATE_CONSUMER_SESSION_TIMEOUT_S": "6",
    # A restarted worker catches up on its verdict backlog before the barrier opens; with the
    # default 5 s wait, a saturated machine lets gates decide on a partial view (marked
    # barrier_timeout). A comparison run waits for the memory instead.
    "CLINGATE_DBPM_BARRIER_TIMEOUT_S": "300",
}


class WorkerProcess:
    """One ``python -m streams.cli worker`` subprocess; restartable on the same data directory.

    Args:
        bootstrap: the broker.
        app_id: the workers' application id (consumer group, changelog names).
        datadir: this worker's own state directory (two workers MUST NOT share one).
        env: extra environment (settings) for the worker.
        role: the worker's ``--role``.
    """

    def __init__(
        self, bootstrap: str, app_id: str, datadir: Path, env: dict[str, str], role: str = "all"
    ) -> None:
        self.app_id = app_id
        self.role = role
        self.datadir = datadir
        self.log = datadir.with_suffix(".log")
        self._env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CLINGATE_APP_ID": app_id, **env}
        self._process: ProcessHandle | None = None
        self.web_port = 0

    @property
    def running(self) -> bool:
        """Whether the subprocess is alive."""
        return self._process is not None and self._process.running

    @property
    def pid(self) -> int | None:
        """The subprocess's pid (None: never started)."""
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit status of the latest start once it ended (None: running, or never started)."""
        return self._process.returncode if self._process is not None else None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the running subprocess (SIGSTOP, SIGCONT: a paused host)."""
        if self.pid is not None and self.running:
            os.kill(self.pid, signum)

    @property
    def log_offset(self) -> int:
        """Where the log of the latest start begins."""
        return self._process.log_offset if self._process is not None else 0

    def start(self, timeout_s: float = 180.0, ready: bytes = READY) -> float:
        """Start the worker (its log appended to) and wait until its log shows ``ready`` (default: the
        worker's loops have started).

        Returns:
            Seconds from the start of the process to its ready line (the loops started; restores follow).

        Raises:
            RuntimeError: the worker exited or was not ready in ``timeout_s`` (see its log).
        """
        self.web_port = free_port()
        started = time.monotonic()
        argv = python_module(
            "streams.cli",
            "worker",
            "-l",
            "info",
            "--web-port",
            str(self.web_port),
            "--datadir",
            str(self.datadir),
            "--role",
            self.role,
        )
        self._process = ProcessHandle("worker", argv, env=self._env, cwd=SOURCE_ROOT, log=self.log)
        self._process.start(append=True)
        try:
            self._process.wait_for_output(ready, timeout_s=timeout_s)
        except ProcessError as error:
            if error.returncode is not None:
                raise RuntimeError(f"worker exited with {error.returncode}: see {self.log}") from error
            self.kill()
            raise RuntimeError(f"worker not ready in {timeout_s:.0f} s: see {self.log}") from error
        return time.monotonic() - started

    def consumed(self) -> dict[str, float]:
        """The input records the worker's loops consumed so far, by topic (its ``/metrics``)."""
        return scraped_by(self.web_port, "clingate_loop_records_consumed_total", "topic")

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the latest start to exit on its own; its exit status (None: still
        running)."""
        if self._process is not None:
            self._process.wait(timeout_s)
        return self.returncode

    def output(self) -> str:
        """What the latest start wrote to its log so far."""
        return self._process.output().decode(errors="replace") if self._process is not None else ""

    def kill(self) -> None:
        """SIGKILL: no flush, no commit, no clean close."""
        if self._process is not None:
            self._process.kill()

    def stop(self) -> None:
        """SIGTERM and wait for the clean stop (SIGKILL after a minute)."""
        if self._process is not None:
            self._process.stop(grace_s=60)


def comparison_engine() -> DBPMEngine:
    """The engine configured as workers started with :data:`COMPARISON_ENV` are."""
    return dbpm_engine(Settings(CLINGATE_DBPM_CROSS_TASK=False, CLINGATE_DBPM_MAINTENANCE=False))


def check_own_input(workers: Sequence[WorkerProcess], topics: Collection[str]) -> None:
    """Raise unless ``workers`` consumed records of ``topics`` alone: a benchmark's workers run every
    loop of their role, and a loop whose group a fresh app id started at the beginning of a topic an
    earlier run filled (without :func:`streams.replay.kafka.commit_worker_end_offsets`) would be
    timed draining that backlog.

    Raises:
        RuntimeError: naming the worker, each other topic and how many of its records it consumed.
    """
    for worker in workers:
        foreign = {t: n for t, n in worker.consumed().items() if t not in topics and n > 0}
        if foreign:
            read = ", ".join(f"{n:,.0f} of {topic}" for topic, n in sorted(foreign.items()))
            raise RuntimeError(
                f"worker {worker.app_id} ({worker.role}) consumed records the benchmark did not write "
                f"({read}): its figures would include that work; start its groups at the end of their "
                "inputs (commit_worker_end_offsets)"
            )


def soak_stream(n_events: int, epoch: int, tag: str) -> list[dict[str, Any]]:
    """The synthetic stream cut into epochs: each epoch's candidates first, then its verdicts.

    Args:
        n_events: events taken from the generator.
        epoch: events per epoch.
        tag: prefix of every candidate id (keeps runs on one broker apart).
    """
    source = generate_events(n_events)
    out: list[dict[str, Any]] = []
    while chunk := list(islice(source, epoch)):
        first_ts = chunk[0]["ts"]
        out += [{**e, "ts": first_ts, "candidate_id": f"{tag}-{e['candidate_id']}"}
                for e in chunk if e["kind"] == "gate"]  # fmt: skip
        out += [e for e in chunk if e["kind"] == "verdict"]
    return out


def in_process(engine: DBPMEngine, events: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], object]:
    """Decisions (provenance fields included) and final state of the in-process engine on ``events``."""
    store = RamStore()
    decisions = StringIO()
    replay_stream((json.dumps(e) for e in events), decisions, StringIO(), store, engine, provenance=True)
    txn = store.transaction()
    try:
        state = engine.snapshot(txn)
    finally:
        txn.abort()
    return [json.loads(line) for line in decisions.getvalue().splitlines()], state


class LiveGate:
    """Live verdicts, pins and candidates of one NER entity sent to a running worker, and its decisions read
    back (the ``clingate.dbpm.decisions`` reader starts at the topic's current end).

    A live candidate never waits for the memory (no barrier): what the memory learnt reaches the gate's
    view a moment later, so :meth:`until` sends candidates until one is decided as expected.

    Args:
        bootstrap: the broker.
        entity: the NER entity (its signature is the entity lower-cased).
        tag: prefix of the candidate ids (keeps runs on one broker apart).
    """

    def __init__(self, bootstrap: str, entity: str, tag: str) -> None:
        self._serde = make_serde(None)
        self._engine = dbpm_engine(Settings())
        self._producer = Producer(producer_config(bootstrap))
        self._decisions = reader(bootstrap, "live-gate")
        assign_at_ends(self._decisions, [DBPM_DECISIONS])
        self.entity = entity
        self._tag = tag
        self._sent = 0

    def verdict(self, verdict: str, source: str = "verifier_mmed") -> None:
        """A verdict of the entity now, without a candidate id (the memory applies it as given)."""
        record = Verdict.model_validate({
            "ts": datetime.now(UTC), "task": NER, "verdict": verdict, "source": source,
            "patient_id": self._tag, "payload": {"entity": self.entity, "category": "Symptoms"},
        })  # fmt: skip
        self.send(record)

    def send(self, record: Verdict) -> None:
        """Publish a verdict record (a pin included) keyed for its signature's memory partition."""
        key = verdict_key(self._engine, contract_event(record))  # type: ignore[arg-type]
        self._producer.produce(DBPM_VERDICTS, key=key, value=self._serde.encode(record, topic=DBPM_VERDICTS))
        assert self._producer.flush(30) == 0

    def decide(self, timeout_s: float = 60.0) -> GateDecision:
        """Publish a new candidate of the entity now and return its decision."""
        self._sent += 1
        candidate_id = f"{self._tag}-{self._sent}"
        candidate = Candidate.model_validate({
            "ts": datetime.now(UTC), "task": NER, "patient_id": self._tag, "candidate_id": candidate_id,
            "payload": {"entity": self.entity, "category": "Symptoms"},
        })  # fmt: skip
        self._producer.produce(DBPM_CANDIDATES, key=self._tag.encode(), value=self._serde.encode(candidate))
        assert self._producer.flush(30) == 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for message in self._decisions.consume(100, 0.5):
                if message.error() is None and message.key() == self._tag.encode():
                    decision = self._serde.decode(message.value(), GateDecision, topic=DBPM_DECISIONS)
                    if decision.candidate_id == candidate.candidate_id:
                        return decision
        raise TimeoutError(f"no decision of {candidate.candidate_id} in {timeout_s:.0f} s")

    def until(self, wanted: Callable[[GateDecision], bool], timeout_s: float = 90.0) -> list[GateDecision]:
        """Decide new candidates until one is ``wanted``; every decision, the wanted one last."""
        decisions = [self.decide()]
        deadline = time.monotonic() + timeout_s
        while not wanted(decisions[-1]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no wanted decision in {timeout_s:.0f} s: {decisions[-1]}")
            time.sleep(0.2)
            decisions.append(self.decide())
        return decisions

    def close(self) -> None:
        """Close the decisions reader."""
        self._decisions.close()
