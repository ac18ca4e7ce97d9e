"""The broker-free parts of ``clingate demo``: its stage-batched stream and its report page."""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import UTC, datetime
from itertools import combinations, groupby, pairwise
from pathlib import Path
from types import SimpleNamespace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology, parse_event
from processors.dbpm.extraction import QA_TEMPLATES
from processors.dbpm.measurement import (
    ChannelPopulation,
    PopulationReport,
    SelectivityCell,
    SelectivityCounts,
    TagCounts,
)
from streams import charts
from streams.demo import report
from streams.demo.plan import SNAPSHOTS, demo_stream, memory_over_time
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


def test_memory_snapshots_follow_event_time_when_the_events_come_narrative_by_narrative():
    """The reference run's order (patient by patient, a later patient's events stamped before an earlier
    one's) goes back in time; the snapshots are in time order and hold what happened up to their time:
    the last one is the memory after every event, however they came."""
    stream = demo_stream(12)
    by_patient = [list(events) for _, events in groupby(stream, key=lambda e: e["patient_id"])]
    arrived = [parse_event(e) for patient in reversed(by_patient) for e in patient]
    assert any(b.time < a.time for a, b in pairwise(arrived)), "the input goes back in time"
    engine = DBPMEngine(DBPMConfig(), load_ontology())
    snapshots = memory_over_time(engine, arrived)
    times = [s.time for s in snapshots]
    assert times == sorted(times) and len(snapshots) >= SNAPSHOTS
    assert times[-1] == max(e.time for e in arrived)
    assert snapshots == memory_over_time(engine, [parse_event(e) for e in stream]), "as if in time order"
    assert any(s.blocklist.get("ner") or s.whitelist.get("ner") for s in snapshots), "the memory fills"


