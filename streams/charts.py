"""Charts as inline SVG, for the demo's ``report.html`` and the console's pages: line charts over event
time or a count, and horizontal bar and interval charts with their category names on the left.

Inline SVG rather than a plotting library: the page must open offline (no network fonts or scripts),
and the runtime dependencies hold no plotting library (matplotlib arrives only with a test extra).

Every chart places its values with an :class:`Axis` from :func:`value_axis` or :func:`time_axis`. Its
ticks are round: 1, 2 or 5 x 10^k, or on a time axis a whole number of seconds, minutes, hours or days;
of those, the axis takes the densest ticks whose labels stay apart, and spans from the tick at or below
its lowest value to the tick at or above its highest. A label is a plain number with thousands
separators and the decimals its step needs (none when every value is a whole number, as counts are),
or a UTC time of day (dated where the ticks span a day or more). Texts are placed by an upper estimate
of their width (:func:`text_width`), so no label overlaps another or leaves the chart: ticks are spaced
by it, category names get one row each left of the plot (at most :data:`_LABEL_ROOM` wide), a legend
flows in rows under the plot, and a text longer than its room is cut short with an ellipsis.

A line joins its series' points in x order, one polyline per series. A series or a bar is drawn in the
colour it carries, and a series' legend entry, drawn right after its line, in that same colour.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain, count, dropwhile, pairwise

FONT = 11
"""The size of every text of a chart, in px (set once on the ``svg`` element)."""
WIDTH = 900
"""The width of every chart, in px: the page is at most 980 px wide."""

_EM = 0.62
"""A character's width in em, an upper estimate for a sans-serif font (its digits are 0.56 em)."""
_GAP = 8.0
"""The least room between two labels side by side, in px."""
_MOST_TICKS = 8
"""Most ticks on a horizontal axis, and two more than on a vertical one: enough to read a value off,
few enough to read."""
_PLOT_HEIGHT = 220
_ROW = 22
"""The height of a category's row in a bar or interval chart, in px."""
_MARGIN = 10
_X_AXIS_HEIGHT = 16 + 2 * FONT
"""The height the tick labels and the title of an x axis take under it, in px."""
_LABEL_ROOM = WIDTH * 0.35
"""The most a category name may take left of a bar or interval chart, in px."""
_DAY = 86400.0
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)
"""Steps of a time axis below a day, in seconds; from a day on, 1, 2 or 5 x 10^k days."""


@dataclass(frozen=True)
class Series:
    """One line of a line chart: ``points`` are ``(x, y)``; its line and legend swatch are in ``colour``."""

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


@dataclass(frozen=True)
class Axis:
    """Values from ``lo`` to ``hi`` placed at pixels ``start`` to ``end``, on a log scale when ``log``;
    ``ticks`` are ``(value, label)``, the first at ``lo`` and the last at ``hi``."""

    lo: float
    hi: float
    start: float
    end: float
    ticks: tuple[tuple[float, str], ...]
    log: bool = False

    def __call__(self, value: float) -> float:
        """The pixel of ``value``."""
        scale: Callable[[float], float] = math.log10 if self.log else float
        share = (scale(value) - scale(self.lo)) / (scale(self.hi) - scale(self.lo))
        return self.start + share * (self.end - self.start)


def text_width(text: str) -> float:
    """The width of ``text`` at :data:`FONT`, estimated from above."""
    return len(text) * FONT * _EM


def _clipped(text: str, room: float) -> str:
    """``text``, cut short with an ellipsis to fit ``room`` px."""
    return text if text_width(text) <= room else text[: max(0, int(room / (FONT * _EM)) - 1)] + "…"


def value_axis(
    values: Iterable[float], start: float, end: float, *, horizontal: bool, log: bool = False
) -> Axis:
    """An axis over ``values`` from ``start`` to ``end`` (left to right when ``horizontal``, else
    bottom to top). A linear axis starts at 0: every linear quantity of the report is a magnitude (a
    count, a severity, a rate); its step is a whole number when every value is one. A log axis, for
    ratios (all positive), spans 1, where there is no effect."""
    values = list(values)
    if log:
        lo, hi = min([*values, 1.0]), max([*values, 1.0])
        return _fitted(_decades(lo / 2 if lo == hi else lo, hi), start, end, horizontal, log=True)
    lo, hi = min([*values, 0.0]), max([*values, 0.0])
    whole = all(float(v).is_integer() for v in values)
    steps = (step for step in _round_values((hi - lo) / _MOST_TICKS or 1.0) if step >= 1 or not whole)
    return _fitted(_ticks(lo, hi, steps, _numbers), start, end, horizontal)


