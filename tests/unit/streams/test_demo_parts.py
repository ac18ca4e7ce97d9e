"""The broker-free parts of ``clingate demo``: its stage-batched stream and its report page."""

from __future__ import annotations

import html
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from itertools import combinations, groupby, pairwise
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology, parse_event
from streams import charts
from streams.demo import report
from streams.demo.plan import SNAPSHOTS, demo_stream, memory_over_time
from streams.demo.results import MemoryPoint
from streams.demo.streams import FLOWS
from tests.report_run import CATEGORIES, SNAPSHOT_HOURS, TASKS, small_run


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
    assert (
        "<script" not in html and "<link" not in html and "@import" not in html and 'href="http' not in html
    )
    assert "&lt;b&gt;" in html


# ------------------------------------------------------------------------- what every chart of report.html is

_SVG = "{http://www.w3.org/2000/svg}"
_TOP = "severity of the top 5 blocklist signatures (severity x count at the end)"
_OVER_TIME = ("blocklist signatures held over event time", "whitelist signatures held over event time", _TOP)
_COUNTS = (
    "blocklist signatures held over event time",
    "whitelist signatures held over event time",
    "traffic-light distribution (final)",
    "traffic lights at the end of each simulated week",
)
_LIFT = "lift with 95% CI (dashed: 1, no selectivity)"
_NUMBER = re.compile(r"-?\d{1,3}(,\d{3})*(\.\d+)?")


def _report(tmp_path: Path) -> str:
    path = tmp_path / "report.html"
    report.write_report(path, small_run())
    return path.read_text()


def _charts(tmp_path: Path) -> dict[str, ET.Element]:
    """Every chart of the small run's report.html, by its caption."""
    figures = re.findall(
        r"<figure><figcaption>(.*?)</figcaption>(<svg .*?</svg>)</figure>", _report(tmp_path), flags=re.S
    )
    return {html.unescape(caption): ET.fromstring(svg) for caption, svg in figures}


def _of(svg: ET.Element, kind: str) -> list[ET.Element]:
    """The elements of a chart of class ``kind``: matplotlib's artists of that kind (``line2d``,
    ``xtick``, ``legend``, ...) or the chart's own marks (``series``, ``bar``, ``estimate``, ...)."""
    return [e for e in svg.iter() if kind in (e.get("class") or "").split()]


def _points(path: ET.Element) -> list[tuple[float, float]]:
    """The points of a line's path, in the order it joins them."""
    numbers = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path.attrib["d"])]
    return list(zip(numbers[::2], numbers[1::2], strict=True))


def _lines(svg: ET.Element) -> list[tuple[str, list[tuple[float, float]]]]:
    """Each series' line as its colour and its points, in the order drawn."""
    paths = [group.find(f"{_SVG}path") for group in _of(svg, "series")]
    return [(path.attrib["stroke"], _points(path)) for path in paths if path is not None]


def _legend(svg: ET.Element) -> list[tuple[str, str]]:
    """The legend's entries as ``(label, colour of its line)``, in order: each entry's line is drawn
    just before its label."""
    entries, colour = [], ""
    for legend in _of(svg, "legend"):
        for element in legend.iter():
            if element.tag == f"{_SVG}path" and "stroke" in element.attrib:
                colour = element.attrib["stroke"]
            elif element.tag == f"{_SVG}text":
                entries.append((element.text or "", colour))
    return entries


def _ticks(svg: ET.Element, which: str) -> list[tuple[float, str]]:
    """A chart's labelled ``x`` or ``y`` ticks as ``(position, label)``: the position of the tick's mark,
    or of its label where it has none (the rows of a bar chart)."""
    ticks = []
    for tick in _of(svg, f"{which}tick"):
        mark, text = tick.find(f".//{_SVG}use"), tick.find(f".//{_SVG}text")
        if text is not None:
            ticks.append((float((text if mark is None else mark).attrib[which]), text.text or ""))
    return ticks


