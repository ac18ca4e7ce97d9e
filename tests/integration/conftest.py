"""Integration-test helpers on top of the session broker (see tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streams.replay.kafka import commit_worker_end_offsets
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.worker import WorkerProcess
from topics.admin import TopicStatus, ensure_topics
from topics.catalog import TopicSpec, build_catalog


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Factory: create a topic with a unique name on the session broker and return its name.

    Tests that need a scratch topic use this instead of catalog names, so that they never clash
    with each other or with the catalog topics other tests create.
    """

    def create(prefix: str = "test", partitions: int = 1) -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:12]}"
        spec = TopicSpec(name=name, key="test key", value_schema="test", partitions=partitions)
        [report] = ensure_topics(admin_client(kafka_bootstrap), [spec])
        assert report.outcome is TopicStatus.CREATED
        return name

    return create


@pytest.fixture
def start_workers(
    kafka_bootstrap: str, tmp_path: Path
) -> Iterator[Callable[..., tuple[str, list[WorkerProcess]]]]:
    """Factory: ``start_workers(n, **env)`` -> (app id, n ready workers of one fresh app)."""
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    started: list[WorkerProcess] = []

    def start(count: int = 1, **env: str) -> tuple[str, list[WorkerProcess]]:
        app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
        commit_worker_end_offsets(kafka_bootstrap, app_id)
        workers = [
            WorkerProcess(kafka_bootstrap, app_id, tmp_path / f"{app_id}-{i}", env) for i in range(count)
        ]
        for worker in workers:
            started.append(worker)
            worker.start()
        return app_id, workers

    yield start
    for worker in started:
        worker.stop()
