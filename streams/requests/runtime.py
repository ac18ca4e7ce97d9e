"""The request runtime: reads the console's requests and writes what :func:`~streams.requests.check.check`
allows, each with its outcome, in one Kafka transaction per batch (``clingate worker --role requests``).

It runs as a principal of its own (``clingate-requests`` in ``deploy/security/acls.yaml``), the one that
may write every re-drive target (every topic with a dead-letter topic) and every topic a person's own record
is published on (:data:`~streams.requests.check.PUBLICATIONS`); the console's principal writes the request
topic instead. What holds:

* **Checked, then written.** For each re-drive it reads, ``read_committed``, the dead letter at the
  coordinates the request names and the record at that dead letter's source coordinates, and it knows
  which requests and targets were carried out (:class:`Outcomes`, followed on the outcome topic); the
  check decides from those alone.
* **Audited.** Every request gets one ``ConsoleRequestOutcome`` on ``clingate.console.request-outcomes``,
  ``ok`` with the partition written or ``refused`` with the reason, keyed like the request; the console's
  own audit record of the action (``redrive``, ``pin``, ``review``, ``ask``, ``query-decision``,
  ``evidence-review``) precedes the request (a review from ``clingate arbiter review`` has none: the
  request and its outcome are its record).
* **Exactly once.** A batch's records, outcomes and dead letters (a request that is not a
  ``ConsoleRequest``) commit in one transaction with the loop's position on each request partition
  (:class:`~streams.runtime.progress.ProgressLog`, ``<group>-progress``), a step of the batch core
  (:mod:`streams.runtime.core`). A batch that cannot commit is aborted and read again from the last
  committed position: nothing of it was visible. Requests are keyed by
  their target, so the requests of one target are read in order by one member, and a request carried out
  marks its target done (:func:`~streams.requests.check.marks`) before the next request on it is checked.
* **Refused for good** (:class:`~streams.runtime.transactions.TransactionRefused`): the principal may not
  write a target; the loop stops and the worker exits, naming it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime

from confluent_kafka import Message, TopicPartition

from schemas.common import DeadLetter
from schemas.console import ConsoleRequest, ConsoleRequestOutcome
from schemas.serde import SchemaDecodeError, Serde
from streams.requests.check import (
    DEAD_LETTER_QUEUES,
    OK,
    REFUSED,
    Carried,
    Evidence,
    Original,
    Refused,
    RequestAction,
    check,
    coordinates,
    marks,
)
from streams.runtime.core import BatchCore, Output, Step
from streams.runtime.dlq import PRODUCER_LIMITS, Rejected, SourceRecord, decode_record
from streams.runtime.kafka_clients import partitions, producer_config, read_to_end, reader, watermark_offsets
from streams.runtime.kafka_config import client_config
from streams.runtime.logs import log_dead_letter
from streams.runtime.metrics import LoopMetrics
from streams.runtime.progress import Progress, ProgressLog
from streams.runtime.settings import Settings
from streams.runtime.transactions import TransactionalProducer
from topics.catalog import CONSOLE_REQUEST_OUTCOMES, CONSOLE_REQUESTS

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 30.0
"""Longest read of a dead letter, its source record or the outcomes."""


def group_id(app_id: str) -> str:
    """The request runtime's consumer group, progress topic prefix and transactional id prefix."""
    return f"{app_id}-requests"


