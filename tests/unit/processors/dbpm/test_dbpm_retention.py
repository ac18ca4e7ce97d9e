"""Retention: whitelist entries, preempted entities and patients unused for their retention are deleted.

Properties: a record is deleted at the first maintenance boundary past its last use plus its retention
and not before; using it again in time keeps it; after deletion the memory behaves as if it had never
held it (a new success whitelists at the initial confidence, an entity is no longer preempted, a patient
has no categories or counters); the incremental populations always equal the records held; a long
stream keeps no record older than its retention; with maintenance off nothing expires.
"""

from __future__ import annotations

import pytest
from dbpm_harness import DAY, T0, Harness, ner, rel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig
from processors.dbpm.memory import KIND_PATIENT, KIND_PREEMPTED, KIND_WHITE, Memory
from processors.dbpm.partitioned import merge_values
from processors.dbpm.retention import RETENTION_STEP_S
from state import RamStore

RETENTION = {
    "whitelist_retention_s": 10 * DAY,
    "preempt_retention_s": 20 * DAY,
    "patient_retention_s": 5 * DAY,
}
CONFIG = DBPMConfig(**RETENTION)


def _tick(h: Harness, at: float) -> None:
    """Any event at ``at`` runs the maintenance due then: here a gate of an unrelated signature."""
    h.gate("ner", ner("unrelated finding"), at=at, patient="p-other")


def test_a_whitelist_entry_unconfirmed_for_its_retention_is_deleted_and_a_new_success_starts_afresh():
    h = Harness(CONFIG)
    h.verdict("ner", "success", ner("pneumonia"), at=T0)
    h.verdict("ner", "success", ner("pneumonia"), at=T0 + DAY)
    assert h.memory().white("ner", "pneumonia").count == 2
    _tick(h, T0 + 10.9 * DAY)
    assert h.memory().is_whitelisted("ner", "pneumonia"), "last confirmed on day 1: kept until day 11"
    _tick(h, T0 + 11.1 * DAY)
    mem = h.memory()
    assert not mem.is_whitelisted("ner", "pneumonia")
    assert (mem.population("W", "ner"), mem.expired(KIND_WHITE)) == (0, 1)
    assert h.gate("ner", ner("pneumonia"), at=T0 + 11.2 * DAY).decision == "ALLOW"
    h.verdict("ner", "success", ner("pneumonia"), at=T0 + 12 * DAY)
    entry = h.memory().white("ner", "pneumonia")
    assert (entry.confidence, entry.count) == (CONFIG.whitelist_initial, 1)


def test_a_preempted_entity_leaves_the_set_after_its_retention_unless_preempted_again():
    h = Harness(CONFIG)
    h.verdict("ner", "hard_fail", ner("chest pain"), at=T0)
    h.verdict("ner", "hard_fail", ner("abdominal mass"), at=T0)
    h.verdict("ner", "hard_fail", ner("abdominal mass"), at=T0 + 15 * DAY)
    assert h.memory().held(b"P") == 2
    _tick(h, T0 + 21 * DAY)
    mem = h.memory()
    assert not mem.is_preempted("chest pain") and mem.is_preempted("abdominal mass")
    assert (mem.held(b"P"), mem.expired(KIND_PREEMPTED)) == (1, 1)
    assert h.snapshot()["preempted_entities"] == ["abdominal mass"]


def test_a_patients_counters_and_categories_are_deleted_after_its_retention():
    h = Harness(CONFIG)
    h.verdict("ner", "success", ner("pneumonia", "Diagnosis"), at=T0, patient="p1")
    h.verdict("re", "hard_fail", rel(), at=T0 + DAY, patient="p1")
    h.verdict("ner", "success", ner("aspirin", "Medication"), at=T0 + 3 * DAY, patient="p2")
    mem = h.memory()
    assert mem.patient_categories("p1") == ("diagnosis",) and mem.patient_counts("p1") == (1, 1)
    assert mem.held(b"T") == 2
    _tick(h, T0 + 6.5 * DAY)
    mem = h.memory()
    assert mem.patient_categories("p1") == () and mem.patient_counts("p1") == (0, 0)
    assert mem.patient_categories("p2") == ("medication",), "p2 was written on day 3: kept until day 8"
    assert (mem.held(b"T"), mem.expired(KIND_PATIENT)) == (1, 1)


