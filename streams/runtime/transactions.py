"""One Kafka transaction per batch, and the one abort policy of every loop that writes in transactions.

Every transactional loop (the table loops, the gate, the LLM groups and the arbiter) commits a batch as
:meth:`TransactionalProducer.run`: begin, let the loop produce the batch's records into a
:class:`Batch`, commit. What a fault does to the batch is decided here, once:

* **Committed**: every record was acknowledged and the commit went through; the loop moves on.
* **Aborted** (``run`` returns None): anything a restart would get past, a broker that went away, paused,
  moved its coordinator or lost the batch's records, the coordinator ending an epoch the producer
  outlived (a transaction that lasted longer than :data:`TRANSACTION_TIMEOUT_MS`), a producer fenced or
  left in a fatal state. The transaction is aborted (or, where the producer can no longer abort, the
  producer is replaced by a new one under the same transactional id, whose ``init_transactions`` aborts
  what the old one left open), and the loop rewinds: nothing of the batch happened, so it is read and
  applied again. A ``read_committed`` reader never sees an aborted batch's records.
* **Refused** (a :class:`TransactionRefused` is raised): what no retry and no restart can fix, a record
  the broker or librdkafka will never take (too large, invalid) or a principal the cluster does not
  authorise. The loop stops with that one line; everything else is ridden out.

librdkafka classifies its transaction errors (``txn_requires_abort``, ``retriable``, ``fatal``) on what
the transactional API returns, but not on what ``produce()`` raises or a delivery report carries (a
producer in a fatal state raises ``_FATAL`` with ``fatal()`` false, a paused broker times a record out
with neither flag): so the policy reads the error codes that no retry can fix and treats every other
failure as one to abort and ride out.

Retries are bounded per call, never in number: a commit that times out is asked again every
:data:`COMMIT_STEP_S` for as long as the broker does not answer, and a new producer's
``init_transactions`` likewise, each attempt logged once. A worker therefore waits out an outage of any
length, and its stop (``stop``) ends the wait.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from streams.runtime.kafka_clients import produce_waiting

log = logging.getLogger(__name__)

#: Bound of one transactional API call (commit, abort, init); a timed-out call is made again.
COMMIT_STEP_S = 10.0
#: How long an open transaction of a dead member holds back ``read_committed`` readers of its
#: topics before the coordinator aborts it. A batch's transaction lasts milliseconds; the broker's
#: default (60 s) would stall the readers of a loop's outputs for a minute after every SIGKILL.
TRANSACTION_TIMEOUT_MS = 10_000
#: Wait between two attempts to open a producer while the cluster does not answer.
RETRY_S = 1.0

#: Errors no retry and no restart gets past: a record too large or invalid for any broker, or a
#: principal the cluster refuses (authentication or authorisation). Everything else is ridden out.
REFUSED: frozenset[int] = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD, KafkaError._INVALID_ARG,
    KafkaError.INVALID_CONFIG, KafkaError.INVALID_TRANSACTION_TIMEOUT,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION,
    KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT, KafkaError.UNSUPPORTED_VERSION,
})  # fmt: skip


class TransactionRefused(RuntimeError):
    """The cluster refuses the loop's writes for a reason no retry or restart fixes (:data:`REFUSED`)."""


class _Failed(Exception):
    """A record of the batch was not taken: the transaction is aborted."""


def _error(exc: BaseException) -> KafkaError | None:
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def _refused(name: str, error: KafkaError) -> TransactionRefused:
    return TransactionRefused(
        f"{name}: the cluster refuses the loop's writes: {error.str()} ({error.name()})"
    )


