"""``report.html`` of ``clingate demo``: one page, charts drawn as inline SVG; the console's screenshots
are the only other files it shows, written next to it.

Inline SVG rather than a plotting library: the page must open offline (no network fonts or scripts),
and the installed environment has no plotting library among the runtime dependencies (matplotlib
arrives only with a test extra). The charts: the memory population over event time, the severity
trajectories of the top signatures, the lift per QA category with its 95% CI, the traffic lights
(final and per simulated week), and throughput and latency per stream. Every chart also lists its
numbers in a table, so nothing depends on reading a plot.

Each series or bar carries its colour, chosen once where the page builds it, and a chart draws the
mark and the legend entry of a series in that one colour: a traffic light is always in its own colour
(:data:`_LIGHT_COLOURS`), and a task or a stream keeps its colour across the charts that show it
(:func:`_palette`). A chart never picks a colour by position, which would tie a light's colour to the
order its series happen to come in.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import astuple, dataclass
from itertools import cycle
from pathlib import Path

from processors.dbpm.measurement import PopulationReport, SelectivityCounts
from streams.demo.gate_runs import OUTCOMES, table4
from streams.demo.results import MemoryPoint, Results
from streams.demo.summary import stream_rows, summary_rows

_W, _H, _PAD = 640, 260, 48
_COLOURS = ("#1f77b4", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f", "#e377c2")
"""Colours of series without one of their own: no red, yellow or green, which mean a traffic light."""
_LIGHT_COLOURS = {"RED": "#d62728", "YELLOW": "#e6b800", "GREEN": "#2ca02c"}
"""Each traffic light's own colour, in the order the page lists the lights."""


@dataclass(frozen=True)
class Series:
    """One line of a line chart: ``points`` are ``(x, y)``; its line and legend swatch are in ``colour``."""

    name: str
    points: Sequence[tuple[float, float]]
    colour: str


@dataclass(frozen=True)
class Bar:
    """One bar of a bar chart: ``value`` high, labelled ``label`` below it, filled with ``colour``."""

    label: str
    value: int
    colour: str


@dataclass(frozen=True)
class Interval:
    """One bar of an interval chart: a point estimate with its confidence interval (None: undefined)."""

    label: str
    value: float | None
    low: float | None
    high: float | None
    text: str


def _palette(names: Iterable[str]) -> dict[str, str]:
    """A colour per name, in order (repeating after seven): the one place series without a colour of
    their own get one, so charts that show the same names show them in the same colours."""
    return dict(zip(names, cycle(_COLOURS)))


def _scale(lo: float, hi: float, a: float, b: float) -> Callable[[float], float]:
    span = (hi - lo) or 1.0
    return lambda v: a + (v - lo) / span * (b - a)


def _frame(title: str, body: str, y_max: float, y_label: str, x_label: str) -> str:
    ticks = "".join(
        f'<text x="{_PAD - 6}" y="{_H - _PAD - k / 4 * (_H - 2 * _PAD) + 4:.1f}" text-anchor="end" '
        f'font-size="10">{y_max * k / 4:.3g}</text>'
        for k in range(5)
    )
    return (
        f"<figure><figcaption>{html.escape(title)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
        f'font-family="sans-serif">'
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#333"/>'
        f'<line x1="{_PAD}" y1="{_PAD / 2}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#333"/>{ticks}'
        f'<text x="{_W / 2}" y="{_H - 8}" text-anchor="middle" font-size="11">{html.escape(x_label)}</text>'
        f'<text x="12" y="{_H / 2}" transform="rotate(-90 12 {_H / 2})" text-anchor="middle" '
        f'font-size="11">{html.escape(y_label)}</text>{body}</svg></figure>'
    )


