"""The clinical loop's batches: a batch publishes and stores what its records do one batch each.

:class:`~streams.worker.clinical.ClinicalHandler` decodes a patient's state at the patient's first record
of a batch, applies and assesses each record of the patient on it (on the parts of the patient's
previous assessment) and encodes the state once, at the batch's end, checking every record against the
table's limit on a bound of the state's size. On generated streams of two patients
(:mod:`tests.clinical_streams`, whose event times reach past the table's retention, so that a patient is
deleted in the middle of a batch), the records in one batch publish the same records, dead-letter the
same ones and leave the same table as the records applied one batch each, as the topology driver
applies them; so they do under a limit small enough that some states do not fit (``StateTooLarge``).
"""

from __future__ import annotations

from collections.abc import Iterator
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from prometheus_client import CollectorRegistry

from processors.clinical.assess import ClinicalStreamState, process_event
from processors.clinical.knowledge import GateFlags, default_knowledge
from schemas.base import AvroModel
from schemas.clinical import AdversarialReview, AuditReport, ClinicalDraft, Deliverable, EvidenceBundle
from schemas.fhir import FhirUpdate
from schemas.wire import make_serde
from state.base import RESERVED_PREFIX
from state.ram import RamStore
from streams.runtime.dlq import SourceRecord
from streams.worker import clinical
from streams.worker.clinical import ClinicalHandler, json_growth
from streams.worker.metrics import ClinicalMetrics
from streams.worker.tablestore import apply_batch, write_group
from tests.clinical_streams import patient_streams, processor_event
from topics.catalog import (
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_REVIEWS,
    FHIR_UPDATES,
)

KNOWLEDGE = default_knowledge()
SERDE = make_serde(None)
TOPICS: dict[type[AvroModel], str] = {
    FhirUpdate: FHIR_UPDATES,
    AdversarialReview: CLINICAL_REVIEWS,
    Deliverable: CLINICAL_DELIVERABLES,
    EvidenceBundle: CLINICAL_EVIDENCE,
    ClinicalDraft: CLINICAL_DRAFTS,
    AuditReport: CLINICAL_AUDIT_REPORTS,
}
STREAMS = patient_streams(("pt-1", "pt-2"), max_size=40)


class _Table:
    """One partition's store, as the table loop reads it."""

    def __init__(self) -> None:
        self.store = RamStore()

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.store.get(key)

    def iter_range(self, partition: int, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return self.store.iter_range(start, end)


def _records(stream: list[AvroModel]) -> list[SourceRecord]:
    return [
        SourceRecord(
            TOPICS[type(r)], 0, offset, None, r.patient_id.encode(), SERDE.encode(r, topic=TOPICS[type(r)])
        )
        for offset, r in enumerate(stream)
    ]


def _apply(records: list[SourceRecord], batch: int) -> tuple[list, list, dict[bytes, bytes]]:
    """The outputs, dead letters and final table of ``records`` applied ``batch`` at a time."""
    handler = ClinicalHandler(SERDE, KNOWLEDGE, GateFlags(), ClinicalMetrics(CollectorRegistry()), 365)
    table = _Table()
    outputs, dead_letters = [], []
    for start in range(0, len(records), batch):
        applied = apply_batch(handler, table, 0, records[start : start + batch])
        outputs += applied.outputs
        dead_letters += applied.dead_letters
        if applied.group is not None:
            write_group(table.store, applied.group, start)
    return outputs, dead_letters, dict(table.store.iter_range(b"", RESERVED_PREFIX))  # not the offset applied


@pytest.mark.parametrize("limit", [clinical.STATE_MAX_BYTES, 6_000], ids=["table limit", "small limit"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=STREAMS)
def test_a_batch_publishes_dead_letters_and_stores_what_its_records_one_by_one_do(
    stream: list[AvroModel], limit: int
) -> None:
    records = _records(stream)
    with patch.object(clinical, "STATE_MAX_BYTES", limit):
        assert _apply(records, len(records)) == _apply(records, 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=STREAMS)
def test_the_growth_of_a_state_is_bounded_by_what_it_holds_anew(stream: list[AvroModel]) -> None:
    """What the handler's size check stands on: a state's JSON grows by at most :func:`json_growth`."""
    states: dict[str, ClinicalStreamState] = {}
    for record in stream:
        event, now = processor_event(record)
        if event is None:
            continue
        before = states.get(event.patient_id)
        try:
            after, _ = process_event(before, event, now, KNOWLEDGE)
        except ValueError:  # a run's record out of order, an audit that is not the contract's
            continue
        if before is not None:
            grown = len(after.model_dump_json().encode()) - len(before.model_dump_json().encode())
            assert grown <= json_growth(before, after)
        states[event.patient_id] = after
