"""``clingate generator``: the generator consumer group (narratives -> candidates).

See :mod:`streams.groups.generator`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from streams.groups.generator import run_generator
from streams.groups.llm import RoleDisabledError, run_until_signalled
from streams.local.bootstrap import require_bootstrap
from streams.runtime.settings import env_help, get_settings

app = typer.Typer(help="Run a generator group member (narratives -> candidates).", no_args_is_help=False)


@app.callback(invoke_without_command=True)
def generator(
    max_in_flight: Annotated[
        int | None,
        typer.Option(help=f"Narratives at once {env_help('generator_max_in_flight')}."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help=f"/metrics port, 0: off {env_help('generator_metrics_port')}."),
    ] = None,
) -> None:
    """Extract candidates from narratives with the generator LLM until SIGINT/SIGTERM."""
    settings = get_settings()
    bootstrap = require_bootstrap(settings)
    port = settings.generator_metrics_port if metrics_port is None else metrics_port
    try:
        loop = run_until_signalled(run_generator, bootstrap, settings, port, max_in_flight=max_in_flight)
    except RoleDisabledError as error:
        typer.echo(f"generator not started: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"stopped after {loop.processed} narratives", err=True)
