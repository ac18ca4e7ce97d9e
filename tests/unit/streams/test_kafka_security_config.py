"""One principal per process: every client's librdkafka keys come from the same settings."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from streams.runtime.kafka_config import KafkaSecurityError, client_config, security_config
from streams.runtime.settings import Settings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _settings(protocol: str, **fields: object) -> Settings:
    return Settings(kafka_security_protocol=protocol, kafka_username="clingate-worker",
                    kafka_password="s3cret", **fields)  # fmt: skip


def test_plaintext_adds_no_security_keys() -> None:
    assert client_config("k:9092", settings=Settings(kafka_security_protocol="PLAINTEXT")) == {
        "bootstrap.servers": "k:9092"
    }


def test_sasl_ssl_gives_scram_credentials_and_ca_to_librdkafka(tmp_path: Path) -> None:
    config = security_config(_settings("SASL_SSL", kafka_ssl_ca_file=tmp_path / "ca.pem"))
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "clingate-worker",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "ssl.endpoint.identification.algorithm": "https",
    }


def test_sasl_plaintext_sends_no_tls_keys() -> None:
    assert not any(key.startswith("ssl.") for key in security_config(_settings("SASL_PLAINTEXT")))


def test_hostname_check_can_be_turned_off() -> None:
    settings = _settings("SASL_SSL", kafka_ssl_check_hostname=False)
    assert security_config(settings)["ssl.endpoint.identification.algorithm"] == "none"


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_without_a_password_is_refused_with_the_variables_to_set(protocol: str) -> None:
    settings = Settings(kafka_security_protocol=protocol, kafka_username="u")
    with pytest.raises(KafkaSecurityError, match="CLINGATE_KAFKA_PASSWORD"):
        client_config("k:9092", settings=settings)
    with pytest.raises(KafkaSecurityError, match="CLINGATE_KAFKA_USERNAME"):
        client_config("k:9092", settings=Settings(kafka_security_protocol=protocol, kafka_password="p"))


def test_the_password_is_a_secret_in_settings_output() -> None:
    assert "s3cret" not in repr(_settings("SASL_SSL"))


@pytest.mark.parametrize(
    ("protocol", "mechanism"), list(itertools.product(PROTOCOLS, ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")))
)
def test_every_protocol_and_mechanism_gives_the_processs_principal(protocol: str, mechanism: str) -> None:
    config = security_config(_settings(protocol, kafka_sasl_mechanism=mechanism))
    assert config.get("security.protocol", "PLAINTEXT") == protocol
    sasl = protocol.startswith("SASL_")
    assert config.get("sasl.mechanism") == (mechanism if sasl else None)
    assert config.get("sasl.username") == ("clingate-worker" if sasl else None)
    assert config.get("sasl.password") == ("s3cret" if sasl else None)


def test_overrides_win_over_the_security_keys() -> None:
    config = client_config("k:9092", settings=_settings("SASL_PLAINTEXT"), **{"sasl.username": "admin"})
    assert config["sasl.username"] == "admin"
