"""The ``clingate`` command line: one sub-command group per module under :mod:`streams.commands`."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="clingate",
    help="clingate: gated decisions for clinical LLM pipelines on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported here so `clingate --help` stays fast and each command module owns its group.
    from streams.commands import (
        bench,
        broker,
        clinical,
        config,
        demo,
        docs,
        generator,
        llm,
        replay,
        topics,
        verifier,
        worker,
    )

    app.add_typer(bench.app, name="bench")
    app.add_typer(broker.app, name="broker")
    app.add_typer(clinical.app, name="clinical")
    app.add_typer(config.app, name="config")
    app.add_typer(demo.app, name="demo")
    app.add_typer(docs.app, name="docs")
    app.add_typer(generator.app, name="generator")
    app.add_typer(llm.app, name="llm")
    app.add_typer(replay.app, name="replay")
    app.add_typer(topics.app, name="topics")
    app.add_typer(verifier.app, name="verifier")
    app.add_typer(worker.app, name="worker")


def main() -> None:
    """Console-script entry point."""
    _register()
    app()


if __name__ == "__main__":
    main()