def _bars(svg: ET.Element) -> dict[str, str]:
    """A bar chart's bars as label -> fill: row by row, the name on the y axis at the height of its bar."""
    fills = [group.find(f"{_SVG}path") for group in _of(svg, "bar")]
    names = _ticks(svg, "y")
    assert len(fills) == len(names)
    drawn = {}
    for path, (height, name) in zip(fills, names, strict=True):
        assert path is not None
        ys = [y for _, y in _points(path)]
        assert min(ys) <= height <= max(ys), f"{name} is not beside its bar"
        drawn[name] = path.attrib["fill"]
    return drawn


def _one_colour_per_series(svg: ET.Element) -> dict[str, str]:
    """Label -> colour of a line chart, after checking that the legend names each line in the line's
    colour, in the order drawn, and that no two lines share a colour."""
    lines, legend = _lines(svg), _legend(svg)
    assert [colour for colour, _ in lines] == [colour for _, colour in legend], legend
    colours = dict(legend)
    assert len(set(colours.values())) == len(colours) == len(lines), legend
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

    weekly = _one_colour_per_series(chart("traffic lights at the end of each simulated week"))
    assert list(weekly.items()) == list(lights.items())
    final = _bars(chart("traffic-light distribution (final)"))
    assert list(final.items()) == list(lights.items())

    blocklist = _one_colour_per_series(chart("blocklist signatures held over event time"))
    whitelist = _one_colour_per_series(chart("whitelist signatures held over event time"))
    assert list(blocklist) == list(TASKS) and whitelist == blocklist

    trajectories = _one_colour_per_series(chart(_TOP))
    longest = ["qa qa::outcome_clinicalstatus|unsupported", "re TESTS|ASSOCIATED_WITH|DIAGNOSIS"]
    assert list(trajectories) == [*longest, "ner n2", "qa q1", "re r1"]

    lift = chart(_LIFT)
    assert not _legend(lift)  # one kind of mark in one colour: nothing for a legend to tell apart
    estimates = [use.attrib["fill"] for group in _of(lift, "estimate") for use in group.iter(f"{_SVG}use")]
    assert len(estimates) == len(CATEGORIES) - 1 and len(set(estimates)) == 1  # the undefined one is text
    rows = [cell.category for cell in small_run().loop_results.selectivity.cells if cell.task == "qa"]
    assert [name for _, name in _ticks(lift, "y")] == rows and set(rows) == set(CATEGORIES)
    assert "undefined (no PASS pairs)" in [t.text for t in lift.iter(f"{_SVG}text")]

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


def test_each_series_is_one_line_through_its_points_in_event_time_order(tmp_path):
    """One line per legend entry, its x never going back. On the event-time charts each snapshot
    stands at its own time: the third where the axis labels 02:00."""
    drawn = _charts(tmp_path)
    for caption, svg in drawn.items():
        for _, line in _lines(svg):
            xs = [x for x, _ in line]
            assert xs == sorted(xs), f"{caption}: x goes back: {xs}"
    for caption in _OVER_TIME[:2]:
        ticks = {label: x for x, label in _ticks(drawn[caption], "x")}
        for _, line in _lines(drawn[caption]):
            xs = [x for x, _ in line]
            assert len(xs) == len(SNAPSHOT_HOURS) and xs[0] < xs[1] < xs[2] < xs[3], (caption, xs)
            assert math.isclose(xs[2], ticks["02:00"], abs_tol=0.01), (caption, xs, ticks)


