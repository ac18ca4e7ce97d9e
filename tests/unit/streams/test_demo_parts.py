"""The broker-free parts of ``clingate demo``: its stage-batched stream and its report page."""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET
from collections import Counter
from itertools import groupby
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm.measurement import (
    ChannelPopulation,
    PopulationReport,
    SelectivityCell,
    SelectivityCounts,
    TagCounts,
)
from streams.demo import report
from streams.demo.plan import demo_stream
from streams.demo.results import DbpmResults, MemoryPoint, PatientRow, Results, WeekLights
from streams.demo.streams import FLOWS
from streams.demo.tap import Flow


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
            ("lines", report.line_chart("c", [report.Series("s", [(0.0, 1.0), (1.0, 2.0)], "#000")], "y")),
            ("ci", report.interval_chart("c", [report.Interval("a", 1.5, 1.1, 2.0, "1.50"),
                                               report.Interval("b", None, None, None, "undefined")], "lift")),
            ("bars", report.bar_chart("c", [report.Bar("RED", 2, "#f00"),
                                            report.Bar("GREEN", 0, "#0f0")], "n")),
            ("table", report.table(["a"], [["<b>"]])),
        ],
    )  # fmt: skip
    assert html.count("<svg") == 3
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "&lt;b&gt;" in html


# ------------------------------------------------------------------ the colours of every chart of report.html

_TASKS = ("ner", "re", "qa")
_SIGNATURES = {"ner": ("n1", "n2"), "re": ("r1", "r2"), "qa": ("q1", "q2")}
"""Six blocklist signatures, so the trajectory chart leaves one out (``ner n1``, the smallest)."""


def _small_run() -> Results:
    """A run of three memory snapshots, three QA categories (one lift undefined), three weeks of
    lights and the demo's five streams: enough for every chart of the report to draw every kind of
    series. Severity x count at the end differs between signatures, so the top five are certain."""
    snapshots = [
        MemoryPoint(
            3600.0 * hour,
            {
                task: {
                    sig: ((hour + 1) * (0.1 * (k + 1) + 0.03 * t), hour + k + 1)
                    for k, sig in enumerate(_SIGNATURES[task])
                }
                for t, task in enumerate(_TASKS)
            },
            {task: hour + i for i, task in enumerate(_TASKS)},
        )
        for hour in range(3)
    ]
    dbpm = DbpmResults(
        patients=3, narratives=3, gates=12, same=True, per_task=Counter({("ner", "BLOCK"): 2}),
        population=PopulationReport.of(None, [ChannelPopulation(t, 4, 2, 1, 1, 1) for t in _TASKS]),
        selectivity=SelectivityCounts.from_cells([
            SelectivityCell("qa", "dose", TagCounts(8, 10, 2, 10)),
            SelectivityCell("qa", "frequency", TagCounts(5, 10, 5, 10)),
            SelectivityCell("qa", "route", TagCounts(1, 3, 0, 0)),
        ]),
        snapshots=snapshots, differing=0, lockstep=1, lockstep_gates=4, same_state=True,
        memory_differences=[], verdicts=10,
        lockstep_s=1.0, blocks=2, let_through=10, failed_verifications=0, failed_narratives=0, bulk=None,
    )  # fmt: skip
    flows = {}
    sources = {"verifier": "verifier_mmed", "filter": "rule_based"}
    for i, name in enumerate(FLOWS):
        flow = Flow(name, produced={"a": 0.0, "b": 0.5}, consumed={"a": 0.1 * (i + 1), "b": 1.0 + i})
        flow.outputs = [SimpleNamespace(source=sources[name])] * 2 if name in sources else ["a", "b"]
        flows[name] = flow
    weeks = [Counter(RED=1, YELLOW=3, GREEN=6), Counter(RED=2, YELLOW=4, GREEN=4), Counter(RED=4, GREEN=6)]
    return Results(
        dbpm=dbpm,
        lights=weeks[-1],
        lights_by_week=[WeekLights(week, lights, 1) for week, lights in enumerate(weeks)],
        golden=[PatientRow("p1", 70, "high", ["warfarin"], "RED", "RED", ["interaction"])],
        flows=flows,
    )


