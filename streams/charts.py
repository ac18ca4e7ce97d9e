"""Charts drawn by matplotlib as inline SVG, for the demo's ``report.html`` and the console's pages: line
charts over event time or a number, and horizontal bar and interval charts with their category names on
the left.

What holds for every chart:

* **An inline ``<svg>`` element and nothing else**: matplotlib's SVG backend on a
  :class:`~matplotlib.figure.Figure` of its own (no pyplot, no global backend), written to a string; no
  file, no script, no external font or image, so a page that holds it opens offline.
* **No style sheet, no ``style`` attribute** (:func:`_inline`): the console's Content-Security-Policy
  (``style-src 'self'``) refuses both, so every declaration matplotlib writes as CSS is written as the
  SVG presentation attribute of the same name, and the chart looks the same under that policy.
* **Text stays text** (``svg.fonttype: none``) in DejaVu Sans, the font matplotlib lays the chart out
  with, so the labels can be read, searched and measured in the page.
* **The same input gives the same bytes**: no date in the file, and the ids matplotlib hashes (clip
  paths, markers) salted with the chart's title, so two charts of a page do not share one. The ids
  nothing refers to become classes of their kind (``series``, ``bar``, ``legend``, ``xtick``, ...).
* **Readable axes**: event time (seconds since the epoch) on a date axis in UTC with matplotlib's concise
  date labels; values in plain numbers with thousands separators, 1, 2 or 5 x 10^k apart, whole numbers
  when every value is whole, from 0; ratios on a log axis labelled with the values themselves.
* **One line per series**, through its points in x order, in the colour the series carries, and its
  legend entry (under the plot) in that same colour; a chart never picks a colour by position.
* **Category names** on the left of horizontal bars or intervals, one row each, cut short with an
  ellipsis past :data:`_LONGEST_LABEL` characters.

matplotlib is imported where a chart is drawn, never when this module is: the command line imports the
modules that draw charts, and most of its commands draw none. Its settings (:data:`_RC`) are global to
the process, so one chart is drawn at a time (:data:`_LOCK`).
"""

from __future__ import annotations

import html
import io
import math
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

_WIDTH = 9.0
"""The width of every chart, in inches (648 pt, 864 px): the report's page is at most 980 px wide."""
_LINE_HEIGHT = 3.4
"""The height of a line chart, its legend included, in inches."""
_ROW = 0.3
"""The height of a category's row in a bar or interval chart, in inches."""
_AXIS_HEIGHT = 0.75
"""The height a bar or interval chart takes besides its rows (its x axis and title), in inches."""
_LONGEST_LABEL = 48
"""The most characters a category name or legend entry shows; a longer one ends in an ellipsis."""
_LEGEND_ROW = 110
"""About the characters of names a legend row holds across the chart (each entry takes its name's and
six more for its line and the gap after it)."""
_MARKED = 60
"""The most points a line marks one by one; past that the markers would hide the line."""
_TIME_FORMATS = ["%Y", "%b", "%d", "%H:%M", "%H:%M", "%H:%M:%S"]
"""The tick labels of a date axis by the unit its ticks step in (years to seconds): as matplotlib's
concise ones, but a tick between minutes reads as a time of day (``20:27:30``), never as ``30``."""
_RC = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.axisbelow": True,
    "grid.color": "#e4e4e4",
    "legend.frameon": False,
}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Series:
    """One line of a line chart: ``points`` are ``(x, y)``; its line and legend entry are in ``colour``."""

    name: str
    points: Sequence[tuple[float, float]]
    colour: str


@dataclass(frozen=True)
class Bar:
    """One bar of a bar chart: ``value`` long, named ``label`` on its left, filled with ``colour``."""

    label: str
    value: int
    colour: str


@dataclass(frozen=True)
class Interval:
    """One row of an interval chart: a point estimate with its confidence interval (None: undefined,
    and ``text`` says why)."""

    label: str
    value: float | None
    low: float | None
    high: float | None
    text: str


def _clipped(text: str) -> str:
    """``text``, cut short with an ellipsis past :data:`_LONGEST_LABEL` characters."""
    return text if len(text) <= _LONGEST_LABEL else text[: _LONGEST_LABEL - 1] + "…"


def _number(value: float, step: float) -> str:
    """``value`` with thousands separators and the decimals a tick ``step`` apart needs."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    return f"{value + 0.0:,.{decimals}f}"


def _plain(axis: Axis, *, whole: bool) -> None:
    """Ticks 1, 2 or 5 x 10^k apart (whole numbers if ``whole``), labelled in plain numbers."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 5, 10], integer=whole))
    axis.set_major_formatter(FuncFormatter(lambda value, _: _number(value, _step(axis.get_majorticklocs()))))


def _step(locs: Sequence[float]) -> float:
    """The distance between neighbouring ticks (1 for a lone tick)."""
    return float(locs[1] - locs[0]) if len(locs) > 1 else 1.0