def test_report_page_is_self_contained():
    html = report.page(
        "t",
        [
            ("lines", charts.line_chart("c", [charts.Series("s", [(0.0, 1.0), (1.0, 2.0)], "#000")], "y",
                                        "x")),
            ("ci", charts.interval_chart("c", [charts.Interval("a", 1.5, 1.1, 2.0, "1.50"),
                                               charts.Interval("b", None, None, None, "undefined")], "lift",
                                         "#000")),
            ("bars", charts.bar_chart("c", [charts.Bar("RED", 2, "#f00"),
                                            charts.Bar("GREEN", 0, "#0f0")], "n")),
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
_SNAPSHOT_HOURS = (0, 1, 2, 3)
"""The event times of the snapshots, in hours (in time order, as :func:`memory_over_time` takes them)."""
_CATEGORIES = tuple(QA_TEMPLATES)
"""The QA categories of the lift chart: eleven, some with long names."""


def _small_run() -> Results:
    """A run of four memory snapshots, every QA category (the last one's lift undefined), three weeks of
    lights and the demo's five streams: enough for every chart of the report to draw every kind of
    series. Severity x count at the end differs between signatures, so the top five are certain."""
    snapshots = [
        MemoryPoint(
            3600.0 * hours,
            {
                task: {
                    sig: ((index + 1) / 4 * (0.1 * (k + 1) + 0.03 * t), index + k + 1)
                    for k, sig in enumerate(_SIGNATURES[task])
                }
                for t, task in enumerate(_TASKS)
            },
            {task: 500 * index + i for i, task in enumerate(_TASKS)},
        )
        for index, hours in enumerate(_SNAPSHOT_HOURS)
    ]
    selectivity = [
        SelectivityCell("qa", c, TagCounts(2 + i, 12, 1 + i % 3, 10)) for i, c in enumerate(_CATEGORIES)
    ]
    selectivity[-1] = SelectivityCell("qa", _CATEGORIES[-1], TagCounts(1, 3, 0, 0))
    dbpm = DbpmResults(
        patients=3, narratives=3, gates=12, same=True, per_task=Counter({("ner", "BLOCK"): 2}),
        population=PopulationReport.of(None, [ChannelPopulation(t, 4, 2, 1, 1, 1) for t in _TASKS]),
        selectivity=SelectivityCounts.from_cells(selectivity),
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
    """A bar chart's bars as label -> fill; the label beside a bar, drawn last, is its legend."""
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
    drawn = _charts(tmp_path)
    lights = report._LIGHT_COLOURS
    assert not set(report._COLOURS) & set(lights.values()), "only a light is drawn in a light's colour"
    checked = set()

    def chart(caption: str) -> ET.Element:
        checked.add(caption)
        return drawn[caption]

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
    assert len(points) == len(_CATEGORIES) - 1 and len(set(points)) == 1  # the undefined lift is labelled

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

    assert checked == set(drawn)


# ------------------------------------------------------------ the geometry of every chart of report.html

_TOP = "severity of the top 5 blocklist signatures (severity x count at the end)"
_OVER_TIME = ("blocklist signatures held over event time", "whitelist signatures held over event time", _TOP)
_COUNTS = (
    "blocklist signatures held over event time",
    "whitelist signatures held over event time",
    "traffic-light distribution (final)",
    "traffic lights at the end of each simulated week",
)
_LIFT = "lift with 95% CI (dashed: 1, no selectivity)"
_EM = 0.6
"""A character's width in em for a text's box: a sans-serif font's digits and lower case are narrower."""
_NUMBER = re.compile(r"\d{1,3}(,\d{3})*(\.\d+)?")


def _lines(svg: ET.Element) -> list[list[tuple[float, float]]]:
    """Each polyline of a chart as its points, in the order it joins them."""
    return [
        [(float(x), float(y)) for x, y in (p.split(",") for p in e.attrib["points"].split())]
        for e in svg
        if _tag(e) == "polyline"
    ]


def _axis(svg: ET.Element, which: str) -> tuple[list[tuple[float, str]], str]:
    """A chart's ``x`` or ``y`` axis: its tick labels as ``(position along the axis, label)``, and its
    title (the last text of the axis's group)."""
    group = next((e for e in svg if _tag(e) == "g" and e.get("class") == f"axis {which}"), None)
    assert group is not None, f"no {which} axis"
    texts = [e for e in group if _tag(e) == "text"]
    return [(float(t.attrib[which]), t.text or "") for t in texts[:-1]], texts[-1].text or ""


def _value_axis(svg: ET.Element) -> list[tuple[float, str]]:
    """The ticks of the axis a chart reads its values off: a line chart's y axis, a bar chart's x axis."""
    return _axis(svg, "y" if _lines(svg) else "x")[0]


def _is_round(step: float) -> bool:
    """``step`` is 1, 2 or 5 x 10^k."""
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 5))


def _ticks_are_round(labels: list[str], whole: bool) -> None:
    """Plain numbers (thousands separators, no exponent), a round step apart; whole numbers if ``whole``."""
    assert len(labels) >= 2, labels
    assert all(_NUMBER.fullmatch(label) for label in labels), labels
    assert not whole or all("." not in label for label in labels), labels
    values = [float(label.replace(",", "")) for label in labels]
    steps = [b - a for a, b in pairwise(values)]
    assert all(math.isclose(s, steps[0], rel_tol=1e-6) for s in steps), labels
    assert _is_round(steps[0]), labels


def _boxes(svg: ET.Element) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Each text of a chart that is not turned, with its box ``(left, top, right, bottom)`` estimated
    from its length and font size (the font's ascent above the baseline, its descent below)."""
    boxes = []
    for text in svg.iter():
        if _tag(text) != "text" or "transform" in text.attrib:
            continue
        size = float(text.get("font-size") or svg.get("font-size") or 16)  # a browser's default: 16 px
        width = len(text.text or "") * size * _EM
        x, y = float(text.attrib["x"]), float(text.attrib["y"])
        left = {"start": x, "middle": x - width / 2, "end": x - width}[text.get("text-anchor", "start")]
        boxes.append((text.text or "", (left, y - 0.8 * size, left + width, y + 0.2 * size)))
    return boxes


def test_each_series_is_one_line_through_its_points_in_event_time_order(tmp_path):
    """One polyline per legend entry, its x never going back. On the event-time charts each snapshot
    stands at its own time: the third where the axis labels 02:00."""
    drawn = _charts(tmp_path)
    for caption, svg in drawn.items():
        lines = _lines(svg)
        assert len(lines) == len(_legend(svg)), caption
        for line in lines:
            xs = [x for x, _ in line]
            assert xs == sorted(xs), f"{caption}: x goes back: {xs}"
    for caption in _OVER_TIME[:2]:
        ticks = {label: x for x, label in _axis(drawn[caption], "x")[0]}
        for line in _lines(drawn[caption]):
            xs = [x for x, _ in line]
            assert len(xs) == len(_SNAPSHOT_HOURS) and xs[0] < xs[1] < xs[2] < xs[3], (caption, xs)
            assert math.isclose(xs[2], ticks["02:00"], abs_tol=0.2), (caption, xs, ticks)


def test_value_ticks_are_round_steps_in_plain_notation(tmp_path):
    """Every axis a chart reads values off has ticks a round step apart (1, 2 or 5 x 10^k) labelled in
    plain numbers with thousands separators, whole numbers on the charts of counts; the lift's log axis
    ticks are round values themselves, 1 among them."""
    drawn = _charts(tmp_path)
    for caption, svg in drawn.items():
        ticks = _value_axis(svg)
        labels = [label for _, label in ticks]
        positions = [p for p, _ in ticks]
        assert positions == sorted(positions) or positions == sorted(positions, reverse=True), caption
        if caption == _LIFT:
            values = [float(label) for label in labels]
            assert all(_NUMBER.fullmatch(label) for label in labels), labels
            assert all(_is_round(v) for v in values), labels
            assert 1.0 in values and values == sorted(values)
        else:
            _ticks_are_round(labels, whole=caption in _COUNTS)
    whitelist = [label for _, label in _value_axis(drawn[_OVER_TIME[1]])]
    assert "1,000" in whitelist, whitelist  # up to 1,502 signatures


def test_event_time_axes_are_labelled_with_utc_times_of_day(tmp_path):
    """The charts over event time label their x axis with UTC times of day, left to right, within the
    axis; its title names the date."""
    drawn = _charts(tmp_path)
    for caption in _OVER_TIME:
        ticks, title = _axis(drawn[caption], "x")
        assert len(ticks) >= 2, caption
        assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", label) for _, label in ticks), ticks
        positions = [x for x, _ in ticks]
        assert positions == sorted(positions) and len(set(positions)) == len(positions), caption
        xs = [x for line in _lines(drawn[caption]) for x, _ in line]
        assert positions[0] <= min(xs) and max(xs) <= positions[-1], caption
        assert title == "event time (UTC, 1970-01-01)", title


def test_no_text_of_a_chart_overlaps_another_or_leaves_the_chart(tmp_path):
    """Tick labels, category names (eleven QA categories, some long), values and legend entries: the
    boxes of a chart's texts, estimated from length x font size, are disjoint and inside the chart."""
    for caption, svg in _charts(tmp_path).items():
        width, height = float(svg.attrib["width"]), float(svg.attrib["height"])
        boxes = _boxes(svg)
        for text, (left, top, right, bottom) in boxes:
            assert left >= 0 and top >= 0 and right <= width and bottom <= height, (caption, text)
        for (a, (l1, t1, r1, b1)), (b, (l2, t2, r2, b2)) in combinations(boxes, 2):
            assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, f"{caption}: {a!r} overlaps {b!r}"


def test_severity_trajectories_rise_over_event_time_on_a_severity_axis(tmp_path):
    """Each top signature's line spans more than one event time and rises as its severity does; the
    axis holds every severity, in tenths; the page lists each one's severity and count at the end."""
    path = tmp_path / "report.html"
    report.write_report(path, _small_run())
    svg = _charts(tmp_path)[_TOP]
    ticks = [float(label) for _, label in _axis(svg, "y")[0]]
    assert ticks[0] == 0.0 and ticks[-1] >= 0.26 and ticks[1] == 0.1, ticks  # (0.2 + 0.06) at the end
    for line in _lines(svg):
        assert len({x for x, _ in line}) > 1, line
        heights = [y for _, y in line]
        assert heights == sorted(heights, reverse=True), line  # pixels grow downwards
    assert "<td>qa q2</td><td>0.260</td><td>5</td>" in path.read_text()


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1e7)), min_size=1, max_size=12),
    whole=st.booleans(),
    horizontal=st.booleans(),
)
def test_a_value_axis_spans_its_values_with_round_ticks_whose_labels_stay_apart(values, whole, horizontal):
    """From 0 to a tick at or above the largest value, a round step apart, whole numbers for whole
    values, at most eight ticks and the labels of neighbours apart (their widths side by side, their
    height one above the other)."""
    values = [float(round(v)) for v in values] if whole else values
    axis = charts.value_axis(values, 60.0, 860.0, horizontal=horizontal)
    labels = [label for _, label in axis.ticks]
    assert axis.lo == 0.0 and axis.ticks[0][0] == 0.0 and axis.ticks[-1][0] >= max(values)
    assert len(labels) <= 8
    _ticks_are_round(labels, whole)
    for (a, label_a), (b, label_b) in pairwise(axis.ticks):
        extent = (len(label_a) + len(label_b)) / 2 * charts.FONT * _EM if horizontal else charts.FONT
        assert abs(axis(b) - axis(a)) >= extent, labels