def test_value_ticks_are_round_steps_in_plain_notation(tmp_path):
    """Every axis a chart reads values off has ticks a round step apart (1, 2 or 5 x 10^k) labelled in
    plain numbers with thousands separators, whole numbers on the charts of counts; the lift's log axis
    ticks are round values themselves, 1 among them."""
    drawn = _charts(tmp_path)
    for caption, svg in drawn.items():
        ticks = _ticks(svg, "y" if _lines(svg) else "x")
        labels = [label for _, label in ticks]
        if caption == _LIFT:
            values = [float(label) for label in labels]
            assert all(_NUMBER.fullmatch(label) for label in labels), labels
            assert all(_is_round(v) for v in values), labels
            assert 1.0 in values and values == sorted(values)
        else:
            _ticks_are_round(labels, whole=caption in _COUNTS)
    whitelist = [label for _, label in _ticks(drawn[_OVER_TIME[1]], "y")]
    assert "1,000" in whitelist, whitelist  # up to 1,502 signatures


def test_event_time_axes_are_labelled_with_utc_times_of_day(tmp_path):
    """The charts over event time label their x axis with UTC times of day, left to right, around the
    points; the axis names UTC and its date is written once, beside it."""
    drawn = _charts(tmp_path)
    for caption in _OVER_TIME:
        svg = drawn[caption]
        ticks = _ticks(svg, "x")
        assert len(ticks) >= 2, caption
        assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", label) for _, label in ticks), ticks
        positions = [x for x, _ in ticks]
        assert positions == sorted(positions) and len(set(positions)) == len(positions), caption
        xs = [x for _, line in _lines(svg) for x, _ in line]
        assert positions[0] - 0.01 <= min(xs) and max(xs) <= positions[-1] + 0.01, caption
        texts = [t.text for t in svg.iter(f"{_SVG}text")]
        assert "event time (UTC)" in texts and "1970-Jan-01" in texts, texts


def _boxes(svg: ET.Element) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Each text of a chart that is not turned, with its box ``(left, top, right, bottom)`` as DejaVu
    Sans, the font the chart names first, sets it (measured by matplotlib, which ships that font)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    measure, boxes = TextToPath(), []
    for text in svg.iter(f"{_SVG}text"):
        if not re.fullmatch(r"rotate\(-?0 .*\)", text.get("transform", "rotate(0 0 0)")):
            continue
        assert text.attrib["font-family"].startswith("'DejaVu Sans'"), text.attrib
        font = FontProperties(family="DejaVu Sans", size=float(text.attrib["font-size"].removesuffix("px")))
        width, height, descent = measure.get_text_width_height_descent(text.text or "", font, ismath=False)
        x, y = float(text.attrib["x"]), float(text.attrib["y"])
        left = {"start": x, "middle": x - width / 2, "end": x - width}[text.get("text-anchor", "start")]
        boxes.append((text.text or "", (left, y - height + descent, left + width, y + descent)))
    return boxes


def test_no_text_of_a_chart_overlaps_another_or_leaves_the_chart(tmp_path):
    """Tick labels, category names (eleven QA categories, some long), values and legend entries: the
    boxes of a chart's texts are disjoint and inside the chart."""
    for caption, svg in _charts(tmp_path).items():
        _, _, width, height = map(float, svg.attrib["viewBox"].split())
        boxes = _boxes(svg)
        assert boxes, caption
        for text, (left, top, right, bottom) in boxes:
            assert left >= 0 and top >= 0 and right <= width and bottom <= height, (caption, text)
        for (a, (l1, t1, r1, b1)), (b, (l2, t2, r2, b2)) in combinations(boxes, 2):
            assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1, f"{caption}: {a!r} overlaps {b!r}"


def test_severity_trajectories_rise_over_event_time_on_a_severity_axis(tmp_path):
    """Each top signature's line spans more than one event time and rises as its severity does, on an
    axis from 0 in hundredths; the page lists each one's severity and count at the end."""
    page = _report(tmp_path)
    svg = _charts(tmp_path)[_TOP]
    ticks = [float(label) for _, label in _ticks(svg, "y")]
    assert ticks[0] == 0.0 and ticks[-1] >= 0.25, ticks  # 0.26 at the end
    for _, line in _lines(svg):
        assert len({x for x, _ in line}) > 1, line
        heights = [y for _, y in line]
        assert heights == sorted(heights, reverse=True), line  # pixels grow downwards
    assert "<td>qa qa::outcome_clinicalstatus|unsupported</td><td>0.260</td><td>5</td>" in page