def line_chart(
    title: str, series: Sequence[Series], y_label: str, x_label: str = "event time (hours)"
) -> str:
    """An SVG line chart with a legend; an empty ``series`` gives a chart that says so."""
    xs = [x for s in series for x, _ in s.points] or [0.0, 1.0]
    ys = [y for s in series for _, y in s.points] or [1.0]
    y_max = max(max(ys), 1e-9) * 1.05
    sx = _scale(min(xs), max(xs), _PAD, _W - _PAD - 120)
    sy = _scale(0.0, y_max, _H - _PAD, _PAD / 2)
    parts = []
    for i, s in enumerate(series):
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s.points)
        parts.append(f'<polyline fill="none" stroke="{s.colour}" stroke-width="1.8" points="{path}"/>')
        parts.append(
            f'<rect x="{_W - _PAD - 110}" y="{_PAD / 2 + 14 * i}" width="10" height="10" fill="{s.colour}"/>'
            f'<text x="{_W - _PAD - 96}" y="{_PAD / 2 + 14 * i + 9}" font-size="10">'
            f"{html.escape(s.name[:22])}</text>"
        )
    if not series:
        parts.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no data</text>')
    return _frame(title, "".join(parts), y_max, y_label, x_label)


def interval_chart(title: str, bars: Sequence[Interval], y_label: str) -> str:
    """Point estimates with CI whiskers; a dashed line at 1 (no selectivity); undefined ones are labelled."""
    finite = [b.high for b in bars if b.high is not None and math.isfinite(b.high)]
    y_max = max([*finite, 2.0]) * 1.1
    sy = _scale(0.0, y_max, _H - _PAD, _PAD / 2)
    step = (_W - 2 * _PAD) / max(len(bars), 1)
    parts = [
        f'<line x1="{_PAD}" x2="{_W - _PAD}" y1="{sy(1.0):.1f}" y2="{sy(1.0):.1f}" stroke="#999" '
        'stroke-dasharray="4 3"/>'
    ]
    for i, b in enumerate(bars):
        cx = _PAD + step * (i + 0.5)
        parts.append(
            f'<text x="{cx:.1f}" y="{_H - _PAD + 14}" text-anchor="middle" font-size="10">'
            f"{html.escape(b.label[:14])}</text>"
        )
        if b.value is None or b.low is None or b.high is None:
            parts.append(
                f'<text x="{cx:.1f}" y="{sy(0.5):.1f}" text-anchor="middle" font-size="9">'
                f"{html.escape(b.text[:18])}</text>"
            )
            continue
        parts.append(
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{sy(b.low):.1f}" y2="{sy(b.high):.1f}" stroke="#333"/>'
            f'<circle cx="{cx:.1f}" cy="{sy(b.value):.1f}" r="4" fill="{_COLOURS[0]}"/>'
        )
    return _frame(title, "".join(parts), y_max, y_label, "category")


def bar_chart(title: str, bars: Sequence[Bar], y_label: str) -> str:
    """Vertical bars with their values above them and their labels below (the labels are the legend)."""
    y_max = max([*(b.value for b in bars), 1]) * 1.1
    sy = _scale(0.0, y_max, _H - _PAD, _PAD / 2)
    step = (_W - 2 * _PAD) / max(len(bars), 1)
    parts = []
    for i, b in enumerate(bars):
        x = _PAD + step * i + step * 0.2
        parts.append(
            f'<rect x="{x:.1f}" y="{sy(b.value):.1f}" width="{step * 0.6:.1f}" '
            f'height="{_H - _PAD - sy(b.value):.1f}" fill="{b.colour}"/>'
            f'<text x="{x + step * 0.3:.1f}" y="{sy(b.value) - 4:.1f}" text-anchor="middle" font-size="11">'
            f"{b.value}</text>"
            f'<text x="{x + step * 0.3:.1f}" y="{_H - _PAD + 14}" text-anchor="middle" font-size="11">'
            f"{html.escape(b.label)}</text>"
        )
    return _frame(title, "".join(parts), y_max, y_label, "")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An HTML table of the given cells (escaped)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page(title: str, sections: Sequence[tuple[str, str]]) -> str:
    """The whole document: ``sections`` are ``(heading, HTML body)``; no external resource."""
    style = (
        "body{font-family:sans-serif;max-width:980px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;"
        "font-size:13px;text-align:left}figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:4px}"
    )
    body = "".join(f"<h2>{html.escape(h)}</h2>{content}" for h, content in sections)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )


