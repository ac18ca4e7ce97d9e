"""The schema registry of this repository: every ``.avsc``, its model, its fingerprint, its released versions.

Discovery. Every ``schemas/avro/<area>/<Name>.avsc`` is a schema (directories whose name starts with
``_``, such as ``_released``, are not); every area directory names a model module ``schemas.<area>``,
which is imported and whose :class:`~schemas.base.AvroModel` subclasses are the models; every other
module of the package except the serde machinery (base, registry, serde, release) is a model module
too, so models written before their schemas are caught. A new area or
a new schema is therefore picked up without editing this file, and :func:`load_registry` refuses to
build a registry in which the two listings disagree (an event schema without a model, a model without
a schema, a field present on one side only, an enum whose symbols differ from the
:class:`enum.StrEnum` of the same name when the module has one). Documentation rules (every field has a
``doc``) are the tests' business, not a reason to refuse to start.

Nested records. Every event (the type a file is named after) needs an :class:`AvroModel`; a record
nested in it may be mirrored by an :class:`AvroModel` with its ``avro_name`` (then it is checked and
encodable on its own) or by a plain pydantic model (then the round-trip test of the event covers it).
Field names are compared by alias, so a model may rename an Avro field that is a Python keyword.

References across files. Every named type (record, enum, fixed) is defined in exactly one file; any
other file uses it by its full name (``GateDecision`` embeds ``clingate.dbpm.Candidate``, ``ReviewPacket``
the ``clingate.docs.ClassificationOutput`` of ``ClassificationRequest``). A type shared by several
events lives in the file of the one upstream of the others (``ClassificationRequest`` holds the
classification that ``Disposition``, ``ReviewPacket`` and ``GroundTruth`` carry), not in a file of its
own: every file is an event with a model, and references between files must not form a cycle. A file
that defines a type another file already defines is refused: one parser context for all files (Java's
``Schema.Parser``, an ``avro.schema.Names``, fastavro's ``named_schemas``) fails on it with "Can't
redefine", so such files could not be loaded by a client of another language. Files are parsed until
every reference resolves; the order in which they parse is :attr:`SchemaRegistry.files`, an order in
which a single parser can read them (``clingate schemas export`` writes them in it).

Standalone forms. Each named type gets a *standalone* form in which every named type it uses is defined
inline at its first use and referenced by name afterwards (fastavro's own ``expand=True`` repeats
definitions, which the Avro specification forbids and which would change the fingerprint). The
standalone form is what is fingerprinted, snapshotted on release and sent to a Confluent registry; it
depends on each type's definition and never on which file holds it.

Two parsers. fastavro parses for the hot path (the serde reads and writes with its parsed schemas); the
official ``avro`` package parses every standalone form as well, as the conformance check of the
reference implementation (names, defaults, enum symbols), and decides backward compatibility
(:func:`compatibility_errors`, its ``ReaderWriterCompatibilityChecker``).

Released versions. ``schemas/avro/_released/<area>/<Name>.v<N>.avsc`` holds the standalone form of
every released version (written by ``python -m schemas.release``). The serde reads records written with
any released version of a schema through Avro schema resolution, so a topic may hold old and new
records side by side.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
import pkgutil
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from fastavro.types import Schema

from schemas.base import AVRO_ENUM_NAME, AvroModel

AVRO_ROOT = Path(__file__).parent / "avro"
"""Where the current schemas live, one directory per area."""

RELEASED_ROOT = AVRO_ROOT / "_released"
"""Where the snapshots of released versions live, mirroring the area directories."""

NAMESPACE_ROOT = "clingate"

_NAMED_KINDS = frozenset({"record", "enum", "fixed"})
_RELEASED_FILE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\.v(?P<version>[1-9][0-9]*)\.avsc$")


class SchemaRegistryError(Exception):
    """The schemas and models in the repository are inconsistent; the message lists every problem."""


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a named type in standalone form, parsed and fingerprinted."""

    full_name: str
    schema: dict[str, Any] = field(repr=False)
    parsed: Schema = field(repr=False)
    canonical_form: str = field(repr=False)
    fingerprint: bytes
    version: int | None
    """Released version number; ``None`` for the current schema when it differs from every release."""