def test_the_memory_charts_take_the_last_snapshot_of_each_event_time():
    """Snapshots taken every so many events share a time where a run stamped many events with one: each
    line has one point per event time, the memory after all of its events."""
    run = small_run()
    first, *rest = run.loop_results.snapshots
    again = MemoryPoint(first.time, first.blocklist, {task: n + 7 for task, n in first.whitelist.items()})
    svg = ET.fromstring(
        re.findall(r"<svg .*?</svg>", report._population(report._at_each_time([first, again, *rest])), re.S)[
            1
        ]
    )
    lines = _lines(svg)
    assert [len(line) for _, line in lines] == [len(SNAPSHOT_HOURS)] * len(TASKS)
    plain = ET.fromstring(re.findall(r"<svg .*?</svg>", report._population([first, *rest]), re.S)[1])
    assert all(a[1][0][1] < b[1][0][1] for a, b in zip(lines, _lines(plain), strict=True)), "drawn higher"


def test_a_chart_is_the_same_bytes_for_the_same_input_and_needs_no_style(tmp_path):
    """Two renderings of a report are equal; a chart has no style sheet and no style attribute (the
    console's Content-Security-Policy refuses both), each text its font and size as attributes, and
    no id of one chart is an id of another on the page."""
    page = _report(tmp_path)
    assert page == _report(tmp_path)
    assert "<style" not in page.split("</head>", 1)[1] and " style=" not in page.split("</head>", 1)[1]
    charts_ = _charts(tmp_path)
    ids = [e.attrib["id"] for svg in charts_.values() for e in svg.iter() if "id" in e.attrib]
    assert ids and len(ids) == len(set(ids)), Counter(ids).most_common(3)
    for svg in charts_.values():
        assert svg.attrib["stroke-linejoin"] == "round"  # the one rule of matplotlib's style sheet
        for text in svg.iter(f"{_SVG}text"):
            assert text.attrib["font-size"].endswith("px") and "sans-serif" in text.attrib["font-family"]


def test_css_declarations_become_presentation_attributes():
    """What matplotlib writes in a ``style`` attribute, as attributes of the same names; the ``font``
    shorthand (written by matplotlib before 3.10) as its parts."""
    assert charts._attributes("fill: #ffffff; stroke-width: 0.8") == ' fill="#ffffff" stroke-width="0.8"'
    font = charts._attributes("font: italic 700 9px 'DejaVu Sans', sans-serif; text-anchor: end")
    assert font == (
        ' font-style="italic" font-weight="700" font-size="9px"'
        ' font-family="\'DejaVu Sans\', sans-serif" text-anchor="end"'
    )


def test_a_chart_of_one_event_time_or_none_says_so():
    """Points all at one event time stand on an axis around it, with a note that says so; no point, bar
    or interval at all, a chart that says "no data"."""
    one = charts.line_chart("c", [charts.Series("s", [(7200.0, 0.5), (7200.0, 0.7)], "#000")], "y",
                            "event time", time=True)  # fmt: skip
    assert "every point at one event time: 1970-01-01 02:00:00 UTC" in one
    assert ">no data</text>" in charts.line_chart("c", [charts.Series("s", [], "#000")], "y", "x")
    assert ">no data</text>" in charts.bar_chart("c", [], "n")
    assert ">no data</text>" in charts.interval_chart("c", [], "lift", "#000")


def test_a_long_category_name_is_cut_short_with_an_ellipsis():
    svg = charts.bar_chart("c", [charts.Bar("x" * 60, 1, "#000")], "n")
    assert f">{'x' * 47}…</text>" in svg and "x" * 48 not in svg
