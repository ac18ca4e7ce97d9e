"""The one place that builds Kafka client settings for clingate's clients, security included.

Every confluent-kafka producer, consumer and admin client of clingate starts from
:func:`client_config`, so that cluster-wide concerns (bootstrap servers, SASL/SCRAM, TLS) are decided
once, from the ``CLINGATE_KAFKA_*`` settings, and every client of a process authenticates as the same
principal.

Choices:
- The process's principal comes from :class:`~streams.runtime.settings.Settings` (the environment), never
  from a command line: a password on a command line is visible to every user of the machine.
- ``client_config`` reads the process settings itself (``get_settings()``) unless given others, so
  the dozens of call sites need no settings argument and cannot forget the security keys; a test
  or tool that acts as another principal passes ``settings=`` (or, for a broker probe, overrides).
- Overrides win over the security keys: the local SASL broker's readiness probe authenticates as
  its super user whatever principal the process has.
- SASL without a user name or password is refused here with a message that names the variables,
  rather than left to fail later as an authentication timeout.
- Host name verification follows ``CLINGATE_KAFKA_SSL_CHECK_HOSTNAME`` (librdkafka
  ``ssl.endpoint.identification.algorithm``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streams.runtime.settings import Settings, get_settings

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient


class KafkaSecurityError(ValueError):
    """The ``CLINGATE_KAFKA_*`` security settings are incomplete; the message says which to set."""


def _uses_sasl(settings: Settings) -> bool:
    return settings.kafka_security_protocol.startswith("SASL_")


def _uses_tls(settings: Settings) -> bool:
    return settings.kafka_security_protocol in ("SSL", "SASL_SSL")


def _sasl_login(settings: Settings) -> tuple[str, str]:
    if settings.kafka_username is None or settings.kafka_password is None:
        raise KafkaSecurityError(
            f"CLINGATE_KAFKA_SECURITY_PROTOCOL={settings.kafka_security_protocol} needs "
            "CLINGATE_KAFKA_USERNAME and CLINGATE_KAFKA_PASSWORD (the principal's SCRAM credentials)."
        )
    return settings.kafka_username, settings.kafka_password.get_secret_value()


def security_config(settings: Settings) -> dict[str, object]:
    """The librdkafka security keys of ``settings`` (empty for PLAINTEXT).

    Args:
        settings: Supplies the ``kafka_security_protocol``, SASL and TLS fields.

    Returns:
        ``security.protocol`` and, as the protocol needs, ``sasl.*`` and ``ssl.*`` keys.

    Raises:
        KafkaSecurityError: A SASL protocol without user name or password.
    """
    if settings.kafka_security_protocol == "PLAINTEXT":
        return {}
    config: dict[str, object] = {"security.protocol": settings.kafka_security_protocol}
    if _uses_sasl(settings):
        username, password = _sasl_login(settings)
        config |= {"sasl.mechanism": settings.kafka_sasl_mechanism, "sasl.username": username,
                   "sasl.password": password}  # fmt: skip
    if _uses_tls(settings):
        if settings.kafka_ssl_ca_file is not None:
            config["ssl.ca.location"] = str(settings.kafka_ssl_ca_file)
        check = "https" if settings.kafka_ssl_check_hostname else "none"
        config["ssl.endpoint.identification.algorithm"] = check
    return config


def client_config(
    bootstrap: str, *, settings: Settings | None = None, **overrides: object
) -> dict[str, object]:
    """librdkafka settings of a clingate client of the cluster at ``bootstrap``.

    Args:
        bootstrap: Kafka bootstrap servers, ``host:port[,host:port...]``.
        settings: Whose security settings to use; default: the process settings.
        **overrides: Client-specific librdkafka settings (``group.id``, batching); dots spelt as in
            librdkafka, passed through a dict (``**{"group.id": "g"}``). They win over the
            security keys.

    Returns:
        A fresh dict for ``confluent_kafka.Producer`` / ``Consumer`` / ``AdminClient``.

    Raises:
        KafkaSecurityError: A SASL protocol without user name or password.
    """
    return {"bootstrap.servers": bootstrap, **security_config(settings or get_settings()), **overrides}


def admin_client(bootstrap: str, **overrides: object) -> AdminClient:
    """An AdminClient of the cluster at ``bootstrap`` with the process's security settings.

    Args:
        bootstrap: Kafka bootstrap servers.
        **overrides: Further librdkafka settings (see :func:`client_config`).
    """
    from confluent_kafka.admin import AdminClient  # the Kafka client library only where a client is made

    return AdminClient(client_config(bootstrap, **overrides))


def liveness_config(session_timeout_s: float) -> dict[str, object]:
    """librdkafka settings of how fast a group notices a silent member.

    ``session_timeout_s`` is ``CLINGATE_CONSUMER_SESSION_TIMEOUT_S`` for every group of the project.

    The session timeout is how long a SIGKILLed member's partitions wait before they move; heartbeats
    every tenth of it (the ratio Kafka's own clients use), so a few lost heartbeats are tolerated.
    """
    return {
        "session.timeout.ms": int(session_timeout_s * 1000),
        "heartbeat.interval.ms": int(session_timeout_s * 100),
    }
