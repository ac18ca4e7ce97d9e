"""The quix-streams peer of ``clingate bench runtime``: one Application, run as a script by the
interpreter of quix-streams' own environment (:mod:`streams.bench.quix`), never imported by clingate.

It reads ``--records`` JSON records from ``--source`` and, per record, reads and rewrites its key's
running count and sum in quix-streams' RocksDB state (changelogged), then produces the record with
both added to ``--sink``; under exactly-once, so outputs, state changes and offsets commit in one
Kafka transaction. The parent times it from the outside from two lines on stdout: ``first`` once the
first record was processed and ``done`` once the application stopped after the last one (its final
checkpoint, a transaction commit, included). Then the script waits for its stdin to close, so the
parent reads the process's CPU at ``done`` while it still exists.

Only the standard library and quix-streams are imported: clingate is not installed beside it (the two
pin incompatible versions of confluent-kafka and pydantic).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def run(bootstrap: str, source: str, sink: str, group: str, state_dir: Path, records: int) -> int:
    """Process ``records`` records (module docstring); how many the stateful step saw.

    The application stops after ``records`` outputs, or after 120 s without a record (then fewer
    were seen: the caller reports it).
    """
    from quixstreams import Application, State  # the peer's environment only

    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        state_dir=state_dir,
        loglevel="WARNING",
    )
    seen = 0

    def count_and_sum(value: dict[str, Any], state: State) -> dict[str, Any]:
        nonlocal seen
        count, total = state.get("count", 0) + 1, state.get("sum", 0) + value["i"]
        state.set("count", count)
        state.set("sum", total)
        seen += 1
        if seen == 1:
            print("first", flush=True)
        return {**value, "count": count, "sum": total}

    frame = app.dataframe(app.topic(source, value_deserializer="json"))
    frame.apply(count_and_sum, stateful=True).to_topic(app.topic(sink, value_serializer="json"))
    app.run(count=records, timeout=120.0, collect=False)
    return seen


def main() -> None:
    """Parse the arguments, run, say ``done`` and wait for stdin to close; exit 1 if records were missing."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--records", type=int, required=True)
    args = parser.parse_args()
    seen = run(args.bootstrap, args.source, args.sink, args.group, args.state_dir, args.records)
    print("done", flush=True)
    sys.stdin.read()
    if seen < args.records:
        sys.exit(f"quix-streams processed {seen:,} of {args.records:,} records, then none for 120 s")


if __name__ == "__main__":
    main()