@settings(max_examples=80, deadline=None)
@given(start=st.floats(1.6e9, 1.9e9), span=st.floats(0.0, 1e8))
@example(start=1.7e9, span=150.0).via("a demo run")
@example(start=1.7e9 + 3600, span=23 * 3600.0).via("ticks from one midnight to the next")
@example(start=1.7e9, span=3 * 86400.0).via("a time of day repeats")
def test_a_time_axis_labels_whole_utc_seconds_minutes_or_days_apart(start, span):
    """Ticks a whole number of seconds, minutes, hours or days apart enclose the times, labelled with
    the UTC time of day (with the date where the ticks span a day or more) or the date; no label
    repeats, and neighbours' labels are apart."""
    axis = charts.time_axis([start, start + span], 60.0, 860.0)
    times = [t for t, _ in axis.ticks]
    labels = [label for _, label in axis.ticks]
    assert 2 <= len(times) <= 8 and times[0] <= start and times[-1] >= start + span
    assert len(set(labels)) == len(labels), labels
    step = times[1] - times[0]
    assert all(math.isclose(b - a, step) for a, b in pairwise(times)) and all(t % step == 0 for t in times)
    day = r"\d\d-\d\d " if times[-1] - times[0] >= 86400 else ""
    form = (
        rf"{day}\d\d:\d\d:\d\d" if step < 60 else rf"{day}\d\d:\d\d" if step < 86400 else r"\d{4}-\d\d-\d\d"
    )
    assert all(re.fullmatch(form, label) for label in labels), labels
    assert charts.dates(axis).startswith(datetime.fromtimestamp(times[0], UTC).date().isoformat())
    for (a, label_a), (b, label_b) in pairwise(axis.ticks):
        assert axis(b) - axis(a) >= (len(label_a) + len(label_b)) / 2 * charts.FONT * _EM, labels
