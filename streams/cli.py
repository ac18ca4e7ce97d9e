"""The ``clingate`` command line: one sub-command group per module under :mod:`streams.commands`."""

from __future__ import annotations

import gc

import typer

app = typer.Typer(
    name="clingate",
    help="clingate: gated decisions for clinical LLM pipelines on Apache Kafka.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


GC_THRESHOLDS = (20_000, 10, 10)
"""The cyclic collector's thresholds in every clingate process (CPython's default: 700, 10, 10).

The stream processes allocate many short-lived objects per record (decoded models, futures, rows),
which reference counting frees; at 700 allocations per young collection the collector also ran
thousands of times a second, and in the demo's bulk phase it took 10% of the generator's CPU and a
quarter of the demo's own (py-spy ``--native``: ``gc_collect_main``), whose downstream view keeps
every output it consumed, so that each older collection walked more of them. Cycles are still
collected, 28 times less often."""


@app.callback()
def _configure_process() -> None:
    # Once per process, before any command runs: the collector, and format and level of the logs from
    # the settings (streams.logs).
    from streams.logs import configure
    from streams.settings import get_settings

    gc.set_threshold(*GC_THRESHOLDS)
    settings = get_settings()
    configure(settings.log_level, settings.log_format)


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
        schemas,
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
    app.add_typer(schemas.app, name="schemas")
    app.add_typer(topics.app, name="topics")
    app.add_typer(verifier.app, name="verifier")
    app.add_typer(worker.app, name="worker")


def main() -> None:
    """Console-script entry point."""
    _register()
    app()


if __name__ == "__main__":
    main()
