"""Encoding and decoding of every clingate event: one interface, two wire formats.

* :class:`SingleObjectSerde` (default): Avro single-object encoding as the Avro specification defines
  it: the two marker bytes ``0xC3 0x01``, the 8-byte little-endian CRC-64-AVRO (Rabin) fingerprint of
  the writer schema's Parsing Canonical Form, then the Avro binary datum. The fingerprint identifies
  the writer schema among the current and released schemas of :mod:`schemas.registry`, so no network
  service is needed and a record written with a released older version is read through Avro schema
  resolution into the current model.
* :class:`~schemas.registry_serde.ConfluentRegistrySerde` (when a registry URL is configured): the
  Confluent wire format, magic byte ``0`` + 4-byte big-endian schema id + Avro binary, through
  ``confluent_kafka.schema_registry``'s ``AvroSerializer`` / ``AvroDeserializer`` (subjects follow its
  default ``<topic>-value`` strategy, so ``topic`` is required there).

Build one serde per process with :func:`make_serde` and reuse it: schemas are parsed once, by the
registry, and the hot path only looks up dictionaries.

Every failure to decode raises :class:`SchemaDecodeError`, whose ``reason`` says which of the five
things went wrong (bad magic, unknown schema, wrong schema for the topic, malformed bytes, validation)
so that the dead-letter step can record it without parsing messages.

The datum written is ``model.model_dump(mode="json")`` (the convention of :mod:`schemas.base`), with
the one documented exception that :data:`~schemas.base.RawBytes` fields, base64 text in JSON, are
written as the bytes they stand for.
"""

from __future__ import annotations

import base64
import io
import struct
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol, TypeVar, overload

import fastavro
from fastavro.types import Schema
from pydantic import ValidationError

from schemas.base import AvroModel
from schemas.registry import SchemaEntry, SchemaRegistry, SchemaVersion, load_registry

M = TypeVar("M", bound=AvroModel)

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
"""The two marker bytes of Avro single-object encoding."""

SINGLE_OBJECT_HEADER_SIZE = len(SINGLE_OBJECT_MAGIC) + 8

CONFLUENT_MAGIC = 0
"""First byte of the Confluent Schema Registry wire format."""

# What fastavro raises on bytes that are not a datum of the writer schema: short reads, varints that
# overflow, invalid UTF-8, union/enum indexes out of range, negative lengths.
MALFORMED = (EOFError, ValueError, IndexError, KeyError, OverflowError, struct.error, MemoryError)


class DecodeReason(StrEnum):
    """Why bytes could not become a model."""

    BAD_MAGIC = "bad_magic"
    UNKNOWN_SCHEMA = "unknown_schema"
    WRONG_SCHEMA = "wrong_schema"
    MALFORMED = "malformed"
    INVALID = "invalid"


class SchemaDecodeError(ValueError):
    """Bytes could not be decoded into the expected model.

    Attributes:
        reason: which check failed.
        writer: full name of the writer schema when it was identified.
    """

    def __init__(self, reason: DecodeReason, message: str, *, writer: str | None = None) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.writer = writer


class SchemaEncodeError(ValueError):
    """A model could not be written with its schema (a value the schema cannot carry)."""


class Serde(Protocol):
    """Turns models into record values and back; build once, reuse (schemas are parsed once)."""

    def encode(self, model: AvroModel, *, topic: str | None = None) -> bytes:
        """The record value of ``model`` (``topic`` names the subject where the format needs one)."""
        ...

    def read_datum(self, data: bytes, expected: type[AvroModel], *, topic: str | None = None) -> Any:
        """The Avro datum in ``data``, read into the current version of ``expected``'s schema, before
        the model's checks: what :meth:`decode` validates. A hot path that turns it into its own type
        MUST agree with the model (values, and the records the model rejects).

        Raises:
            SchemaDecodeError: every way ``data`` can fail but the model's checks (``invalid``).
        """
        ...

    @overload
    def decode(self, data: bytes, expected: type[M], *, topic: str | None = None) -> M: ...

    @overload
    def decode(self, data: bytes, expected: None = None, *, topic: str | None = None) -> AvroModel: ...

    def decode(
        self, data: bytes, expected: type[AvroModel] | None = None, *, topic: str | None = None
    ) -> AvroModel:
        """The model encoded in ``data``; MUST be an ``expected`` when given.

        Raises:
            SchemaDecodeError: for every way ``data`` can fail.
        """
        ...


# ----------------------------------------------------------------------------------- datum adapting


