"""``clingate verifier``: the verifier consumer group (to-verify -> verdicts, verified).

See :mod:`streams.groups.verifier`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from streams.groups.llm import RoleDisabledError, run_until_signalled
from streams.groups.verifier import run_verifier
from streams.local.bootstrap import require_bootstrap
from streams.runtime.settings import env_help, get_settings

app = typer.Typer(
    help="Run a verifier group member (to-verify -> verdicts, verified).", no_args_is_help=False
)


@app.callback(invoke_without_command=True)
def verifier(
    max_in_flight: Annotated[
        int | None,
        typer.Option(help=f"Candidates at once {env_help('verifier_max_in_flight')}."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help=f"/metrics port, 0: off {env_help('verifier_metrics_port')}."),
    ] = None,
) -> None:
    """Judge the candidates the gate let through with the verifier LLM until SIGINT/SIGTERM."""
    settings = get_settings()
    bootstrap = require_bootstrap(settings)
    port = settings.verifier_metrics_port if metrics_port is None else metrics_port
    try:
        loop = run_until_signalled(run_verifier, bootstrap, settings, port, max_in_flight=max_in_flight)
    except RoleDisabledError as error:
        typer.echo(f"verifier not started: {error}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"stopped after {loop.processed} records", err=True)