# ------------------------------------------------------------------------------------ the demo's page


def write_report(path: Path, results: Results) -> None:
    """Write the report.html of the run (it links the console's screenshots next to it)."""
    dbpm = results.loop_results
    sections = [
        ("Summary", table(["measure", "value"], summary_rows(results))),
        ("DBPM memory population", _population(dbpm.snapshots)),
        ("Severity trajectories", _trajectories(dbpm.snapshots)),
        ("QA lift per category", _lifts(dbpm.selectivity)),
        ("Channel population", _channels(dbpm.population)),
        ("Traffic lights", _traffic_lights(results)),
        ("Output gates: the golden runs", _gate_runs(results)),
        (
            "The clinician's agent",
            table(
                ["question", "path", "calls / budget", "tools", "answer", "proposals (light)"],
                [
                    (
                        r.question,
                        r.path,
                        f"{r.llm_calls} / {r.budget}",
                        "; ".join(r.tools),
                        r.answer,
                        "; ".join(f"{p} ({light})" for p, light in zip(r.proposals, r.lights, strict=False)),
                    )
                    for r in results.agent
                ],
            ),
        ),
        (
            "Arbiter dispositions",
            table(
                ["case", "documents", "decision", "rule", "issues"],
                [astuple(d) for d in results.dispositions],
            ),
        ),
        ("The console", _console(results)),
        ("Throughput and latency per stream", _stream_charts(results)),
        ("Dead letters", table(["topic", "records added"], sorted(results.dead_letters.added.items()))),
        (
            "Schemas",
            table(["schema", "topic", "bytes", "round trip OK"], [astuple(r) for r in results.round_trips]),
        ),
    ]
    path.write_text(page("clingate demo report", sections), encoding="utf-8")


def _console(results: Results) -> str:
    """Each console page the demo's browser opened, with its screenshot (a file next to the report)."""
    if not results.console_pages:
        return "<p>No screenshot was taken (Chromium or Playwright is not installed here).</p>"
    figures = "".join(
        f"<figure><figcaption>{html.escape(p.name)}: {html.escape(p.path)} ({p.status})</figcaption>"
        f'<a href="{html.escape(p.screenshot)}"><img src="{html.escape(p.screenshot)}" '
        f'alt="{html.escape(p.name)}" style="max-width:100%;border:1px solid #ccc"></a></figure>'
        for p in results.console_pages
    )
    return f"<p>Each page as the demo's browser saw it, signed in as the page's role.</p>{figures}"


def _hours(snapshots: Sequence[MemoryPoint]) -> list[float]:
    start = snapshots[0].time if snapshots else 0.0
    return [(s.time - start) / 3600 for s in snapshots]


def _population(snapshots: Sequence[MemoryPoint]) -> str:
    hours = _hours(snapshots)
    colours = _palette(("ner", "re", "qa"))
    blocklist = [
        Series(
            task,
            [(h, len(s.blocklist.get(task, {}))) for h, s in zip(hours, snapshots, strict=True)],
            colour,
        )
        for task, colour in colours.items()
    ]
    whitelist = [
        Series(task, [(h, s.whitelist.get(task, 0)) for h, s in zip(hours, snapshots, strict=True)], colour)
        for task, colour in colours.items()
    ]
    return line_chart("blocklist signatures held over event time", blocklist, "patterns") + line_chart(
        "whitelist signatures held over event time", whitelist, "signatures"
    )