def datum_adapter(schema: Schema) -> Callable[[Any], Any] | None:
    """A function turning a model's JSON dump into the datum written with ``schema``; ``None`` where the
    dump is that datum already.

    Two things differ from the dump. Where the schema says ``bytes``, the dump holds base64 text; the
    datum holds the bytes. And a value of a union of several records is given as fastavro's
    ``(full name, record)`` pair, the branch whose fields are the dump's keys (a model's dump holds
    every field): fastavro would otherwise try each branch in turn, validating the value against it,
    which costs more than writing it. A value no branch's fields match is left for fastavro to
    resolve as before.
    """
    named: dict[str, Any] = {}

    def build(node: Any) -> Callable[[Any], Any] | None:
        if isinstance(node, str):
            if node == "bytes":
                return lambda value: base64.b64decode(value) if isinstance(value, str) else value
            return build(named[node]) if node in named else None
        if isinstance(node, list):
            return _union(node, [build(branch) for branch in node])
        kind = node["type"]
        if kind in ("record", "enum", "fixed"):
            named[node["name"]] = node
        if kind == "record":
            adapters = {f["name"]: build(f["type"]) for f in node["fields"]}
            active = {name: fn for name, fn in adapters.items() if fn is not None}
            if not active:
                return None
            return lambda value: {k: (active[k](v) if k in active else v) for k, v in value.items()}
        if kind == "array":
            item = build(node["items"])
            return None if item is None else (lambda value: [item(v) for v in value])
        if kind == "map":
            item = build(node["values"])
            return None if item is None else (lambda value: {k: item(v) for k, v in value.items()})
        return build(kind) if isinstance(kind, str) and kind not in ("enum", "fixed") else None

    def _record(branch: Any) -> Any:
        resolved = named.get(branch, branch) if isinstance(branch, str) else branch
        return resolved if isinstance(resolved, dict) and resolved.get("type") == "record" else None

    def _union(node: list[Any], branches: list[Callable[[Any], Any] | None]) -> Callable[[Any], Any] | None:
        pairs = [(_record(branch), fn) for branch, fn in zip(node, branches, strict=True)]
        records = [(record, fn) for record, fn in pairs if record is not None]
        if len(records) > 1 and all(fn is None for record, fn in pairs if record is None):
            by_fields = {frozenset(f["name"] for f in r["fields"]): (r["name"], fn) for r, fn in records}
            if len(by_fields) == len(records):  # every branch told apart by its fields
                return _records_union(by_fields)
        active = [fn for fn in branches if fn is not None]
        if not active:
            return None
        if len([branch for branch in node if branch != "null"]) > 1:
            # The JSON dump does not say which branch a value took, so base64 text could not be told
            # from a string of another branch.
            raise ValueError('bytes may only appear in a union with null (e.g. ["null", "bytes"])')
        (only,) = active
        return lambda value: None if value is None else only(value)

    def _records_union(
        by_fields: dict[frozenset[str], tuple[str, Callable[[Any], Any] | None]],
    ) -> Callable[[Any], Any]:
        def adapt(value: Any) -> Any:
            if not isinstance(value, dict):
                return value
            found = by_fields.get(frozenset(value))
            if found is None:
                return value
            name, fn = found
            return (name, value if fn is None else fn(value))

        return adapt

    return build(schema)


def model_datum(model: AvroModel, adapter: Callable[[Any], Any] | None) -> Any:
    dumped = model.model_dump(mode="json")
    return dumped if adapter is None else adapter(dumped)


def validated(model_cls: type[M], datum: Any, writer: str) -> M:
    try:
        return model_cls.model_validate(datum)
    except ValidationError as exc:
        raise SchemaDecodeError(
            DecodeReason.INVALID,
            f"{writer} record rejected by {model_cls.__qualname__}: {exc.error_count()} error(s): "
            + "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()),
            writer=writer,
        ) from exc
    except Exception as exc:
        # A model validator that crashes on hostile input (MemoryError on a huge count, OverflowError)
        # must not crash the consumer: the record would be re-read forever and block its partition.
        raise SchemaDecodeError(
            DecodeReason.INVALID,
            f"{writer} record made {model_cls.__qualname__} fail: {type(exc).__name__}: {exc}",
            writer=writer,
        ) from exc


def describe_foreign(data: bytes) -> str:
    """A hint for the operator about what unknown bytes look like."""
    if not data:
        return "the value is empty"
    if data[:1] == bytes([CONFLUENT_MAGIC]):
        return "it looks like the Confluent registry wire format (magic byte 0)"
    if data[:2] == SINGLE_OBJECT_MAGIC:
        return "it looks like Avro single-object encoding"
    if data.lstrip()[:1] in (b"{", b"["):
        return "it looks like JSON"
    return f"it starts with {data[:4].hex()}"


def _write(parsed: Schema, datum: Any, name: str) -> bytes:
    buffer = io.BytesIO()
    try:
        fastavro.schemaless_writer(buffer, parsed, datum)
    except (*MALFORMED, TypeError, AttributeError) as exc:
        raise SchemaEncodeError(f"{name}: the model holds a value its schema cannot carry: {exc}") from exc
    return buffer.getvalue()


