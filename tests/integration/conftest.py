"""Integration-test helpers on top of the session broker (see tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from streams.runtime.kafka_config import admin_client
from topics.admin import TopicStatus, ensure_topics
from topics.catalog import TopicSpec


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