def _charts(tmp_path: Path) -> dict[str, ET.Element]:
    """Every chart of the small run's report.html, by its caption."""
    path = tmp_path / "report.html"
    report.write_report(path, _small_run())
    figures = re.findall(r"<figure><figcaption>(.*?)</figcaption>(<svg .*?</svg>)</figure>", path.read_text())
    return {html.unescape(caption): ET.fromstring(svg) for caption, svg in figures}


def _tag(element: ET.Element) -> str:
    return element.tag.rsplit("}", 1)[-1]


def _drawn(svg: ET.Element, mark: str) -> list[tuple[ET.Element, dict[str, ET.Element]]]:
    """Each ``mark`` element of a chart with what is drawn after it up to the next one, by tag (the
    last of a tag): a chart draws a series' mark and then its legend entry before the next series."""
    drawn: list[tuple[ET.Element, dict[str, ET.Element]]] = []
    for element in svg:
        if _tag(element) == mark:
            drawn.append((element, {}))
        elif drawn:
            drawn[-1][1][_tag(element)] = element
    return drawn


def _legend(svg: ET.Element) -> list[tuple[str, str, str]]:
    """A line chart's series as ``(legend label, swatch colour, line colour)``."""
    return [
        (after["text"].text or "", after["rect"].attrib["fill"], line.attrib["stroke"])
        for line, after in _drawn(svg, "polyline")
    ]


def _bars(svg: ET.Element) -> dict[str, str]:
    """A bar chart's bars as label -> fill; the label below a bar, drawn last, is its legend."""
    return {after["text"].text or "": bar.attrib["fill"] for bar, after in _drawn(svg, "rect")}


def _one_colour_per_series(legend: list[tuple[str, str, str]]) -> dict[str, str]:
    """Label -> colour, after checking that every series' swatch is the colour of its line and that
    no two series share a colour."""
    for label, swatch, line in legend:
        assert swatch == line, f"{label}: legend swatch {swatch}, line {line}"
    colours = {label: line for label, _, line in legend}
    assert len(set(colours.values())) == len(colours), legend
    return colours


def test_every_chart_of_the_report_draws_each_series_in_the_colour_of_its_legend_entry(tmp_path):
    """A traffic light is in its own colour in both of its charts; a task or a stream has one colour
    in every chart that shows it; every chart of the page is checked here, so a new one fails this
    test until it is."""
    charts = _charts(tmp_path)
    lights = report._LIGHT_COLOURS
    assert not set(report._COLOURS) & set(lights.values()), "only a light is drawn in a light's colour"
    checked = set()

    def chart(caption: str) -> ET.Element:
        checked.add(caption)
        return charts[caption]

    weekly = _one_colour_per_series(_legend(chart("traffic lights at the end of each simulated week")))
    assert list(weekly.items()) == list(lights.items())
    final = _bars(chart("traffic-light distribution (final)"))
    assert list(final.items()) == list(lights.items())

    blocklist = _one_colour_per_series(_legend(chart("blocklist signatures held over event time")))
    whitelist = _one_colour_per_series(_legend(chart("whitelist signatures held over event time")))
    assert list(blocklist) == list(_TASKS) and whitelist == blocklist

    top = "severity of the top 5 blocklist signatures (severity x count at the end)"
    trajectories = _one_colour_per_series(_legend(chart(top)))
    assert list(trajectories) == ["qa q2", "re r2", "ner n2", "qa q1", "re r1"]

    lift = chart("lift with 95% CI (dashed: 1, no selectivity)")
    assert not _legend(lift)  # one kind of mark in one colour: nothing for a legend to tell apart
    points = [e.attrib["fill"] for e in lift if _tag(e) == "circle"]
    assert len(points) == 2 and len(set(points)) == 1  # the undefined lift is labelled, not drawn

    streams = [
        _bars(chart(caption))
        for caption in (
            "throughput (outputs/s)",
            "latency p50 (ms, produced -> output consumed)",
            "latency p99 (ms, produced -> output consumed)",
        )
    ]
    assert list(streams[0]) == list(FLOWS)
    assert streams[1] == streams[2] == streams[0]
    assert len(set(streams[0].values())) == len(streams[0])

    assert checked == set(charts)
