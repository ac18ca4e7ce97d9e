"""Avro binary datums of clingate's schemas, written and read by Python compiled once per schema.

fastavro's Cython writer and reader interpret the parsed schema for every datum, while the hot paths
write and read the same few schemas for every record (docs/performance.md has the figures).
:func:`compile_writer` and :func:`compile_reader` generate, once per schema, one Python function per
named record with every field's code inline, and compile it.

They are exact by construction, not by imitation. The compiled code handles the plain shapes of
datums, the ones clingate writes: a ``dict`` holding exactly a record's fields, ``str`` for strings and
enum symbols, ``int`` (not ``bool``) for ints and longs, ``float`` for doubles, ``bytes``, ``list`` for
arrays, ``dict`` for maps, ``None`` or the value for a union of ``null`` and one type, and fastavro's
``(full name, record)`` pair for a union of records. On bytes it reads what a writer of the schema
writes: varints of at most 64 bits, booleans 0 or 1, indexes and lengths in range, array and map blocks
without byte sizes, valid UTF-8. Anything else raises (:class:`Unhandled`, or the error of the
operation that met it), and the caller asks fastavro, whose answer (a datum, bytes or an error) is the
answer. So every datum and every byte string gets fastavro's result, and the common ones get it
sooner; the property tests compare both on every schema and every released version.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

from fastavro.types import Schema

Write = Callable[[Any, bytearray], None]
"""Appends the binary of a datum to the buffer; raises on a datum it leaves to fastavro."""

Read = Callable[[bytes, int], tuple[Any, int]]
"""The datum starting at a position of the bytes, and the position after it; raises on bytes it leaves
to fastavro."""

_LONG_MIN = -(1 << 63)
_LONG_MAX = (1 << 63) - 1
_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "double", "string", "bytes"))


class Unhandled(Exception):
    """The datum or the bytes are not in a shape the compiled code takes: fastavro's to answer."""


def _varint(value: int, out: bytearray) -> None:
    """Append the long ``value`` as Avro's zig-zag varint."""
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise Unhandled
    value = (value << 1) ^ (value >> 63)
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The long whose varint starts at ``pos``, and the position after it."""
    value = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift > 63:  # an eleventh byte: fastavro decides what it means
            raise Unhandled
    if value >> 64:
        raise Unhandled
    return (value >> 1) ^ -(value & 1), pos


def _read_count(data: bytes, pos: int) -> tuple[int, int]:
    """A length or block count at ``pos`` that is not negative and not more than the bytes left (every
    item takes at least one byte where the compiled code reads it), and the position after it."""
    count, pos = _read_varint(data, pos)
    if count < 0 or count > len(data) - pos:
        raise Unhandled
    return count, pos


_HELPERS: dict[str, Any] = {
    "Unhandled": Unhandled,
    "_varint": _varint,
    "_read_varint": _read_varint,
    "_read_count": _read_count,
    "_pack_double": struct.Struct("<d").pack,
    "_unpack_double": struct.Struct("<d").unpack_from,
}


class _Source:
    """Python source being generated: functions, the constants they use, unique local names."""

    def __init__(self) -> None:
        self.functions: list[str] = []
        self.constants: dict[str, Any] = {}
        self.named: dict[str, Any] = {}
        """Every named type met so far, by full name, as fastavro's parsed schema defines it once."""
        self.function_of: dict[str, str] = {}
        self._count = 0

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}{self._count}"

    def constant(self, value: Any) -> str:
        name = self.fresh("_k")
        self.constants[name] = value
        return name

    def compile(self, entry: str) -> Any:
        namespace = {**_HELPERS, **self.constants}
        exec(compile("\n\n".join(self.functions), "<clingate avro codec>", "exec"), namespace)
        return namespace[entry]


def _identifier(full_name: str) -> str:
    return re.sub(r"\W", "_", full_name)


def _resolve(src: _Source, node: Any) -> Any:
    """``node`` with a reference to a named type replaced by its definition."""
    if isinstance(node, str) and node not in _PRIMITIVES:
        return src.named[node]
    if isinstance(node, dict) and node.get("type") in _PRIMITIVES and set(node) <= {"type"}:
        return node["type"]
    return node


def _define(src: _Source, node: Any) -> None:
    """Register every named type ``node`` defines (fastavro's parsed schema defines each once, where
    it first appears, and names it afterwards)."""
    if isinstance(node, list):
        for branch in node:
            _define(src, branch)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            src.named.setdefault(node["name"], node)
        if kind in ("record", "error"):
            for f in node["fields"]:
                _define(src, f["type"])
        elif kind == "array":
            _define(src, node["items"])
        elif kind == "map":
            _define(src, node["values"])


# ------------------------------------------------------------------------------------------- writers


