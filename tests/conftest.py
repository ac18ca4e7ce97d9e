"""Fixtures the whole suite shares: one real Kafka broker per test process.

pytest-xdist runs the suite in several processes (pyproject ``addopts``); each starts its own broker
unless ``KAFKA_BOOTSTRAP_SERVERS`` names one (every test keeps to its own app ids and groups, so a
shared broker works too).

``kafka_bootstrap`` is the address to use. It comes from :func:`streams.testing.kafka.provide_broker`:
``KAFKA_BOOTSTRAP_SERVERS`` if set, else a testcontainers broker on clingate's Kafka image where a
Docker engine answers (``make images``), else a native KRaft broker in a temporary directory, stopped
when the session ends. The broker
starts only when an integration test first asks for it, so unit-only runs never start one.

``schema_registry`` is the Confluent-compatible URL of a real schema registry
(:class:`streams.testing.registry.LocalRegistry`, Apicurio Registry built from Maven Central), started
by the first test that asks for it in a process and stopped when the session ends.

Hypothesis runs without its per-example deadline: the property tests assert properties, not speed,
and on a loaded 2-core machine the 200 ms default failed a slow first example as "flaky" (speed is
measured by the benchmark commands instead).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings

from streams.runtime.settings import get_settings
from streams.testing.kafka import Broker, provide_broker
from streams.testing.registry import LocalRegistry

settings.register_profile("clingate", deadline=None)
settings.load_profile("clingate")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The session's broker (``.local`` is the :class:`LocalKafka` when it is a native one)."""
    with provide_broker(get_settings(), tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: Broker) -> str:
    """Bootstrap address of the session's broker."""
    return kafka_broker.bootstrap


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[str]:
    """URL of the session's schema registry (its Confluent-compatible API)."""
    settings = get_settings()
    with LocalRegistry(settings.home, settings.maven_repository) as url:
        yield url
