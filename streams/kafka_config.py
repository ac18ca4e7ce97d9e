"""The one place that builds librdkafka client settings for clingate's confluent-kafka clients.

Every producer, consumer and admin client of clingate starts from :func:`client_config`, so that
cluster-wide concerns (bootstrap servers, and the security settings of a cluster with SASL/TLS)
are decided once and every client agrees on them.
"""

from __future__ import annotations


def client_config(bootstrap: str, **overrides: object) -> dict[str, object]:
    """librdkafka settings of a clingate client of the cluster at ``bootstrap``.

    Args:
        bootstrap: Kafka bootstrap servers, ``host:port[,host:port...]``.
        **overrides: Client-specific librdkafka settings (``group.id``, batching); dots spelt as in
            librdkafka, passed through a dict (``**{"group.id": "g"}``).

    Returns:
        A fresh dict for ``confluent_kafka.Producer`` / ``Consumer`` / ``AdminClient``.
    """
    return {"bootstrap.servers": bootstrap, **overrides}