def _emit_write(src: _Source, node: Any, x: str, pad: str) -> list[str]:
    """Lines appending the binary of the value in local ``x`` to ``out``."""
    node = _resolve(src, node)
    if isinstance(node, list):
        return _emit_write_union(src, node, x, pad)
    if isinstance(node, str):
        return _emit_write_primitive(src, node, x, pad)
    kind = node["type"]
    if kind in ("record", "error"):
        return [f"{pad}{_writer_function(src, node)}({x}, out)"]
    if kind == "enum":
        codes = src.constant({symbol: _zigzag_bytes(i) for i, symbol in enumerate(node["symbols"])})
        return [f"{pad}out += {codes}[{x}]"]
    if kind == "array":
        item = src.fresh("i")
        return [
            f"{pad}if type({x}) is not list: raise Unhandled",
            f"{pad}if {x}:",
            f"{pad}    _varint(len({x}), out)",
            f"{pad}    for {item} in {x}:",
            *_emit_write(src, node["items"], item, pad + "        "),
            f"{pad}out.append(0)",
        ]
    if kind == "map":
        key, value = src.fresh("k"), src.fresh("v")
        return [
            f"{pad}if type({x}) is not dict: raise Unhandled",
            f"{pad}if {x}:",
            f"{pad}    _varint(len({x}), out)",
            f"{pad}    for {key}, {value} in {x}.items():",
            *_emit_write_primitive(src, "string", key, pad + "        "),
            *_emit_write(src, node["values"], value, pad + "        "),
            f"{pad}out.append(0)",
        ]
    return [f"{pad}raise Unhandled"]  # fixed and logical types: clingate's schemas have none


def _zigzag_bytes(value: int) -> bytes:
    out = bytearray()
    _varint(value, out)
    return bytes(out)


def _emit_write_primitive(src: _Source, kind: str, x: str, pad: str) -> list[str]:
    if kind == "null":
        return [f"{pad}if {x} is not None: raise Unhandled"]
    if kind == "boolean":
        return [
            f"{pad}if {x} is True: out.append(1)",
            f"{pad}elif {x} is False: out.append(0)",
            f"{pad}else: raise Unhandled",
        ]
    if kind in ("int", "long"):
        # An int out of its 32 bits: fastavro writes it where the int stands alone, but fails to match
        # it to the branch of a union, so it is fastavro's either way (_varint bounds a long).
        fits = f"-0x80000000 <= {x} <= 0x7FFFFFFF" if kind == "int" else "True"
        return [
            f"{pad}if type({x}) is not int: raise Unhandled",
            f"{pad}if 0 <= {x} < 64: out.append({x} << 1)",
            f"{pad}elif {fits}: _varint({x}, out)",
            f"{pad}else: raise Unhandled",
        ]
    if kind == "double":
        return [f"{pad}if type({x}) is not float: raise Unhandled", f"{pad}out += _pack_double({x})"]
    encoded, size = src.fresh("e"), src.fresh("n")
    if kind == "string":
        check = f"{pad}if not isinstance({x}, str): raise Unhandled"
        take = f"{pad}{encoded} = {x}.encode()"
    else:
        check = f"{pad}if type({x}) is not bytes: raise Unhandled"
        take = f"{pad}{encoded} = {x}"
    return [
        check,
        take,
        f"{pad}{size} = len({encoded})",
        f"{pad}if {size} < 64: out.append({size} << 1)",
        f"{pad}else: _varint({size}, out)",
        f"{pad}out += {encoded}",
    ]


def _emit_write_union(src: _Source, branches: list[Any], x: str, pad: str) -> list[str]:
    resolved = [_resolve(src, branch) for branch in branches]
    if len(branches) == 2 and branches[0] == "null":
        return [
            f"{pad}if {x} is None: out.append(0)",
            f"{pad}else:",
            f"{pad}    out.append(2)",
            *_emit_write(src, branches[1], x, pad + "    "),
        ]
    records = {
        node["name"]: (index, node)
        for index, node in enumerate(resolved)
        if isinstance(node, dict) and node["type"] in ("record", "error")
    }
    lines = [f"{pad}if type({x}) is not tuple or len({x}) != 2: raise Unhandled"]
    keyword = "if"
    for name, (index, node) in records.items():
        lines += [
            f"{pad}{keyword} {x}[0] == {name!r}:",
            f"{pad}    out.append({index << 1})",
            f"{pad}    {_writer_function(src, node)}({x}[1], out)",
        ]
        keyword = "elif"
    return [*lines, f"{pad}else: raise Unhandled"] if records else [f"{pad}raise Unhandled"]


def _writer_function(src: _Source, node: dict[str, Any]) -> str:
    """The name of the generated writer of record ``node``, generating it on first use."""
    name = node["name"]
    if name in src.function_of:
        return src.function_of[name]
    function = f"_write_{_identifier(name)}"
    src.function_of[name] = function
    fields = node["fields"]
    lines = [
        f"def {function}(value, out):",
        f"    if type(value) is not dict or len(value) != {len(fields)}: raise Unhandled",
    ]
    for f in fields:
        x = src.fresh("x")
        lines.append(f"    {x} = value[{f['name']!r}]")
        lines += _emit_write(src, f["type"], x, "    ")
    src.functions.append("\n".join(lines))
    return function


