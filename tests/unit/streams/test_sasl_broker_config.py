"""The secured local broker's configuration, decided without starting it."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from streams.local import broker as broker_module
from streams.local.broker import BrokerError, LocalKafka, read_password_dir, sasl_local_kafka


def _broker(tmp_path: Path, tls_dir: Path | None = None, password: str = "pw") -> LocalKafka:
    return sasl_local_kafka(tmp_path, home=tmp_path, super_user="admin",
                            passwords={"admin": password, "alice": "a"}, tls_dir=tls_dir)  # fmt: skip


def test_every_listener_authenticates_and_nothing_is_allowed_without_an_acl(tmp_path: Path) -> None:
    properties = _broker(tmp_path)._server_properties(9092, 9093)
    protocols = properties["listener.security.protocol.map"]
    assert protocols == "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"
    assert properties["listeners"] == "SASL_PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert properties["allow.everyone.if.no.acl.found"] == "false"
    assert properties["super.users"] == "User:admin"


def test_tls_puts_both_listeners_on_sasl_ssl_and_the_probe_trusts_the_ca(tmp_path: Path) -> None:
    broker = _broker(tmp_path, tls_dir=tmp_path / "certs")
    properties = broker._server_properties(9092, 9093)
    assert properties["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL"
    assert properties["ssl.keystore.location"] == str(tmp_path / "certs" / "127.0.0.1.pem")
    assert broker.security is not None
    assert broker.security.kafka_ssl_ca_file == tmp_path / "certs" / "ca.pem"
    assert broker.security.kafka_username == "admin"


def test_every_user_gets_scram_credentials_at_format_time(tmp_path: Path) -> None:
    assert _broker(tmp_path).scram_credentials == {"admin": "pw", "alice": "a"}


def test_a_password_that_would_break_the_jaas_quoting_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="may not contain"):
        _broker(tmp_path, password='pw";')


def test_passwords_are_read_one_file_per_user_skipping_secret_metadata(tmp_path: Path) -> None:
    (tmp_path / "clingate-admin").write_text("s3cret\n")
    (tmp_path / "..data").mkdir()
    (tmp_path / ".hidden").write_text("x")
    assert read_password_dir(tmp_path) == {"clingate-admin": "s3cret"}
    with pytest.raises(BrokerError, match="no password files"):
        read_password_dir(tmp_path / "..data")


def test_the_server_properties_with_the_administrators_password_are_readable_by_their_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written at every start, also over a file an earlier start left world-readable: the broker itself is
    not started (no jars, no JVM), its start stops after writing them."""
    broker = _broker(tmp_path / "broker", password="s3cret-admin")
    broker.properties_file.parent.mkdir(parents=True)
    broker.properties_file.write_text("left by an earlier start\n")
    broker.properties_file.chmod(0o644)

    def no_broker(*args: Any, **kwargs: Any) -> None:
        raise BrokerError("no broker in this test")

    monkeypatch.setattr(broker_module, "ensure_artifacts", lambda home, repository: tmp_path / "libs")
    monkeypatch.setattr(LocalKafka, "_format", lambda self, libs, cluster_id: None)
    monkeypatch.setattr(LocalKafka, "_start_native", lambda self, libs: lambda: False)
    monkeypatch.setattr(broker_module, "wait_for_kafka", no_broker)
    with pytest.raises(BrokerError, match="no broker in this test"):
        broker.start(timeout=1)
    assert broker.properties_file.read_text().count("s3cret-admin") == 3, "both JAAS configurations"
    assert stat.S_IMODE(broker.properties_file.stat().st_mode) == 0o600
