"""``clingate config``: every setting, its environment variable, default and meaning.

The listing is generated from :class:`streams.runtime.settings.Settings`, the one place the environment is
read, so it cannot drift from the code; ``--markdown`` prints the table docs/configuration.md carries.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from streams.runtime.settings import AREAS, Settings, get_settings, settings_rows, settings_table

app = typer.Typer(help="Show every setting: environment variable, default, current value, meaning.")


@app.callback(invoke_without_command=True)
def show(
    markdown: Annotated[
        bool, typer.Option(help="Print the Markdown tables, one per area (docs/configuration.md's).")
    ] = False,
    dbpm: Annotated[
        bool,
        typer.Option(
            "--dbpm",
            help="Print the DBPM engine configuration a worker runs with these settings (every flag and "
            "constant) as JSON, with the fingerprint its decisions carry.",
        ),
    ] = False,
) -> None:
    """Print every setting with its environment variable, default and (without --markdown) current value."""
    if dbpm:
        from streams.worker.engine import dbpm_engine  # the engine's modules, only when asked

        config = dbpm_engine(get_settings()).config
        typer.echo(json.dumps({"fingerprint": config.fingerprint(), **config.describe()}, indent=2))
        return
    if markdown:
        typer.echo(settings_table(), nl=False)
        return
    current = get_settings()
    table = Table(title="clingate settings")
    for column in ("variable", "default", "current", "meaning"):
        table.add_column(column, overflow="fold")
    area_ends = {list(area.model_fields)[-1] for area in AREAS}  # a rule under each area's last setting
    for (name, _), (env, default, doc) in zip(Settings.model_fields.items(), settings_rows(), strict=True):
        value = getattr(current, name)
        shown = "***" if "key" in name and value else str(value)
        table.add_row(env, default, shown, doc, end_section=name in area_ends)
    Console().print(table)