def test_with_maintenance_off_nothing_expires():
    h = Harness(CONFIG.with_flags(maintenance=False))
    h.verdict("ner", "success", ner("pneumonia"), at=T0, patient="p1")
    h.verdict("ner", "hard_fail", ner("chest pain"), at=T0)
    _tick(h, T0 + 400 * DAY)
    mem = h.memory()
    assert mem.is_whitelisted("ner", "pneumonia") and mem.is_preempted("chest pain")
    assert mem.patient_categories("p1") == ("diagnosis",)


_ENTITIES = [f"finding number {i}" for i in range(12)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from([0.1, 1.0, 4.0, 9.0]),
            st.sampled_from(["success", "hard_fail"]),
            st.sampled_from(_ENTITIES),
            st.sampled_from(["p1", "p2", "p3"]),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_a_long_stream_holds_nothing_older_than_its_retention_and_the_counts_match_the_records(steps):
    h = Harness(CONFIG)
    now = T0
    for gap_days, verdict, entity, patient in steps:
        now += gap_days * DAY
        h.verdict("ner", verdict, ner(entity), at=now, patient=patient)
    mem = h.memory()
    boundary = now - now % RETENTION_STEP_S
    whites = list(mem.whites("ner"))
    assert all(entry.last_seen >= boundary - CONFIG.whitelist_retention_s for _, entry in whites)
    preempted = list(mem.preempted())
    patients = {key[1:] for key, _ in mem.kv.iter_prefix(b"T")}
    assert all(mem.last_seen_before(kind, boundary - retention) == [] for kind, retention in (
        (KIND_WHITE, CONFIG.whitelist_retention_s),
        (KIND_PREEMPTED, CONFIG.preempt_retention_s),
        (KIND_PATIENT, CONFIG.patient_retention_s),
    ))  # fmt: skip
    assert (mem.population("W", "ner"), mem.held(b"P"), mem.held(b"T")) == (
        len(whites),
        len(preempted),
        len(patients),
    )
    index = {
        kind: len(mem.last_seen_before(kind, now + 1)) for kind in (KIND_WHITE, KIND_PREEMPTED, KIND_PATIENT)
    }
    assert index == {KIND_WHITE: len(whites), KIND_PREEMPTED: len(preempted), KIND_PATIENT: len(patients)}
    assert {key[1:] for key, _ in mem.kv.iter_prefix(b"D")} <= patients
    assert {
        key[3 : 3 + int.from_bytes(key[1:3], "little")] for key, _ in mem.kv.iter_prefix(b"C")
    } <= patients


@pytest.mark.parametrize("name", sorted(RETENTION))
def test_retention_must_be_positive(name):
    with pytest.raises(ValueError, match=name):
        DBPMConfig(**{name: 0.0})


def test_the_partitions_counts_of_held_and_expired_records_add_up_in_the_merged_view():
    partitions = []
    for patient in ("p1", "p2"):
        h = Harness(CONFIG)
        h.verdict("ner", "hard_fail", ner("chest pain"), at=T0, patient=patient)
        _tick(h, T0 + 6 * DAY)
        partitions.append(dict(h.store.iter_range(b"N", b"O")))
    merged = {key: merge_values(key, [p[key] for p in partitions if key in p]) for key in partitions[0]}
    store = RamStore()
    with store.transaction() as txn:
        for key, value in merged.items():
            txn.set(key, value)
    mem = Memory(store.transaction(), CONFIG)
    assert (mem.held(b"P"), mem.held(b"T"), mem.expired(KIND_PATIENT)) == (2, 0, 2)