# ------------------------------------------------------------------------------ single-object serde


class SingleObjectSerde:
    """Avro single-object encoding (``0xC3 0x01`` + CRC-64-AVRO fingerprint + Avro binary)."""

    def __init__(self, registry: SchemaRegistry | None = None) -> None:
        """Index the registry's current and released schemas by fingerprint.

        Args:
            registry: the schemas to know; the repository's own by default.
        """
        self._registry = registry or load_registry()
        self._writers: dict[bytes, tuple[SchemaVersion, SchemaEntry]] = {}
        self._adapters: dict[str, Callable[[Any], Any] | None] = {}
        for entry in self._registry.entries.values():
            for version in (*entry.released, entry.current):
                self._writers[version.fingerprint] = (version, entry)
            self._adapters[entry.full_name] = datum_adapter(entry.current.parsed)

    def encode(self, model: AvroModel, *, topic: str | None = None) -> bytes:
        """The single-object encoding of ``model``; ``topic`` is not needed by this format.

        Raises:
            SchemaEncodeError: the model holds a value its schema cannot carry.
        """
        entry = self._registry.for_model(type(model))
        datum = model_datum(model, self._adapters[entry.full_name])
        body = _write(entry.current.parsed, datum, entry.full_name)
        return SINGLE_OBJECT_MAGIC + entry.current.fingerprint + body

    def decode(
        self, data: bytes, expected: type[AvroModel] | None = None, *, topic: str | None = None
    ) -> Any:
        """The model encoded in ``data``, read into the current version of its schema.

        Args:
            data: a record value.
            expected: the model the topic carries; any other writer schema is ``wrong_schema``.
            topic: unused by this format (kept for a uniform interface).

        Raises:
            SchemaDecodeError: bad magic, unknown fingerprint, wrong schema, malformed bytes or a
                datum the model rejects.
        """
        entry, datum = self._read(data, expected)
        return validated(entry.model, datum, entry.full_name)

    def read_datum(self, data: bytes, expected: type[AvroModel], *, topic: str | None = None) -> Any:
        """The datum :meth:`decode` validates (:meth:`Serde.read_datum`)."""
        return self._read(data, expected)[1]

    def _read(self, data: bytes, expected: type[AvroModel] | None) -> tuple[SchemaEntry, Any]:
        if data[:2] != SINGLE_OBJECT_MAGIC:
            raise SchemaDecodeError(
                DecodeReason.BAD_MAGIC, f"not Avro single-object encoding: {describe_foreign(data)}"
            )
        if len(data) < SINGLE_OBJECT_HEADER_SIZE:
            raise SchemaDecodeError(
                DecodeReason.MALFORMED, f"truncated header: {len(data)} bytes, the header alone is 10"
            )
        fingerprint = data[2:SINGLE_OBJECT_HEADER_SIZE]
        known = self._writers.get(fingerprint)
        if known is None:
            raise SchemaDecodeError(
                DecodeReason.UNKNOWN_SCHEMA,
                f"no current or released schema has fingerprint {fingerprint.hex()} "
                "(written by a newer clingate, or not by clingate at all)",
            )
        writer, entry = known
        if expected is not None and entry.full_name != expected.avro_name:
            raise SchemaDecodeError(
                DecodeReason.WRONG_SCHEMA,
                f"expected {expected.avro_name}, the record was written as {entry.full_name}",
                writer=entry.full_name,
            )
        reader = None if writer is entry.current else entry.current.parsed
        buffer = io.BytesIO(data)
        buffer.seek(SINGLE_OBJECT_HEADER_SIZE)
        try:
            datum = fastavro.schemaless_reader(buffer, writer.parsed, reader)
        except (*MALFORMED, fastavro.read.SchemaResolutionError) as exc:
            raise SchemaDecodeError(
                DecodeReason.MALFORMED,
                f"bytes are not a {entry.full_name} datum: {type(exc).__name__}: {exc}",
                writer=entry.full_name,
            ) from exc
        if buffer.tell() != len(data):
            raise SchemaDecodeError(
                DecodeReason.MALFORMED,
                f"{len(data) - buffer.tell()} trailing bytes after the {entry.full_name} datum",
                writer=entry.full_name,
            )
        return entry, datum


def make_serde(schema_registry_url: str | None = None) -> Serde:
    """The serde of this process: the registry wire format when a URL is configured, else single-object.

    Args:
        schema_registry_url: ``Settings.schema_registry_url``; ``mock://<scope>`` selects the client
            library's in-memory registry (tests).
    """
    if schema_registry_url:
        # The registry client and its HTTP stack take about a third of a second to import; only the
        # processes configured with a registry pay for it.
        from schemas.registry_serde import registry_serde

        return registry_serde(schema_registry_url)
    return SingleObjectSerde()
