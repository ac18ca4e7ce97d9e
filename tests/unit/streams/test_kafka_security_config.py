"""One principal per process: the librdkafka keys and the Faust credentials come from the same settings."""

from __future__ import annotations

import itertools
import ssl
from pathlib import Path

import pytest
from faust.auth import SASLCredentials, SSLCredentials
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from streams.runtime.kafka_config import KafkaSecurityError, client_config, faust_credentials, security_config
from streams.runtime.settings import Settings

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _settings(protocol: str, **fields: object) -> Settings:
    return Settings(kafka_security_protocol=protocol, kafka_username="clingate-worker",
                    kafka_password="s3cret", **fields)  # fmt: skip


def test_plaintext_adds_no_security_keys() -> None:
    assert client_config("k:9092", settings=Settings(kafka_security_protocol="PLAINTEXT")) == {
        "bootstrap.servers": "k:9092"
    }
    assert faust_credentials(Settings(kafka_security_protocol="PLAINTEXT")) is None


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


def test_hostname_check_can_be_turned_off_in_both_clients() -> None:
    settings = _settings("SASL_SSL", kafka_ssl_check_hostname=False)
    assert security_config(settings)["ssl.endpoint.identification.algorithm"] == "none"
    credentials = faust_credentials(settings)
    assert isinstance(credentials, SASLCredentials)
    assert credentials.ssl_context is not None and not credentials.ssl_context.check_hostname


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_without_a_password_is_refused_with_the_variables_to_set(protocol: str) -> None:
    settings = Settings(kafka_security_protocol=protocol, kafka_username="u")
    with pytest.raises(KafkaSecurityError, match="CLINGATE_KAFKA_PASSWORD"):
        client_config("k:9092", settings=settings)
    with pytest.raises(KafkaSecurityError, match="CLINGATE_KAFKA_USERNAME"):
        faust_credentials(settings)


def test_ssl_only_gives_faust_an_ssl_context() -> None:
    credentials = faust_credentials(_settings("SSL"))
    assert isinstance(credentials, SSLCredentials)
    assert isinstance(credentials.context, ssl.SSLContext)


def test_the_password_is_a_secret_in_settings_output() -> None:
    assert "s3cret" not in repr(_settings("SASL_SSL"))


# Every combination (12): exhaustive beats sampling, and building an SSL context (the system trust
# store) is too slow for hypothesis's per-example deadline on a loaded machine.
@pytest.mark.parametrize(
    ("protocol", "mechanism"), list(itertools.product(PROTOCOLS, ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")))
)
def test_faust_and_librdkafka_agree_on_protocol_mechanism_and_principal(
    protocol: str, mechanism: str
) -> None:
    settings = _settings(protocol, kafka_sasl_mechanism=mechanism)
    librdkafka = security_config(settings)
    aiokafka = credentials_to_aiokafka_auth(faust_credentials(settings))
    assert aiokafka["security_protocol"] == librdkafka.get("security.protocol", "PLAINTEXT")
    assert aiokafka.get("sasl_mechanism") == librdkafka.get("sasl.mechanism")
    assert aiokafka.get("sasl_plain_username") == librdkafka.get("sasl.username")
    assert aiokafka.get("sasl_plain_password") == librdkafka.get("sasl.password")


def test_overrides_win_over_the_security_keys() -> None:
    config = client_config("k:9092", settings=_settings("SASL_PLAINTEXT"), **{"sasl.username": "admin"})
    assert config["sasl.username"] == "admin"
