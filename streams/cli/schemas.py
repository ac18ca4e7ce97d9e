"""``clingate schemas export DIR``: every current Avro schema, in files any Avro client can load.

The export holds two views of the same schemas (see :mod:`schemas.registry`):

* ``NN-<full name>.avsc`` and ``order.txt``: the repository's schema files, one per event, numbered in
  dependency order (:attr:`~schemas.registry.SchemaRegistry.files`). Each named type is defined in
  exactly one of them and referenced by its full name in the others, so one parser context reading
  them in that order (Java's ``Schema.Parser``, an ``avro.schema.Names``, fastavro's
  ``named_schemas``) resolves every name and never meets a redefinition. ``order.txt`` lists the file
  names in that order, one per line; the numbers sort the same way.
* ``topics/<topic>.avsc``: the value schema of every catalog topic, dead-letter topics included, as one
  self-contained document (the registry's standalone form: every named type defined inline at its
  first use). It is the schema clingate fingerprints for single-object encoding and registers with a
  schema registry, so its Rabin fingerprint is the one in the header of every record of the topic.

The output is a function of the repository alone: the same bytes on every run. Files of an earlier
export that this one no longer produces (an event or topic since removed) are deleted, so the directory
never holds a schema clingate does not write; no other file in it is touched.

The command imports the registry (fastavro, avro) only when it runs, so ``clingate --help`` stays fast.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from streams.local.paths import output_folder

if TYPE_CHECKING:
    from schemas.registry import SchemaRegistry
    from topics.catalog import Catalog

app = typer.Typer(
    help="The Avro schemas of clingate's topics, for clients in any language.", no_args_is_help=True
)

ORDER_FILE = "order.txt"
"""The export's list of the numbered schema files, in the order a single parser must read them."""

TOPICS_DIR = "topics"
"""The export's directory of self-contained per-topic value schemas."""

_NUMBERED = re.compile(r"^[0-9]+-[A-Za-z_][A-Za-z0-9_.]*\.avsc$")


@app.callback()
def _group() -> None:
    # A callback keeps ``export`` a sub-command when this app runs on its own (tests) as well: typer
    # turns a callback-less app of one command into that command.
    pass


def _json(schema: Any) -> bytes:
    return (json.dumps(schema, indent=2) + "\n").encode("utf-8")


def export_files(registry: SchemaRegistry, catalog: Catalog) -> dict[str, bytes]:
    """The export's files, by path relative to the export directory, in writing order.

    Raises:
        ValueError: a catalog topic's value schema is not an event of ``registry``.
    """
    from schemas.registry import expected_full_name

    width = max(2, len(str(len(registry.files))))
    files: dict[str, bytes] = {}
    for number, path in enumerate(registry.files, 1):
        name = f"{number:0{width}d}-{expected_full_name(path)}.avsc"
        files[name] = _json(json.loads(path.read_text(encoding="utf-8")))
    files[ORDER_FILE] = "".join(f"{name}\n" for name in files).encode("utf-8")
    for spec in catalog:
        entry = registry.entries.get(spec.value_schema)
        if entry is None or not entry.top_level:
            raise ValueError(f"topic {spec.name}: value schema {spec.value_schema} is not a registered event")
        files[f"{TOPICS_DIR}/{spec.name}.avsc"] = _json(entry.current.schema)
    return files


def _stale(directory: Path, written: set[str]) -> list[Path]:
    """Files of an earlier export in ``directory`` that the current one does not write."""
    numbered = [p for p in directory.glob("*.avsc") if _NUMBERED.match(p.name)]
    topics = list((directory / TOPICS_DIR).glob("*.avsc"))
    return sorted(p for p in numbered + topics if p.relative_to(directory).as_posix() not in written)


def write_export(directory: Path, registry: SchemaRegistry, catalog: Catalog) -> list[Path]:
    """Write the export into ``directory`` (created if missing); return the files written, in order.

    Raises:
        ValueError: a catalog topic's value schema is not an event of ``registry``.
    """
    files = export_files(registry, catalog)
    (directory / TOPICS_DIR).mkdir(parents=True, exist_ok=True)
    for path in _stale(directory, set(files)):
        path.unlink()
    written = []
    for relative, content in files.items():
        target = directory / relative
        target.write_bytes(content)
        written.append(target)
    return written


@app.command()
def export(
    directory: Annotated[
        Path,
        typer.Argument(
            file_okay=False,
            callback=output_folder,
            help="Directory to write the schemas into (created if missing).",
        ),
    ],
) -> None:
    """Write every current schema in dependency order, and one self-contained schema per topic value."""
    from schemas.registry import load_registry
    from topics.catalog import CATALOG

    registry = load_registry()
    write_export(directory, registry, CATALOG)
    typer.echo(
        f"{len(registry.files)} schema files in dependency order (listed in {directory / ORDER_FILE}), "
        f"{len(CATALOG)} topic value schemas in {directory / TOPICS_DIR}"
    )