def time_axis(times: Iterable[float], start: float, end: float) -> Axis:
    """A horizontal axis over event times (seconds since the epoch) from ``start`` to ``end``, labelled
    with UTC times of day (:func:`dates` names the days), dated when the axis spans a day or more."""
    times = list(times)
    steps = chain(_TIME_STEPS, (days * _DAY for days in _round_values(1.0)))
    return _fitted(_ticks(min(times), max(times), steps, _times), start, end, horizontal=True)


def dates(axis: Axis) -> str:
    """The UTC date or dates a time axis spans: ``2026-03-05`` or ``2026-03-05 to 2026-03-07``."""
    first, last = (datetime.fromtimestamp(t, UTC).date().isoformat() for t in (axis.lo, axis.hi))
    return first if first == last else f"{first} to {last}"


def _round_values(smallest: float) -> Iterator[float]:
    """1, 2 and 5 x 10^k, ascending without end, from the power of ten at or below ``smallest``."""
    for exponent in count(math.floor(math.log10(smallest))):
        for mantissa in (1, 2, 5):
            yield mantissa * 10.0**exponent


def _multiples(lo: float, hi: float, step: float) -> list[float]:
    """The multiples of ``step`` from the one at or below ``lo`` to the one at or above ``hi`` (a bound a
    rounding error away from a multiple is taken as on it, unless the product falls on its wrong side)."""
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    first -= first * step > lo
    last += last * step < hi
    return [k * step for k in range(first, last + 1)]


def _ticks(
    lo: float, hi: float, steps: Iterable[float], labels: Callable[[list[float], float], list[str]]
) -> Iterator[list[tuple[float, str]]]:
    """For each of ``steps`` (ascending) from the first that spans ``lo`` to ``hi`` in at most
    :data:`_MOST_TICKS` steps, its multiples from ``lo`` to ``hi`` (``lo`` + 1 when they are equal),
    labelled by ``labels(values, step)``."""
    hi = hi if hi > lo else lo + 1
    for step in dropwhile(lambda step: (hi - lo) / step > _MOST_TICKS, steps):
        values = _multiples(lo, hi, step)
        yield list(zip(values, labels(values, step), strict=True))


def _decades(lo: float, hi: float) -> Iterator[list[tuple[float, str]]]:
    """The ticks of a log axis, densest first: 1, 2 and 5 x 10^k, then the powers of ten, then every
    second, third, ... power; each from the tick at or below ``lo`` to the one at or above ``hi``."""
    low, high = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for mantissas, every in chain([((1, 2, 5), 1)], (((1,), every) for every in count(1))):
        values = [m * 10.0**e for e in range(low, high + every, every) for m in mantissas]
        first = max(i for i, v in enumerate(values) if v <= lo * (1 + 1e-9))
        last = min(i for i, v in enumerate(values) if v >= hi * (1 - 1e-9))
        yield [(v, _number(v, v)) for v in values[first : last + 1]]


def _fitted(
    candidates: Iterable[list[tuple[float, str]]],
    start: float,
    end: float,
    horizontal: bool,
    log: bool = False,
) -> Axis:
    """The axis of the first of ``candidates`` (ticks, densest first) whose labels stay apart: at most
    :data:`_MOST_TICKS` (two fewer up a vertical axis), neighbours at least their labels' extent and
    :data:`_GAP` apart."""
    axes = (Axis(ticks[0][0], ticks[-1][0], start, end, tuple(ticks), log) for ticks in candidates)
    return next(axis for axis in axes if _apart(axis, horizontal))


def _apart(axis: Axis, horizontal: bool) -> bool:
    if len(axis.ticks) > (_MOST_TICKS if horizontal else _MOST_TICKS - 2):
        return False
    for (a, label_a), (b, label_b) in pairwise(axis.ticks):
        extent = (text_width(label_a) + text_width(label_b)) / 2 if horizontal else FONT
        if abs(axis(b) - axis(a)) < extent + _GAP:
            return False
    return True


def _number(value: float, step: float) -> str:
    """``value`` with thousands separators and the decimals a tick ``step`` apart needs."""
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value:,.{decimals}f}"


def _numbers(values: list[float], step: float) -> list[str]:
    return [_number(v, step) for v in values]


