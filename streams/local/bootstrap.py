"""How a command finds the cluster it talks to, or says why there is none."""

from __future__ import annotations

import typer

from streams.local.broker import local_broker
from streams.runtime.settings import Settings


def configured_bootstrap(settings: Settings) -> str | None:
    """The address a command should talk to when none is given on its command line.

    Returns:
        ``KAFKA_BOOTSTRAP_SERVERS`` if set, else the address of a running ``clingate broker``,
        else None (nothing to talk to).
    """
    return settings.kafka_bootstrap_servers or local_broker(settings).bootstrap


def require_bootstrap(settings: Settings) -> str:
    """The cluster a command talks to (:func:`configured_bootstrap`), or exit 2.

    Raises:
        typer.Exit: with code 2 after telling the user how to get a cluster.
    """
    bootstrap = configured_bootstrap(settings)
    if bootstrap is None:
        typer.echo("No Kafka cluster: set KAFKA_BOOTSTRAP_SERVERS or run `clingate broker start`.", err=True)
        raise typer.Exit(2)
    return bootstrap
