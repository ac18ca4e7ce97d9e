"""``clingate replay``: run the DBPM engine over a JSON Lines event stream (the replay contract).

``clingate replay --in EVENTS.jsonl --out DECISIONS.jsonl [--state-out STATE.json]
[--store memory|rocksdb] [--no-maintenance]`` reads events in input order, applies each to the
engine at its own event time, writes one decision line per gate event and, on request, the final
memory in the contract's state format. Tools outside the project compare these files line by line,
so the output is byte-identical across runs: JSON with a fixed key order, Python's shortest float
repr, ``\\n`` line ends, state lists sorted by signature.

Bad input (a line that is not UTF-8 or not JSON, or an event with an unknown kind / task / verdict
or a missing or mistyped field, see :mod:`processors.dbpm.events`) is reported on stderr as ``line N: reason``
and written to the dead-letter output (``--dlq``, default ``<out>.dlq.jsonl``; always rewritten, so
it describes this run) as ``{"line": N, "error": reason, "raw": original line}``; replay continues
with the next line. Blank lines are bad input too (nothing is dropped silently).

State is committed in batches of ``--commit-every`` events (one atomic write batch each); the batch
size changes I/O only, never a result. ``--store rocksdb`` keeps the memory in a RocksDB directory:
``--store-path`` (which must not exist yet, so a replay always starts from an empty memory) or a
temporary directory removed afterwards.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from state.kinds import StoreKind
from streams.local.paths import new_folder, output_file

app = typer.Typer(help="Replay a DBPM event stream (JSON Lines) through the engine.", no_args_is_help=True)


@app.callback(invoke_without_command=True)
def replay(
    in_: Annotated[
        Path, typer.Option("--in", help="Input events, JSON Lines (replay contract).", exists=True)
    ],
    out: Annotated[
        Path,
        typer.Option("--out", callback=output_file, help="Output decisions, one JSON line per gate event."),
    ],
    state_out: Annotated[
        Path | None,
        typer.Option(
            "--state-out", callback=output_file, help="Write the final memory state (contract format) here."
        ),
    ] = None,
    store: Annotated[StoreKind, typer.Option("--store", help="Keep the memory in memory or in RocksDB.")] = (
        StoreKind.memory
    ),
    no_maintenance: Annotated[
        bool,
        typer.Option(
            "--no-maintenance",
            help="Turn off pruning, caps and κ decay (§4.6): for cross-implementation diffs.",
        ),
    ] = False,
    dlq: Annotated[
        Path | None,
        typer.Option(
            "--dlq", callback=output_file, help="Dead-letter output for bad lines (default: <out>.dlq.jsonl)."
        ),
    ] = None,
    provenance: Annotated[
        bool, typer.Option("--provenance", help="Add rule, severity, support and sources to each decision.")
    ] = False,
    store_path: Annotated[
        Path | None,
        typer.Option(
            "--store-path",
            callback=new_folder,
            help="RocksDB directory to create and keep (default: a temporary one).",
        ),
    ] = None,
    commit_every: Annotated[
        int, typer.Option("--commit-every", min=1, help="Events per committed batch.")
    ] = 1000,
    via_kafka: Annotated[
        bool,
        typer.Option(
            "--via-kafka",
            help="Publish through the broker to running `clingate worker`s (same CLINGATE_APP_ID and "
            "CLINGATE_DBPM_* settings) and collect their decisions and memory.",
        ),
    ] = False,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            min=1.0,
            help="With --via-kafka: longest wait (s) for the workers' decisions of one run of candidates, "
            "for their final commit and for the broker to answer; a broker outage or a worker restart "
            "shorter than it only slows the replay, and a replay stopped on it goes on where it stopped "
            # The default is the setting's, shown by `clingate config`: `replay --help` loads no settings.
            "when run again (env CLINGATE_REPLAY_WAIT_S, default: see `clingate config`).",
        ),
    ] = None,
) -> None:
    """Run the DBPM engine over EVENTS.jsonl and write the decisions (and the final state).

    The engine is configured by the CLINGATE_DBPM_* settings, as the workers are (`clingate config
    --dbpm` shows the result); --no-maintenance turns maintenance off on top of them.
    """
    from processors.dbpm import DBPMEngine
    from state.kinds import open_store
    from streams.replay.engine import replay_stream, write_state
    from streams.runtime.settings import get_settings
    from streams.worker.engine import in_process_engine

    engine = in_process_engine(get_settings())  # the CLINGATE_DBPM_* settings, as a worker reads them
    if no_maintenance:
        engine = DBPMEngine(engine.config.with_flags(maintenance=False), engine.ontology)
    dlq_path = dlq if dlq is not None else out.with_name(out.name + ".dlq.jsonl")
    if via_kafka:
        _replay_via_kafka(in_, out, state_out, dlq_path, no_maintenance, provenance, wait)
        return
    with (
        open_store(store, store_path) as kv,
        in_.open("rb") as events,
        out.open("w", encoding="utf-8", newline="\n") as decisions,
        dlq_path.open("w", encoding="utf-8", newline="\n") as dead_letters,
    ):
        stats = replay_stream(
            events, decisions, dead_letters, kv, engine, provenance=provenance, commit_every=commit_every
        )
        if state_out is not None:
            write_state(state_out, kv, engine)
    typer.echo(
        f"replayed {stats.events} events: {stats.decisions} decisions, {stats.bad_lines} bad lines"
        + (f" (see {dlq_path})" if stats.bad_lines else ""),
        err=True,
    )


def _replay_via_kafka(
    in_: Path, out: Path, state_out: Path | None, dlq_path: Path, no_maintenance: bool, provenance: bool,
    wait_s: float | None,
) -> None:  # fmt: skip
    """``--via-kafka``: the workers decide; this process publishes, collects and writes the files. A
    replay of the same stream to the same app that stopped before it finished is resumed: what it
    had committed is not published again."""
    from schemas.wire import make_serde
    from streams.local.bootstrap import require_bootstrap
    from streams.replay.engine import EventReader
    from streams.replay.kafka import replay_via_kafka
    from streams.runtime.settings import get_settings
    from streams.worker.engine import dbpm_engine

    settings = get_settings()
    if no_maintenance == settings.dbpm_maintenance:
        raise typer.BadParameter(
            "--no-maintenance must match the workers: start them with CLINGATE_DBPM_MAINTENANCE="
            f"{'false' if no_maintenance else 'true'} and set it here too"
        )
    bootstrap = require_bootstrap(settings)
    engine = dbpm_engine(settings)
    with in_.open("rb") as events, dlq_path.open("w", encoding="utf-8", newline="\n") as dead_letters:
        reader = EventReader(dead_letters, tuple(engine.config.tasks), sys.stderr)
        objects = [json.loads(raw) for raw, _ in reader.read(events)]
    result = replay_via_kafka(
        bootstrap, objects, engine, make_serde(settings.schema_registry_url), settings.app_id,
        timeout_s=settings.replay_wait_s if wait_s is None else wait_s,
    )  # fmt: skip
    with out.open("w", encoding="utf-8", newline="\n") as decisions:
        for decision in result.decisions:
            line = decision if provenance else {k: decision[k] for k in ("candidate_id", "decision")}
            decisions.write(json.dumps(line) + "\n")
    if state_out is not None:
        state_out.write_text(json.dumps(result.state, indent=1) + "\n", encoding="utf-8")
    resumed = f", {result.resumed} records published before (resumed)" if result.resumed else ""
    typer.echo(
        f"replayed {len(objects)} events via Kafka: {len(result.decisions)} decisions, "
        f"{reader.bad} bad lines{resumed}; longest wait for the workers {result.longest_wait_s:.1f} s",
        err=True,
    )