def _times(values: list[float], step: float) -> list[str]:
    """UTC times to the second, the minute or the day, as ticks ``step`` apart need; with the date
    where the ticks span a day or more, and a time of day alone would repeat."""
    if step >= _DAY:
        form = "%Y-%m-%d"
    else:
        form = "%H:%M:%S" if step < 60 else "%H:%M"
        form = f"%m-%d {form}" if values[-1] - values[0] >= _DAY else form
    return [datetime.fromtimestamp(v, UTC).strftime(form) for v in values]


# ------------------------------------------------------------------------------------------- drawing


def _text(text: str, x: float, middle: float, attributes: str) -> str:
    """A text centred on the height ``middle``, starting (or as ``attributes`` anchor it, ending) at ``x``."""
    return f'<text x="{x:.1f}" y="{middle + FONT * 0.35:.1f}" {attributes}>{html.escape(text)}</text>'


def _figure(title: str, height: float, body: str) -> str:
    return (
        f"<figure><figcaption>{html.escape(title)}</figcaption>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="sans-serif" font-size="{FONT}">'
        f"{body}</svg></figure>"
    )


def _x_axis(axis: Axis, top: float, bottom: float, title: str) -> str:
    """The axis along ``bottom``, its grid up to ``top``, tick labels under it and its title under those."""
    ticks = "".join(
        f'<line x1="{axis(v):.1f}" x2="{axis(v):.1f}" y1="{top}" y2="{bottom + 4}" stroke="#e4e4e4"/>'
        f'<text x="{axis(v):.1f}" y="{bottom + 5 + FONT}" text-anchor="middle">{html.escape(label)}</text>'
        for v, label in axis.ticks
    )
    return (
        f'<g class="axis x">{ticks}'
        f'<line x1="{axis.start:.1f}" x2="{axis.end:.1f}" y1="{bottom}" y2="{bottom}" stroke="#333"/>'
        f'<text x="{(axis.start + axis.end) / 2:.1f}" y="{bottom + 11 + 2 * FONT}" text-anchor="middle">'
        f"{html.escape(title)}</text></g>"
    )


def _y_axis(axis: Axis, left: float, right: float, title: str) -> str:
    """The axis along ``left``, its grid across to ``right``, tick labels left of it and its title
    (turned) at the chart's left edge."""
    ticks = "".join(
        f'<line x1="{left - 4}" x2="{right}" y1="{axis(v):.1f}" y2="{axis(v):.1f}" stroke="#e4e4e4"/>'
        + _text(label, left - 6, axis(v), 'text-anchor="end"')
        for v, label in axis.ticks
    )
    middle = (axis.start + axis.end) / 2
    return (
        f'<g class="axis y">{ticks}'
        f'<line x1="{left}" x2="{left}" y1="{axis.end:.1f}" y2="{axis.start:.1f}" stroke="#333"/>'
        f'<text x="{FONT + 2}" y="{middle:.1f}" transform="rotate(-90 {FONT + 2} {middle:.1f})" '
        f'text-anchor="middle">{html.escape(title)}</text></g>'
    )


def _y_axis_width(axis: Axis) -> float:
    """The room left of a vertical axis: its turned title and its widest tick label."""
    return FONT + 10 + max(text_width(label) for _, label in axis.ticks) + 6


def _legend(series: Sequence[Series], left: float, top: float) -> tuple[list[str], float]:
    """Each series' legend entry (a swatch in its colour and its name), flowing in rows across the chart
    from ``(left, top)``; and the height of the rows."""
    entries, x, y = [], left, top
    for s in series:
        name = _clipped(s.name, WIDTH - _MARGIN - left - 14)
        width = 14 + text_width(name) + 16
        if x > left and x + width > WIDTH - _MARGIN:
            x, y = left, y + FONT + 6
        entries.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="10" height="10" fill="{s.colour}"/>'
            f'<text x="{x + 14:.1f}" y="{y + 9:.1f}">{html.escape(name)}</text>'
        )
        x += width
    return entries, y + FONT + 6 - top


