"""Scenario-free real-data runs: official HL7 FHIR R4 examples and Synthea patients.

What must hold: no crash, every entry accounted for (accepted, reported invalid with its error, or
counted as skipped on purpose), and byte-identical assessments across two full runs (parse + assess).

Bounds (so the tests stay in CI and fast): the HL7 set is every example file of the resource types the
gates read plus every example Bundle (222 documents, all of them), fetched once into the user cache.
The Synthea patients are three generated ones, each reduced to what the gates read
(:mod:`clinical_realdata` says how they were made and how to make them again).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from clinical_realdata import hl7_examples, synthea_documents

from processors.clinical.assess import assess
from processors.clinical.fhir_input import SUPPORTED, parse_document
from processors.clinical.state import PatientUpdate, reduce_update

pytestmark = pytest.mark.realdata

AS_OF = datetime(2026, 3, 29, tzinfo=UTC)


Invalid = list[tuple[str | None, str | None, str]]


def run_once(documents: list[dict[str, Any]], knowledge) -> tuple[str, Invalid]:
    """Parse, reduce and assess every patient; return the assessments' JSON and the invalid resources."""
    changes: dict[str, list[Any]] = {}
    invalid = []
    for doc in documents:
        parsed = parse_document(doc)
        entries = len(doc.get("entry") or ()) if doc.get("resourceType") == "Bundle" else 1
        assert parsed.total() == entries, "an entry was dropped without being reported"
        for bad in parsed.invalid:
            assert bad.error
            invalid.append((bad.resource_type, bad.resource_id, bad.error))
        for pid, items in parsed.changes.items():
            changes.setdefault(pid, []).extend(items)
    out = []
    for pid in sorted(changes):
        state, _ = reduce_update(None, PatientUpdate(patient_id=pid, changes=tuple(changes[pid])), AS_OF)
        out.append(assess(state, AS_OF, None, knowledge).model_dump(mode="json"))
    return json.dumps(out, sort_keys=True), invalid


@pytest.fixture(scope="module")
def hl7_documents() -> list[dict[str, Any]]:
    try:
        return [doc for _, doc in hl7_examples((*SUPPORTED, "Bundle"))]
    except OSError as exc:
        pytest.skip(f"HL7 R4 examples could not be fetched into the cache ({exc}); run once with network")


def test_hl7_r4_examples_assess_without_crash_and_stably(hl7_documents, knowledge):
    first, invalid = run_once(hl7_documents, knowledge)
    second, invalid_again = run_once(hl7_documents, knowledge)
    assert first == second and invalid == invalid_again
    assessments = json.loads(first)
    assert len(assessments) >= 40
    # The official examples all validate as R4 with the R4B models.
    assert invalid == []


def test_synthea_patients_assess_without_crash_and_stably(knowledge):
    documents = synthea_documents()
    first, invalid = run_once(documents, knowledge)
    second, _ = run_once(documents, knowledge)
    assert first == second
    assessments = json.loads(first)
    assert len(assessments) == len(documents)
    assert all(a["age"] is not None and a["staleness"]["observations"] for a in assessments)
    # The fixed-seed population holds a warfarin patient (Synthea's atrial fibrillation module).
    assert any("warfarin" in a["nti"]["drugs"] for a in assessments)
    assert all(error for _, _, error in invalid)
