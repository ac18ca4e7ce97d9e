"""The one settings object of a clingate process.

The environment is read here and nowhere else: every setting declares its environment
variable, its default and what it means. Commands build one :class:`Settings` at start-up
and pass it (or the values in it) down; processors never see the environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Process-wide configuration, frozen once read."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    kafka_bootstrap_servers: str | None = Field(
        default=None,
        validation_alias="KAFKA_BOOTSTRAP_SERVERS",
        description="Bootstrap address of an existing Kafka cluster. Unset: clingate starts its own "
        "broker (testcontainers where Docker works, else a native KRaft broker).",
    )
    schema_registry_url: str | None = Field(
        default=None,
        validation_alias="CLINGATE_SCHEMA_REGISTRY_URL",
        description="Confluent Schema Registry URL. Set: values use the registry wire format; "
        "unset: Avro single-object encoding.",
    )
    home: Path = Field(
        default=Path.home() / ".cache" / "clingate",
        validation_alias="CLINGATE_HOME",
        description="Cache directory for broker artifacts, broker data and worker state.",
    )
    broker_dir: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_BROKER_DIR",
        description="Directory of the broker that `clingate broker start|stop|status` manages "
        "(data, logs, pid file). Default: <CLINGATE_HOME>/broker.",
    )
    topic_partitions: int = Field(
        default=6,
        ge=1,
        validation_alias="CLINGATE_TOPIC_PARTITIONS",
        description="Partitions of every data topic in the catalog (the unit of consumer parallelism; "
        "dead-letter topics always get 1).",
    )
    topic_replication: int = Field(
        default=1,
        ge=1,
        validation_alias="CLINGATE_TOPIC_REPLICATION",
        description="Replication factor of every catalog topic: 1 on a single local broker, 3 on a "
        "production cluster.",
    )

    app_id: str = Field(
        default="clingate-dbpm",
        validation_alias="CLINGATE_APP_ID",
        description="Faust application id: the consumer group of the DBPM workers and the prefix of "
        "their changelog topics. Workers of one deployment share it.",
    )
    worker_datadir: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_WORKER_DATADIR",
        description="Local state of one worker (RocksDB tables). Two workers MUST NOT share it "
        "(RocksDB LOCK). Default: <CLINGATE_HOME>/worker.",
    )
    web_port: int = Field(
        default=6066,
        ge=0,
        le=65535,
        validation_alias="CLINGATE_WEB_PORT",
        description="Port of the worker's web endpoint (/metrics in Prometheus text format).",
    )
    table_standby_replicas: int = Field(
        default=1,
        ge=0,
        validation_alias="CLINGATE_TABLE_STANDBY_REPLICAS",
        description="Standby copies of each partitioned table kept warm on other workers for fast failover.",
    )
    consumer_session_timeout_s: float = Field(
        default=30.0,
        ge=6.0,
        validation_alias="CLINGATE_CONSUMER_SESSION_TIMEOUT_S",
        description="How long the group waits for a silent worker before its partitions move to the "
        "others (a SIGKILLed worker is noticed only after this). The broker admits 6 s to 300 s.",
    )
    dbpm_batch_max: int = Field(
        default=500,
        ge=1,
        validation_alias="CLINGATE_DBPM_BATCH_MAX",
        description="Most input events one agent step processes before it sends outputs and stages "
        "state (the unit of delivery waiting and of the changelog group).",
    )
    dbpm_batch_linger_s: float = Field(
        default=0.005,
        gt=0,
        validation_alias="CLINGATE_DBPM_BATCH_LINGER_S",
        description="Longest wait to fill a batch; bounds the latency a batch adds.",
    )
    dbpm_barrier_timeout_s: float = Field(
        default=5.0,
        ge=0,
        validation_alias="CLINGATE_DBPM_BARRIER_TIMEOUT_S",
        description="Longest time a gate waits for every memory partition to reach its event time "
        "(only candidates with the clingate-barrier header wait, e.g. replays) before it decides on the "
        "view it has (then recorded in the decision's provenance).",
    )

    dbpm_cross_task: bool = Field(
        default=True,
        validation_alias="CLINGATE_DBPM_CROSS_TASK",
        description="DBPM cross-task propagation (paper §4.4). Off for event-for-event comparisons "
        "with the in-process engine.",
    )
    dbpm_maintenance: bool = Field(
        default=True,
        validation_alias="CLINGATE_DBPM_MAINTENANCE",
        description="DBPM event-time maintenance (pruning, caps, hit-counter decay, paper §4.6), per "
        "memory partition. Off for event-for-event comparisons.",
    )

    @property
    def worker_dir(self) -> Path:
        """The worker's data directory (``worker_datadir`` or ``<home>/worker``)."""
        return self.worker_datadir or self.home / "worker"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Read the environment once per process."""
    return Settings()
