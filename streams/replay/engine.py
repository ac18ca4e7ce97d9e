"""The DBPM engine over a recorded event stream, in process: the replay contract's reference run.

Events are read in input order and applied to the engine at their own event times; one decision line
per gate event is written, and the final memory can be written in the contract's state format. The
output is byte-identical across runs (JSON with a fixed key order, Python's shortest float repr,
``\\n`` line ends, state lists sorted by signature), so tools outside the project compare it line by
line. Bad input (a line that is not UTF-8 or not JSON, or not a valid event, see
:mod:`processors.dbpm.events`) is reported as ``line N: reason`` and written to the dead-letter
output as ``{"line": N, "error": reason, "raw": original line}``; the replay goes on with the next
line. State is committed in batches; the batch size changes I/O only, never a result.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from processors.dbpm import BadEvent, DBPMEngine, Event, parse_event
from state import Store


@dataclass(frozen=True, slots=True)
class ReplayStats:
    """Counts of one replay run."""

    events: int
    decisions: int
    bad_lines: int


def _read(line: str | bytes, tasks: tuple[str, ...]) -> tuple[str, Event | str]:
    """The line's text and its event, or the reason it is bad input."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return line.decode("utf-8", errors="replace").rstrip("\r\n"), f"not UTF-8: {exc}"
    raw = line.rstrip("\r\n")
    try:
        return raw, parse_event(json.loads(raw), tasks)
    except json.JSONDecodeError as exc:
        return raw, f"not JSON: {exc}"
    except BadEvent as exc:
        return raw, str(exc)


@dataclass
class EventReader:
    """Reads contract events from JSON Lines; bad lines are reported and dead-lettered, not raised."""

    dead_letters: TextIO
    tasks: tuple[str, ...]
    report: TextIO
    bad: int = 0

    def read(self, events: Iterable[str | bytes]) -> Iterator[tuple[str, Event]]:
        """``(line text, parsed event)`` for every good line, in input order."""
        for number, line in enumerate(events, start=1):
            raw, event = _read(line, self.tasks)
            if isinstance(event, str):
                self.bad += 1
                print(f"line {number}: {event}", file=self.report)
                self.dead_letters.write(json.dumps({"line": number, "error": event, "raw": raw}) + "\n")
                continue
            yield raw, event


def replay_stream(
    events: Iterable[str] | Iterable[bytes],
    decisions: TextIO,
    dead_letters: TextIO,
    store: Store,
    engine: DBPMEngine,
    *,
    provenance: bool = False,
    commit_every: int = 1000,
    report: TextIO | None = None,
) -> ReplayStats:
    """Replay ``events`` into ``store`` through ``engine``, writing decisions and dead letters.

    Args:
        events: the input lines, one JSON event each (bytes are decoded as UTF-8; a line that is
            not UTF-8 is bad input like any other).
        decisions: where decision lines go.
        dead_letters: where bad lines go (one JSON object each).
        store: an empty store (it holds the final memory afterwards).
        engine: the DBPM engine.
        provenance: append the decision's provenance fields after ``decision``.
        commit_every: events per committed transaction.
        report: where ``line N: reason`` reports go (stderr by default).

    Returns:
        The number of events applied, decisions written and bad lines.
    """
    reader = EventReader(
        dead_letters, tuple(engine.config.tasks), report if report is not None else sys.stderr
    )
    applied = written = 0
    txn = store.transaction()
    for _, event in reader.read(events):
        txn, outputs = engine.process(txn, event, event.time)
        for decision in outputs:
            decisions.write(json.dumps(decision.to_json(provenance)) + "\n")
        written += len(outputs)
        applied += 1
        if applied % commit_every == 0:
            txn.commit()
            txn = store.transaction()
    txn.commit()
    return ReplayStats(applied, written, reader.bad)


def write_state(path: Path, store: Store, engine: DBPMEngine) -> None:
    """Write the final memory in the contract's state format (indented JSON, trailing newline)."""
    txn = store.transaction()
    try:
        document = engine.snapshot(txn)
    finally:
        txn.abort()
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
