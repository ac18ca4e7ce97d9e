"""The cheap FHIR check vouches only for resources the ``fhir.resources`` model accepts.

:func:`processors.clinical.fhir_check.accepts` lets :func:`~processors.clinical.fhir_input.validate_resource`
skip building the model; every resource it does not vouch for is validated by the model as before, so
the verdicts and the dead-letter reasons stay the library's exactly when ``accepts`` implies the model's
acceptance. Checked over the benchmark population, the committed Synthea patients, the HL7 R4 examples
(realdata), and resources from them mutated at random (values of every FHIR primitive's borderline
forms, nulls, empty containers, unknown and extension keys, a second choice of ``nnn[x]``, a required
element removed).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest
from clinical_realdata import hl7_examples, synthea_documents
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.clinical.exceptions import FhirInvalid
from processors.clinical.fhir_check import accepts
from processors.clinical.fhir_input import (
    REQUIRED_CODES,
    SUPPORTED,
    _model,
    parse_document,
    validate_resource,
)
from processors.clinical.sanitise import sanitise_datetimes
from streams.bench.clinical import _patient_bundle


def _population() -> list[dict[str, Any]]:
    rng = random.Random(11)
    resources = [e["resource"] for i in range(40) for e in _patient_bundle(rng, i)["entry"]]
    resources += [
        e["resource"]
        for doc in synthea_documents()
        for e in doc["entry"]
        if e["resource"]["resourceType"] in SUPPORTED
    ]
    return [sanitise_datetimes(r)[0] for r in resources]


POPULATION = _population()

#: Borderline values of the FHIR primitives and of JSON's types.
VALUES: list[Any] = [
    None, "", " ", "x", " x", "x ", "a b", "a  b", "a\tb", "\u00a0", "\x0b", "é", "-", ".", "a" * 65,
    "a" * 64,
    0, 1, -1, 1.5, 1e400, True, False, 2**40, [], {}, [None], [{}], ["x"], [1], {"x": 1}, {"text": "x"},
    {"coding": []}, {"coding": [None]}, {"reference": "Patient/p"}, {"value": "1.5"}, {"value": "01"},
    "2020", "2020-13", "2020-02-30", "2020-02-29", "2021-02-29", "2020-01-01T10:00:00",
    "2020-01-01T10:00:00Z", "2020-01-01T24:00:00Z", "2020-01-01T10:00:60Z", "2020-01-01T10:00:00+14:00",
    "2020-01-01T10:00:00+14:30", "2020-01-01T10:00:00.123456789Z", "0000-01-01", "final", "active",
    "true", "1.0", "http://loinc.org", "urn:uuid:6f1b", "Patient/x y",
]  # fmt: skip
KEYS = [
    "foo", "_status", "fhir_comments", "resourceType", "resource_type", "class_fhir", "id", "extension",
    "contained", "valueString", "valueQuantity", "effectivePeriod", "medicationReference", "text",
]  # fmt: skip


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*path, i))


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        node = node[step]
    return node


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    resource = copy.deepcopy(draw(st.sampled_from(POPULATION)))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(resource))
        path = draw(st.sampled_from(paths))
        target = _at(resource, path)
        action = draw(st.sampled_from(["set", "delete", "add", "wrap"]))
        if path and action == "set":
            _at(resource, path[:-1])[path[-1]] = copy.deepcopy(draw(st.sampled_from(VALUES)))
        elif path and action == "delete":
            del _at(resource, path[:-1])[path[-1]]
        elif path and action == "wrap":
            _at(resource, path[:-1])[path[-1]] = [copy.deepcopy(target)]
        elif isinstance(target, dict):
            target[draw(st.sampled_from(KEYS))] = copy.deepcopy(draw(st.sampled_from(VALUES)))
    return resource


def _model_error(resource: dict[str, Any]) -> Exception | None:
    """What building the model raises for ``resource`` (None: it accepts it)."""
    try:
        _model(resource["resourceType"]).model_validate(dict(resource))
    except Exception as exc:  # the library raises more than ValueError on some malformed elements
        return exc
    return None


def _model_accepts(resource: dict[str, Any]) -> bool:
    return _model_error(resource) is None


def test_the_check_vouches_for_the_benchmark_and_synthea_resources() -> None:
    """Where it matters, on what the stream carries, the model is not built."""
    assert all(accepts(_model(r["resourceType"]), r) for r in POPULATION)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_the_check_vouches_only_for_what_the_model_accepts(resource: dict[str, Any]) -> None:
    rtype = resource.get("resourceType")
    if not isinstance(rtype, str) or rtype not in SUPPORTED:
        return
    if accepts(_model(rtype), resource):
        assert _model_accepts(resource), resource


@settings(max_examples=300, deadline=None)
@given(mutated())
def test_invalid_resources_keep_the_models_message(resource: dict[str, Any]) -> None:
    """A resource the model refuses is refused as the model refuses it: a ValueError is a FhirInvalid with
    its message (the dead-letter reason), anything else is raised as it is."""
    rtype = resource.get("resourceType")
    expected = _model_error(resource) if isinstance(rtype, str) and rtype in SUPPORTED else None
    if expected is None:
        return
    with pytest.raises(Exception) as caught:
        validate_resource(resource)
    if isinstance(expected, ValueError):
        assert isinstance(caught.value, FhirInvalid) and caught.value.message == str(expected)
    else:
        assert type(caught.value) is type(expected) and str(caught.value) == str(expected)


@pytest.mark.realdata
def test_the_check_vouches_only_for_hl7_examples_the_model_accepts() -> None:
    documents = [doc for _, doc in hl7_examples(SUPPORTED)]
    vouched = 0
    for doc in documents:
        resource = sanitise_datetimes(doc)[0]
        if accepts(_model(resource["resourceType"]), resource):
            vouched += 1
            assert _model_accepts(resource), resource
    assert vouched > 0


def test_parsing_reports_the_same_invalid_resources_as_the_model() -> None:
    """The poison resources of the clinical family: each invalid one is reported with the model's reason
    (or the required value set's), its valid siblings applied."""
    bad = [
        {"resourceType": "Observation", "id": "o1", "code": {"text": "x"}},
        {"resourceType": "Observation", "id": "o2", "status": "final", "code": {"text": ""}},
        {"resourceType": "Observation", "id": "o3", "status": "done", "code": {"text": "x"}},
        {"resourceType": "MedicationStatement", "id": "m1", "status": "active"},
        {"resourceType": "Patient", "id": "p", "birthDate": "1950-02-30"},
        {"resourceType": "Condition", "id": "c 1", "subject": {"reference": "Patient/p"}},
        {"resourceType": "Encounter", "id": "e1", "status": "finished", "foo": 1},
    ]  # fmt: skip
    good = {"resourceType": "Observation", "id": "ok", "status": "final", "code": {"text": "x"}}
    entries = [{"resource": r} for r in [*bad, good]]
    bundle = {"resourceType": "Bundle", "type": "collection", "entry": entries}
    parsed = parse_document(bundle, default_patient="p")
    assert [i.resource_id for i in parsed.invalid] == ["o1", "o2", "o3", "m1", "p", "c 1", "e1"]
    for resource, invalid in zip(bad, parsed.invalid, strict=True):
        codes = REQUIRED_CODES.get((resource["resourceType"], "status"), frozenset({resource.get("status")}))
        if _model_accepts(resource):
            assert resource.get("status") not in codes
            assert "required value set" in invalid.error
        else:
            with pytest.raises(ValueError) as caught:
                _model(resource["resourceType"]).model_validate(dict(resource))
            assert invalid.error == str(caught.value)
    assert [c.record.id for c in parsed.changes["p"]] == ["ok"]  # type: ignore[union-attr]
