"""What several commands share: finding the cluster to talk to, or saying why there is none."""

from __future__ import annotations

import typer

from streams.runtime.settings import Settings
from streams.testing.broker import configured_bootstrap


def require_bootstrap(settings: Settings) -> str:
    """The cluster a command talks to (:func:`streams.testing.broker.configured_bootstrap`), or exit 2.

    Raises:
        typer.Exit: with code 2 after telling the user how to get a cluster.
    """
    bootstrap = configured_bootstrap(settings)
    if bootstrap is None:
        typer.echo("No Kafka cluster: set KAFKA_BOOTSTRAP_SERVERS or run `clingate broker start`.", err=True)
        raise typer.Exit(2)
    return bootstrap
