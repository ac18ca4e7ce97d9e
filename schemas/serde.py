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

Build one serde per process with :func:`schemas.wire.make_serde` and reuse it: schemas are parsed once, by the
registry, and the hot path only looks up dictionaries.

Every failure to decode raises :class:`SchemaDecodeError`, whose ``reason`` says which of the five
things went wrong (bad magic, unknown schema, wrong schema for the topic, malformed bytes, validation)
so that the dead-letter step can record it without parsing messages.

The datum written is ``model.model_dump(mode="json")`` (the convention of :mod:`schemas.base`), with
the one documented exception that :data:`~schemas.base.RawBytes` fields, base64 text in JSON, are
written as the bytes they stand for.

The Avro binary itself is written and read by :class:`Codec`: Python compiled once per schema
(:mod:`schemas.codec`) for the datums clingate writes, fastavro for everything else, so every datum and
every byte string gets fastavro's answer, the common ones sooner.

Hot paths skip the model: :meth:`Serde.read_datum` gives the datum a model would be validated from,
:meth:`Serde.write_datum` writes a datum built without one, with the framing :meth:`Serde.encode`
writes. Each format implements reading and writing datums once (:class:`DatumSerde`), so a model and
a datum take the same path to the wire and back.
"""

from __future__ import annotations

import base64
import io
import re
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from enum import StrEnum
from typing import Any, Protocol, TypeVar, overload

import fastavro
from fastavro.types import Schema
from pydantic import ValidationError

from schemas import codec
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

    def write_datum(self, datum: Any, model: type[AvroModel], *, topic: str | None = None) -> bytes:
        """The record value of ``datum``, a datum of the current version of ``model``'s schema in the form
        fastavro writes (``bytes`` as bytes; a value of a union of records as its ``(full name,
        record)`` pair, which spares fastavro trying each branch), framed as :meth:`encode` frames it:
        :meth:`encode` is this on the model's datum. A hot path that builds the datum from its own type
        MUST build the one the model gives, so that both write the same bytes.

        Raises:
            SchemaEncodeError: the datum holds a value the schema cannot carry.
        """
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


_OBJECT_AT = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")
"""An object's default repr, which holds its memory address."""


def not_a_datum(writer: str, exc: BaseException) -> SchemaDecodeError:
    """The ``malformed`` error of bytes that are not a datum of ``writer``'s schema, as ``exc`` (the
    reader's error) says. Objects the reader names by their repr (its buffer) are left out: their
    addresses would make the reason of the same bytes differ from one read to the next, and a dead
    letter's reason is the same every time its record is read."""
    message = _OBJECT_AT.sub("the buffer", str(exc))
    return SchemaDecodeError(
        DecodeReason.MALFORMED,
        f"bytes are not a {writer} datum: {type(exc).__name__}: {message}",
        writer=writer,
    )


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


class Codec:
    """The Avro binary of the datums of one schema version: the code :mod:`schemas.codec` compiles for
    it, and fastavro for whatever that code leaves (so every datum and every byte string gets
    fastavro's answer). Compiled on first use: a process builds only the codecs it uses."""

    def __init__(self, version: SchemaVersion) -> None:
        self._version = version
        self._write: codec.Write | None = None
        self._read: codec.Read | None = None

    def write(self, datum: Any) -> bytes:
        """The Avro binary of ``datum``, without framing.

        Raises:
            SchemaEncodeError: the datum holds a value the schema cannot carry.
        """
        if self._write is None:
            self._write = codec.compile_writer(self._version.parsed)
        out = bytearray()
        try:
            self._write(datum, out)
        except Exception:  # a shape the compiled code leaves to fastavro (its docstring)
            return self._fastavro_write(datum)
        return bytes(out)

    def _fastavro_write(self, datum: Any) -> bytes:
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, self._version.parsed, datum)
        except (*MALFORMED, TypeError, AttributeError) as exc:
            name = self._version.full_name
            raise SchemaEncodeError(f"{name}: a value its schema cannot carry: {exc}") from exc
        return buffer.getvalue()

    def read(self, data: bytes, start: int, reader: Schema | None) -> tuple[Any, int]:
        """The datum at ``start`` of ``data`` read into ``reader`` (``None``: this version), and the
        position after it.

        Raises:
            SchemaDecodeError: ``malformed``, the bytes are not a datum of this version.
        """
        if reader is None:
            if self._read is None:
                self._read = codec.compile_reader(self._version.parsed)
            try:
                return self._read(data, start)
            except Exception:  # bytes the compiled code leaves to fastavro (its docstring)
                pass
        buffer = io.BytesIO(data)
        buffer.seek(start)
        try:
            datum = fastavro.schemaless_reader(buffer, self._version.parsed, reader)
        except (*MALFORMED, fastavro.read.SchemaResolutionError) as exc:
            raise not_a_datum(self._version.full_name, exc) from exc
        return datum, buffer.tell()