@dataclass(frozen=True)
class SchemaEntry:
    """A current named record type and the model that mirrors it."""

    current: SchemaVersion
    model: type[AvroModel]
    path: Path
    """The ``.avsc`` file that defines the type (a nested type shares its enclosing file)."""
    top_level: bool
    """True for the type a file is named after, i.e. an event that has a topic of its own."""
    released: tuple[SchemaVersion, ...]

    @property
    def full_name(self) -> str:
        """Full Avro name, ``clingate.<area>.<Name>``."""
        return self.current.full_name


@dataclass(frozen=True)
class SchemaRegistry:
    """Every named record type of the repository, by full name, with models and released versions."""

    entries: Mapping[str, SchemaEntry]
    named: Mapping[str, Schema]
    """Every named type of every current file (records, enums, fixed), parsed, by full name."""
    files: tuple[Path, ...] = ()
    """Every current ``.avsc`` in dependency order: each file's references are defined by earlier files,
    so one parser context reading them in this order resolves every name and defines each once."""

    def for_model(self, model: type[AvroModel]) -> SchemaEntry:
        """The entry of a model class.

        Raises:
            KeyError: the class is not a registered model.
        """
        entry = self.entries[model.avro_name]
        if entry.model is not model:
            raise KeyError(f"{model.__qualname__} is not the registered model of {model.avro_name}")
        return entry

    def events(self) -> Iterator[SchemaEntry]:
        """The top-level schemas (one per ``.avsc`` file), sorted by full name."""
        return (self.entries[name] for name in sorted(self.entries) if self.entries[name].top_level)


# --------------------------------------------------------------------------------------------- files


def area_of(path: Path) -> str:
    """Area of a current schema file: its directory under the avro root."""
    return path.parent.name


def schema_files(root: Path = AVRO_ROOT) -> list[Path]:
    """Every current ``.avsc`` under ``root``, skipping directories whose name starts with ``_``."""
    return sorted(
        path
        for path in root.rglob("*.avsc")
        if not any(part.startswith("_") for part in path.relative_to(root).parts)
    )


def expected_full_name(path: Path) -> str:
    """The full name the convention requires of a schema file: ``clingate.<area>.<Name>``."""
    return f"{NAMESPACE_ROOT}.{area_of(path)}.{path.stem}"


def snapshot_path(full_name: str, version: int, root: Path = RELEASED_ROOT) -> Path:
    """Where version ``version`` of ``clingate.<area>.<Name>`` is snapshotted."""
    _, area, name = full_name.split(".")
    return root / area / f"{name}.v{version}.avsc"


def released_files(root: Path = RELEASED_ROOT) -> dict[str, dict[int, Path]]:
    """Released snapshots by full name, then version number."""
    found: dict[str, dict[int, Path]] = {}
    for path in sorted(root.rglob("*.avsc")) if root.is_dir() else []:
        match = _RELEASED_FILE.match(path.name)
        if match is None:
            raise SchemaRegistryError(f"{path.name}: released snapshots are named <Name>.v<N>.avsc")
        full_name = f"{NAMESPACE_ROOT}.{path.parent.name}.{match['name']}"
        found.setdefault(full_name, {})[int(match["version"])] = path
    return found


# ------------------------------------------------------------------------------------------- parsing


def _parse_all(files: list[Path]) -> tuple[dict[str, Schema], dict[str, Path], list[Path]]:
    """Parse every file in one fastavro name context, resolving references across files.

    Files are taken in passes over ``files``; a file whose references are not all defined yet waits for
    the next pass, so the order of parsing is deterministic and a valid reading order for any parser.

    Returns:
        The named types by full name, the file defining each, and the files in the order they parsed.

    Raises:
        SchemaRegistryError: a file is not valid Avro, redefines a type of an earlier file, or uses a
            name no file defines.
    """
    pending = {path: json.loads(path.read_text(encoding="utf-8")) for path in files}
    named: dict[str, Schema] = {}
    defined_in: dict[str, Path] = {}
    order: list[Path] = []
    errors: dict[Path, str] = {}
    while pending:
        progressed = False
        for path, raw in list(pending.items()):
            trial = dict(named)
            try:
                fastavro.parse_schema(raw, named_schemas=trial)
            except fastavro.schema.UnknownType as exc:
                errors[path] = f"unresolved reference {exc.name}"
                continue
            except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
                raise SchemaRegistryError(f"{path.name}: not a valid Avro schema: {exc}") from exc
            # fastavro replaces the entry of a name defined again in a later file instead of refusing it
            # (its check covers one document): a replaced entry is a second definition.
            redefined = sorted(name for name, schema in named.items() if trial[name] is not schema)
            if redefined:
                raise SchemaRegistryError(
                    "; ".join(
                        f"{area_of(path)}/{path.name} defines {name}, already defined in "
                        f"{area_of(defined_in[name])}/{defined_in[name].name}"
                        for name in redefined
                    )
                    + " (define each named type in one file and reference it by its full name elsewhere)"
                )
            for name in trial.keys() - named.keys():
                defined_in[name] = path
            named = trial
            order.append(path)
            del pending[path]
            progressed = True
        if not progressed:
            raise SchemaRegistryError(
                "; ".join(f"{path.name}: {errors[path]}" for path in pending)
                + " (reference types of other files by their full name)"
            )
    return named, defined_in, order