def _trajectories(snapshots: Sequence[MemoryPoint]) -> str:
    """The severity of the five blocklist signatures with the largest severity x count at the end."""
    hours = _hours(snapshots)
    final = snapshots[-1].blocklist if snapshots else {}
    ranked = sorted(
        (
            (severity * count, task, sig)
            for task, ps in final.items()
            for sig, (severity, count) in ps.items()
        ),
        reverse=True,
    )
    top = {f"{task} {signature}": (task, signature) for _, task, signature in ranked[:5]}
    trajectories = []
    for name, colour in _palette(top).items():
        task, signature = top[name]
        points = []
        for h, s in zip(hours, snapshots, strict=True):
            found = s.blocklist.get(task, {}).get(signature)
            if found is not None:
                points.append((h, found[0]))
        trajectories.append(Series(name, points, colour))
    return line_chart(
        "severity of the top 5 blocklist signatures (severity x count at the end)", trajectories, "severity"
    )


def _lifts(selectivity: SelectivityCounts) -> str:
    bars = []
    for cell in selectivity.cells:
        if cell.task == "qa":
            lift = cell.counts.lift()
            bars.append(Interval(cell.category, lift.value, lift.ci_low, lift.ci_high, str(lift)))
    return interval_chart("lift with 95% CI (dashed: 1, no selectivity)", bars, "lift") + table(
        ["category", "lift [95% CI]"], [(b.label, b.text) for b in bars]
    )


def _channels(population: PopulationReport) -> str:
    headers = ["task", "fail events", "patterns", "BLOCK-clearing", "DOWNGRADE band", "whitelist", "status"]
    rows = [
        (c.task, c.fail_events, c.patterns, c.block_eligible, c.downgrade_band, c.whitelist, c.status.value)
        for c in population.channels
    ]
    return table(headers, rows)


def _traffic_lights(results: Results) -> str:
    lights = [Bar(light, results.lights[light], colour) for light, colour in _LIGHT_COLOURS.items()]
    weeks = [
        Series(light, [(float(w.week), float(w.lights[light])) for w in results.lights_by_week], colour)
        for light, colour in _LIGHT_COLOURS.items()
    ]
    patients = [
        (p.patient, p.age, p.severity, ", ".join(p.drugs), p.light, p.shadow, "; ".join(p.sources))
        for p in [*results.golden, *results.red_patients]
    ]
    return (
        bar_chart("traffic-light distribution (final)", lights, "patients")
        + line_chart("traffic lights at the end of each simulated week", weeks, "patients", "simulated week")
        + table(["patient", "age", "NTI", "drugs", "light", "shadow", "red sources"], patients)
    )


def _gate_runs(results: Results) -> str:
    rows = [
        (row.case if revision == 0 else "", revision, *counts.values(),
         row.routes[revision] if revision < len(row.routes) else "not routed")
        for row in results.gate_runs
        for revision, counts in enumerate(row.citations)
    ]  # fmt: skip
    cases = [
        (r.case, f"{r.transforms} / {r.imperative_warnings}", r.final_light,
         "PASS" if r.scda_passed else "HARD_FAIL", ", ".join(r.flagged) or "none")
        for r in results.gate_runs
    ]  # fmt: skip
    totals = [(k, *v.values()) for k, v in table4(results.gate_runs).items()]
    return (
        table(["case", "revision", "checked", *OUTCOMES, "route (overrides)"], rows)
        + table(
            ["case", "lint rev 0 (transforms / warnings)", "final light", "SCDA", "tracked items flagged"],
            cases,
        )
        + table(["revisions", "checked", *OUTCOMES], totals)
    )


def _stream_charts(results: Results) -> str:
    stats = {name: flow.stats() for name, flow in results.flows.items()}
    colours = _palette(stats)

    def bars(stat: str, scale: float) -> list[Bar]:
        return [Bar(name, round(scale * s[stat]), colours[name]) for name, s in stats.items()]

    return (
        bar_chart("throughput (outputs/s)", bars("rate", 1), "outputs/s")
        + bar_chart("latency p50 (ms, produced -> output consumed)", bars("p50", 1000), "ms")
        + bar_chart("latency p99 (ms, produced -> output consumed)", bars("p99", 1000), "ms")
        + table(["stream", "outputs", "throughput", "latency p50", "latency p99"], stream_rows(results))
    )
