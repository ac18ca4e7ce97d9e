"""Clients in other languages load clingate's schemas and decode its records, with no workaround.

A foreign client sees only the files ``clingate schemas export`` writes and the bytes on a topic. It
either reads the numbered files in order into one parser context (Java's ``Schema.Parser``, an
``avro.schema.Names``, fastavro's ``named_schemas``), or a topic's self-contained schema alone; then it
checks the single-object header (marker, Rabin fingerprint of the Parsing Canonical Form) and decodes
the body. Both parsers used here are independent of clingate's serde: fastavro through its public API
only, and the reference ``avro`` package, whose parser behaves like Java's (a name defined twice in one
context is refused). The fingerprint is recomputed from the specification's algorithm.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import avro.io
import avro.name
import avro.schema
import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_strategies import model_strategy
from typer.testing import CliRunner

from schemas.registry import SchemaEntry, load_registry, schema_files
from schemas.serde import SINGLE_OBJECT_HEADER_SIZE, SINGLE_OBJECT_MAGIC, SingleObjectSerde
from streams.cli.schemas import ORDER_FILE, TOPICS_DIR, app
from topics.catalog import CATALOG

REGISTRY = load_registry()
SERDE = SingleObjectSerde()
# One event per value schema of the catalog: every area, GateDecision (which uses Candidate.avsc) and
# the docs events that share the classification types.
EVENTS = [REGISTRY.entries[name] for name in sorted({spec.value_schema for spec in CATALOG})]
TOPIC_OF = {
    entry.full_name: next(s.name for s in CATALOG if s.value_schema == entry.full_name) for entry in EVENTS
}


def _rabin(canonical_form: str) -> int:
    """CRC-64-AVRO of a Parsing Canonical Form, as the Avro specification gives the algorithm."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in canonical_form.encode("utf-8"):
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def _export(directory: Path) -> None:
    result = CliRunner().invoke(app, ["export", str(directory)])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("export")
    _export(directory)
    return directory


def _ordered(directory: Path) -> list[Path]:
    return [directory / name for name in (directory / ORDER_FILE).read_text(encoding="utf-8").splitlines()]


class ForeignClients:
    """What the two foreign clients parsed from an export, by full name of the event."""

    def __init__(self, directory: Path) -> None:
        self.avro_names = avro.name.Names()
        self.fastavro_named: dict[str, Any] = {}
        self.avro_ordered: dict[str, avro.schema.Schema] = {}
        self.fastavro_ordered: dict[str, Any] = {}
        for path in _ordered(directory):
            document = json.loads(path.read_text(encoding="utf-8"))
            as_avro = avro.schema.make_avsc_object(document, self.avro_names)
            as_fastavro = fastavro.parse_schema(document, named_schemas=self.fastavro_named)
            self.avro_ordered[as_avro.fullname] = as_avro
            self.fastavro_ordered[as_fastavro["name"]] = as_fastavro
        self.avro_topic: dict[str, avro.schema.Schema] = {}
        self.fastavro_topic: dict[str, Any] = {}
        for spec in CATALOG:
            text = (directory / TOPICS_DIR / f"{spec.name}.avsc").read_text(encoding="utf-8")
            self.avro_topic[spec.name] = avro.schema.parse(text)
            self.fastavro_topic[spec.name] = fastavro.parse_schema(json.loads(text))


@pytest.fixture(scope="module")
def clients(exported: Path) -> ForeignClients:
    return ForeignClients(exported)


# ------------------------------------------------------------------------------ the repository's files


def test_the_repository_files_load_in_one_parser_context_in_dependency_order():
    assert sorted(REGISTRY.files) == schema_files()
    names = avro.name.Names()
    for path in REGISTRY.files:  # SchemaParseException "already in use" on a second definition
        avro.schema.make_avsc_object(json.loads(path.read_text(encoding="utf-8")), names)
    assert set(names.names) == set(REGISTRY.named)


# ----------------------------------------------------------------------------------- the export itself