def compile_writer(schema: Schema) -> Write:
    """The writer of datums of ``schema``, a record schema parsed by fastavro."""
    return _compiled(schema, _writer_function)  # type: ignore[no-any-return]


def _compiled(schema: Schema, entry: Callable[[_Source, dict[str, Any]], str]) -> Any:
    """The function ``entry`` generates for the record ``schema``, with every function it calls."""
    src = _Source()
    _define(src, schema)
    return src.compile(entry(src, _resolve(src, schema)))


# ------------------------------------------------------------------------------------------- readers


def _emit_read(src: _Source, node: Any, target: str, pad: str) -> list[str]:
    """Lines reading a datum of ``node`` at ``p`` of ``data`` into local ``target``, advancing ``p``."""
    node = _resolve(src, node)
    if isinstance(node, list):
        index = src.fresh("u")
        lines = [*_emit_read_long(index, pad)]
        keyword = "if"
        for i, branch in enumerate(node):
            lines += [f"{pad}{keyword} {index} == {i}:", *_emit_read(src, branch, target, pad + "    ")]
            keyword = "elif"
        return [*lines, f"{pad}else: raise Unhandled"]
    if isinstance(node, str):
        return _emit_read_primitive(node, target, pad)
    kind = node["type"]
    if kind in ("record", "error"):
        return [f"{pad}{target}, p = {_reader_function(src, node)}(data, p)"]
    if kind == "enum":
        symbols = src.constant(tuple(node["symbols"]))
        index = src.fresh("s")
        return [
            *_emit_read_long(index, pad),
            f"{pad}if {index} < 0: raise Unhandled",
            f"{pad}{target} = {symbols}[{index}]",
        ]
    if kind in ("array", "map"):
        count, item, key = src.fresh("c"), src.fresh("i"), src.fresh("k")
        lines = [
            f"{pad}{target} = {'[]' if kind == 'array' else '{}'}",
            f"{pad}while True:",
            f"{pad}    {count}, p = _read_count(data, p)",
            f"{pad}    if not {count}: break",
            f"{pad}    for _ in range({count}):",
        ]
        inner = pad + "        "
        if kind == "array":
            return [*lines, *_emit_read(src, node["items"], item, inner), f"{inner}{target}.append({item})"]
        return [
            *lines,
            *_emit_read_primitive("string", key, inner),
            *_emit_read(src, node["values"], item, inner),
            f"{inner}{target}[{key}] = {item}",
        ]
    return [f"{pad}raise Unhandled"]


def _emit_read_long(target: str, pad: str) -> list[str]:
    return [
        f"{pad}if data[p] < 0x80:",
        f"{pad}    {target} = (data[p] >> 1) ^ -(data[p] & 1)",
        f"{pad}    p += 1",
        f"{pad}else: {target}, p = _read_varint(data, p)",
    ]


def _emit_read_primitive(kind: str, target: str, pad: str) -> list[str]:
    if kind == "null":
        return [f"{pad}{target} = None"]
    if kind == "boolean":
        return [
            f"{pad}if data[p] > 1: raise Unhandled",
            f"{pad}{target} = data[p] == 1",
            f"{pad}p += 1",
        ]
    if kind in ("int", "long"):
        return _emit_read_long(target, pad)
    if kind == "double":
        return [f"{pad}{target} = _unpack_double(data, p)[0]", f"{pad}p += 8"]
    value = "data[p:end].decode()" if kind == "string" else "data[p:end]"
    return [
        f"{pad}if data[p] < 0x80 and not data[p] & 1:",
        f"{pad}    end = p + 1 + (data[p] >> 1)",
        f"{pad}    p += 1",
        f"{pad}    if end > length: raise Unhandled",
        f"{pad}else:",
        f"{pad}    size, p = _read_count(data, p)",
        f"{pad}    end = p + size",
        f"{pad}{target} = {value}",
        f"{pad}p = end",
    ]


def _reader_function(src: _Source, node: dict[str, Any]) -> str:
    """The name of the generated reader of record ``node``, generating it on first use."""
    name = node["name"]
    if name in src.function_of:
        return src.function_of[name]
    function = f"_read_{_identifier(name)}"
    src.function_of[name] = function
    lines = [f"def {function}(data, p):", "    length = len(data)"]
    fields = []
    for f in node["fields"]:
        local = src.fresh("f")
        fields.append(f"{f['name']!r}: {local}")
        lines += _emit_read(src, f["type"], local, "    ")
    lines.append(f"    return {{{', '.join(fields)}}}, p")
    src.functions.append("\n".join(lines))
    return function


def compile_reader(schema: Schema) -> Read:
    """The reader of datums written with ``schema`` (a record schema parsed by fastavro) into the same
    schema: a datum of another version is fastavro's to resolve."""
    return _compiled(schema, _reader_function)  # type: ignore[no-any-return]