class Outcomes:
    """The requests and dead letters carried out (:func:`~streams.requests.check.marks`), followed on the
    outcome topic from its beginning: :meth:`refresh` reads what was committed since the last call."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._consumer = reader(bootstrap, "requests-outcomes", **{"isolation.level": "read_committed"})
        self._serde = serde
        self._reached: dict[tuple[str, int], int] = {}
        self.done: set[str] = set()

    def refresh(self) -> None:
        """Read the outcomes committed since the last refresh."""
        starts = {CONSOLE_REQUEST_OUTCOMES: {p: end for (_, p), end in self._reached.items()}}
        for message in read_to_end(self._consumer, starts, READ_TIMEOUT_S, reached=self._reached):
            value = message.value()
            if value is None:
                continue
            try:
                outcome = self._serde.decode(value, ConsoleRequestOutcome, topic=CONSOLE_REQUEST_OUTCOMES)
            except SchemaDecodeError as exc:
                log.warning("requests: an unreadable outcome at offset %s: %s", message.offset(), exc)
                continue
            self.add(outcome)

    def add(self, outcome: ConsoleRequestOutcome) -> None:
        """Count ``outcome`` (one this loop just committed, or one read back)."""
        if outcome.outcome == OK:
            self.done.update(marks(outcome.action, outcome.request_id, outcome.target))

    def close(self) -> None:
        """Close the reader."""
        self._consumer.close()


class RequestLoop:
    """The loop (module docstring): a job on a :class:`~streams.runtime.core.BatchCore`; :meth:`run`
    until stopped, :meth:`lag` for the worker's metrics.

    Args:
        settings: the process settings (the app id names the group).
        bootstrap: Kafka bootstrap servers.
        serde: the process's serde.
        metrics: where its traffic is counted (label ``loop``: ``requests``).
    """

    def __init__(self, settings: Settings, bootstrap: str, serde: Serde, metrics: LoopMetrics) -> None:
        self.group = group_id(settings.app_id)
        self._serde = serde
        self._letters = reader(bootstrap, "requests-letters", **{"isolation.level": "read_committed"})
        self._progress = ProgressLog(bootstrap, self.group, [CONSOLE_REQUESTS])
        self._outcomes = Outcomes(bootstrap, serde)
        config = producer_config(bootstrap, **PRODUCER_LIMITS)
        self.core = BatchCore(
            "requests",
            client_config(bootstrap, **{
                "group.id": self.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }),
            TransactionalProducer({**config, "transactional.id": f"{self.group}-{uuid.uuid4().hex[:12]}"},
                                  self.group),
            serde, metrics, on_dead_letter=lambda failed: log_dead_letter(log, failed),
        )  # fmt: skip
        self.core.subscribe([CONSOLE_REQUESTS], self.assigned, self.revoked)
        self.carried = 0
        self.refused = 0

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, requests behind the end) of the assigned request partitions."""
        return self.core.lag()

    def run(self, stop: threading.Event) -> None:
        """Carry out requests until ``stop`` is set; then leave the group and close the clients.

        Raises:
            streams.runtime.transactions.TransactionRefused: the principal may not write a target.
        """
        self.core.run(stop, self)

    def assigned(self, partitions: list[TopicPartition]) -> Mapping[tuple[str, int], int]:
        """Start each assigned partition where its last committed progress resumes (else at the group's
        offset)."""
        return {key: done.resume for key, done in self._progress.assigned(partitions).items()}

    def revoked(self, partitions: list[TopicPartition]) -> None:
        """Nothing is kept per partition between batches."""

    def prepare(self) -> None:
        """Nothing to follow between batches (the outcomes are read when requests come)."""

    def close(self) -> None:
        """Close the readers."""
        self._letters.close()
        self._progress.close()
        self._outcomes.close()

    def step(self, messages: list[Message]) -> Step | None:
        """Check every request of the batch: what they write, their outcomes, dead letters and the
        position, as one step."""
        if not messages:
            return None
        self._outcomes.refresh()
        done = set(self._outcomes.done)
        carried: list[Carried] = []
        outcomes: list[ConsoleRequestOutcome] = []
        failed: list[Rejected] = []
        read: dict[tuple[str, int], int] = {}
        for message in messages:
            record = SourceRecord.from_message(message)
            read[(record.topic, record.partition)] = record.offset + 1
            decoded = decode_record(self._serde, record, ConsoleRequest)
            if isinstance(decoded, Rejected):
                failed.append(decoded)
                continue
            request = decoded.value
            result = check(request, self._evidence(request, done), self._serde)
            outcomes.append(outcome_of(request, result))
            if isinstance(result, Carried):
                carried.append(result)
                done.update(marks(request.action, request.request_id, request.target))
        outputs = [Output(c.topic, c.key, c.value, c.headers, c.partition) for c in carried]
        outputs += [
            Output(
                CONSOLE_REQUEST_OUTCOMES,
                o.target.encode(),
                self._serde.encode(o, topic=CONSOLE_REQUEST_OUTCOMES),
            )
            for o in outcomes
        ]
        offsets = self.core.positions(read)
        progress = [
            self._progress.record(tp.topic, tp.partition, Progress(tp.offset, tp.offset)) for tp in offsets
        ]

        def committed(_tracked: Mapping[int, int]) -> None:
            for outcome in outcomes:
                self._outcomes.add(outcome)
                level = logging.INFO if outcome.outcome == OK else logging.WARNING
                log.log(level, "requests: %s %s of %s by %s: %s %s", outcome.action, outcome.target,
                        outcome.topic, outcome.user, outcome.outcome, outcome.reason)  # fmt: skip
            self.carried += len(carried)
            self.refused += len(outcomes) - len(carried)

        return Step(failed, outputs, progress, offsets, done=committed)

    def _evidence(self, request: ConsoleRequest, done: set[str]) -> Evidence:
        """What :func:`check` needs of ``request``: the dead letter it names and its source record."""
        already = any(mark in done for mark in marks(request.action, request.request_id, request.target))
        where = coordinates(request.target) if request.action == RequestAction.REDRIVE else None
        if where is None or already or where.topic not in DEAD_LETTER_QUEUES:
            return Evidence(done=already)  # nothing to read: the check refuses what is not a dead letter
        found = self._read(where.topic, where.partition, where.offset)
        if found is None or found.value() is None:
            return Evidence()
        try:
            letter = self._serde.decode(found.value(), DeadLetter, topic=where.topic)  # type: ignore[arg-type]
        except SchemaDecodeError as exc:
            return Evidence(unreadable=str(exc))
        original = self._read(letter.topic, letter.partition, letter.offset)
        return Evidence(
            letter, original=None if original is None else Original(original.key(), original.value())
        )

    def _read(self, topic: str, partition: int, offset: int) -> Message | None:
        """The committed record at ``topic[partition]@offset`` (None: there is none, or no such topic)."""
        try:
            if partition not in partitions(self._letters, topic, READ_TIMEOUT_S):
                return None
            first, end = watermark_offsets(self._letters, topic, partition, READ_TIMEOUT_S)
        except Exception as exc:  # an unknown topic's metadata error: no such record
            log.warning("requests: %s[%s] not readable: %s", topic, partition, exc)
            return None
        if not first <= offset < end:
            return None
        for message in read_to_end(
            self._letters, {topic: {partition: offset}}, READ_TIMEOUT_S, named_only=True
        ):
            return message if message.offset() == offset else None
        return None


def outcome_of(request: ConsoleRequest, result: Carried | Refused) -> ConsoleRequestOutcome:
    """What the runtime records of ``request`` given what :func:`check` made of it, stamped now."""
    carried = isinstance(result, Carried)
    return ConsoleRequestOutcome(
        request_id=request.request_id, event_time=datetime.now(UTC), user=request.user,
        action=request.action, target=request.target, topic=request.topic,
        partition=result.partition if isinstance(result, Carried) else None,
        outcome=OK if carried else REFUSED, reason="" if isinstance(result, Carried) else result.reason,
    )  # fmt: skip


def build_requests(settings: Settings, bootstrap: str, metrics: LoopMetrics) -> RequestLoop:
    """The request runtime of this worker process (``clingate worker --role requests``)."""
    from schemas.wire import make_serde

    return RequestLoop(settings, bootstrap, make_serde(settings.schema_registry_url), metrics)