class DatumSerde(ABC):
    """What every wire format shares: a model is written as its datum and read from one.

    A format reads and writes datums (:meth:`_read`, :meth:`write_datum`); :meth:`encode`,
    :meth:`decode` and :meth:`read_datum` are the same on each, so a model and a datum built without one
    take one path to the wire and back.
    """

    def __init__(self, registry: SchemaRegistry | None) -> None:
        self._registry = registry or load_registry()
        self._adapters: dict[str, Callable[[Any], Any] | None] = {
            entry.full_name: datum_adapter(entry.current.parsed) for entry in self._registry.entries.values()
        }

    @abstractmethod
    def write_datum(self, datum: Any, model: type[AvroModel], *, topic: str | None = None) -> bytes:
        """The record value of a datum of ``model``'s current schema (:meth:`Serde.write_datum`)."""

    @abstractmethod
    def _read(
        self, data: bytes, expected: type[AvroModel] | None, topic: str | None
    ) -> tuple[SchemaEntry, Any]:
        """The entry of the writer schema and the datum in ``data``, read into its current version.

        Raises:
            SchemaDecodeError: every way ``data`` can fail but the model's checks.
        """

    def encode(self, model: AvroModel, *, topic: str | None = None) -> bytes:
        """The record value of ``model`` (``topic`` names the subject where the format needs one).

        Raises:
            SchemaEncodeError: the model holds a value its schema cannot carry.
        """
        datum = model_datum(model, self._adapters[model.avro_name])
        return self.write_datum(datum, type(model), topic=topic)

    def decode(
        self, data: bytes, expected: type[AvroModel] | None = None, *, topic: str | None = None
    ) -> Any:
        """The model encoded in ``data``, read into the current version of its schema.

        Args:
            data: a record value.
            expected: the model the topic carries; any other writer schema is ``wrong_schema``.
            topic: the topic ``data`` was read from (the registry format's subject).

        Raises:
            SchemaDecodeError: bad magic, unknown schema, wrong schema, malformed bytes or a datum the
                model rejects.
        """
        entry, datum = self._read(data, expected, topic)
        return validated(entry.model, datum, entry.full_name)

    def read_datum(self, data: bytes, expected: type[AvroModel], *, topic: str | None = None) -> Any:
        """The datum :meth:`decode` validates (:meth:`Serde.read_datum`)."""
        return self._read(data, expected, topic)[1]


# ------------------------------------------------------------------------------ single-object serde


class SingleObjectSerde(DatumSerde):
    """Avro single-object encoding (``0xC3 0x01`` + CRC-64-AVRO fingerprint + Avro binary)."""

    def __init__(self, registry: SchemaRegistry | None = None) -> None:
        """Index the registry's current and released schemas by fingerprint.

        Args:
            registry: the schemas to know; the repository's own by default.
        """
        super().__init__(registry)
        self._writers: dict[bytes, tuple[SchemaVersion, SchemaEntry]] = {}
        self._codecs: dict[bytes, Codec] = {}
        for entry in self._registry.entries.values():
            for version in (*entry.released, entry.current):
                self._writers[version.fingerprint] = (version, entry)
                self._codecs[version.fingerprint] = Codec(version)

    def write_datum(self, datum: Any, model: type[AvroModel], *, topic: str | None = None) -> bytes:
        """The single-object encoding of ``datum`` (:meth:`Serde.write_datum`); ``topic`` is not needed
        by this format."""
        current = self._registry.for_model(model).current
        return SINGLE_OBJECT_MAGIC + current.fingerprint + self._codecs[current.fingerprint].write(datum)

    def _read(
        self, data: bytes, expected: type[AvroModel] | None, topic: str | None
    ) -> tuple[SchemaEntry, Any]:
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
        datum, end = self._codecs[fingerprint].read(data, SINGLE_OBJECT_HEADER_SIZE, reader)
        if end != len(data):
            raise SchemaDecodeError(
                DecodeReason.MALFORMED,
                f"{len(data) - end} trailing bytes after the {entry.full_name} datum",
                writer=entry.full_name,
            )
        return entry, datum
