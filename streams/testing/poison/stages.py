"""The poison suite's processes and Kafka I/O: the runtimes as subprocesses (:class:`Service`,
:func:`environment`), producing the records and reading the outputs back, the feeding phases, each ending
when its consumer groups committed what it fed (:class:`Stages`), and the groups' lag at the end.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from streams.local.process import SOURCE_ROOT, ProcessError, ProcessHandle, python_module
from streams.replay.kafka import CommitWatcher, ReplayTimeout
from streams.runtime.dlq import PRODUCER_LIMITS
from streams.runtime.kafka_clients import end_offsets, produce_waiting, producer_config, read_to_end, reader
from streams.runtime.kafka_config import client_config
from streams.testing.poison.plan import Plan
from streams.testing.poison.records import MIB, Record
from streams.testing.worker import COMPARISON_ENV
from topics.catalog import MAX_MESSAGE_BYTES


class Service:
    """A clingate subprocess with its log, stopped with SIGTERM (SIGKILL after 60 s).

    Args:
        name: what it is.
        args: the command line after ``python -m streams.cli``.
        env: its whole environment.
        log: file of its stdout and stderr.
    """

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._process = ProcessHandle(
            name, python_module("streams.cli", *args), env=env, cwd=SOURCE_ROOT, log=log, new_session=True
        ).start(append=True)

    @property
    def exit_code(self) -> int | None:
        """None while it runs."""
        return self._process.returncode

    def wait_for(self, marker: bytes, timeout_s: float = 180.0) -> None:
        """Wait until its log says ``marker``.

        Raises:
            RuntimeError: it exited first, or ``timeout_s`` passed.
        """
        try:
            self._process.wait_for_output(marker, timeout_s=timeout_s)
        except ProcessError as error:
            raise RuntimeError(f"{self.name} not ready (exit {self.exit_code}): see {self.log}") from error

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM) without waiting."""
        self._process.terminate()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 60 s."""
        self._process.stop(grace_s=60)


_LLM_VARIABLES = frozenset(
    {
        "CLINGATE_LLM_URL",
        "CLINGATE_GENERATOR_URL",
        "CLINGATE_VERIFIER_URL",
        "CLINGATE_LLM_MODEL",
        "CLINGATE_GENERATOR_MODEL",
        "CLINGATE_VERIFIER_MODEL",
    }
)


def environment(bootstrap: str, **settings: str) -> dict[str, str]:
    """A runtime's environment: this process's without any LLM server setting (the docs worker runs
    rules-only, as its reference), the broker, :data:`streams.testing.worker.COMPARISON_ENV` (propagation and
    maintenance off, a 6 s session timeout) and ``settings``."""
    base = {k: v for k, v in os.environ.items() if k not in _LLM_VARIABLES}
    return {**base, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, **COMPARISON_ENV, **settings}


def produce(bootstrap: str, records: Sequence[Record]) -> list[tuple[int, int]]:
    """Produce ``records`` in order (murmur2 by key, or their explicit partition); their coordinates.

    Raises:
        RuntimeError: a record was not acknowledged.
    """
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 5, **PRODUCER_LIMITS}))
    coordinates: list[tuple[int, int] | None] = [None] * len(records)
    errors: list[str] = []

    def report(index: int) -> Callable[[KafkaError | None, Message], None]:
        def done(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                errors.append(f"{records[index].topic} record {index}: {error.str()}")
            else:
                coordinates[index] = (message.partition(), message.offset())  # type: ignore[assignment]

        return done

    for index, record in enumerate(records):
        extra = {} if record.partition is None else {"partition": record.partition}
        produce_waiting(producer, record.topic, key=record.key, value=record.value,
                        headers=list(record.headers), on_delivery=report(index), **extra)  # fmt: skip
        producer.poll(0)
    left = producer.flush(120)
    if errors or left or any(c is None for c in coordinates):
        raise RuntimeError(f"records not acknowledged: {errors[:3]} ({left} still queued)")
    return coordinates  # type: ignore[return-value]


@dataclass(frozen=True)
class Read:
    """One record read back."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def read_from(bootstrap: str, starts: dict[str, dict[int, int]], timeout_s: float = 300.0) -> list[Read]:
    """Every record of the topics of ``starts`` from those offsets to the topics' current ends.

    Raises:
        TimeoutError: not everything could be read within ``timeout_s``.
    """
    client = reader(bootstrap, "poison-reader", **{"fetch.message.max.bytes": MAX_MESSAGE_BYTES + MIB})
    try:
        out: list[Read] = []
        for m in read_to_end(client, starts, timeout_s):
            headers = tuple((k, v or b"") for k, v in m.headers() or ())
            out.append(Read(m.topic(), m.partition(), m.offset(), m.key(), m.value(), headers))
        return out
    finally:
        client.close()


class Stages:
    """The feeding phases, in threads, each ending when its consumer groups committed what it fed."""

    def __init__(
        self, bootstrap: str, plan: Plan, groups: dict[str, str], timeout_s: float, log: Callable[[str], None]
    ) -> None:
        self.bootstrap = bootstrap
        self.plan = plan
        self.groups = groups
        self.timeout_s = timeout_s
        self.log = log
        self.coordinates: dict[str, list[tuple[int, int]]] = {}
        self.stalled: list[str] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def feed(self, *topics: str) -> None:
        """Produce the records of ``topics`` (in this order), then wait until their groups committed them."""
        for topic in topics:
            coordinates = produce(self.bootstrap, self.plan.feeds[topic])
            with self._lock:
                self.coordinates[topic] = coordinates
        for topic in topics:
            self.wait(topic)
        self.log(f"  fed and committed: {', '.join(topics)}")

    def wait(self, topic: str, group: str | None = None) -> None:
        """Wait until the group consuming ``topic`` committed its end; a timeout is recorded as a stall."""
        group = group or self.groups[topic]
        try:
            with CommitWatcher(self.bootstrap, group) as watcher:
                watcher.wait(topic, self.timeout_s)
        except ReplayTimeout as stalled:
            with self._lock:
                self.stalled.append(str(stalled))

    def start(self, *phases: tuple[str, ...]) -> threading.Thread:
        """Feed ``phases`` one after the other in a thread (an error is re-raised by :meth:`join`)."""

        def body() -> None:
            try:
                for topics in phases:
                    self.feed(*topics)
            except BaseException as error:  # re-raised in the caller's thread
                self._errors.append(error)

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        return thread

    def join(self, *threads: threading.Thread) -> None:
        """Wait for ``threads``; re-raise the first error of any."""
        for thread in threads:
            thread.join()
        if self._errors:
            raise self._errors[0]


def topic_lags(bootstrap: str, groups: dict[str, str]) -> dict[str, int]:
    """Per fed topic, the records its group has not committed."""
    out: dict[str, int] = {}
    for topic, group in groups.items():
        client = Consumer(client_config(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
        try:
            ends = end_offsets(client, topic)
            committed = client.committed([TopicPartition(topic, p) for p in ends], timeout=30)
            out[topic] = sum(
                max(0, ends[tp.partition] - max(tp.offset, 0)) for tp in committed if ends[tp.partition] > 0
            )
        finally:
            client.close()
    return out