def standalone(full_name: str, named: Mapping[str, Schema]) -> dict[str, Any]:
    """The standalone form of a named type: each named type it uses defined once, at its first use.

    Args:
        full_name: the type to expand.
        named: every parsed named type by full name (fastavro parsed form: full names everywhere).
    """
    emitted: set[str] = set()

    def expand(node: Any) -> Any:
        if isinstance(node, str):
            if node in named and node not in emitted:
                return expand(named[node])
            return node
        if isinstance(node, list):
            return [expand(branch) for branch in node]
        if not isinstance(node, dict):
            return node
        if node.get("type") in _NAMED_KINDS:
            if node["name"] in emitted:
                return node["name"]
            emitted.add(node["name"])
        result: dict[str, Any] = {}
        for key, value in node.items():
            if key.startswith("__"):
                continue  # fastavro's bookkeeping, not schema
            if key == "fields":
                result[key] = [{**f, "type": expand(f["type"])} for f in value]
            elif key in ("type", "items", "values"):
                result[key] = expand(value)
            else:
                result[key] = copy.deepcopy(value)
        return result

    return expand(full_name)


def make_version(full_name: str, schema: dict[str, Any], version: int | None) -> SchemaVersion:
    """Parse, check (reference parser) and fingerprint one standalone schema.

    Raises:
        SchemaRegistryError: the reference Avro implementation rejects the schema.
    """
    parsed = fastavro.parse_schema(schema, named_schemas={})
    canonical = to_parsing_canonical_form(parsed)
    fingerprint = bytes.fromhex(fastavro_fingerprint(canonical, "CRC-64-AVRO"))
    try:
        avro.schema.parse(json.dumps(schema))
    except avro.errors.AvroException as exc:
        raise SchemaRegistryError(f"{full_name}: rejected by the reference Avro parser: {exc}") from exc
    return SchemaVersion(full_name, schema, parsed, canonical, fingerprint, version)


