"""The one settings object of a clingate process.

The environment is read here and nowhere else: every setting declares its environment
variable, its default and what it means. Commands build one :class:`Settings` at start-up
and pass it (or the values in it) down; processors never see the environment.

The settings are grouped by area, one class each (:class:`KafkaSettings`, :class:`DbpmSettings`, ...),
and :class:`Settings` inherits them all, so that code reads every setting as ``settings.<name>`` and
the settings table (``clingate config --markdown``, docs/configuration.md) shows one section per area.

Size: the module declares every setting of clingate with its meaning, one block each, and has no other
job; keeping it whole keeps the environment read in one place.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
"""Where the local broker's jars come from unless ``CLINGATE_MAVEN_REPOSITORY`` names a mirror."""


class _AliasedEnvironment(EnvSettingsSource):
    """The environment read by each setting's variable name only.

    ``populate_by_name`` lets code build :class:`Settings` by field name (``Settings(home=...)``), and
    with it pydantic-settings would also read a variable named like a field: ``HOME`` set ``home``,
    so every cache went to the user's home directory instead of ``~/.cache/clingate``.
    """

    def _extract_field_info(self, field: FieldInfo, field_name: str) -> list[tuple[str, str, bool]]:
        found = super()._extract_field_info(field, field_name)
        if field.validation_alias is None:
            return found
        return [info for info in found if info[0] != field_name]


class _Area(BaseModel):
    """The settings of one area of clingate, composed into :class:`Settings`.

    ``title`` heads the area's section of the settings table.
    """

    title: ClassVar[str]


class KafkaSettings(_Area):
    """How every clingate client reaches the cluster, authenticates and encodes values.

    :mod:`streams.runtime.kafka_config` turns the security settings into librdkafka's."""

    title: ClassVar[str] = "Kafka"

    kafka_bootstrap_servers: str | None = Field(
        default=None,
        validation_alias="KAFKA_BOOTSTRAP_SERVERS",
        description="Bootstrap address of an existing Kafka cluster. Unset: clingate starts its own "
        "broker (testcontainers where Docker works, else a native KRaft broker).",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        validation_alias="CLINGATE_KAFKA_SECURITY_PROTOCOL",
        description="How every clingate client talks to Kafka: PLAINTEXT (local broker), SASL_PLAINTEXT, "
        "SASL_SSL (production: SCRAM over TLS) or SSL.",
    )
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] = Field(
        default="SCRAM-SHA-512",
        validation_alias="CLINGATE_KAFKA_SASL_MECHANISM",
        description="SASL mechanism for the SASL_* protocols.",
    )
    kafka_username: str | None = Field(
        default=None,
        validation_alias="CLINGATE_KAFKA_USERNAME",
        description="SASL user name: the principal (User:<name>) the cluster's ACLs grant to "
        "(deploy/security/acls.yaml). Required by the SASL_* protocols.",
    )
    kafka_password: SecretStr | None = Field(
        default=None,
        validation_alias="CLINGATE_KAFKA_PASSWORD",
        description="SASL password of CLINGATE_KAFKA_USERNAME. Required by the SASL_* protocols.",
    )
    kafka_ssl_ca_file: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_KAFKA_SSL_CA_FILE",
        description="PEM file of the CA that signed the brokers' certificates (SSL, SASL_SSL). Unset: "
        "the system trust store.",
    )
    kafka_ssl_check_hostname: bool = Field(
        default=True,
        validation_alias="CLINGATE_KAFKA_SSL_CHECK_HOSTNAME",
        description="Verify that a broker's certificate names the host it was reached at (SSL, SASL_SSL).",
    )
    schema_registry_url: str | None = Field(
        default=None,
        validation_alias="CLINGATE_SCHEMA_REGISTRY_URL",
        description="Confluent Schema Registry URL. Set: values use the registry wire format; "
        "unset: Avro single-object encoding.",
    )
    consumer_session_timeout_s: float = Field(
        default=30.0,
        ge=6.0,
        validation_alias="CLINGATE_CONSUMER_SESSION_TIMEOUT_S",
        description="How long the group waits for a silent worker before its partitions move to the "
        "others (a SIGKILLed worker is noticed only after this); also the generator and verifier groups'. "
        "The broker admits 6 s to 300 s.",
    )


