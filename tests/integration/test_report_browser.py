"""The demo's ``report.html`` in a real browser (Debian's Chromium, headless, Playwright): every chart as
a reader sees it, measured from the page's own geometry.

The report is written from a small run (:func:`tests.report_run.small_run`, no broker, no demo) and opened
as a file, 1400 px wide. For every chart's ``<svg>``: it draws data (a line, a bar or an estimate); each
line's points, read from its path, go left to right; and no two of its texts (tick labels, category
names, values, legend entries, axis titles) overlap, by the boxes Chromium lays them out in. Then the
same page under the console's Content-Security-Policy (no inline style): no chart asks for a style the
policy refuses, and each line and bar is still drawn in its colour.

Skips, saying why, where Chromium or Playwright is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from streams.console.app import HEADERS
from streams.demo import report
from streams.testing.console import chromium, rgb
from tests.report_run import small_run

_CHARTS = """() => [...document.querySelectorAll("figure")].filter(f => f.querySelector("svg")).map(f => {
  const figure = f;
  const svg = figure.querySelector("svg");
  const xs = path => {
    const numbers = (path.getAttribute("d").match(/-?\\d+(?:\\.\\d+)?(?:e-?\\d+)?/g) || []).map(Number);
    return numbers.filter((_, i) => i % 2 === 0);
  };
  const texts = [...svg.querySelectorAll("text")].filter(t => t.textContent.trim()).map(t => {
    const box = t.getBoundingClientRect();
    return {text: t.textContent, left: box.left, top: box.top, right: box.right, bottom: box.bottom};
  });
  const frame = svg.getBoundingClientRect();
  return {
    caption: figure.querySelector("figcaption").textContent,
    lines: [...svg.querySelectorAll(".series > path")].map(xs),
    bars: svg.querySelectorAll(".bar > path").length,
    estimates: svg.querySelectorAll(".estimate use").length,
    texts,
    frame: {left: frame.left, top: frame.top, right: frame.right, bottom: frame.bottom},
  };
})"""
"""Each chart's caption, its lines' x coordinates in path order, its bars and estimates, its texts'
boxes and its own box, as Chromium lays them out."""

_COLOURS = """() => [...document.querySelectorAll(".series > path, .bar > path")].map(mark => ({
  drawn: getComputedStyle(mark)[mark.closest(".series") ? "stroke" : "fill"],
  given: mark.getAttribute(mark.closest(".series") ? "stroke" : "fill"),
}))"""
"""Each line's and bar's colour as drawn (computed) and as its attribute names it."""

_WATCH_VIOLATIONS = """window.violations = [];
document.addEventListener("securitypolicyviolation", e => window.violations.push({
  directive: e.violatedDirective,
  inChart: !!(e.target && e.target.closest && e.target.closest("svg")),
}));"""


def _apart(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two boxes share no area (touching edges, or a fraction of a pixel of rounding, are apart)."""
    slack = 0.5
    return (
        a["right"] <= b["left"] + slack
        or b["right"] <= a["left"] + slack
        or a["bottom"] <= b["top"] + slack
        or b["bottom"] <= a["top"] + slack
    )


def test_every_chart_of_the_report_has_data_in_time_order_and_labels_that_do_not_overlap(
    tmp_path: Path,
) -> None:
    chromium_of = chromium()
    path = tmp_path / "report.html"
    report.write_report(path, small_run())
    with chromium_of as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(path.as_uri())
        charts = page.evaluate(_CHARTS)
        assert len(charts) == 9, [c["caption"] for c in charts]
        for chart in charts:
            caption = chart["caption"]
            assert chart["lines"] or chart["bars"] or chart["estimates"], f"{caption}: no data drawn"
            for xs in chart["lines"]:
                assert xs and xs == sorted(xs), f"{caption}: a line goes back in x: {xs}"
            texts = chart["texts"]
            assert texts, caption
            frame = chart["frame"]
            for text in texts:
                inside = frame["left"] - 0.5 <= text["left"] and text["right"] <= frame["right"] + 0.5
                assert inside and frame["top"] - 0.5 <= text["top"], f"{caption}: {text} leaves the chart"
                assert text["bottom"] <= frame["bottom"] + 0.5, f"{caption}: {text} leaves the chart"
            for i, a in enumerate(texts):
                for b in texts[i + 1 :]:
                    assert _apart(a, b), f"{caption}: {a['text']!r} overlaps {b['text']!r}"
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)

        strict = browser.new_page(viewport={"width": 1400, "height": 900})
        strict.add_init_script(_WATCH_VIOLATIONS)
        url = "http://report.test/report.html"
        strict.route(
            url,
            lambda route: route.fulfill(
                status=200, headers=HEADERS, content_type="text/html", body=path.read_text()
            ),
        )
        strict.goto(url)
        violations = strict.evaluate("window.violations")
        assert not [v for v in violations if v["inChart"]], violations
        colours = strict.evaluate(_COLOURS)
        assert colours and all(c["drawn"] == rgb(c["given"]) for c in colours), colours