def test_the_export_is_the_same_bytes_on_every_run(tmp_path: Path, exported: Path):
    _export(tmp_path)
    files = sorted(p.relative_to(exported) for p in exported.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    for relative in files:
        assert (tmp_path / relative).read_bytes() == (exported / relative).read_bytes(), relative


def test_the_export_lists_every_schema_file_numbered_in_order_and_every_topic(exported: Path):
    ordered = _ordered(exported)
    assert [p.name for p in ordered] == sorted(p.name for p in exported.glob("*.avsc"))
    assert [p.name.split("-", 1)[1] for p in ordered] == [
        f"clingate.{p.parent.name}.{p.stem}.avsc" for p in REGISTRY.files
    ]
    topics = {p.name.removesuffix(".avsc") for p in (exported / TOPICS_DIR).iterdir()}
    assert topics == set(CATALOG.names)
    assert any(name.endswith(".dlq") for name in topics)


def test_a_new_export_replaces_an_older_one_and_leaves_other_files_alone(tmp_path: Path):
    (tmp_path / TOPICS_DIR).mkdir()
    stale = [tmp_path / "99-clingate.gone.Removed.avsc", tmp_path / TOPICS_DIR / "clingate.gone.avsc"]
    kept = tmp_path / "notes.avsc"
    for path in [*stale, kept]:
        path.write_text("{}")
    _export(tmp_path)
    assert not any(path.exists() for path in stale)
    assert kept.read_text() == "{}"


def test_each_named_type_is_defined_once_across_the_ordered_files(clients: ForeignClients):
    assert set(clients.avro_names.names) == set(REGISTRY.named)
    assert set(clients.fastavro_named) == set(REGISTRY.named)


@pytest.mark.parametrize("spec", list(CATALOG), ids=lambda s: s.name)
def test_each_topic_schema_alone_has_the_fingerprint_clingate_writes(clients: ForeignClients, spec):
    fingerprint = REGISTRY.entries[spec.value_schema].current.fingerprint
    avro_schema = clients.avro_topic[spec.name]
    assert avro_schema.fullname == spec.value_schema
    assert _rabin(avro_schema.canonical_form).to_bytes(8, "little") == fingerprint
    assert to_parsing_canonical_form(clients.fastavro_topic[spec.name]) == avro_schema.canonical_form


@pytest.mark.parametrize("entry", EVENTS, ids=lambda e: e.full_name)
def test_each_event_of_the_ordered_files_has_the_fingerprint_clingate_writes(
    clients: ForeignClients, entry: SchemaEntry
):
    canonical = clients.avro_ordered[entry.full_name].canonical_form
    assert _rabin(canonical).to_bytes(8, "little") == entry.current.fingerprint


# ------------------------------------------------------------------------ decoding clingate's records


def _avro_read(schema: avro.schema.Schema, body: bytes) -> object:
    return avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(io.BytesIO(body)))


def _fastavro_read(schema: Any, body: bytes) -> object:
    return fastavro.schemaless_reader(io.BytesIO(body), schema, None)


@pytest.mark.parametrize("entry", EVENTS, ids=lambda e: e.full_name)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_foreign_clients_decode_every_event_clingate_encodes(
    clients: ForeignClients, entry: SchemaEntry, data
):
    instance = data.draw(model_strategy(entry.model))
    record = SERDE.encode(instance)
    header, body = record[:SINGLE_OBJECT_HEADER_SIZE], record[SINGLE_OBJECT_HEADER_SIZE:]
    assert header[:2] == SINGLE_OBJECT_MAGIC
    topic = TOPIC_OF[entry.full_name]
    assert int.from_bytes(header[2:], "little") == _rabin(clients.avro_topic[topic].canonical_form)

    expected = _fastavro_read(entry.current.parsed, body)  # what clingate itself reads
    assert _fastavro_read(clients.fastavro_ordered[entry.full_name], body) == expected
    assert _fastavro_read(clients.fastavro_topic[topic], body) == expected
    assert _avro_read(clients.avro_ordered[entry.full_name], body) == expected
    assert _avro_read(clients.avro_topic[topic], body) == expected
    assert SERDE.decode(record, entry.model) == instance