class TopicSettings(_Area):
    """The catalog's topics: who creates them and with how many partitions and replicas."""

    title: ClassVar[str] = "Topics"

    ensure_topics_on_start: bool = Field(
        default=True,
        validation_alias="CLINGATE_ENSURE_TOPICS",
        description="Workers create missing catalog topics when they start. Set false where a provisioning "
        "job owns the topics and worker principals hold no Create/DescribeConfigs grants (ACLs).",
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


class LocalSettings(_Area):
    """Where a clingate process on this machine keeps its caches; the local broker, cluster and images."""

    title: ClassVar[str] = "Local broker and caches"

    home: Path = Field(
        default=Path.home() / ".cache" / "clingate",
        validation_alias="CLINGATE_HOME",
        description="Cache directory for broker artifacts, broker data and worker state.",
    )
    maven_repository: str = Field(
        default=MAVEN_CENTRAL,
        validation_alias="CLINGATE_MAVEN_REPOSITORY",
        description="Maven repository the local broker's locked jars are fetched from (a mirror of "
        "Maven Central, e.g. a company's proxy); every jar is checked against the lock's SHA-256.",
    )
    image_prefix: str = Field(
        default="clingate-local",
        pattern=r"^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$",
        validation_alias="CLINGATE_IMAGE_PREFIX",
        description="Repository prefix of the container images `make images` builds here "
        "(<prefix>/base, <prefix>/kafka, <prefix>/clingate): clingate's own names, never another vendor's.",
    )
    broker_dir: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_BROKER_DIR",
        description="Directory of the broker that `clingate broker start|stop|status` manages "
        "(data, logs, pid file). Default: <CLINGATE_HOME>/broker.",
    )
    cluster_dir: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_CLUSTER_DIR",
        description="Directory of the cluster that `clingate cluster start|stop|status` manages (one "
        "sub-directory per node). Default: <CLINGATE_HOME>/cluster.",
    )


class LogSettings(_Area):
    """What every clingate process logs and where its /metrics endpoint binds."""

    title: ClassVar[str] = "Logs and metrics"

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO",
        validation_alias="CLINGATE_LOG_LEVEL",
        description="Log level of every clingate process (`clingate worker --loglevel` overrides it for "
        "the worker). Clinical text is never logged at INFO or above.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        validation_alias="CLINGATE_LOG_FORMAT",
        description="Log lines on stderr: `text` for people, `json` (one object per line with ts, level, "
        "logger, message and the patient/candidate/document ids) for log collectors.",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        validation_alias="CLINGATE_METRICS_HOST",
        description="Address every process's /metrics endpoint binds. Loopback by default, so nothing is "
        "reachable from another machine unless asked; a pod that Prometheus scrapes at its own address sets "
        "0.0.0.0 (deploy/kustomization.yaml).",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_upper(cls, value: object) -> object:
        # `CLINGATE_LOG_LEVEL=info` is as good as INFO (`clingate worker -l` takes lower case too).
        return value.upper() if isinstance(value, str) else value