def _log(axis: Axis, lo: float, hi: float) -> None:
    """A log axis from ``lo`` to ``hi``: ticks at 1, 2 and 5 x 10^k (at the powers of ten alone past three
    decades, where those would crowd), each labelled with its value."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    subs = (1.0, 2.0, 5.0) if math.log10(hi / lo) <= 3 else (1.0,)
    axis.set_major_locator(LogLocator(subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda value, _: _number(value, value)))
    axis.set_minor_formatter(NullFormatter())


@contextmanager
def _drawing(title: str, height: float) -> Iterator[Figure]:
    """A figure ``height`` inches high under :data:`_RC`, the hashed ids salted with ``title``."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    with _LOCK, rc_context({**_RC, "svg.hashsalt": title}):
        yield Figure(figsize=(_WIDTH, height), layout="constrained")


def _svg(figure: Figure) -> str:
    """``figure`` as an inline ``<svg>`` element (:func:`_inline`); called within :func:`_drawing`."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    out = io.StringIO()
    FigureCanvasSVG(figure).print_svg(out, metadata={"Date": None})
    return _inline(out.getvalue())


_STYLE_SHEET = re.compile(r"\s*<style[^>]*>(.*?)</style>", re.S)
_STYLE = re.compile(r' style="([^"]*)"')
_ID = re.compile(r' id="([^"]+)"')
_REFERENCE = re.compile(r'(?:url\(#|href="#)([^")]+)')
_KIND = re.compile(r"_[0-9]+$")
"""The number matplotlib puts after an id's kind (``line2d_3``)."""
_SIZE = re.compile(r"[\d.]+(?:px|pt|em|%)(?:/\S+)?")


def _inline(svg: str) -> str:
    """matplotlib's SVG document as an element for an HTML page under a policy that refuses styles: no
    prologue or metadata, SVG 2's ``href`` for ``xlink:href`` (so no second namespace), the style
    sheet's rule for every element (``*{...}``) as attributes of the root, each ``style`` attribute as
    presentation attributes, and the ids nothing refers to as classes (their kind: ``line2d_3`` is of
    class ``line2d``)."""
    svg = svg[svg.index("<svg") :].rstrip()
    svg = re.sub(r'\s+xmlns:xlink="[^"]*"', "", svg, count=1).replace(" xlink:href=", " href=")
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, flags=re.S)
    sheet = _STYLE_SHEET.search(svg)
    svg = _STYLE_SHEET.sub("", svg)
    svg = re.sub(r"\s*<defs>\s*</defs>", "", svg)
    if sheet is not None:
        rules = re.fullmatch(r"\s*\*\s*\{(.*)\}\s*", sheet.group(1), re.S)
        if rules is None:
            raise ValueError(f"a style sheet of more than the rule for every element: {sheet.group(1)}")
        svg = svg.replace("<svg", "<svg" + _attributes(rules.group(1)), 1)
    svg = _STYLE.sub(lambda m: _attributes(m.group(1)), svg)
    referenced = set(_REFERENCE.findall(svg))

    def id_or_class(found: re.Match[str]) -> str:
        name = found.group(1)
        return found.group(0) if name in referenced else f' class="{_KIND.sub("", name).replace(".", "-")}"'

    return _ID.sub(id_or_class, svg)


def _attributes(declarations: str) -> str:
    """CSS declarations (``fill: #fff; font: 9px 'DejaVu Sans'``) as SVG presentation attributes, the
    ``font`` shorthand as its parts."""
    pairs: list[tuple[str, str]] = []
    for declaration in declarations.split(";"):
        name, _, value = (part.strip() for part in declaration.partition(":"))
        if name == "font":
            pairs += _font(value)
        elif name:
            pairs.append((name, value))
    return "".join(f' {name}="{value}"' for name, value in pairs)


def _font(value: str) -> list[tuple[str, str]]:
    """The ``font`` shorthand (``[style] [variant] [weight] size[/line-height] family``) as its parts."""
    tokens = value.split()
    at = next(i for i, token in enumerate(tokens) if _SIZE.fullmatch(token))
    pairs = []
    for token in tokens[:at]:
        if token in ("italic", "oblique"):
            pairs.append(("font-style", token))
        elif token == "small-caps":
            pairs.append(("font-variant", token))
        elif token != "normal":
            pairs.append(("font-weight", token))
    size = tokens[at].split("/")[0]
    return [*pairs, ("font-size", size), ("font-family", " ".join(tokens[at + 1 :]))]


def _note(axes: Axes, text: str, *, left: bool = False) -> None:
    """``text`` halfway up the plot, in its middle or (``left``) at its left edge, where a chart has
    nothing or little to draw."""
    x, align = (0.02, "left") if left else (0.5, "center")
    axes.text(x, 0.5, text, transform=axes.transAxes, ha=align, va="center", color="#555")


# ---------------------------------------------------------------------------------------------- charts


def _figure(title: str, svg: str) -> str:
    """The chart with its title as the figure's caption (HTML, so the page's font and search see it)."""
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{svg}</figure>"


