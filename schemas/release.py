"""Release the current schemas: ``python -m schemas.release [--check]``.

A release snapshots the standalone form of every event schema whose Parsing Canonical Form differs
from its latest released version (a change to ``doc`` alone is not a new version) as
``schemas/avro/_released/<area>/<Name>.v<N+1>.avsc``; a schema never released gets ``v1``. Before
writing, each changed schema is checked to read data written with every released version (the
reference implementation's compatibility checker); an incompatible change is refused, listing why.

Commit the snapshots with the schema change. The compatibility test fails, naming this command, while
a schema has unreleased changes, and the serde reads records written with any snapshot.

``--check`` reports what a release would do and exits 1 if anything needs releasing or is refused,
writing nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from schemas.registry import (
    RELEASED_ROOT,
    SchemaEntry,
    SchemaRegistry,
    compatibility_errors,
    load_registry,
    snapshot_path,
)


@dataclass(frozen=True)
class ReleasePlan:
    """What releasing one event schema entails."""

    entry: SchemaEntry
    version: int | None
    """The version to snapshot; ``None`` when the current schema is already released."""
    refusals: tuple[str, ...]
    """Why the current schema cannot read a released version (empty when it can)."""


def plan(registry: SchemaRegistry) -> list[ReleasePlan]:
    """The release plan of every event schema of ``registry``, sorted by full name."""
    plans = []
    for entry in registry.events():
        released = entry.released
        if released and released[-1].fingerprint == entry.current.fingerprint:
            plans.append(ReleasePlan(entry, None, ()))
            continue
        refusals = tuple(
            f"v{old.version}: {problem}"
            for old in released
            for problem in compatibility_errors(entry.current.schema, old.schema)
        )
        version = (released[-1].version or 0) + 1 if released else 1
        plans.append(ReleasePlan(entry, version, refusals))
    return plans


def write_snapshot(entry: SchemaEntry, version: int, root: Path = RELEASED_ROOT) -> Path:
    """Write the standalone current schema of ``entry`` as ``version``; return the file written."""
    path = snapshot_path(entry.full_name, version, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry.current.schema, indent=2) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Run the release; return the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m schemas.release", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report only; exit 1 if a release is due")
    args = parser.parse_args(argv)
    status = 0
    for item in plan(load_registry()):
        name = item.entry.full_name
        if item.version is None:
            continue
        if item.refusals:
            status = 1
            print(f"REFUSED {name}: not backward compatible:\n  " + "\n  ".join(item.refusals))
        elif args.check:
            status = 1
            print(f"DUE     {name} v{item.version}")
        else:
            print(f"RELEASED {name} v{item.version} -> {write_snapshot(item.entry, item.version)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
