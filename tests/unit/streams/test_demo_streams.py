"""Broker-free parts of the demo's streams: the FHIR timeline and the latency bookkeeping."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.demo_data.timeline import START, WEEKS, fhir_timeline, week_of
from streams.demo_tap import Flow


@settings(max_examples=10, deadline=None)
@given(patients=st.integers(min_value=1, max_value=12), seed=st.integers(min_value=0, max_value=1000))
def test_fhir_timeline_is_in_event_time_order_one_update_per_patient_and_time(patients, seed):
    updates = fhir_timeline(patients, seed)
    assert [u.ts for u in updates] == sorted(u.ts for u in updates)
    assert len({(u.patient_id, u.ts) for u in updates}) == len(updates)
    assert len({u.patient_id for u in updates}) == patients
    assert all(0 <= week_of(u.ts) < WEEKS + 1 for u in updates)


def test_fhir_timeline_is_seeded():
    assert fhir_timeline(5, seed=3) == fhir_timeline(5, seed=3)


def test_fhir_timeline_spreads_changes_over_the_weeks():
    weeks = Counter(week_of(u.ts) for u in fhir_timeline(40))
    assert set(weeks) >= set(range(WEEKS))


def test_week_of_counts_whole_weeks_from_the_start():
    assert week_of(START) == 0
    assert week_of(START + timedelta(days=6, hours=23)) == 0
    assert week_of(START + timedelta(weeks=2)) == 2
    assert week_of(START - timedelta(days=1)) == 0


def test_flow_latency_pairs_outputs_with_their_inputs_and_ignores_unmatched_ones():
    flow = Flow("x", produced={"a": 10.0, "b": 10.5, "c": 11.0}, consumed={"a": 10.2, "b": 11.5, "z": 99.0})
    flow.outputs = ["a", "b", "z"]
    assert flow.latencies() == pytest.approx([0.2, 1.0])
    stats = flow.stats()
    assert stats["p50"] == 1.0 and stats["p99"] == 1.0
    assert stats["span"] == 89.0


def test_flow_without_outputs_reports_zeros():
    assert Flow("x").stats()["rate"] == 0.0
