"""``clingate cluster``: three native KRaft nodes on loopback as one cluster, the deployment's shape.

Scenario: the CLI starts three nodes and prints their bootstrap list; a topic made the catalog's way
with three replicas gets ``min.insync.replicas`` 2; records written with ``acks=all`` keep being
accepted after the leader of their partition is SIGKILLed; the killed node comes back at its address
and rejoins the partition's in-sync replicas; every record is read back once, in order; ``stop`` leaves
no JVM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams.local.cluster import local_cluster
from streams.runtime.kafka_clients import read_to_end, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from topics.admin import TopicStatus, ensure_topics
from topics.catalog import TopicSpec

pytestmark = [
    pytest.mark.integration,
    # Three brokers and a leader failover: `make soak`, outside make test's time budget.
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("java") is None, reason="the native brokers need java"),
]

REPO = Path(__file__).resolve().parents[2]


def _clingate(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "CLINGATE_CLUSTER_DIR": str(directory)}
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *arguments],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _partition(bootstrap: str, topic: str) -> tuple[int, list[int]]:
    """The leader and the in-sync replicas of partition 0 of ``topic``."""
    metadata = admin_client(bootstrap).list_topics(topic, timeout=10).topics[topic].partitions[0]
    return metadata.leader, sorted(metadata.isrs)


def _until(condition, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the cluster did not get there in time"
        time.sleep(0.2)


def _write(producer: Producer, topic: str, values: range) -> None:
    for i in values:
        producer.produce(topic, key=b"k", value=f"r{i}".encode())
    assert producer.flush(60) == 0


def test_three_nodes_keep_accepting_acks_all_writes_through_a_killed_leader_that_rejoins(tmp_path: Path):
    directory = tmp_path / "cluster"
    started = _clingate(directory, "cluster", "start", "--brokers", "3")
    cluster = local_cluster(Settings(CLINGATE_CLUSTER_DIR=directory))
    try:
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip()
        assert bootstrap == cluster.bootstrap_servers and len(bootstrap.split(",")) == 3
        assert len(admin_client(bootstrap).list_topics(timeout=10).brokers) == 3

        spec = TopicSpec(name="cluster.records", key="k", value_schema="test", partitions=1, replication=3)
        assert spec.configs["min.insync.replicas"] == "2"
        assert ensure_topics(admin_client(bootstrap), [spec])[0].outcome is TopicStatus.CREATED
        # EXISTS: the cluster holds the topic with the catalog's replication and configs.
        assert ensure_topics(admin_client(bootstrap), [spec])[0].outcome is TopicStatus.EXISTS
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        _write(producer, spec.name, range(100))

        leader, isr = _partition(bootstrap, spec.name)
        assert isr == [1, 2, 3]
        killed = cluster.node(leader)
        address = killed.bootstrap
        assert killed.kill()
        _write(producer, spec.name, range(100, 200))
        assert _partition(bootstrap, spec.name)[0] != leader

        restarted = _clingate(directory, "cluster", "start", "--brokers", "3")
        assert restarted.returncode == 0, restarted.stderr
        assert killed.bootstrap == address
        _until(lambda: _partition(bootstrap, spec.name)[1] == [1, 2, 3])
        consumer = reader(bootstrap, "cluster-test")
        try:
            values = [m.value() for m in read_to_end(consumer, {spec.name: {}}, timeout_s=60)]
        finally:
            consumer.close()
        assert values == [f"r{i}".encode() for i in range(200)]
        assert _clingate(directory, "cluster", "status").returncode == 0
    finally:
        stopped = _clingate(directory, "cluster", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not cluster.running
    assert _clingate(directory, "cluster", "status").returncode == 3
