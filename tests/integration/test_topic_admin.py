"""Topic creation is idempotent and tells existing, missing and mismatched topics apart."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from streams.runtime.kafka_config import admin_client
from topics.admin import TopicStatus, ensure_topics, inspect_topics
from topics.catalog import CATALOG, build_catalog

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _private_copy(partitions: int = 2) -> list:
    """The whole catalog under a unique prefix, so this test owns every topic it creates."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    return [replace(spec, name=prefix + spec.name) for spec in build_catalog(partitions=partitions)]


def test_creating_the_catalog_twice_creates_then_finds_every_topic(kafka_bootstrap: str):
    """Scenario: first run creates every topic, the second finds every one unchanged."""
    specs = _private_copy()
    admin = admin_client(kafka_bootstrap)

    first = ensure_topics(admin, specs)
    second = ensure_topics(admin, specs)

    assert [r.outcome for r in first] == [TopicStatus.CREATED] * len(specs)
    assert [r.outcome for r in second] == [TopicStatus.EXISTS] * len(specs)
    assert all(r.differences == () for r in second)


def test_a_topic_made_with_other_partitions_or_retention_is_reported_as_different(kafka_bootstrap: str):
    """Scenario: a topic made by hand with 1 partition and 1 h retention is reported, not altered."""
    admin = admin_client(kafka_bootstrap)
    spec = _private_copy(partitions=3)[0]
    by_hand = replace(spec, partitions=1, retention_ms=3_600_000)
    assert ensure_topics(admin, [by_hand])[0].outcome is TopicStatus.CREATED

    [report] = ensure_topics(admin, [spec])

    assert report.outcome is TopicStatus.EXISTS_DIFFERENT_CONFIG
    assert "partitions: cluster=1, catalog=3" in report.differences
    assert any(d.startswith("retention.ms: cluster=3600000") for d in report.differences)
    assert len(admin.list_topics(topic=spec.name, timeout=10).topics[spec.name].partitions) == 1


def test_inspect_reports_missing_topics_and_creates_nothing(kafka_bootstrap: str):
    """Scenario: describing a cluster that lacks the topics lists them as MISSING and leaves it as it was."""
    admin = admin_client(kafka_bootstrap)
    specs = _private_copy()[:3]

    reports = inspect_topics(admin, specs)

    assert [r.outcome for r in reports] == [TopicStatus.MISSING] * 3
    assert not set(admin.list_topics(timeout=10).topics) & {s.name for s in specs}


def test_compacted_topic_configs_round_trip_through_the_broker(kafka_bootstrap: str):
    """Scenario: a compact,delete topic created from the catalog compares equal to its spec."""
    admin = admin_client(kafka_bootstrap)
    spec = replace(CATALOG.get("clingate.clinical.assessments"), name=f"t{uuid.uuid4().hex[:8]}.assessments")

    assert ensure_topics(admin, [spec])[0].outcome is TopicStatus.CREATED
    assert inspect_topics(admin, [spec])[0].outcome is TopicStatus.EXISTS


def test_cli_topics_create_on_the_real_catalog_is_idempotent(kafka_bootstrap: str):
    """Scenario: `clingate topics create` twice: all catalog topics exist, the rerun changes nothing."""

    def run() -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "COLUMNS": "250"}
        return subprocess.run(
            [sys.executable, "-m", "streams.cli", "topics", "create", "--bootstrap", kafka_bootstrap],
            cwd=REPO, env=environment, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    first, second = run(), run()

    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    assert "CREATED" not in second.stdout
    assert f"{len(CATALOG)} EXISTS" in second.stderr
    assert set(CATALOG.names) <= set(admin_client(kafka_bootstrap).list_topics(timeout=10).topics)
