"""The Faust application of a clingate worker: topics, tables, the DBPM memory agent and the clinical agent.

:func:`create_app` builds one app from :class:`~streams.settings.Settings`; nothing happens at
import time. ``clingate worker`` runs it (:mod:`streams.commands.worker`).

Choices (reasons in ``docs/faust-runtime.md``):

* ``processing_guarantee="at_least_once"`` with effectively-once state: Faust's exactly-once does
  not cover outputs on other partitions, never persists the changelog offset (full replay on every
  restart) and does not roll back the local store. State is made exactly-once by
  :mod:`streams.tablestore` (durable only after the changelog acknowledged it, whole groups,
  re-delivered input skipped by offset).
* The DBPM gate is not a Faust agent: it is a confluent-kafka consumer group (:mod:`streams.gate`)
  that ``clingate worker`` runs next to this app (docs/faust-runtime.md section 4: Faust's
  per-event path cost ~85% of the gate's CPU).
* Every agent has ``concurrency=1`` (faust-streaming#606: commits past in-flight events).
* The consumer is :class:`streams.faust_consumer.PositionSafeConsumer` (broker URL scheme
  ``clingate-kafka://``): Faust's own drops fetched records it did not hand over without moving the
  partition's position back, which stalled a survivor after a rebalance (docs/faust-runtime.md
  section 6).
* The memory is a :class:`faust.GlobalTable` whose changelog has as many partitions as the verdict
  topic, on our store (URL scheme :data:`streams.tablestore.STORE_SCHEME`), with raw bytes keys and
  values (the engine encodes its records).
* Catalog topics are not declared by Faust (``internal=False``); ``topics/`` creates them. Faust
  creates only its own internal topics (the changelog, the assignor's leader topic).
* The clinical agent (:mod:`streams.clinical`) runs on the same app: one agent over the three
  patient-keyed topics, its patient table a partitioned :class:`faust.Table` on the same store.
* Records are raw bytes for Faust; :mod:`schemas.serde` encodes and decodes them.
* Producer linger 5 ms, 1 MiB batches, 5,000 records per poll, 64k stream buffer: fewer produce
  requests and fewer hand-offs per event (measured on the former Faust gate agent: ~20% less worker
  CPU per candidate).
"""

from __future__ import annotations

from collections.abc import Iterator

import faust
from faust.stores import STORES
from faust.types import StreamT, TopicT

from processors.clinical.knowledge import default_knowledge
from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology
from schemas.serde import make_serde
from streams.clinical import INPUTS as CLINICAL_INPUTS
from streams.clinical import ClinicalAgent, gate_flags
from streams.dbpm import MEMORY_INPUTS, MEMORY_TABLE, MemoryAgent
from streams.faust_consumer import TRANSPORT_SCHEME
from streams.faust_consumer import register as register_transport
from streams.kafka_config import faust_credentials
from streams.metrics import ClinicalMetrics, DbpmMetrics, faust_sensors
from streams.settings import Settings
from streams.tablestore import STORE_SCHEME, ChangelogStore
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_SAFETY_AUDITS,
    DBPM_PROPAGATIONS,
    dlq_name,
)

#: Name of the clinical patient table (changelog ``<app id>-clinical-patients-changelog``).
PATIENT_TABLE = "clinical-patients"


def dbpm_engines(settings: Settings) -> tuple[DBPMEngine, DBPMEngine]:
    """The memory engine and the gate engine (maintenance off: gates never maintain the view)."""
    config = DBPMConfig().with_flags(
        cross_task=settings.dbpm_cross_task, maintenance=settings.dbpm_maintenance
    )
    ontology = load_ontology()
    return DBPMEngine(config, ontology), DBPMEngine(config.with_flags(maintenance=False), ontology)


def _lag(app: faust.App, topics: tuple[str, ...]) -> Iterator[tuple[str, int, int]]:
    """(topic, partition, end offset - committed offset) of the app's assigned input partitions."""
    monitor = app.monitor
    for tp, end in list(monitor.tp_end_offsets.items()):
        if tp.topic in topics:
            yield tp.topic, tp.partition, max(end - monitor.tp_committed_offsets.get(tp, 0), 0)


def create_app(settings: Settings, bootstrap: str, metrics: DbpmMetrics) -> faust.App:
    """Build the worker's Faust app.

    Args:
        settings: the process settings (ids, ports, data directory, DBPM flags, batching).
        bootstrap: Kafka bootstrap servers, ``host:port[,host:port...]``.
        metrics: the process's DBPM metrics; their registry is served at ``/metrics`` on the web port.

    Returns:
        The app, its agents registered; run it with :class:`faust.Worker`.
    """
    STORES.aliases[STORE_SCHEME] = f"{ChangelogStore.__module__}:{ChangelogStore.__qualname__}"
    register_transport()
    partitions = settings.topic_partitions
    app = faust.App(
        settings.app_id,
        broker=[f"{TRANSPORT_SCHEME}://{host}" for host in bootstrap.split(",")],
        # The same principal and transport as every confluent-kafka client (streams.kafka_config).
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

    # bytes key and value types give the raw serializers (Collection._serializer_from_type).
    memory = app.GlobalTable(
        MEMORY_TABLE, partitions=partitions, key_type=bytes, value_type=bytes,
        help="DBPM memory records, partitioned by signature.",
    )  # fmt: skip
    engine, _ = dbpm_engines(settings)
    serde = make_serde(settings.schema_registry_url)
    faust_sensors(app, metrics.registry)
    agent = MemoryAgent(
        engine,
        memory.data,  # type: ignore[arg-type]
        serde,
        {
            "propagations": topic(DBPM_PROPAGATIONS),
            **{dlq_name(t): topic(dlq_name(t), topic_partitions=1) for t in MEMORY_INPUTS},
        },
        metrics,
    )
    metrics.watch(lambda: _lag(app, (*MEMORY_INPUTS, *CLINICAL_INPUTS)), agent.view, engine.config)
    batch, linger = settings.dbpm_batch_max, settings.dbpm_batch_linger_s

    async def dbpm_memory(stream: StreamT) -> None:
        async for events in stream.take_events(batch, within=linger):
            await agent.apply_memory_inputs(events)

    # One agent over both memory inputs: Faust assigns partition p of each to the same worker.
    app.agent(topic(*MEMORY_INPUTS), name="dbpm-memory", concurrency=1)(dbpm_memory)

    patients = app.Table(
        PATIENT_TABLE, partitions=partitions, key_type=bytes, value_type=bytes,
        help="Clinical stream state per patient (latest FHIR resources, review, last assessment digest).",
    )  # fmt: skip
    clinical = ClinicalAgent(
        patients.data,  # type: ignore[arg-type]
        serde,
        default_knowledge(),
        gate_flags(settings),
        {
            CLINICAL_ASSESSMENTS: topic(CLINICAL_ASSESSMENTS),
            CLINICAL_SAFETY_AUDITS: topic(CLINICAL_SAFETY_AUDITS),
            **{dlq_name(t): topic(dlq_name(t), topic_partitions=1) for t in CLINICAL_INPUTS},
        },
        ClinicalMetrics(metrics.registry),
    )

    async def clinical_patients(stream: StreamT) -> None:
        async for events in stream.take_events(batch, within=linger):
            await clinical.process(events)

    app.agent(topic(*CLINICAL_INPUTS), name="clinical-patients", concurrency=1)(clinical_patients)
    return app
