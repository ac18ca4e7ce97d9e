"""``clingate llm``: where LLM calls go, and the local OpenAI-compatible server (test answers or SmolLM2)."""

from __future__ import annotations

import typer

from streams.llm.config import resolve_roles
from streams.llm.serve.server import serve
from streams.runtime.settings import get_settings

app = typer.Typer(
    help="LLM serving: per-role status and a local OpenAI-compatible server.", no_args_is_help=True
)


@app.command()
def status() -> None:
    """Print, per role, the server and model its calls go to, or why its LLM phases are off."""
    for config in resolve_roles(get_settings()).values():
        typer.echo(config.status)


app.command()(serve)
