"""``clingate bench``: the benchmarks, one sub-command per area (``streams/bench/<area>.py``).

Each area module exposes its own ``app``; this group only mounts them, so adding a benchmark is one
import and one ``add_typer`` line here.
"""

from __future__ import annotations

import typer

from streams.bench import chaos, clinical, dbpm, dbpm_kafka, docs, llm, restart

app = typer.Typer(help="Benchmarks of each area: throughput, per-event cost, size.", no_args_is_help=True)
app.add_typer(dbpm.app, name="dbpm")
app.command("dbpm-kafka")(dbpm_kafka.dbpm_kafka)
app.command("chaos")(chaos.chaos)
app.command("clinical")(clinical.clinical)
app.command("docs")(docs.docs)
app.command("llm")(llm.llm)
app.command("restart")(restart.restart)
