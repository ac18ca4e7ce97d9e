"""The schema files and the model modules agree, whoever adds the next area."""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shutil
from pathlib import Path

import pytest

from schemas.base import AvroModel
from schemas.registry import (
    AVRO_ROOT,
    SchemaRegistryError,
    area_of,
    build_registry,
    expected_full_name,
    load_registry,
    model_areas,
    schema_files,
)


def test_every_schema_file_has_a_model_and_every_model_a_schema():
    registry = load_registry()
    files = schema_files()
    assert {expected_full_name(path) for path in files} == {e.full_name for e in registry.events()}
    assert {area_of(path) for path in files} == model_areas()
    for area in model_areas():
        module = importlib.import_module(f"schemas.{area}")
        models = {
            cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, AvroModel) and cls.__module__ == module.__name__
        }  # fmt: skip
        assert models == {e.model for e in registry.entries.values() if e.model.__module__ == module.__name__}


@pytest.mark.parametrize("area", ["common", "dbpm", "fhir"])
def test_every_event_of_this_foundation_carries_its_event_time_as_ts(area: str):
    events = [e for e in load_registry().events() if area_of(e.path) == area]
    assert events
    for entry in events:
        assert entry.model.model_fields["ts"].metadata, f"{entry.full_name}.ts must be an EventTime"


def test_every_named_type_is_namespaced_under_its_area():
    for name, entry in load_registry().entries.items():
        assert name == entry.model.avro_name
        assert name.startswith(f"clingate.{area_of(entry.path)}.")


def test_every_schema_and_field_is_documented():
    undocumented = [
        f"{name}.{f['name']}" if f else name
        for name, schema in load_registry().named.items()
        for f in ([None] if not schema.get("doc") else []) + schema.get("fields", [])
        if f is None or not f.get("doc")
    ]
    assert undocumented == [], "add a doc to: " + ", ".join(undocumented)


@pytest.fixture
def avro_copy(tmp_path: Path) -> Path:
    root = tmp_path / "avro"
    shutil.copytree(AVRO_ROOT, root, ignore=shutil.ignore_patterns("_released"))
    return root


def _edit(path: Path, edit) -> None:
    schema = json.loads(path.read_text())
    edit(schema)
    path.write_text(json.dumps(schema))


def test_a_field_only_in_the_model_is_refused(avro_copy: Path):
    _edit(avro_copy / "dbpm" / "Narrative.avsc", lambda s: s["fields"].pop())
    only_in_model = re.escape("clingate.dbpm.Narrative.metadata: in Narrative, not in")
    with pytest.raises(SchemaRegistryError, match=only_in_model):
        build_registry(avro_copy, avro_copy / "_released")


def test_an_enum_mirrored_under_another_python_name_is_still_checked(avro_copy: Path):
    """GateAction mirrors clingate.dbpm.Decision (``avro_enum``): a symbol only in the schema is refused."""

    def add_symbol(schema: dict) -> None:
        decision = next(f for f in schema["fields"] if f["name"] == "decision")
        decision["type"]["symbols"].append("QUARANTINE")

    _edit(avro_copy / "dbpm" / "GateDecision.avsc", add_symbol)
    with pytest.raises(SchemaRegistryError, match=re.escape("clingate.dbpm.Decision: symbols")):
        build_registry(avro_copy, avro_copy / "_released")


def test_a_schema_without_a_model_is_refused(avro_copy: Path):
    orphan = {"type": "record", "name": "Orphan", "namespace": "clingate.dbpm", "fields": []}
    (avro_copy / "dbpm" / "Orphan.avsc").write_text(json.dumps(orphan))
    with pytest.raises(SchemaRegistryError, match=re.escape("clingate.dbpm.Orphan: no model")):
        build_registry(avro_copy, avro_copy / "_released")


def test_an_area_without_a_model_module_is_refused(avro_copy: Path):
    (avro_copy / "nowhere").mkdir()
    lost = {"type": "record", "name": "Lost", "namespace": "clingate.nowhere", "fields": []}
    (avro_copy / "nowhere" / "Lost.avsc").write_text(json.dumps(lost))
    with pytest.raises(SchemaRegistryError, match=re.escape("no model module schemas/nowhere.py")):
        build_registry(avro_copy, avro_copy / "_released")


def test_a_file_must_define_the_type_it_is_named_after(avro_copy: Path):
    (avro_copy / "dbpm" / "Narrative.avsc").rename(avro_copy / "dbpm" / "Story.avsc")
    must = re.escape("Story.avsc in dbpm/ must define clingate.dbpm.Story")
    with pytest.raises(SchemaRegistryError, match=must):
        build_registry(avro_copy, avro_copy / "_released")


def test_an_unresolvable_reference_names_the_file(avro_copy: Path):
    (avro_copy / "dbpm" / "Candidate.avsc").unlink()
    with pytest.raises(SchemaRegistryError, match=re.escape("unresolved reference clingate.dbpm")):
        build_registry(avro_copy, avro_copy / "_released")


def test_a_type_used_twice_is_defined_once_in_the_standalone_form():
    schema = json.dumps(load_registry().entries["clingate.dbpm.GateDecision"].current.schema)
    assert schema.count('"name": "clingate.dbpm.Candidate"') == 1
    assert schema.count('"name": "clingate.dbpm.NerPayload"') == 1


def _field(schema: dict, name: str) -> dict:
    return next(f for f in schema["fields"] if f["name"] == name)


def _payload(schema: dict) -> dict:
    return _field(schema, "payload")


def test_a_type_defined_again_in_another_file_is_refused(avro_copy: Path):
    candidate = json.loads((avro_copy / "dbpm" / "Candidate.avsc").read_text())
    _edit(
        avro_copy / "dbpm" / "GateDecision.avsc",
        lambda s: _field(s, "candidate").update(type=candidate),  # inline again
    )
    again = re.escape(
        "dbpm/GateDecision.avsc defines clingate.dbpm.Candidate, already defined in dbpm/Candidate.avsc"
    )
    with pytest.raises(SchemaRegistryError, match=again):
        build_registry(avro_copy, avro_copy / "_released")


def test_files_are_ordered_after_the_files_whose_types_they_use_whatever_their_names(avro_copy: Path):
    # Verdict.avsc takes over the payload records, which Candidate.avsc (and so GateDecision) now uses.
    candidate = json.loads((avro_copy / "dbpm" / "Candidate.avsc").read_text())
    verdict = json.loads((avro_copy / "dbpm" / "Verdict.avsc").read_text())
    _payload(candidate)["type"], _payload(verdict)["type"] = (
        _payload(verdict)["type"],
        _payload(candidate)["type"],
    )
    (avro_copy / "dbpm" / "Candidate.avsc").write_text(json.dumps(candidate))
    (avro_copy / "dbpm" / "Verdict.avsc").write_text(json.dumps(verdict))
    moved = build_registry(avro_copy, avro_copy / "_released")
    order = [f"{area_of(path)}/{path.stem}" for path in moved.files]
    assert sorted(moved.files) == schema_files(avro_copy)
    assert order.index("dbpm/Verdict") < order.index("dbpm/Candidate") < order.index("dbpm/GateDecision")
    # The standalone form, and so the fingerprint, does not depend on which file holds a type.
    assert {name: entry.current.canonical_form for name, entry in moved.entries.items()} == {
        name: entry.current.canonical_form for name, entry in load_registry().entries.items()
    }
