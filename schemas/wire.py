"""The wire format of a process, chosen from its settings: single-object encoding, or the Confluent
registry's format when a registry URL is configured."""

from __future__ import annotations

from schemas.serde import Serde, SingleObjectSerde


def make_serde(schema_registry_url: str | None = None) -> Serde:
    """The serde of this process: the registry wire format when a URL is configured, else single-object.

    Args:
        schema_registry_url: ``Settings.schema_registry_url``; ``mock://<scope>`` selects the client
            library's in-memory registry (tests).
    """
    if schema_registry_url:
        # The registry client and its HTTP stack take about a third of a second to import; only the
        # processes configured with a registry pay for it.
        from schemas.registry_serde import registry_serde

        return registry_serde(schema_registry_url)
    return SingleObjectSerde()