def line_chart(
    title: str, series: Sequence[Series], y_label: str, x_label: str, *, time: bool = False
) -> str:
    """One line per series with its points, over event time (``time``: seconds since the epoch, the
    axis in UTC) or over ``x_label``'s values; its legend under it. No points: a chart that says so."""
    xs = [x for s in series for x, _ in s.points]
    if not xs:
        return _figure(title, 40, f'<text x="{WIDTH / 2}" y="24" text-anchor="middle">no data</text>')
    top, bottom = _MARGIN, _MARGIN + _PLOT_HEIGHT
    y = value_axis((v for s in series for _, v in s.points), bottom, top, horizontal=False)
    left, right = _y_axis_width(y), WIDTH - 4 * FONT
    x = time_axis(xs, left, right) if time else value_axis(xs, left, right, horizontal=True)
    legend, legend_height = _legend(series, left, bottom + _X_AXIS_HEIGHT + 8)
    parts = [
        _y_axis(y, left, right, y_label),
        _x_axis(x, top, bottom, f"{x_label} (UTC, {dates(x)})" if time else x_label),
    ]
    for s, entry in zip(series, legend, strict=True):
        points = sorted(s.points)
        path = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in points)
        parts.append(f'<polyline fill="none" stroke="{s.colour}" stroke-width="1.8" points="{path}"/>')
        parts += (f'<circle cx="{x(px):.1f}" cy="{y(py):.1f}" r="2" fill="{s.colour}"/>' for px, py in points)
        parts.append(entry)
    return _figure(title, bottom + _X_AXIS_HEIGHT + 8 + legend_height + _MARGIN, "".join(parts))


def _rows(labels: Sequence[str]) -> tuple[list[str], float, float, list[float]]:
    """Where a chart of one row per label draws: the labels as they fit :data:`_LABEL_ROOM`, the plot's
    left edge (right of the widest), its bottom, and each row's middle."""
    labels = [_clipped(label, _LABEL_ROOM) for label in labels]
    left = max([text_width(label) for label in labels], default=0.0) + 2 * _MARGIN
    middles = [_MARGIN + (i + 0.5) * _ROW for i in range(len(labels))]
    return labels, left, _MARGIN + _ROW * len(labels), middles


def bar_chart(title: str, bars: Sequence[Bar], x_label: str) -> str:
    """One row per bar: its label on the left, the bar from 0 and its value at the bar's end."""
    labels, left, bottom, middles = _rows([b.label for b in bars])
    value_room = max([text_width(f"{b.value:,}") for b in bars], default=0.0) + 2 * _MARGIN
    x = value_axis((b.value for b in bars), left, WIDTH - value_room, horizontal=True)
    parts = [_x_axis(x, _MARGIN, bottom, x_label)]
    for b, label, middle in zip(bars, labels, middles, strict=True):
        parts.append(
            f'<rect x="{left}" y="{middle - _ROW / 2 + 4:.1f}" width="{x(b.value) - left:.1f}" '
            f'height="{_ROW - 8}" fill="{b.colour}"/>'
            + _text(f"{b.value:,}", x(b.value) + 4, middle, "")
            + _text(label, left - 6, middle, 'text-anchor="end"')
        )
    return _figure(title, bottom + _X_AXIS_HEIGHT + _MARGIN, "".join(parts))


def interval_chart(title: str, intervals: Sequence[Interval], x_label: str, colour: str) -> str:
    """One row per interval: its label on the left, its CI as a whisker and its estimate as a dot in
    ``colour`` on a log axis (ratios), a dashed line at 1 (no effect); an undefined one says why in
    its row."""
    labels, left, bottom, middles = _rows([i.label for i in intervals])
    bounds = [v for i in intervals if i.low is not None and i.high is not None for v in (i.low, i.high)]
    x = value_axis(bounds, left, WIDTH - 4 * FONT, horizontal=True, log=True)
    parts = [
        _x_axis(x, _MARGIN, bottom, x_label),
        f'<line x1="{x(1.0):.1f}" x2="{x(1.0):.1f}" y1="{_MARGIN}" y2="{bottom}" stroke="#777" '
        'stroke-dasharray="4 3"/>',
    ]
    for i, label, middle in zip(intervals, labels, middles, strict=True):
        parts.append(_text(label, left - 6, middle, 'text-anchor="end"'))
        if i.value is None or i.low is None or i.high is None:
            parts.append(_text(_clipped(i.text, WIDTH - _MARGIN - left - 6), left + 6, middle, 'fill="#555"'))
            continue
        low, high = x(i.low), x(i.high)
        parts.append(
            f'<path d="M{low:.1f},{middle - 4:.1f}v8M{low:.1f},{middle:.1f}H{high:.1f}M{high:.1f},'
            f'{middle - 4:.1f}v8" stroke="#333" fill="none"/>'
            f'<circle cx="{x(i.value):.1f}" cy="{middle:.1f}" r="4" fill="{colour}"/>'
        )
    return _figure(title, bottom + _X_AXIS_HEIGHT + _MARGIN, "".join(parts))