def line_chart(
    title: str, series: Sequence[Series], y_label: str, x_label: str, *, time: bool = False
) -> str:
    """One line per series through its points in x order, over event time (``time``: seconds since the
    epoch, on a UTC date axis) or over ``x_label``'s values; the y axis from 0 (or the lowest value
    below it); the legend under the plot. Several points at one event time alone are said to be at it;
    no point at all, a chart that says "no data"."""
    from matplotlib import dates

    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    with _drawing(title, _LINE_HEIGHT) as figure:
        axes = figure.add_subplot()

        def place(x: float) -> float:
            return float(dates.date2num(datetime.fromtimestamp(x, UTC))) if time else x

        for s in series:
            points = sorted(s.points, key=lambda point: point[0])
            axes.plot(
                [place(x) for x, _ in points],
                [y for _, y in points],
                color=s.colour,
                linewidth=1.6,
                marker="o" if len(points) <= _MARKED else "",
                markersize=3,
                label=_clipped(s.name),
                gid="series",
            )
        axes.grid(True)
        axes.set_ylabel(y_label)
        axes.set_xlabel(f"{x_label} (UTC)" if time else x_label)
        if not xs:
            _note(axes, "no data")
            axes.set_yticks([])
            axes.set_xticks([])
        else:
            _plain(axes.yaxis, whole=all(float(y).is_integer() for y in ys))
            if time:
                locator = dates.AutoDateLocator(tz=UTC)
                axes.xaxis.set_major_locator(locator)
                axes.xaxis.set_major_formatter(
                    dates.ConciseDateFormatter(locator, tz=UTC, formats=_TIME_FORMATS)
                )
            else:
                _plain(axes.xaxis, whole=all(float(x).is_integer() for x in xs))
            axes.set_ylim(bottom=min(0.0, *ys))
            if len(set(xs)) == 1:
                at = f"{datetime.fromtimestamp(xs[0], UTC):%Y-%m-%d %H:%M:%S} UTC" if time else f"{xs[0]:,}"
                _note(axes, f"every point at one {x_label}: {at}", left=True)  # the points: in the middle
                pad = 1 / 1440 if time else 1.0  # a minute on a date axis (in days)
                axes.set_xlim(place(xs[0]) - pad, place(xs[0]) + pad)
        if series:
            longest = max(len(_clipped(s.name)) for s in series)
            columns = max(1, min(3, len(series), _LEGEND_ROW // (longest + 6)))
            figure.legend(loc="outside lower center", ncols=columns)
        return _figure(title, _svg(figure))


def _rows(axes: Axes, labels: Sequence[str]) -> None:
    """One row per label, the first at the top, each named on the left; no label, one row that says
    "no data"."""
    axes.set_yticks(range(len(labels)), labels=[_clipped(label) for label in labels])
    axes.set_ylim(max(1, len(labels)) - 0.5, -0.5)
    if not labels:
        _note(axes, "no data")
    axes.tick_params(axis="y", length=0)
    axes.grid(True, axis="x")


def bar_chart(title: str, bars: Sequence[Bar], x_label: str) -> str:
    """One row per bar: its label on the left, the bar from 0 in its colour and its value at its end."""
    with _drawing(title, _AXIS_HEIGHT + _ROW * max(1, len(bars))) as figure:
        axes = figure.add_subplot()
        drawn = axes.barh(
            range(len(bars)), [b.value for b in bars], height=0.6, color=[b.colour for b in bars]
        )
        for patch in drawn.patches:
            patch.set_gid("bar")
        axes.bar_label(drawn, labels=[f"{b.value:,}" for b in bars], padding=3)
        _rows(axes, [b.label for b in bars])
        axes.margins(x=0.12)
        axes.set_xlim(left=0)
        _plain(axes.xaxis, whole=True)
        axes.set_xlabel(x_label)
        return _figure(title, _svg(figure))


def interval_chart(title: str, intervals: Sequence[Interval], x_label: str, colour: str) -> str:
    """One row per interval: its label on the left, its CI as a whisker and its estimate as a dot in
    ``colour`` on a log axis (ratios), a dashed line at 1 (no effect); an undefined one says why in
    its row."""
    from matplotlib.transforms import blended_transform_factory

    bounds = [v for i in intervals for v in (i.low, i.high) if v is not None and v > 0]  # a log axis
    lo, hi = min([*bounds, 1.0]), max([*bounds, 1.0])
    with _drawing(title, _AXIS_HEIGHT + _ROW * max(1, len(intervals))) as figure:
        axes = figure.add_subplot()
        axes.set_xscale("log")
        axes.axvline(1.0, color="#777", linewidth=1, linestyle=(0, (4, 3)), gid="no-effect")
        in_row = blended_transform_factory(axes.transAxes, axes.transData)
        for row, i in enumerate(intervals):
            if i.value is None or i.low is None or i.high is None:
                axes.text(0.01, row, _clipped(i.text), transform=in_row, va="center", color="#555")
                continue
            axes.plot([i.low, i.high], [row, row], color="#333", marker="|", markersize=8, gid="interval")
            axes.plot([i.value], [row], color=colour, marker="o", markersize=6, gid="estimate")
        _rows(axes, [i.label for i in intervals])
        axes.set_xlim(lo / 1.5, hi * 1.5)
        _log(axes.xaxis, lo / 1.5, hi * 1.5)
        axes.set_xlabel(x_label)
        return _figure(title, _svg(figure))