def compatibility_errors(reader: dict[str, Any], writer: dict[str, Any]) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can).

    Decided by the reference implementation's ``ReaderWriterCompatibilityChecker``.
    """
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        avro.schema.parse(json.dumps(reader)), avro.schema.parse(json.dumps(writer))
    )
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    return sorted(
        f"{location}: {message}"
        for location, message in zip(sorted(result.locations), sorted(result.messages), strict=False)
    ) or [str(result.incompatibilities)]


# -------------------------------------------------------------------------------------------- models


_INFRASTRUCTURE_MODULES = frozenset(
    {"base", "codec", "registry", "serde", "registry_serde", "release", "wire"}
)


def model_areas() -> set[str]:
    """Areas that have a model module ``schemas/<area>.py`` (whether or not they have schemas)."""
    package = Path(__file__).parent
    return {
        info.name
        for info in pkgutil.iter_modules([str(package)])
        if not info.ispkg and not info.name.startswith("_") and info.name not in _INFRASTRUCTURE_MODULES
    }


def _model_module(area: str) -> ModuleType:
    try:
        return importlib.import_module(f"schemas.{area}")
    except ModuleNotFoundError as exc:
        raise SchemaRegistryError(
            f"schemas/avro/{area}/ has schemas but there is no model module schemas/{area}.py"
        ) from exc


def _models_of(module: ModuleType) -> list[type[AvroModel]]:
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, AvroModel) and cls.__module__ == module.__name__ and hasattr(cls, "avro_name")
    ]


def _enums_of(module: ModuleType) -> dict[str, type[StrEnum]]:
    return {
        getattr(cls, AVRO_ENUM_NAME, cls.__name__): cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, StrEnum) and cls.__module__ == module.__name__
    }


def _mirror_problems(schema: Schema, model: type[AvroModel]) -> list[str]:
    name = schema["name"]
    fields = {f["name"]: f for f in schema["fields"]}
    # A model may rename a field whose Avro name is a Python keyword (``class``) through an alias.
    model_fields = {info.serialization_alias or info.alias or key for key, info in model.model_fields.items()}
    problems = [
        f"{name}.{missing}: in the schema, not in {model.__qualname__}"
        for missing in fields.keys() - model_fields
    ]
    problems += [
        f"{name}.{extra}: in {model.__qualname__}, not in the schema"
        for extra in model_fields - fields.keys()
    ]
    return problems


def _enum_problems(schema: Schema, enums: Mapping[str, type[StrEnum]]) -> list[str]:
    short = schema["name"].rsplit(".", 1)[-1]
    enum_cls = enums.get(short)
    if enum_cls is None:  # mirrored by a Literal, say; the round-trip test covers it
        return []
    values = [member.value for member in enum_cls]
    if values != list(schema["symbols"]):
        return [f"{schema['name']}: symbols {schema['symbols']} differ from {short} values {values}"]
    return []


# -------------------------------------------------------------------------------------------- loading


def build_registry(root: Path = AVRO_ROOT, released_root: Path = RELEASED_ROOT) -> SchemaRegistry:
    """Discover, parse and cross-check every schema and model under ``root``.

    Raises:
        SchemaRegistryError: listing every inconsistency found.
    """
    files = schema_files(root)
    named, defined_in, order = _parse_all(files)
    problems: list[str] = []
    for path in files:
        if expected_full_name(path) not in named or defined_in[expected_full_name(path)] != path:
            problems.append(f"{path.name} in {area_of(path)}/ must define {expected_full_name(path)}")
    models: dict[str, type[AvroModel]] = {}
    enums: dict[str, dict[str, type[StrEnum]]] = {}
    for area in sorted({area_of(path) for path in files} | model_areas()):
        module = _model_module(area)
        enums[area] = _enums_of(module)
        for model in _models_of(module):
            models[model.avro_name] = model
            if model.avro_name not in named:
                problems.append(f"{module.__name__}.{model.__qualname__}: no schema named {model.avro_name}")
    for full_name, schema in named.items():
        area = full_name.split(".")[1] if full_name.count(".") == 2 else None
        if not full_name.startswith(f"{NAMESPACE_ROOT}.") or area not in enums:
            problems.append(f"{full_name}: named types live in the {NAMESPACE_ROOT}.<area> namespace")
            continue
        if schema["type"] == "enum":
            problems += _enum_problems(schema, enums[area])
        elif schema["type"] == "record":
            if full_name in models:
                problems += _mirror_problems(schema, models[full_name])
            elif expected_full_name(defined_in[full_name]) == full_name:
                problems.append(f"{full_name}: no model with avro_name {full_name!r} in schemas.{area}")
    if problems:
        raise SchemaRegistryError("schemas and models disagree:\n  " + "\n  ".join(sorted(problems)))

    released = released_files(released_root)
    entries: dict[str, SchemaEntry] = {}
    for full_name, model in models.items():
        path = defined_in[full_name]
        versions = tuple(
            make_version(full_name, json.loads(snapshot.read_text(encoding="utf-8")), number)
            for number, snapshot in sorted(released.get(full_name, {}).items())
        )
        current = make_version(full_name, standalone(full_name, named), None)
        same = [v for v in versions if v.fingerprint == current.fingerprint]
        if same:
            current = same[-1]
        entries[full_name] = SchemaEntry(
            current=current,
            model=model,
            path=path,
            top_level=expected_full_name(path) == full_name,
            released=versions,
        )
    return SchemaRegistry(entries, named, tuple(order))


@lru_cache(maxsize=1)
def load_registry() -> SchemaRegistry:
    """The registry of this repository's schemas, built once per process."""
    return build_registry()
