"""The secured local broker's configuration, decided without starting it."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.testing.broker import BrokerError, LocalKafka, read_password_dir, sasl_local_kafka


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