class WorkerSettings(_Area):
    """The stream workers (``clingate worker``): their application id, local state and web endpoint."""

    title: ClassVar[str] = "Stream workers"

    app_id: str = Field(
        default="clingate-dbpm",
        validation_alias="CLINGATE_APP_ID",
        description="Application id of the stream workers: the prefix of their consumer groups "
        "(<id>-memory, <id>-clinical, <id>-gate), changelog and progress topics and transactional ids. "
        "Workers of one deployment share it.",
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
    store_cache_bytes: int = Field(
        default=64 << 20,
        ge=0,
        validation_alias="CLINGATE_STORE_CACHE_BYTES",
        description="Bytes of memory all the RocksDB stores of a process share, however much they hold on "
        "disk (a worker opens one store per partition of each table it writes and of the memory view its "
        "gate reads): half for their read caches, an equal share each; half, at least 4 MiB, for "
        "RocksDB's block cache, which is also charged with the stores' memtables. 0 turns the read caches "
        "off. Shown as clingate_store_cache_bytes.",
    )


class DbpmSettings(_Area):
    """The DBPM engine the workers run (switches, signal, maintenance, retention) and the gate's waits."""

    title: ClassVar[str] = "DBPM"

    dbpm_barrier_timeout_s: float = Field(
        default=5.0,
        ge=0,
        validation_alias="CLINGATE_DBPM_BARRIER_TIMEOUT_S",
        description="Longest time a gate waits for every memory partition to reach its event time "
        "(only candidates with the clingate-barrier header wait, e.g. replays) before it decides on the "
        "view it has (then recorded in the decision's provenance).",
    )
    dbpm_coverage_wait_s: float = Field(
        default=300.0,
        ge=0,
        validation_alias="CLINGATE_DBPM_COVERAGE_WAIT_S",
        description="The NER-coverage join (paper §4.8): longest a live QA candidate waits for its "
        "narrative's NER candidates to be verified, BLOCKed or dead-lettered before the gate decides it "
        "(the decision records which, and how long it waited); 0 turns the join off (QA candidates are "
        "decided at once on the coverage the memory holds). It must cover the verifier's latency, backlog "
        "included, or QA candidates are decided without their narrative's coverage; a restarted gate "
        "reads again the candidates of the narratives still waiting.",
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
    dbpm_three_tier: bool = Field(
        default=True,
        validation_alias="CLINGATE_DBPM_THREE_TIER",
        description="BPM_ENABLE_THREE_TIER (paper Table 12); off: the gate collapses to BLOCK / ALLOW.",
    )
    dbpm_uncertainty: bool = Field(
        default=True,
        validation_alias="CLINGATE_DBPM_UNCERTAINTY",
        description="BPM_ENABLE_UNCERTAINTY (Table 12); off: ambiguous QA verdicts (soft_downgrade) are "
        "applied as success.",
    )
    dbpm_source_weights: bool = Field(
        default=True,
        validation_alias="CLINGATE_DBPM_SOURCE_WEIGHTS",
        description="BPM_ENABLE_SOURCE_WEIGHTS (Table 12, weights of Table 4); off: every source weighs 1.",
    )
    dbpm_qa_hard_block: bool = Field(
        default=False,
        validation_alias="CLINGATE_DBPM_QA_HARD_BLOCK",
        description="M1_QA_GATE_HARD_BLOCK (Table 12); on: the QA gate's DOWNGRADE becomes BLOCK.",
    )
    dbpm_downgrade_first: bool = Field(
        default=False,
        validation_alias="CLINGATE_DBPM_DOWNGRADE_FIRST",
        description="The paper's measurement discipline (§4.9): no gate BLOCKs, it tags DOWNGRADE instead, "
        "so every suspect candidate stays in the stream and the audit trail.",
    )
    dbpm_disable: bool = Field(
        default=False,
        validation_alias="CLINGATE_DBPM_DISABLE",
        description="BPM_DISABLE master switch (Table 12); on: every gate ALLOWs and the memory records "
        "nothing.",
    )
    dbpm_ontology_filter: Literal["on", "tag-only", "off"] = Field(
        default="on",
        validation_alias="CLINGATE_DBPM_ONTOLOGY_FILTER",
        description="The ontology-violation filter's channel (§4.7, BPM_DISABLE_M3 inverted): on; "
        "tag-only (a BLOCK resting on ontology evidence is emitted as DOWNGRADE, §4.9 / A.6); off "
        "(rule-based RE verdicts are not recorded).",
    )
    dbpm_ner_coverage: bool = Field(
        default=True,
        validation_alias="CLINGATE_DBPM_NER_COVERAGE",
        description="M1V7_ENABLE, the QA gate's NER-coverage signal (paper Eq. 9, Table 6 row 2); off: "
        "no category has a NER bucket, so every QA candidate takes the fail-rate x difficulty fallback "
        "(Eq. 7-8).",
    )
    dbpm_qa_signal: Literal["ner_coverage", "fail_mass", "parse_failure", "fail_rate", "difficulty"] = Field(
        default="ner_coverage",
        validation_alias="CLINGATE_DBPM_QA_SIGNAL",
        description="The signal source the QA gate reads (paper §4.8, Table 11): ner_coverage (the fifth "
        "source, the deployed design); fail_mass, parse_failure, fail_rate or difficulty (the first four, "
        "for their measurement: `clingate bench ablation --qa-sources`).",
    )
    dbpm_qa_fail_threshold: float = Field(
        default=0.30,
        ge=0.0,
        le=1.0,
        validation_alias="CLINGATE_DBPM_QA_FAIL_THRESHOLD",
        description="M1V5_FAIL_THRESHOLD, the QA category fail rate above which the third and fourth "
        "signal sources DOWNGRADE (Eq. 7-8; the paper used 0.30 on its development cohort, 0.60 "
        "held out).",
    )
    dbpm_maintenance_interval_s: float = Field(
        default=5.0,
        gt=0,
        validation_alias="CLINGATE_DBPM_MAINTENANCE_INTERVAL_S",
        description="Spacing of the memory's maintenance grid (pruning, caps, cross-task counter decay, "
        "§4.6) in seconds of event time, which is wall-clock time live; the paper's workers maintained "
        "on every save, every 200 events each (Appendix A.7).",
    )
    dbpm_whitelist_retention_days: float = Field(
        default=365.0,
        gt=0,
        validation_alias="CLINGATE_DBPM_WHITELIST_RETENTION_DAYS",
        description="A whitelist entry not confirmed again for this many days of event time is deleted at "
        "the next maintenance boundary; its next success whitelists it afresh (the paper gives the "
        "whitelist no decay; docs/dbpm.md, Retention).",
    )
    dbpm_preempt_retention_days: float = Field(
        default=365.0,
        gt=0,
        validation_alias="CLINGATE_DBPM_PREEMPT_RETENTION_DAYS",
        description="An entity of the NER-to-RE preemption set not preempted again for this many days "
        "leaves the set at the next maintenance boundary.",
    )
    dbpm_patient_retention_days: float = Field(
        default=90.0,
        gt=0,
        validation_alias="CLINGATE_DBPM_PATIENT_RETENTION_DAYS",
        description="A patient's Eq. 8 counters and accepted NER categories in a memory partition are "
        "deleted when no verdict wrote them there for this many days.",
    )


class ReplaySettings(_Area):
    """A replay of a recorded stream through running workers (``clingate replay --via-kafka``)."""

    title: ClassVar[str] = "Replay"

    replay_wait_s: float = Field(
        default=300.0,
        gt=0,
        validation_alias="CLINGATE_REPLAY_WAIT_S",
        description="`clingate replay --via-kafka` (`--wait`): longest wait in seconds for the workers' "
        "decisions of one run of candidates and their commit, for the memory's final commit and for the "
        "broker to answer a read; a broker outage or a worker restart shorter than it only slows the "
        "replay. A replay stopped on it (or killed) goes on where it stopped when run again.",
    )


class ClinicalSettings(_Area):
    """The clinical gates' optional rules and the patients' retention."""

    title: ClassVar[str] = "Clinical gates"

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
    clinical_patient_retention_days: float = Field(
        default=365.0,
        gt=0,
        validation_alias="CLINGATE_CLINICAL_PATIENT_RETENTION_DAYS",
        description="A patient's clinical state (resources, last review and assessment) is deleted when no "
        "FHIR update, review or deliverable of the patient arrived for this many days of event time; a "
        "returning patient is then assessed on what is published anew (docs/operations.md, Retention).",
    )
    clinical_rule_a_enforced: bool = Field(
        default=False,
        validation_alias="CLINGATE_CLINICAL_RULE_A",
        description="Clinical gates: Rule A (automation bias) sets the production light (default: shadow).",
    )


class ArbiterSettings(_Area):
    """The classification arbiter's worker (``clingate arbiter worker``) and its trap rules."""

    title: ClassVar[str] = "Classification arbiter"

    docs_trap_rules: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_DOCS_TRAP_RULES",
        description="YAML of the classification arbiter's V3 trap rules (vendor, keyword and "
        "header/footer rule sets). Unset: the packaged processors/docs/v3_trap_rules.yaml.",
    )
    docs_group_id: str = Field(
        default="clingate-docs",
        validation_alias="CLINGATE_DOCS_GROUP_ID",
        description="Consumer group of `clingate arbiter worker` (its own group, see "
        "streams/groups/arbiter.py).",
    )
    docs_max_in_flight: int = Field(
        default=32,
        ge=1,
        validation_alias="CLINGATE_DOCS_MAX_IN_FLIGHT",
        description="Documents the docs worker verifies at once (their LLM calls overlap); at the bound "
        "it keeps a few records consumed and waiting, then pauses its partitions until one finishes.",
    )
    docs_metrics_port: int = Field(
        default=6067,
        ge=0,
        le=65535,
        validation_alias="CLINGATE_DOCS_METRICS_PORT",
        description="Port of `clingate arbiter worker`'s /metrics endpoint (Prometheus text format); 0 picks "
        "a free port.",
    )


class LlmSettings(_Area):
    """The OpenAI-compatible servers every LLM call goes to (:mod:`streams.llm`).

    A role's URL wins over ``CLINGATE_LLM_URL``; with neither, the role's LLM phases are off."""

    title: ClassVar[str] = "LLM servers"

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
    vision_url: str | None = Field(
        default=None,
        validation_alias="CLINGATE_VISION_URL",
        description="Base URL of the vision model server (the agent's image analysis); overrides "
        "CLINGATE_LLM_URL.",
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
    vision_model: str | None = Field(
        default=None,
        validation_alias="CLINGATE_VISION_MODEL",
        description="Served model name of the vision model; overrides CLINGATE_LLM_MODEL.",
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
        "llm_url",
        "generator_url",
        "verifier_url",
        "vision_url",
        "llm_model",
        "generator_model",
        "verifier_model",
        "vision_model",
    )
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        # `export CLINGATE_LLM_URL=` must mean "off", not "a server at the empty URL".
        if value is None or not value.strip():
            return None
        return value.strip()


class LlmGroupSettings(_Area):
    """The LLM consumer groups (:mod:`streams.groups.generator`, :mod:`streams.groups.verifier`)."""

    title: ClassVar[str] = "Generator and verifier groups"

    generator_group_id: str = Field(
        default="clingate-generator",
        validation_alias="CLINGATE_GENERATOR_GROUP_ID",
        description="Consumer group of `clingate generator` (narratives -> candidates).",
    )
    generator_max_in_flight: int = Field(
        default=64,
        ge=1,
        validation_alias="CLINGATE_GENERATOR_MAX_IN_FLIGHT",
        description="Narratives one generator process extracts at once (each makes 13 calls; the calls "
        "on the wire are bounded by CLINGATE_LLM_MAX_IN_FLIGHT); at the bound it pauses its partitions.",
    )
    generator_metrics_port: int = Field(
        default=6067,
        ge=0,
        le=65535,
        validation_alias="CLINGATE_GENERATOR_METRICS_PORT",
        description="Port of the generator's /metrics endpoint (Prometheus text format); 0: not served.",
    )
    verifier_group_id: str = Field(
        default="clingate-verifier",
        validation_alias="CLINGATE_VERIFIER_GROUP_ID",
        description="Consumer group of `clingate verifier` (to-verify -> verdicts, verified).",
    )
    verifier_max_in_flight: int = Field(
        default=64,
        ge=1,
        validation_alias="CLINGATE_VERIFIER_MAX_IN_FLIGHT",
        description="Candidates one verifier process judges at once (one verdict call each, four for an "
        "ambiguous QA answer); at the bound it pauses its partitions.",
    )
    verifier_metrics_port: int = Field(
        default=6068,
        ge=0,
        le=65535,
        validation_alias="CLINGATE_VERIFIER_METRICS_PORT",
        description="Port of the verifier's /metrics endpoint (Prometheus text format); 0: not served.",
    )
    verifier_narrative_cache: int = Field(
        default=100_000,
        ge=1,
        validation_alias="CLINGATE_VERIFIER_NARRATIVE_CACHE",
        description="Narratives the verifier keeps in memory (least recently used evicted) to judge "
        "candidates against; a candidate whose narrative is gone is dead-lettered.",
    )
    verifier_narrative_wait_s: float = Field(
        default=10.0,
        gt=0,
        validation_alias="CLINGATE_VERIFIER_NARRATIVE_WAIT_S",
        description="How long the verifier waits for a candidate's narrative to be read from "
        "clingate.dbpm.narratives before it dead-letters the candidate.",
    )


class AgentSettings(_Area):
    """The clinician's agent (:mod:`streams.agent`) and the literature services it searches."""

    title: ClassVar[str] = "The clinician's agent"

    agent_group_id: str = Field(
        default="clingate-agent",
        validation_alias="CLINGATE_AGENT_GROUP_ID",
        description="Consumer group of `clingate agent worker` (requests -> responses, traces, proposals).",
    )
    agent_max_in_flight: int = Field(
        default=16,
        ge=1,
        validation_alias="CLINGATE_AGENT_MAX_IN_FLIGHT",
        description="Conversations one agent worker answers at once (each makes 2 to about 14 calls in "
        "sequence); at the bound it pauses its partitions.",
    )
    agent_metrics_port: int = Field(
        default=6070,
        ge=0,
        le=65535,
        validation_alias="CLINGATE_AGENT_METRICS_PORT",
        description="Port of the agent worker's /metrics endpoint (Prometheus text format); 0: not served.",
    )
    pubmed_url: str = Field(
        default="https://eutils.ncbi.nlm.nih.gov/entrez/eutils",
        validation_alias="CLINGATE_PUBMED_URL",
        description="Base URL of a PubMed E-utilities service (the agent's literature search appends "
        "/esearch.fcgi and /esummary.fcgi).",
    )
    clinicaltrials_url: str = Field(
        default="https://clinicaltrials.gov/api/v2",
        validation_alias="CLINGATE_CLINICALTRIALS_URL",
        description="Base URL of a ClinicalTrials.gov v2 API (the agent's trial search appends /studies).",
    )


class ConsoleSettings(_Area):
    """The web console (:mod:`streams.console`): where it binds, its users and sessions."""

    title: ClassVar[str] = "Console"

    console_port: int = Field(
        default=6080,
        ge=0,
        le=65535,
        validation_alias="CLINGATE_CONSOLE_PORT",
        description="Port `clingate console` serves on (its --port overrides; 0 picks a free port). It "
        "binds 127.0.0.1 unless --host says otherwise; TLS is a reverse proxy's (docs/console.md).",
    )
    console_host: str = Field(
        default="127.0.0.1",
        validation_alias="CLINGATE_CONSOLE_HOST",
        description="Address `clingate console` binds (its --host overrides): loopback, with a TLS reverse "
        "proxy on the same host in front; a container behind a cluster's TLS ingress binds 0.0.0.0.",
    )
    console_users: Path | None = Field(
        default=None,
        validation_alias="CLINGATE_CONSOLE_USERS",
        description="JSON file of the console's users (name, role, scrypt hash of the password), written "
        "by `clingate console users add`. Default: <CLINGATE_HOME>/console/users.json.",
    )
    console_session_s: float = Field(
        default=8 * 3600.0,
        gt=0,
        validation_alias="CLINGATE_CONSOLE_SESSION_S",
        description="Absolute lifetime of a console session in seconds (8 h): then its person signs in "
        "again, however active.",
    )
    console_idle_s: float = Field(
        default=30 * 60.0,
        gt=0,
        validation_alias="CLINGATE_CONSOLE_IDLE_S",
        description="A console session no request used for this many seconds ends (30 min).",
    )
    console_secure_cookies: bool = Field(
        default=False,
        validation_alias="CLINGATE_CONSOLE_SECURE_COOKIES",
        description="Mark the console's session cookie Secure (sent over HTTPS only): true when people "
        "reach the console through a TLS reverse proxy, as they must from another machine.",
    )
    console_trusted_proxies: int = Field(
        default=0,
        ge=0,
        le=16,
        validation_alias="CLINGATE_CONSOLE_TRUSTED_PROXIES",
        description="How many reverse proxies in front of the console append the client's address to "
        "X-Forwarded-For (0: the header is ignored). With N, the sign-in throttle counts the address the "
        "outermost of them saw: the N-th X-Forwarded-For entry from the right.",
    )


class Settings(  # the areas from the last to the first: pydantic lists the last base's fields first
    ConsoleSettings,
    AgentSettings,
    LlmGroupSettings,
    LlmSettings,
    ArbiterSettings,
    ClinicalSettings,
    ReplaySettings,
    DbpmSettings,
    WorkerSettings,
    LogSettings,
    LocalSettings,
    TopicSettings,
    KafkaSettings,
    BaseSettings,
):
    """Process-wide configuration, frozen once read: every area's settings as attributes of one object."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments first, then the environment by variable name (:class:`_AliasedEnvironment`)."""
        return init_settings, _AliasedEnvironment(settings_cls), dotenv_settings, file_secret_settings

    @property
    def worker_dir(self) -> Path:
        """The worker's data directory (``worker_datadir`` or ``<home>/worker``)."""
        return self.worker_datadir or self.home / "worker"

    @property
    def console_users_file(self) -> Path:
        """The console's users file (``console_users`` or ``<home>/console/users.json``)."""
        return self.console_users or self.home / "console" / "users.json"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Read the environment once per process."""
    return Settings()


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return "(computed)"
    if field.default is PydanticUndefined or field.default is None:
        return "unset"
    # Shown as the user would write it, never as this machine's home directory.
    return str(field.default).replace(str(Path.home()), "~", 1)


AREAS: tuple[type[_Area], ...] = tuple(
    base for base in reversed(Settings.__bases__) if issubclass(base, _Area)
)
"""The areas in the order of :attr:`Settings.model_fields` and of the settings table."""


def _row(field: FieldInfo) -> tuple[str, str, str]:
    return str(field.validation_alias), _default(field), field.description or ""


def settings_rows() -> list[tuple[str, str, str]]:
    """``(environment variable, default, description)`` of every setting, area by area."""
    return [_row(field) for field in Settings.model_fields.values()]


def settings_table() -> str:
    """Markdown of every setting, as ``clingate config --markdown`` prints it and docs/configuration.md
    carries it: a section per area (``## <title>``), each a table of variable, default and meaning in
    declaration order; ``|`` inside a cell is shown as ``/`` so that no cell splits the row."""
    sections = []
    for area in AREAS:
        lines = [f"## {area.title}", "", "| variable | default | meaning |", "| --- | --- | --- |"]
        for field in area.model_fields.values():
            env, default, doc = _row(field)
            lines.append(f"| `{env}` | {default.replace('|', '/')} | {doc.replace('|', '/')} |")
        sections.append("\n".join(lines) + "\n")
    return "\n".join(sections)


def env_help(name: str) -> str:
    """``(env VARIABLE, default VALUE)`` of the setting ``name`` (``(env VARIABLE)`` when it has no
    default), for the help of a command-line option that overrides it: the help shows the default the
    setting declares, never a copy of it. Parentheses, not brackets: the help is Rich markup, where
    ``[...]`` is a style tag and vanishes."""
    env, default, _ = _row(Settings.model_fields[name])
    return f"(env {env})" if default == "unset" else f"(env {env}, default {default})"
