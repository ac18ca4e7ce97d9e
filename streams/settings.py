"""The one settings object of a clingate process.

The environment is read here and nowhere else: every setting declares its environment
variable, its default and what it means. Commands build one :class:`Settings` at start-up
and pass it (or the values in it) down; processors never see the environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
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
    docs_trap_rules: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_DOCS_TRAP_RULES",
        description="YAML of the classification arbiter's V3 trap rules (vendor, keyword and "
        "header/footer rule sets). Unset: the packaged processors/docs/v3_trap_rules.yaml.",
    )
    docs_group_id: str = Field(
        default="clingate-docs",
        validation_alias="CLINGATE_DOCS_GROUP_ID",
        description="Consumer group of `clingate docs worker` (its own group: the arbiter is not a Faust "
        "agent, see streams/docs.py).",
    )
    docs_max_in_flight: int = Field(
        default=32,
        ge=1,
        validation_alias="CLINGATE_DOCS_MAX_IN_FLIGHT",
        description="Documents the docs worker verifies at once (their LLM calls overlap); at the bound "
        "it pauses its partitions until one finishes.",
    )

    # --- LLM serving (streams.llm). Role URL > CLINGATE_LLM_URL > none (the role's LLM phases are off).
    llm_url: str | None = Field(
        default=None,
        validation_alias="CLINGATE_LLM_URL",
        description="Base URL of an OpenAI-compatible server (vLLM), including /v1, e.g. "
        "http://127.0.0.1:8000/v1. Serves every LLM call unless a role URL overrides it. "
        "Unset (and no role URL): LLM phases are off and say so.",
    )
    generator_url: str | None = Field(
        default=None,
        validation_alias="CLINGATE_GENERATOR_URL",
        description="Base URL of the generator server (extraction calls); overrides CLINGATE_LLM_URL.",
    )
    verifier_url: str | None = Field(
        default=None,
        validation_alias="CLINGATE_VERIFIER_URL",
        description="Base URL of the verifier server (verdict calls); overrides CLINGATE_LLM_URL.",
    )
    llm_model: str | None = Field(
        default=None,
        validation_alias="CLINGATE_LLM_MODEL",
        description="Served model name sent with every LLM call unless a role model overrides it.",
    )
    generator_model: str | None = Field(
        default=None,
        validation_alias="CLINGATE_GENERATOR_MODEL",
        description="Served model name of the generator; overrides CLINGATE_LLM_MODEL.",
    )
    verifier_model: str | None = Field(
        default=None,
        validation_alias="CLINGATE_VERIFIER_MODEL",
        description="Served model name of the verifier; overrides CLINGATE_LLM_MODEL.",
    )
    llm_api_key: SecretStr | None = Field(
        default=None,
        validation_alias="CLINGATE_LLM_API_KEY",
        description="Bearer token for servers started with `vllm serve --api-key`; unset: no header.",
    )
    llm_timeout_s: float = Field(
        default=180.0,
        gt=0,
        validation_alias="CLINGATE_LLM_TIMEOUT_S",
        description="Per-attempt deadline of one LLM call in seconds (DBPM paper Table 14: 180 s).",
    )
    llm_max_retries: int = Field(
        default=3,
        ge=0,
        validation_alias="CLINGATE_LLM_MAX_RETRIES",
        description="Retries after the first attempt for transient failures (paper A.3: three).",
    )
    llm_max_in_flight: int = Field(
        default=64,
        ge=1,
        validation_alias="CLINGATE_LLM_MAX_IN_FLIGHT",
        description="Concurrent requests per server (paper A.3: 64-way effective concurrency).",
    )

    @field_validator(
        "llm_url", "generator_url", "verifier_url", "llm_model", "generator_model", "verifier_model"
    )
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        # `export CLINGATE_LLM_URL=` must mean "off", not "a server at the empty URL".
        if value is None or not value.strip():
            return None
        return value.strip()
    clinical_tier_b_class_maps: bool = Field(
        default=False,
        validation_alias="CLINGATE_CLINICAL_TIER_B",
        description="Clinical gates: ESC-021 Tier B class-level NTI maps (opioids, benzodiazepines).",
    )
    clinical_esc032_staleness: bool = Field(
        default=False,
        validation_alias="CLINGATE_CLINICAL_ESC032",
        description="Clinical gates: ESC-032, stale monitoring dependencies escalate the traffic light.",
    )
    clinical_esc033_compound: bool = Field(
        default=False,
        validation_alias="CLINGATE_CLINICAL_ESC033",
        description="Clinical gates: ESC-033, NTI ELEVATED + stale NTI monitoring parameter -> RED.",
    )
    clinical_esc033_min_class: Literal["STALE", "PROFOUNDLY_STALE"] = Field(
        default="PROFOUNDLY_STALE",
        validation_alias="CLINGATE_CLINICAL_ESC033_MIN_CLASS",
        description="Clinical gates: staleness class ESC-033 needs (the seed proposes PROFOUNDLY_STALE).",
    )
    clinical_rule_a_enforced: bool = Field(
        default=False,
        validation_alias="CLINGATE_CLINICAL_RULE_A",
        description="Clinical gates: Rule A (automation bias) sets the production light (default: shadow).",
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
    commit_interval_s: float = Field(
        default=2.8,
        gt=0,
        validation_alias="CLINGATE_COMMIT_INTERVAL_S",
        description="How often a worker commits the input offsets it has processed (after flushing its "
        "outputs). Faust's default; `replay --via-kafka` waits for these commits between runs, so replay "
        "workers SHOULD use a short interval (0.1 s).",
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
