"""``clingate bench poison``: one run of the suite against the configured broker, its counts printed."""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer

from streams.local.bootstrap import require_bootstrap
from streams.runtime.settings import get_settings
from streams.testing.poison.records import Scale
from streams.testing.poison.run import run_poison


def poison_command(scale: Scale, seed: int, timeout: float, workdir: Path | None) -> None:
    """``clingate bench poison`` (registered in :mod:`streams.cli.bench`): run, print the counts, exit
    1 if a check fails."""
    bootstrap = require_bootstrap(get_settings())
    with tempfile.TemporaryDirectory(prefix="clingate-poison-") as scratch:
        report = run_poison(
            bootstrap, workdir or Path(scratch), scale=scale, seed=seed, timeout_s=timeout, log=typer.echo
        )
    typer.echo(report.render())
    if not report.passed:
        raise typer.Exit(1)
