"""The one settings object of a clingate process.

The environment is read here and nowhere else: every setting declares its environment
variable, its default and what it means. Commands build one :class:`Settings` at start-up
and pass it (or the values in it) down; processors never see the environment.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Read the environment once per process."""
    return Settings()
