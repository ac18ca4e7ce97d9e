"""Patient-state reducer: latest version wins whatever the arrival order; deletes honoured."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from processors.clinical.records import (
    ObservationRecord,
    PatientState,
    ResourceDelete,
    ResourceUpsert,
    VersionStamp,
)
from processors.clinical.state import PatientUpdate, reduce_update

NOW = datetime(2026, 3, 29, tzinfo=UTC)


def version(
    n: int | None = None, updated: str | None = None, value: float = 1.0, rid: str = "o1"
) -> ResourceUpsert:
    stamp = VersionStamp(version_id=str(n) if n is not None else None, last_updated=updated)
    return ResourceUpsert(record=ObservationRecord(id=rid, stamp=stamp, value=value))


def apply(state, *changes):
    return reduce_update(state, PatientUpdate(patient_id="p", changes=tuple(changes)), NOW)


def stored_value(state: PatientState, rid: str = "o1") -> float | None:
    rec = state.resources.get(f"Observation/{rid}")
    return rec.value if rec is not None else None


@given(st.permutations(list(range(1, 7))))
def test_any_arrival_order_keeps_the_highest_version(order):
    state = None
    for n in order:
        state, _ = apply(state, version(n, value=float(n)))
    assert stored_value(state) == 6.0


@given(
    st.permutations(
        [
            "2026-03-01T00:00:00Z",
            "2026-03-02T00:00:00+01:00",
            "2026-03-02T00:00:00Z",
            "2026-03-03T12:00:00-05:00",
        ]
    )
)
def test_without_version_ids_last_updated_orders_versions(order):
    values = {
        "2026-03-01T00:00:00Z": 1.0,
        "2026-03-02T00:00:00+01:00": 2.0,
        "2026-03-02T00:00:00Z": 3.0,
        "2026-03-03T12:00:00-05:00": 4.0,
    }
    state = None
    for updated in order:
        state, _ = apply(state, version(updated=updated, value=values[updated]))
    assert stored_value(state) == 4.0


def test_older_version_is_reported_and_ignored():
    state, _ = apply(None, version(3, value=3.0))
    same, outcomes = apply(state, version(2, value=2.0))
    assert same is state and outcomes[0].action == "ignored_older"


def test_replayed_version_is_an_idempotent_duplicate():
    state, _ = apply(None, version(3, value=3.0))
    same, outcomes = apply(state, version(3, value=3.0))
    assert same is state and outcomes[0].action == "ignored_duplicate"


def test_unversioned_updates_follow_log_order():
    state, _ = apply(None, version(value=1.0), version(value=2.0))
    assert stored_value(state) == 2.0


def test_delete_removes_and_an_older_late_version_cannot_resurrect():
    state, _ = apply(None, version(2, value=2.0))
    state, outcomes = apply(
        state, ResourceDelete(resource_type="Observation", id="o1", stamp=VersionStamp(version_id="3"))
    )
    assert outcomes[0].action == "deleted" and stored_value(state) is None
    state, outcomes = apply(state, version(2, value=2.0))
    assert outcomes[0].action == "ignored_older" and stored_value(state) is None
    state, outcomes = apply(state, version(4, value=4.0))
    assert outcomes[0].action == "applied" and stored_value(state) == 4.0


def test_unstamped_delete_is_stamped_with_event_time():
    state, _ = apply(None, version(updated="2026-03-01T00:00:00Z"))
    state, _ = apply(state, ResourceDelete(resource_type="Observation", id="o1"))
    state, outcomes = apply(state, version(updated="2026-03-02T00:00:00Z"))
    assert outcomes[0].action == "ignored_older"


def test_deleting_the_patient_drops_the_whole_state():
    state, _ = apply(None, version(1), version(1, rid="o2"))
    state, outcomes = apply(state, ResourceDelete(resource_type="Patient", id="p"))
    assert outcomes[0].action == "patient_deleted" and state.resources == {} and state.tombstones == {}


def test_state_is_never_mutated_in_place():
    state, _ = apply(None, version(1, value=1.0))
    snapshot = state.model_dump()
    apply(state, version(2, value=2.0), ResourceDelete(resource_type="Observation", id="o1"))
    assert state.model_dump() == snapshot


def test_stream_state_survives_a_json_round_trip(knowledge):
    from clinical_builders import AS_OF, load_bundle

    from processors.clinical.assess import ClinicalStreamState, process_event
    from processors.clinical.fhir_input import parse_document

    parsed = parse_document(load_bundle("PT-TEST-010"))
    state, _ = process_event(
        None,
        PatientUpdate(patient_id="PT-TEST-010", changes=tuple(parsed.changes["PT-TEST-010"])),
        AS_OF,
        knowledge,
    )
    assert ClinicalStreamState.model_validate_json(state.model_dump_json()) == state
