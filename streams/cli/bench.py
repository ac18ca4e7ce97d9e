"""``clingate bench``: the benchmarks, one sub-command per area (``streams/bench/<area>.py``).

Each area module exposes its own ``app``; this group only mounts them, so adding a benchmark is one
import and one ``add_typer`` line here. ``poison`` imports its module (Hypothesis, every runtime's code)
only when it runs, so that ``clingate --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from streams.bench import (
    ablation,
    agent,
    chaos,
    clinical,
    console,
    dbpm,
    dbpm_kafka,
    docs,
    llm,
    memory,
    restart,
    rss,
    runtime,
)
from streams.local.paths import output_folder

app = typer.Typer(help="Benchmarks of each area: throughput, per-event cost, size.", no_args_is_help=True)
app.add_typer(dbpm.app, name="dbpm")
app.command("dbpm-kafka")(dbpm_kafka.dbpm_kafka)
app.command("ablation")(ablation.ablation)
app.command("agent")(agent.agent)
app.command("chaos")(chaos.chaos)
app.command("clinical")(clinical.clinical)
app.command("console")(console.console)
app.command("docs")(docs.docs)
app.command("llm")(llm.llm)
app.command("restart")(restart.restart)
app.command("memory")(memory.memory)
app.command("runtime")(runtime.runtime)
app.command("rss")(rss.rss)


def poison(
    good: Annotated[
        int, typer.Option(help="Good records per topic (LLM topics excepted); at least 7.")
    ] = 2000,
    bad: Annotated[
        int, typer.Option(help="Bad records per topic, drawn by the Hypothesis strategies.")
    ] = 1000,
    llm_good: Annotated[int, typer.Option(help="Good narratives, and good to-verify records.")] = 200,
    oversized: Annotated[
        int, typer.Option(help="Oversized bad records in all (one near 8 MiB, one with a 2 MiB key, 2 MiB).")
    ] = 12,
    large: Annotated[
        int, typer.Option(help="Valid 2 MiB records per kind, and valid records too large for their outputs.")
    ] = 3,
    seed: Annotated[int, typer.Option(help="Seeds the good and the bad records.")] = 7,
    timeout: Annotated[float, typer.Option(help="Longest wait for one phase's commits (s).")] = 600.0,
    workdir: Annotated[
        Path | None,
        typer.Option(
            callback=output_folder, help="The runtimes' data directories and logs (default: a temporary one)."
        ),
    ] = None,
) -> None:
    """Feed good and bad records to every consumed topic through every runtime; check and count them.

    Every bad record must be dead-lettered exactly once with a reason, every good record's outputs must
    equal the in-process reference, no process may exit or restart, no partition may stall. Needs a
    broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); starts its own runtimes. Exit status 1
    if a check fails.
    """
    try:
        from streams.testing.poison import Scale, poison_command
    except ModuleNotFoundError as missing:  # Hypothesis draws the bad records; it is in the test extra
        if missing.name != "hypothesis":
            raise
        typer.echo("clingate bench poison needs Hypothesis: pip install 'clingate[test]'", err=True)
        raise typer.Exit(2) from missing
    poison_command(Scale(good, bad, llm_good, oversized, large), seed, timeout, workdir)


app.command("poison")(poison)
