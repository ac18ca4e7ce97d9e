"""The broker helper's decisions that need no broker: version, properties, the three-way choice."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

from streams.local.broker import (
    BROKER_DEFAULTS,
    LocalKafka,
    docker_engine_available,
    free_port,
    local_broker,
)
from streams.local.jars import kafka_version
from streams.runtime.settings import Settings
from streams.testing.kafka import provide_broker


def test_kafka_version_is_read_from_the_pom_and_is_a_3_9_or_4_release():
    assert re.fullmatch(r"(3\.9|4\.\d+)\.\d+", kafka_version())


def test_server_properties_bind_loopback_and_make_topics_come_from_the_catalog(tmp_path: Path):
    properties = LocalKafka(tmp_path, home=tmp_path)._server_properties(port=19092, controller_port=19093)
    assert properties["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert properties["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert properties["auto.create.topics.enable"] == "false"
    assert properties["transaction.state.log.replication.factor"] == "1"
    assert properties["transaction.state.log.min.isr"] == "1"
    assert properties["log.dirs"] == str(tmp_path / "data")


def test_extra_properties_override_generated_ones_with_this_starts_ports(tmp_path: Path):
    listeners = "SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
    broker = LocalKafka(tmp_path, home=tmp_path, extra_properties={"listeners": listeners})
    properties = broker._server_properties(port=2, controller_port=3)
    assert properties["listeners"] == "SASL_PLAINTEXT://127.0.0.1:2,CONTROLLER://127.0.0.1:3"


def test_broker_defaults_are_single_node_safe():
    assert BROKER_DEFAULTS["offsets.topic.replication.factor"] == "1"
    assert BROKER_DEFAULTS["min.insync.replicas"] == "1"
    assert BROKER_DEFAULTS["group.initial.rebalance.delay.ms"] == "0"


def test_a_broker_never_started_reports_stopped(tmp_path: Path):
    status = LocalKafka(tmp_path, home=tmp_path).status()
    assert not status.running
    assert status.bootstrap is None
    assert LocalKafka(tmp_path, home=tmp_path).stop() is False


def test_environment_bootstrap_wins_and_starts_nothing(tmp_path: Path):
    settings = Settings(kafka_bootstrap_servers="kafka.example:9092", home=tmp_path)
    with provide_broker(settings, tmp_path / "broker") as broker:
        assert broker.bootstrap == "kafka.example:9092"
        assert broker.origin == "environment"
        assert broker.local is None
    assert not (tmp_path / "broker").exists()


def test_docker_client_without_engine_is_detected_quickly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    started = time.monotonic()
    assert docker_engine_available() is False
    assert time.monotonic() - started < 3.0


def test_a_port_whose_connections_are_in_time_wait_is_still_free_for_a_restart():
    """The closing side of a connection keeps it in TIME_WAIT on the broker's port for a minute."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    assert free_port(port) == port


def test_a_port_someone_listens_on_is_given_up_after_the_wait():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        started = time.monotonic()
        assert free_port(port, wait=0.5) != port
        assert time.monotonic() - started >= 0.5


def test_free_port_avoids_taken_ports():
    first = free_port()
    assert free_port(first, taken=(first,)) != first


def test_the_configured_maven_repository_reaches_the_native_broker(tmp_path: Path):
    settings = Settings(home=tmp_path, maven_repository="https://mirror.example/maven2")
    assert local_broker(settings).repository == "https://mirror.example/maven2"
    assert LocalKafka(tmp_path, home=tmp_path).repository == "https://repo1.maven.org/maven2"
