"""``report.html`` of ``clingate demo``: one page, its charts drawn by matplotlib as inline SVG
(:mod:`streams.charts`); the console's screenshots are the only other files it shows, written next to it.

The charts: the memory population over event time, the severity trajectories of the top signatures
(with their final values in a table), both from the memory as it stood after each event time
(:func:`_at_each_time`), the lift per QA category with its 95% CI, the traffic lights
(final and per simulated week), and throughput and latency per stream (with their table).

Each series or bar carries its colour, chosen once where the page builds it, and a chart draws the
mark and the legend entry of a series in that one colour: a traffic light is always in its own colour
(:data:`_LIGHT_COLOURS`), and a task or a stream keeps its colour across the charts that show it
(:func:`_palette`). A chart never picks a colour by position, which would tie a light's colour to the
order its series happen to come in.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import astuple
from itertools import cycle
from pathlib import Path

from processors.dbpm.measurement import PopulationReport, SelectivityCounts
from streams.charts import Bar, Interval, Series, bar_chart, interval_chart, line_chart
from streams.demo.gate_runs import OUTCOMES, table4
from streams.demo.results import MemoryPoint, Results
from streams.demo.summary import stream_rows, summary_rows

_COLOURS = ("#1f77b4", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f", "#e377c2")
"""Colours of series without one of their own: no red, yellow or green, which mean a traffic light."""
_LIGHT_COLOURS = {"RED": "#d62728", "YELLOW": "#e6b800", "GREEN": "#2ca02c"}
"""Each traffic light's own colour, in the order the page lists the lights."""


def _palette(names: Iterable[str]) -> dict[str, str]:
    """A colour per name, in order (repeating after seven): the one place series without a colour of
    their own get one, so charts that show the same names show them in the same colours."""
    return dict(zip(names, cycle(_COLOURS)))


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
        "svg{max-width:100%;height:auto}"
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
    snapshots = _at_each_time(dbpm.snapshots)
    sections = [
        ("Summary", table(["measure", "value"], summary_rows(results))),
        ("DBPM memory population", _population(snapshots)),
        ("Severity trajectories", _trajectories(snapshots)),
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


def _at_each_time(snapshots: Sequence[MemoryPoint]) -> list[MemoryPoint]:
    """The last of ``snapshots`` (in time order) at each event time: the memory after every event of that
    time. Snapshots are taken every so many events, and a live run stamps many events with one time, so
    several can share a time; charted as they are, a series would rise straight up at that instant."""
    last = {s.time: s for s in snapshots}
    return list(last.values())


def _population(snapshots: Sequence[MemoryPoint]) -> str:
    """The signatures each task's blocklist and whitelist hold at each event time (``snapshots``: one per
    event time, :func:`_at_each_time`)."""
    colours = _palette(("ner", "re", "qa"))
    blocklist = [
        Series(task, [(s.time, len(s.blocklist.get(task, {}))) for s in snapshots], colour)
        for task, colour in colours.items()
    ]
    whitelist = [
        Series(task, [(s.time, s.whitelist.get(task, 0)) for s in snapshots], colour)
        for task, colour in colours.items()
    ]
    return line_chart(
        "blocklist signatures held over event time", blocklist, "patterns", "event time", time=True
    ) + line_chart(
        "whitelist signatures held over event time", whitelist, "signatures", "event time", time=True
    )


def _trajectories(snapshots: Sequence[MemoryPoint]) -> str:
    """The effective severity of the five blocklist signatures with the largest severity x count at the
    end, at each event time of ``snapshots`` (one per event time) from the one that first holds it, and
    their values at the end (severities near 1 draw their lines on top of one another)."""
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
        for s in snapshots:
            found = s.blocklist.get(task, {}).get(signature)
            if found is not None:
                points.append((s.time, found[0]))
        trajectories.append(Series(name, points, colour))
    chart = line_chart(
        "severity of the top 5 blocklist signatures (severity x count at the end)",
        trajectories,
        "effective severity",
        "event time",
        time=True,
    )
    ends = [(name, f"{final[task][sig][0]:.3f}", final[task][sig][1]) for name, (task, sig) in top.items()]
    return chart + table(["signature", "severity at the end", "count"], ends)


def _lifts(selectivity: SelectivityCounts) -> str:
    bars = []
    for cell in selectivity.cells:
        if cell.task == "qa":
            lift = cell.counts.lift()
            bars.append(Interval(cell.category, lift.value, lift.ci_low, lift.ci_high, str(lift)))
    chart = interval_chart(
        "lift with 95% CI (dashed: 1, no selectivity)", bars, "lift (log scale)", _COLOURS[0]
    )
    return chart + table(["category", "lift [95% CI]"], [(b.label, b.text) for b in bars])


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
