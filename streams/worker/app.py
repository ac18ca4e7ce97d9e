"""The Faust application of a clingate worker: the clinical agent and its patient table.

:func:`create_app` builds one app from :class:`~streams.runtime.settings.Settings`; nothing happens at
import time. ``clingate worker`` runs it (:mod:`streams.cli.worker`).

Choices (reasons in ``docs/faust-runtime.md``):

* ``processing_guarantee="at_least_once"`` with effectively-once state: Faust's exactly-once does
  not cover outputs on other partitions, never persists the changelog offset (full replay on every
  restart) and does not roll back the local store. State is made exactly-once by
  :mod:`streams.worker.tablestore` (durable only after the changelog acknowledged it, whole groups,
  re-delivered input skipped by offset).
* The DBPM gate and the DBPM memory agent are not Faust agents: they are confluent-kafka consumer
  groups (:mod:`streams.worker.gate`, :mod:`streams.worker.memory`) that ``clingate worker`` runs next
  to this app (docs/faust-runtime.md section 4: Faust's per-event path cost ~85% of their CPU).
* Every agent has ``concurrency=1`` (faust-streaming#606: commits past in-flight events).
* The consumer is :class:`streams.worker.faust_consumer.PositionSafeConsumer` (broker URL scheme
  ``clingate-kafka://``): Faust's own drops fetched records it did not hand over without moving the
  partition's position back, which stalled a survivor after a rebalance (docs/faust-runtime.md
  section 6).
* Catalog topics are not declared by Faust (``internal=False``); ``topics/`` creates them. Faust
  creates only its own internal topics (the changelog, the assignor's leader topic).
* The clinical agent (:mod:`streams.worker.clinical`): one agent over the three patient-keyed topics,
  its patient table a partitioned :class:`faust.Table` on our store (URL scheme
  :data:`streams.worker.tablestore.STORE_SCHEME`), with raw bytes keys and values.
* Records are raw bytes for Faust; :mod:`schemas.serde` encodes and decodes them.
* No record is acknowledged unless applied or dead-lettered. The agents handle every record's failure
  themselves (dead letter, state unchanged), so nothing a producer sends makes them raise. An error
  in a batch that escapes anyway (a bug, a broker that rejects a write) stops the worker at once
  (:func:`fail_stop`): Faust's take buffer acknowledges its batch when the body raises, and a
  supervisor restart would commit records never applied. The partitions' uncommitted records then go
  to their next owner. Crashes in Faust's own stream machinery still restart the agent; each restart
  is logged with its cause and counted (``clingate_agent_restarts_total``).
* The producer admits the largest record a dead-letter topic holds (``producer_max_request_size``):
  aiokafka's 1 MB default rejected the dead letter of a 2 MB record. The tables' changelogs admit what
  the data topics do (:data:`CHANGELOG_CONFIGS`, applied when Faust creates them; a changelog created
  before keeps its limit until ``max.message.bytes`` is raised on it).
* Producer linger 5 ms, 1 MiB batches, 5,000 records per poll, 64k stream buffer: fewer produce
  requests and fewer hand-offs per event (measured on the former Faust gate agent: ~20% less worker
  CPU per candidate).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn

import faust
from faust.stores import STORES
from faust.types import AgentT, EventT, StreamT, TopicT

from processors.clinical.knowledge import default_knowledge
from schemas.serde import Serde, make_serde
from streams.runtime.dlq import SourceRecord, send_dead_letter
from streams.runtime.kafka_config import faust_credentials
from streams.runtime.metrics import ClinicalMetrics, DbpmMetrics, faust_sensors
from streams.runtime.settings import Settings
from streams.worker.clinical import INPUTS as CLINICAL_INPUTS
from streams.worker.clinical import ClinicalHandler, gate_flags
from streams.worker.faust_consumer import TRANSPORT_SCHEME
from streams.worker.faust_consumer import register as register_transport
from streams.worker.tablestore import STORE_SCHEME, ChangelogStore, TableHandler
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_SAFETY_AUDITS,
    DATA_MAX_MESSAGE_BYTES,
    MAX_MESSAGE_BYTES,
    dlq_name,
)

log = logging.getLogger(__name__)

#: Name of the clinical patient table (changelog ``<app id>-clinical-patients-changelog``).
PATIENT_TABLE = "clinical-patients"
#: Exit status of a worker stopped by :func:`fail_stop` (``EX_SOFTWARE``).
AGENT_FAILED_EXIT = 70
#: Configs of the patient table's changelog (Faust creates it): it admits records as large as the data
#: topics, since a patient's state holds its FHIR resources; at the broker's ~1 MB default a valid large
#: input could not be staged, and the worker stopped on it every time.
CHANGELOG_CONFIGS = {"max.message.bytes": str(DATA_MAX_MESSAGE_BYTES)}


def fail_stop(agent: str, error: Exception) -> NoReturn:
    """Stop the process at once after ``agent`` raised on a batch, before anything acknowledges it.

    ``os._exit``: a clean stop would commit the offsets Faust's take buffer acknowledges as the body
    unwinds, and the batch's unapplied records would be lost.
    """
    log.critical(
        "agent %s failed on a batch (%s: %s); stopping the worker without acknowledging it, its records "
        "go to the partitions' next owner", agent, type(error).__name__, error,
        exc_info=error, extra={"error_type": type(error).__name__},
    )  # fmt: skip
    logging.shutdown()
    os._exit(AGENT_FAILED_EXIT)


def batch_agent(
    name: str, batch: int, linger_s: float, process: Callable[[Sequence[EventT]], Awaitable[None]]
) -> Callable[[StreamT], Awaitable[None]]:
    """An agent body that hands ``process`` batches of at most ``batch`` events (``linger_s`` apart at
    most), and stops the worker (:func:`fail_stop`) if ``process`` raises."""

    async def body(stream: StreamT) -> None:
        async for events in stream.take_events(batch, within=linger_s):
            try:
                await process(events)
            except Exception as error:
                fail_stop(name, error)

    body.__name__ = name.replace("-", "_")
    return body


class TableAgent:
    """A Faust agent body over a table handler: batches per partition, sends, waits, stages.

    Everything a record means is the handler's (:class:`~streams.worker.tablestore.TableHandler`);
    this adapter only does what needs Faust, in the order that makes state exactly once: per
    partition of the batch, it sends the handler's dead letters and outputs and waits until the
    broker acknowledged every one, and only then stages the handler's changelog group
    (:meth:`~streams.worker.tablestore.ChangelogStore.stage`) and waits for it. Faust acknowledges
    the events when the body returns, so no input offset is committed before its outputs and its
    group are durable; a crash in between re-delivers the input, which the group's boundary (or the
    handler's own offset markers) lets the handler skip once durable.

    Args:
        handler: the per-partition logic.
        table: the table's store.
        serde: the process's serde (dead letters).
        topics: raw-bytes topics by name: every output topic and the dead-letter topic of every input.
    """

    def __init__(
        self, handler: TableHandler, table: ChangelogStore, serde: Serde, topics: Mapping[str, TopicT]
    ) -> None:
        self._handler = handler
        self._table = table
        self._serde = serde
        self._topics = topics

    async def process(self, events: Sequence[EventT]) -> None:
        """Process one batch, partition by partition; each partition's writes are one changelog group."""
        by_partition: dict[int, list[SourceRecord]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(SourceRecord.from_event(event))
        for partition, records in by_partition.items():
            batch = self._handler.apply(self._table, partition, records)
            for failed in batch.dead_letters:
                self._handler.dead_lettered(failed)
                await send_dead_letter(self._topics, self._serde, failed)
            sent: list[Awaitable[Any]] = []
            for out in batch.outputs:
                headers = list(out.headers) or None
                sent.append(await self._topics[out.topic].send(key=out.key, value=out.value, headers=headers))
            await asyncio.gather(*sent)  # outputs acknowledged before the group that stands for them
            if batch.writes is not None:
                await asyncio.gather(*self._table.stage(partition, batch.writes.items(), batch.input_offset))


def count_restarts(app: faust.App, metrics: DbpmMetrics) -> None:
    """Log and count every crash after which Faust's supervisor restarts one of ``app``'s agents.

    Faust calls the app's agent-error handler (it commits the consumer's offsets) before the restart;
    this wraps it, so it must run before the agents are created.
    """
    faust_handler = app._on_agent_error

    async def on_error(agent: AgentT, error: BaseException) -> None:
        name = agent.name.rsplit(".", 1)[-1]
        metrics.agent_restarts.labels(name, type(error).__name__).inc()
        log.error("agent %s crashed and is restarted by its supervisor: %s", name, error,
                  exc_info=error, extra={"error_type": type(error).__name__})  # fmt: skip
        await faust_handler(agent, error)

    app._on_agent_error = on_error  # type: ignore[method-assign]


def faust_lag(app: faust.App) -> Iterator[tuple[str, int, int]]:
    """(topic, partition, end offset - committed offset) of the app's assigned input partitions."""
    monitor = app.monitor
    for tp, end in list(monitor.tp_end_offsets.items()):
        if tp.topic in CLINICAL_INPUTS:
            yield tp.topic, tp.partition, max(end - monitor.tp_committed_offsets.get(tp, 0), 0)


def create_app(settings: Settings, bootstrap: str, metrics: DbpmMetrics) -> faust.App:
    """Build the worker's Faust app.

    Args:
        settings: the process settings (ids, ports, data directory, clinical flags, batching).
        bootstrap: Kafka bootstrap servers, ``host:port[,host:port...]``.
        metrics: the process's metrics; their registry is served at ``/metrics`` on the web port.

    Returns:
        The app, its agents registered; run it with :class:`faust.Worker`.
    """
    STORES.aliases[STORE_SCHEME] = f"{ChangelogStore.__module__}:{ChangelogStore.__qualname__}"
    register_transport()
    partitions = settings.topic_partitions
    app = faust.App(
        settings.app_id,
        broker=[f"{TRANSPORT_SCHEME}://{host}" for host in bootstrap.split(",")],
        # The same principal and transport as every confluent-kafka client (streams.runtime.kafka_config).
        broker_credentials=faust_credentials(settings),
        store=f"{STORE_SCHEME}://",
        datadir=str(settings.worker_dir),
        web_port=settings.web_port,
        processing_guarantee="at_least_once",
        table_standby_replicas=settings.table_standby_replicas,
        topic_partitions=partitions,
        topic_replication_factor=settings.topic_replication,
        key_serializer="raw",
        value_serializer="raw",
        producer_acks=-1,
        # Throughput (docs/faust-runtime.md section 4): decisions are sent in batches of 5 ms (the
        # default, 0, sends a produce request per ready batch: the socket write was the largest
        # single cost in the worker's profile), and the consumer hands the stream large fetches.
        producer_linger=0.005,
        producer_max_batch_size=1 << 20,
        producer_max_request_size=MAX_MESSAGE_BYTES,
        stream_buffer_maxsize=65536,
        broker_max_poll_records=5000,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.consumer_session_timeout_s,
        broker_commit_interval=settings.commit_interval_s,
        broker_heartbeat_interval=settings.consumer_session_timeout_s / 10,
        autodiscover=False,
    )

    def topic(*names: str, topic_partitions: int | None = None) -> TopicT:
        return app.topic(
            *names, partitions=topic_partitions or partitions, internal=False,
            key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
        )  # fmt: skip

    serde = make_serde(settings.schema_registry_url)
    faust_sensors(app, metrics.registry)
    batch, linger = settings.dbpm_batch_max, settings.dbpm_batch_linger_s
    count_restarts(app, metrics)
    # bytes key and value types give the raw serializers (Collection._serializer_from_type).
    patients = app.Table(
        PATIENT_TABLE, partitions=partitions, key_type=bytes, value_type=bytes,
        help="Clinical stream state per patient (latest FHIR resources, review, last assessment digest).",
        extra_topic_configs=CHANGELOG_CONFIGS,
    )  # fmt: skip
    clinical = TableAgent(
        ClinicalHandler(serde, default_knowledge(), gate_flags(settings), ClinicalMetrics(metrics.registry)),
        patients.data,  # type: ignore[arg-type]
        serde,
        {
            CLINICAL_ASSESSMENTS: topic(CLINICAL_ASSESSMENTS),
            CLINICAL_SAFETY_AUDITS: topic(CLINICAL_SAFETY_AUDITS),
            **{dlq_name(t): topic(dlq_name(t), topic_partitions=1) for t in CLINICAL_INPUTS},
        },
    )
    app.agent(topic(*CLINICAL_INPUTS), name="clinical-patients", concurrency=1)(
        batch_agent("clinical-patients", batch, linger, clinical.process)
    )
    return app
