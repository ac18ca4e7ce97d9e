"""The compiled Avro code agrees with fastavro on every schema and every released version.

Datums are drawn from each parsed schema itself (not from a model), so a released version without a
model of its own is covered, with values in the shapes clingate writes and in shapes the compiled code
leaves to fastavro (a ``bool`` for a long, an ``int`` for a double, a record missing a field or holding
one more, a union of records given as a bare record). Three things hold:

* the compiled writer either writes fastavro's bytes or raises, and it takes every plain datum;
* the compiled reader reads fastavro's datum, and ends where fastavro ends, from every datum's bytes;
* on any bytes at all (datums cut, grown, with bytes changed, or random), whatever the compiled reader
  returns, fastavro returns too: what it refuses falls to fastavro, so every record's datum or
  dead-letter reason is fastavro's.
"""

from __future__ import annotations

import io
import math
from enum import StrEnum
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schemas import codec
from schemas.registry import SchemaVersion, load_registry
from schemas.serde import Codec, SchemaDecodeError, SchemaEncodeError

VERSIONS = sorted(
    {
        version.fingerprint: version
        for entry in load_registry().entries.values()
        for version in (*entry.released, entry.current)
    }.values(),
    key=lambda v: (v.full_name, v.version or 0),
)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
PRIMITIVES = {"null", "boolean", "int", "long", "double", "string", "bytes"}


class Colour(StrEnum):
    RED = "red"


def datums(schema: Any, plain: bool) -> st.SearchStrategy[Any]:
    """Datums of ``schema`` (fastavro-parsed); ``plain``: only the shapes clingate writes."""
    named: dict[str, Any] = {}

    def define(node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                define(branch)
        elif isinstance(node, dict):
            if node.get("type") in ("record", "enum", "fixed"):
                named.setdefault(node["name"], node)
            for f in node.get("fields", ()):
                define(f["type"])
            for key in ("items", "values"):
                if key in node:
                    define(node[key])

    define(schema)

    def build(node: Any, depth: int) -> st.SearchStrategy[Any]:
        if isinstance(node, str) and node not in PRIMITIVES:
            node = named[node]
        if isinstance(node, dict) and node["type"] in PRIMITIVES:
            node = node["type"]
        if isinstance(node, str):
            return primitive(node)
        if isinstance(node, list):
            return union(node, depth)
        kind = node["type"]
        if kind == "record":
            fields = {f["name"]: build(f["type"], depth + 1) for f in node["fields"]}
            exact = st.fixed_dictionaries(fields)
            if plain:
                return exact
            return exact | exact.flatmap(
                lambda d: st.sampled_from([{**d, "extra": 1}, dict(list(d.items())[1:]), d])
            )
        if kind == "enum":
            return st.sampled_from(node["symbols"])
        items = build(node["items" if kind == "array" else "values"], depth + 1)
        size = 0 if depth > 3 else 3
        if kind == "array":
            lists = st.lists(items, max_size=size)
            return lists if plain else lists | lists.map(tuple)
        return st.dictionaries(st.text(max_size=4), items, max_size=size)

    def primitive(kind: str) -> st.SearchStrategy[Any]:
        plain_values = {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": st.integers(-(2**63), 2**63 - 1),
            "double": st.floats(),
            "string": st.text(max_size=80),
            "bytes": st.binary(max_size=80),
        }[kind]
        if plain:
            return plain_values
        odd = {
            "boolean": st.integers(0, 1),
            "int": st.booleans() | st.integers(2**31, 2**40),
            "long": st.booleans() | st.integers(2**63, 2**65),
            "double": st.integers(-(2**53), 2**53) | st.booleans(),
            "string": st.just(Colour.RED) | st.just("\udc80"),
            "bytes": st.binary(max_size=4).map(bytearray),
        }.get(kind, st.none())
        return plain_values | odd

    def union(branches: list[Any], depth: int) -> st.SearchStrategy[Any]:
        options = []
        for branch in branches:
            resolved = named.get(branch, branch) if isinstance(branch, str) else branch
            value = build(branch, depth + 1)
            is_record = isinstance(resolved, dict) and resolved["type"] == "record"
            if is_record and len(branches) > 2:
                tagged = value.map(lambda v, name=resolved["name"]: (name, v))
                options.append(tagged if plain else tagged | value)
            else:
                options.append(value)
        return st.one_of(options)

    return build(schema, 0)


def fastavro_bytes(version: SchemaVersion, datum: Any) -> bytes | type[Exception]:
    buffer = io.BytesIO()
    try:
        fastavro.schemaless_writer(buffer, version.parsed, datum)
    except Exception as exc:
        return type(exc)
    return buffer.getvalue()


def fastavro_read(version: SchemaVersion, data: bytes) -> tuple[Any, int]:
    buffer = io.BytesIO(data)
    datum = fastavro.schemaless_reader(buffer, version.parsed, None)
    return datum, buffer.tell()


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN (a double's datum)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


WRITERS = {version.fingerprint: codec.compile_writer(version.parsed) for version in VERSIONS}
READERS = {version.fingerprint: codec.compile_reader(version.parsed) for version in VERSIONS}


def compiled_bytes(version: SchemaVersion, datum: Any) -> bytes | None:
    out = bytearray()
    try:
        WRITERS[version.fingerprint](datum, out)
    except Exception:
        return None
    return bytes(out)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v.full_name}.v{v.version or 'current'}")
@SETTINGS
@given(data=st.data())
def test_the_compiled_writer_writes_every_plain_datum_as_fastavro_does(version: SchemaVersion, data):
    datum = data.draw(datums(version.parsed, plain=True))
    written = compiled_bytes(version, datum)
    assert written is not None, "a plain datum fell to fastavro"
    assert written == fastavro_bytes(version, datum)
    read = READERS[version.fingerprint](written, 0)
    expected = fastavro_read(version, written)
    assert same(read[0], expected[0]) and read[1] == expected[1] == len(written)


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v.full_name}.v{v.version or 'current'}")
@SETTINGS
@given(data=st.data())
def test_a_datum_the_compiled_writer_takes_gets_fastavro_bytes_and_one_it_leaves_gets_fastavro_answer(
    version: SchemaVersion, data
):
    datum = data.draw(datums(version.parsed, plain=False))
    expected = fastavro_bytes(version, datum)
    written = compiled_bytes(version, datum)
    if written is not None:
        assert written == expected
    try:
        through = Codec(version).write(datum)
    except SchemaEncodeError:
        assert isinstance(expected, type)
    else:
        assert through == expected


