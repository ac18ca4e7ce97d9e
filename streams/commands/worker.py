"""``clingate worker``: one stream worker, DBPM and clinical agents (Faust flags ``-l``, ``--web-port``).

The worker ensures the catalog topics exist (idempotent; off with ``CLINGATE_ENSURE_TOPICS=false``
where a provisioning job owns them and the worker's principal may not create topics), builds the
app of :mod:`streams.app` and runs it with :class:`faust.Worker`, which handles SIGTERM/SIGINT with a
clean stop (flush, commit, close the stores). Run several workers with the same ``CLINGATE_APP_ID`` to
share the partitions; each MUST have its own ``--datadir``.

The classification arbiter is not part of this worker: it runs in its own consumer group with
``clingate docs worker`` (see :mod:`streams.docs` for why it is not a Faust agent).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import faust
import typer

from streams.broker import configured_bootstrap
from streams.logs import logging_config
from streams.settings import get_settings
from topics.admin import admin_client, ensure_topics
from topics.catalog import build_catalog

app = typer.Typer(help="Run a stream worker (DBPM and clinical agents).", no_args_is_help=False)


@app.callback(invoke_without_command=True)
def worker(
    loglevel: Annotated[
        str | None, typer.Option("--loglevel", "-l", help="Log level (Faust's -l) [env CLINGATE_LOG_LEVEL].")
    ] = None,
    web_port: Annotated[
        int | None, typer.Option(help="Web endpoint port [env CLINGATE_WEB_PORT, default 6066].")
    ] = None,
    datadir: Annotated[
        Path | None, typer.Option(help="Worker state directory [env CLINGATE_WORKER_DATADIR].")
    ] = None,
) -> None:
    """Start a worker: the DBPM memory and gate agents and the clinical agent, until stopped."""
    from streams.app import create_app  # faust app construction is heavy; keep --help fast

    settings = get_settings()
    overrides = {"web_port": web_port, "worker_datadir": datadir}
    settings = settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    bootstrap = configured_bootstrap(settings)
    if bootstrap is None:
        typer.echo("No Kafka cluster: set KAFKA_BOOTSTRAP_SERVERS or run `clingate broker start`.", err=True)
        raise typer.Exit(2)
    if settings.ensure_topics_on_start:
        catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
        ensure_topics(admin_client(bootstrap), catalog)
    faust_app = create_app(settings, bootstrap)
    level = (loglevel or settings.log_level).upper()
    # Faust replaces the root handlers when it starts: hand it the clingate format (streams.logs).
    faust.Worker(
        faust_app, loglevel=level, logging_config=logging_config(level, settings.log_format)
    ).execute_from_commandline()
