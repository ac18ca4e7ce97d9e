"""Specification tests for DBPM measurement (processors/dbpm/measurement.py)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig
from processors.dbpm.measurement import (
    ChannelPopulation,
    ChannelStatus,
    LiftStatus,
    PopulationReport,
    SelectivityCell,
    SelectivityCounts,
    SelectivityTracker,
    TagCounts,
    VerdictOutcome,
    channel_population,
    is_tagged,
    measurement_category,
    pairing_key,
    verdict_outcome,
)

PAPER_HELD_OUT = TagCounts(fail_tagged=1392, fail_total=3868, pass_tagged=6101, pass_total=31135)


def test_paper_held_out_counts_give_lift_1_84_with_interval_1_75_to_1_93() -> None:
    lift = PAPER_HELD_OUT.lift()
    assert lift.status is LiftStatus.FINITE
    assert str(lift) == "1.84 [1.75, 1.93]"
    assert round(lift.p_tag_fail, 3) == 0.360
    assert round(lift.p_tag_pass, 3) == 0.196
    assert lift.p_value < 1e-15  # §6.3: "p < 10^-15"


def test_paper_table_8_diagnosis_row_gives_lift_17() -> None:
    # Table 8: diagnosis P(t|P)=0.043 of 4,764, P(t|F)=0.733 of 105 -> lift 17.13 (rates rounded there)
    counts = TagCounts(fail_tagged=77, fail_total=105, pass_tagged=205, pass_total=4764)
    assert counts.lift().value == pytest.approx(17.13, rel=0.02)


def test_no_tags_on_either_side_is_undefined_not_an_error() -> None:
    lift = TagCounts(0, 433, 0, 1971).lift()  # Table 8 history row
    assert lift.status is LiftStatus.UNDEFINED
    assert lift.value is None and lift.ci_low is None and lift.ci_high is None
    assert str(lift) == "undefined (no pair tagged)"


def test_tags_on_fail_only_is_infinite() -> None:
    lift = TagCounts(3, 10, 0, 50).lift()
    assert lift.status is LiftStatus.INFINITE
    assert lift.value is None
    assert str(lift).startswith("inf")


def test_tags_on_pass_only_is_zero_without_interval() -> None:
    lift = TagCounts(0, 351, 104, 697).lift()  # Table 8 outcome_mortality row: fallback, lift 0.00
    assert lift.status is LiftStatus.ZERO
    assert lift.value == 0.0
    assert lift.ci_low is None and lift.ci_high is None


@pytest.mark.parametrize("counts", [TagCounts(), TagCounts(0, 0, 5, 10), TagCounts(5, 10, 0, 0)])
def test_a_side_without_pairs_is_undefined(counts: TagCounts) -> None:
    assert counts.lift().status is LiftStatus.UNDEFINED


def test_every_pair_tagged_on_both_sides_is_lift_one_with_a_point_interval() -> None:
    lift = TagCounts(4, 4, 9, 9).lift()
    assert (lift.value, lift.ci_low, lift.ci_high, lift.p_value) == (1.0, 1.0, 1.0, 1.0)


def test_tagged_above_total_is_rejected() -> None:
    with pytest.raises(ValueError):
        TagCounts(fail_tagged=2, fail_total=1)


def test_only_downgrade_and_block_tag() -> None:
    assert [is_tagged(d) for d in ("ALLOW", "DOWNGRADE", "BLOCK")] == [False, True, True]


def test_only_verifier_verdicts_measure_a_gate() -> None:
    assert verdict_outcome("hard_fail", "verifier_mmed") is VerdictOutcome.FAIL
    assert verdict_outcome("success", "verifier_mmed") is VerdictOutcome.PASS
    assert verdict_outcome("soft_downgrade", "verifier_mmed") is VerdictOutcome.PASS
    assert verdict_outcome("hard_fail", "rule_based") is None
    with pytest.raises(ValueError):
        verdict_outcome("maybe", "verifier_mmed")


def test_relation_cells_are_type_pairs_not_open_vocabulary_labels() -> None:
    payload = {
        "head": "x",
        "head_type": " tests",
        "relation": "MAY_REVEAL_42",
        "tail": "y",
        "tail_type": "Diagnosis",
    }
    assert measurement_category("re", payload) == "TESTS|DIAGNOSIS"
    assert (
        measurement_category("qa", {"question": "q", "answer": "a", "category": " Diagnosis "}) == "diagnosis"
    )
    assert measurement_category("qa", {"question": "q", "answer": "a", "category": ""}) == "other"
    assert measurement_category("ner", {"entity": "fever", "category": "Symptoms"}) == "Symptoms"


_OBSERVATIONS = st.lists(
    st.tuples(
        st.sampled_from(["ner", "re", "qa"]),
        st.sampled_from(["diagnosis", "tests", "history"]),
        st.sampled_from(list(VerdictOutcome)),
        st.booleans(),
    ),
    max_size=60,
)


def _fold(observations: list[tuple[str, str, VerdictOutcome, bool]]) -> SelectivityCounts:
    counts = SelectivityCounts()
    for task, category, outcome, tagged in observations:
        counts = counts.record(task, category, outcome, tagged)
    return counts


@given(left=_OBSERVATIONS, right=_OBSERVATIONS)
def test_merging_partition_counters_equals_counting_the_whole_stream(left, right) -> None:
    assert _fold(left).merge(_fold(right)) == _fold(left + right)
    assert _fold(left).merge(_fold(right)) == _fold(right).merge(_fold(left))


@given(observations=_OBSERVATIONS)
def test_selectivity_counts_round_trip_through_json(observations) -> None:
    counts = _fold(observations)
    assert SelectivityCounts.from_json(json.loads(json.dumps(counts.to_json()))) == counts


@given(observations=_OBSERVATIONS)
def test_task_totals_add_up_their_categories(observations) -> None:
    counts = _fold(observations)
    for task in counts.tasks():
        fail_total = sum(c.counts.fail_total for c in counts.cells if c.task == task)
        assert counts.task_total(task).fail_total == fail_total


@given(
    fail_total=st.integers(1, 10_000),
    pass_total=st.integers(1, 10_000),
    data=st.data(),
)
def test_a_finite_lift_lies_inside_its_interval_and_never_raises(fail_total, pass_total, data) -> None:
    counts = TagCounts(
        data.draw(st.integers(0, fail_total)), fail_total, data.draw(st.integers(0, pass_total)), pass_total
    )
    lift = counts.lift()
    json.dumps(lift.to_json(), allow_nan=False)
    if lift.status is LiftStatus.FINITE:
        assert lift.ci_low <= lift.value <= lift.ci_high
        assert math.isclose(lift.value, lift.p_tag_fail / lift.p_tag_pass)


def test_unsorted_cells_are_rejected_and_from_cells_sorts_and_adds() -> None:
    a = SelectivityCell("qa", "tests", TagCounts(1, 1, 0, 0))
    b = SelectivityCell("ner", "Symptoms", TagCounts(0, 0, 1, 2))
    with pytest.raises(ValueError):
        SelectivityCounts((a, b))
    built = SelectivityCounts.from_cells([a, b, a])
    assert built.cells[0] == b
    assert built.cell("qa", "tests") == TagCounts(2, 2, 0, 0)
    assert built.cell("re", "none") == TagCounts()


def test_render_shows_every_cell_and_a_total_per_task() -> None:
    counts = (
        SelectivityCounts()
        .record("qa", "diagnosis", VerdictOutcome.FAIL, True)
        .record("qa", "history", VerdictOutcome.PASS, False)
    )
    text = counts.render()
    assert "diagnosis" in text and "history" in text and "(all)" in text


# --- channel population -----------------------------------------------------------------------


def test_a_channel_that_consumed_fails_but_cannot_block_is_flagged_inert() -> None:
    # §6.1: 785,797 relation rejections, zero persisted patterns
    report = PopulationReport.of(
        "2026-05-16T00:00:00Z",
        [
            ChannelPopulation("re", fail_events=785_797),
            ChannelPopulation("ner", fail_events=900, patterns=5860, block_eligible=2991, whitelist=96_708),
            ChannelPopulation("qa"),
        ],
    )
    assert report.inert_channels() == ("re",)
    assert [c.status for c in report.channels] == [
        ChannelStatus.POPULATED,
        ChannelStatus.IDLE,
        ChannelStatus.INERT,
    ]
    text = report.render()
    assert "WARNING: the re channel consumed 785797 fail events" in text
    assert "ner" in text and "96708" in text


def test_population_reports_merge_by_adding_counts_and_keeping_the_later_time() -> None:
    left = PopulationReport.of("2026-05-04T10:00:00Z", [ChannelPopulation("ner", 3, 2, 1, 1, 4)])
    right = PopulationReport.of(
        "2026-05-05T00:00:00Z", [ChannelPopulation("ner", 1, 1, 0, 0, 1), ChannelPopulation("re", 2)]
    )
    merged = left.merge(right)
    assert merged.as_of == "2026-05-05T00:00:00Z"
    assert merged.channels == (ChannelPopulation("ner", 4, 3, 1, 1, 5), ChannelPopulation("re", 2))
    assert merged == right.merge(left)


def test_population_report_round_trips_through_json() -> None:
    report = PopulationReport.of(None, [ChannelPopulation("qa", 5, 4, 2, 1, 3), ChannelPopulation("re", 7)])
    assert PopulationReport.from_json(json.loads(json.dumps(report.to_json()))) == report


def test_inconsistent_channel_counts_are_rejected() -> None:
    with pytest.raises(ValueError):
        ChannelPopulation("ner", patterns=1, block_eligible=1, downgrade_band=1)
    with pytest.raises(ValueError):
        ChannelPopulation("ner").merge(ChannelPopulation("re"))


def test_a_gate_and_its_verdict_share_a_pairing_key_whatever_their_extras() -> None:
    question = {"question": "Which tests?", "answer": "ct", "category": "tests"}
    gate = pairing_key("qa", "p-1", {**question, "ner_categories": ["Tests"], "difficulty": 0.1})
    verdict = pairing_key("qa", "p-1", {**question, "error_class": "unsupported"})
    assert gate == verdict
    assert pairing_key("qa", "p-2", question) != gate
    assert pairing_key("summary", "p-1", {"text": "a"}) == ("summary", "p-1", "a")


def test_channel_population_applies_the_block_clause_and_band_of_eq_4_to_a_snapshot() -> None:
    config = DBPMConfig()  # RE: block above 0.70 with >= 2 observations; band (0.40, 0.70]
    snapshot = {
        "as_of": "2026-05-05T00:00:00Z",
        "blocklist": {
            "re": [
                {"signature": "A|X|B", "severity": 0.71, "count": 2, "cross_task_hits": 0},  # blocks
                {"signature": "A|Y|B", "severity": 0.90, "count": 1, "cross_task_hits": 0},  # lacks support
                {"signature": "A|Z|B", "severity": 0.70, "count": 5, "cross_task_hits": 0},  # band top
                {"signature": "C|X|D", "severity": 0.40, "count": 5, "cross_task_hits": 0},  # below band
            ],
            "ner": [],
        },
        "whitelist": {"re": [{"signature": "E|X|F", "confidence": 0.9, "count": 1}], "ner": []},
        "preempted_entities": [],
    }
    report = channel_population(snapshot, config, {"re": 9, "ner": 4})
    by_task = {c.task: c for c in report.channels}
    assert by_task["re"] == ChannelPopulation("re", 9, 4, 1, 1, 1)
    assert by_task["ner"].status is ChannelStatus.INERT
    assert by_task["qa"].status is ChannelStatus.IDLE
    assert report.as_of == "2026-05-05T00:00:00Z"


def test_tracker_pairs_each_verdict_with_its_candidates_gate_decision():
    tracker = SelectivityTracker()
    payload = {"question": "Q?", "answer": "A", "category": "diagnosis"}
    tracker.gate("qa", "p1", payload, "DOWNGRADE")
    tracker.verdict("qa", "p1", payload, "hard_fail", "verifier_mmed")
    tracker.gate("qa", "p2", payload, "ALLOW")
    tracker.verdict("qa", "p2", payload, "success", "verifier_mmed")
    tracker.verdict("qa", "p3", payload, "hard_fail", "verifier_mmed")  # no pending gate: not a pair
    cell = tracker.counts().cell("qa", "diagnosis")
    assert (cell.fail_tagged, cell.fail_total, cell.pass_tagged, cell.pass_total) == (1, 1, 0, 1)
    assert tracker.fail_events == {"qa": 2}


def test_a_bounded_tracker_drops_the_oldest_unverified_decision_and_counts_it():
    tracker = SelectivityTracker(max_pending=2)
    payloads = [{"question": f"Q{i}?", "answer": "A", "category": "diagnosis"} for i in range(3)]
    for payload in payloads:
        tracker.gate("qa", "p1", payload, "BLOCK")  # never verified in a live pipeline
    assert len(tracker.pending) == 2 and tracker.expired == 1
    tracker.verdict("qa", "p1", payloads[0], "hard_fail", "verifier_mmed")  # its decision expired
    tracker.verdict("qa", "p1", payloads[2], "hard_fail", "verifier_mmed")
    assert tracker.counts().cell("qa", "diagnosis") == TagCounts(fail_tagged=1, fail_total=1)


@given(st.lists(st.integers(min_value=0, max_value=5), max_size=40), st.integers(min_value=1, max_value=4))
def test_a_bounded_tracker_keeps_the_most_recently_gated_candidates(candidates: list[int], bound: int):
    tracker = SelectivityTracker(max_pending=bound)
    for i in candidates:
        tracker.gate("ner", "p", {"text": f"t{i}", "category": "c"}, "ALLOW")
    recent = list(dict.fromkeys(reversed(candidates)))[:bound]
    expected = {pairing_key("ner", "p", {"text": f"t{i}", "category": "c"}) for i in recent}
    assert set(tracker.pending) == expected