class Batch:
    """The open transaction a loop fills: :meth:`produce` as ``Producer.produce``, with the loop's
    delivery callbacks kept and every failure recorded for the commit to see."""

    def __init__(self, producer: Producer, name: str) -> None:
        self._producer = producer
        self._name = name
        self.failures: list[KafkaError] = []
        """Delivery failures reported so far (a failed batch is aborted)."""
        self.topics: list[str] = []
        """The topic of every record produced, in order (the loop counts them once committed)."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
    ) -> None:
        """Produce one record of the batch; while librdkafka's local queue is full, serve delivery
        reports (which lets it send) and try again.

        Raises:
            TransactionRefused: librdkafka will never take the record (:data:`REFUSED`).
        """
        if self.failures:
            raise _Failed  # already lost: the batch is aborted at once instead of filled for nothing
        report = self._report if on_delivery is None else self._reporting(on_delivery)
        kwargs: dict[str, object] = {"key": key, "value": value, "on_delivery": report}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        try:
            produce_waiting(self._producer, topic, **kwargs)
        except KafkaException as exc:
            error = _error(exc)
            if error is not None and error.code() in REFUSED:
                raise _refused(self._name, error) from exc
            self.failures.append(error or KafkaError(KafkaError._FAIL, str(exc)))
            raise _Failed from exc
        self.topics.append(topic)

    def _report(self, error: KafkaError | None, _message: Message) -> None:
        """The delivery report of a record without a callback of its own (most records: one bound
        method, no closure per record): a failure is recorded."""
        if error is not None:
            self.failures.append(error)

    def _reporting(
        self, on_delivery: Callable[[KafkaError | None, Message], None]
    ) -> Callable[[KafkaError | None, Message], None]:
        """The delivery report of a record with callback ``on_delivery``: a failure is recorded, a
        delivery handed to it."""

        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                self.failures.append(error)
            else:
                on_delivery(error, message)

        return report


class TransactionalProducer:
    """A loop's transactional producer under one transactional id, with the abort policy (module
    docstring): :meth:`run` commits a batch or aborts it, and replaces the producer where it must.

    Args:
        config: the producer's settings, ``transactional.id`` included.
        name: the loop, in log lines.
    """

    def __init__(self, config: dict[str, object], name: str) -> None:
        self._config = {"transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, **config}
        self._name = name
        self.stop = threading.Event()
        """Set by the loop when it stops: ends the waits of an outage."""
        self.producer = self._open()

    def run(self, fill: Callable[[Batch], None], confirm: Callable[[], bool] | None = None) -> Batch | None:
        """Begin a transaction, let ``fill`` produce the batch into it, commit; the filled
        :class:`Batch` when committed, None when aborted (the caller rewinds and applies it again).

        ``fill`` is called once. It produces only through the batch; what else it does it must be able
        to undo (the caller's rewind), as an aborted batch never happened. ``confirm``, when given, is
        asked once every record is acknowledged, just before the commit: False aborts the batch (the
        caller learnt meanwhile that the batch is no longer its own to commit).

        Raises:
            TransactionRefused: the cluster refuses the writes for good (:data:`REFUSED`).
        """
        batch = Batch(self.producer, self._name)
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:  # a producer left in a fatal state: a new one, and the batch again
            self._renew(exc)
            return None
        try:
            fill(batch)
            # Delivery failures surface at the flush; without it the commit would fail on them anyway.
            self.producer.flush(COMMIT_STEP_S)
        except _Failed:
            self._abort(batch.failures[0])
            return None
        if batch.failures:
            self._abort(batch.failures[0])
            return None
        if confirm is not None and not confirm():
            self._abort_open()
            return None
        return batch if self._commit() else None

    def _commit(self) -> bool:
        """Commit the open transaction; False if it was aborted instead. A timed-out commit is asked
        again (librdkafka: the same call resumes it) until the broker answers or the loop stops."""
        while True:
            try:
                self.producer.commit_transaction(COMMIT_STEP_S)
                return True
            except KafkaException as exc:
                error = _error(exc)
                if error is not None and error.retriable() and not self.stop.is_set():
                    log.warning("%s: the transaction's commit is not confirmed yet (%s); asked again",
                                self._name, error.str())  # fmt: skip
                    continue
                self._abort(error or KafkaError(KafkaError._FAIL, str(exc)))
                return False

    def _abort(self, cause: KafkaError) -> None:
        """Abort the open transaction after ``cause``; replace the producer where it cannot abort."""
        if cause.code() in REFUSED:
            raise _refused(self._name, cause)
        log.warning("%s: a batch was not committed (%s); it is applied again", self._name, cause.str())
        self._abort_open()

    def _abort_open(self) -> None:
        """Abort the open transaction, asked again while the coordinator does not answer; the producer
        is replaced where it cannot abort."""
        while True:
            try:
                self.producer.abort_transaction(COMMIT_STEP_S)
                return
            except KafkaException as exc:
                error = _error(exc)
                if error is not None and error.retriable() and not self.stop.is_set():
                    continue  # the coordinator does not answer yet: the same abort, asked again
                self._renew(exc)
                return

    def _renew(self, cause: KafkaException) -> None:
        """Replace the producer by a new one under the same transactional id (it takes a new epoch
        and aborts what the old one left open)."""
        error = _error(cause)
        log.warning("%s: the producer cannot go on (%s); a new one takes its transactional id",
                    self._name, error.str() if error is not None else cause)  # fmt: skip
        self.producer.purge()
        self.producer = self._open()

    def _open(self) -> Producer:
        """A new producer with its transactions initialised, retried while the cluster does not answer."""
        while True:
            producer = Producer(self._config)
            try:
                producer.init_transactions(COMMIT_STEP_S)
                return producer
            except KafkaException as exc:
                error = _error(exc)
                if error is not None and error.code() in REFUSED:
                    raise _refused(self._name, error) from exc
                if self.stop.is_set():
                    raise
                log.warning("%s: the transaction coordinator does not answer (%s); tried again",
                            self._name, error.str() if error is not None else exc)  # fmt: skip
                self.stop.wait(RETRY_S)