def mutated(data: st.DataObject, valid: bytes) -> bytes:
    how = data.draw(st.sampled_from(["cut", "grow", "flip", "random"]))
    if how == "cut":
        return valid[: data.draw(st.integers(0, max(len(valid) - 1, 0)))]
    if how == "grow":
        return valid + data.draw(st.binary(min_size=1, max_size=8))
    if how == "flip" and valid:
        at = data.draw(st.integers(0, len(valid) - 1))
        return valid[:at] + bytes([data.draw(st.integers(0, 255))]) + valid[at + 1 :]
    return data.draw(st.binary(max_size=64))


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v.full_name}.v{v.version or 'current'}")
@SETTINGS
@given(data=st.data())
def test_whatever_the_compiled_reader_reads_from_any_bytes_fastavro_reads_too(version: SchemaVersion, data):
    valid = data.draw(datums(version.parsed, plain=True).map(lambda d: fastavro_bytes(version, d)))
    assume(isinstance(valid, bytes))
    raw = mutated(data, valid)
    try:
        read = READERS[version.fingerprint](raw, 0)
    except Exception:
        read = None
    try:
        expected: tuple[Any, int] | None = fastavro_read(version, raw)
    except Exception:
        expected = None
    if read is not None:
        assert expected is not None, "the compiled reader took bytes fastavro refuses"
        assert same(read[0], expected[0]) and read[1] == expected[1]
    try:
        through = Codec(version).read(raw, 0, None)
    except SchemaDecodeError:
        assert expected is None
    else:
        assert expected is not None and same(through[0], expected[0]) and through[1] == expected[1]
