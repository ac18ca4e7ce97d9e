"""The native broker's life cycle: start, stop, restart on its data, crash, and failing loudly.

These tests exercise :class:`streams.local.broker.LocalKafka` itself, so they need Java whatever
broker the rest of the session uses; each runs its own broker in a temporary directory and shares
only the jar cache under CLINGATE_HOME.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from streams.local.broker import BrokerError, LocalKafka
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from topics.admin import TopicStatus, ensure_topics
from topics.catalog import TopicSpec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("java") is None, reason="the native broker needs java"),
]

REPO = Path(__file__).resolve().parents[2]


def _jvms_using(directory: Path) -> list[int]:
    """Pids of live processes whose command line mentions ``directory`` (Linux /proc)."""
    needle = str(directory).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _clingate(*arguments: str, broker_dir: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "CLINGATE_BROKER_DIR": str(broker_dir)}
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *arguments],
        cwd=REPO, env=environment, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _read_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{os.urandom(4).hex()}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        for _ in range(60):
            batch = consumer.consume(num_messages=count, timeout=1.0)
            values += [m.value() for m in batch if m.error() is None]
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts JVMs through /proc")
def test_cli_broker_start_and_stop_leave_no_jvm(tmp_path: Path):
    """Scenario: `clingate broker start` prints an address that answers; `stop` leaves no JVM behind."""
    broker_dir = tmp_path / "broker"
    started = _clingate("broker", "start", broker_dir=broker_dir)
    try:
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip()
        assert bootstrap.startswith("127.0.0.1:")
        assert admin_client(bootstrap).list_topics(timeout=10).brokers
        status = _clingate("broker", "status", broker_dir=broker_dir)
        assert status.returncode == 0
        assert f"bootstrap={bootstrap}" in status.stdout
        assert len(_jvms_using(broker_dir)) == 1
    finally:
        stopped = _clingate("broker", "stop", broker_dir=broker_dir)

    assert stopped.returncode == 0, stopped.stderr
    assert _jvms_using(broker_dir) == []
    assert not (broker_dir / "kafka.pid").exists()
    assert _clingate("broker", "status", broker_dir=broker_dir).returncode == 3


def test_a_killed_broker_restarts_on_the_same_directory_with_its_address_topics_and_records(tmp_path: Path):
    """Scenario: a broker is SIGKILLed and comes back on the same directory with its data and port.

    The clean stop and start is the broker-restart soak's disruption (``tests/integration/test_chaos.py``),
    which checks the address and, through its end conditions, that no record was lost.
    """
    broker = LocalKafka(tmp_path / "broker", home=get_settings().home)
    bootstrap = broker.start()
    try:
        spec = TopicSpec(name="restart.records", key="k", value_schema="test", partitions=1)
        assert ensure_topics(admin_client(bootstrap), [spec])[0].outcome is TopicStatus.CREATED
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(3):
            producer.produce(spec.name, value=f"r{i}".encode())
        assert producer.flush(30) == 0

        assert broker.kill() is True
        assert not broker.status().running
        assert broker.start() == bootstrap
        assert ensure_topics(admin_client(bootstrap), [spec])[0].outcome is TopicStatus.EXISTS
        assert _read_all(bootstrap, spec.name, 3) == [b"r0", b"r1", b"r2"]
    finally:
        broker.stop()
    assert not broker.status().running


def test_a_broker_that_cannot_bind_its_port_fails_with_the_tail_of_its_log(tmp_path: Path):
    """Scenario: the port is taken; start fails within the timeout, says why, and leaves no JVM."""
    broker = LocalKafka(tmp_path / "broker", home=get_settings().home)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(BrokerError, match="Address already in use") as failure:
            broker.start(port=port, timeout=60)
    assert "server.log" in str(failure.value) or "jvm.out" in str(failure.value)
    assert not broker.status().running
    if Path("/proc").is_dir():
        assert _jvms_using(tmp_path / "broker") == []
