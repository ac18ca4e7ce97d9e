"""The broker-free parts of ``clingate demo``: its stage-batched stream and its report page."""

from __future__ import annotations

from itertools import groupby

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.demo import report
from streams.demo.plan import demo_stream


@settings(max_examples=5, deadline=None)
@given(patients=st.integers(min_value=1, max_value=4), seed=st.integers(min_value=0, max_value=50))
def test_demo_stream_batches_each_stage_gates_first_and_never_goes_back_in_time(patients, seed):
    stream = demo_stream(patients, seed)
    assert len({e["patient_id"] for e in stream}) == patients
    times = [e["ts"] for e in stream]
    assert times == sorted(times)
    for _, stage in groupby(stream, key=lambda e: (e["patient_id"], e["task"])):
        kinds = [e["kind"] for e in stage]
        assert kinds == sorted(kinds, key=lambda k: k != "gate")


def test_demo_stream_keeps_every_candidate_and_verdict_of_its_patients():
    stream = demo_stream(2)
    gates = [e for e in stream if e["kind"] == "gate"]
    assert len({e["candidate_id"] for e in gates}) == len(gates)
    assert sum(1 for e in stream if e["kind"] == "verdict") > 0


def test_report_page_is_self_contained():
    html = report.page(
        "t",
        [
            ("lines", report.line_chart("c", [report.Series("s", [(0.0, 1.0), (1.0, 2.0)])], "y")),
            ("ci", report.interval_chart("c", [report.Interval("a", 1.5, 1.1, 2.0, "1.50"),
                                               report.Interval("b", None, None, None, "undefined")], "lift")),
            ("bars", report.bar_chart("c", {"RED": 2, "GREEN": 0}, "n")),
            ("table", report.table(["a"], [["<b>"]])),
        ],
    )  # fmt: skip
    assert html.count("<svg") == 3
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "&lt;b&gt;" in html
