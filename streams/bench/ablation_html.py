"""The ablation report (:func:`streams.bench.ablation.run_ablation`) as one self-contained HTML page.

Tables and one inline SVG figure (per-category lift with its 95% CI on a log scale, Figure 5's
view), no script, no stylesheet or font from the network: the page opens offline and prints as is.
Every figure on it is a field of the JSON report; nothing is computed here but layout.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from processors.dbpm.ablation import SELECTIVE_LIFT

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0 1em}th,td{border:1px solid #ccc;padding:.2em .5em}
th{background:#f3f3f3;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
p.note{color:#555;max-width:60em}code{background:#f3f3f3;padding:0 .2em}
"""


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return f"<td>{escape(str(value if value is not None else '-'))}</td>"
    if isinstance(value, int):
        return f'<td class="n">{value:,}</td>'
    if isinstance(value, float):
        return f'<td class="n">{value:,.4g}</td>'
    return f"<td>{escape(str(value))}</td>"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}%"


def _lift(lift: Mapping[str, Any]) -> str:
    if lift["status"] == "finite":
        return f"{lift['value']:.2f} [{lift['ci_low']:.2f}, {lift['ci_high']:.2f}]"
    return f"{lift['status']} ({lift['reason']})"


def _arms(report: Mapping[str, Any]) -> str:
    rows = []
    for arm in report["arms"]:
        blocks = arm["verifier_calls_saved"]["blocks"]
        qa = arm["tag_confusion"].get("qa")
        rows.append([
            arm["name"], arm["description"], arm["fingerprint"],
            ", ".join(f"{task} {n:,}" for task, n in blocks.items()), arm["verifier_calls_saved"]["total"],
            _pct(100 * (arm["provenance"]["touched_share"] or 0)),
            _lift(qa["lift"]) if qa else "-", _lift(arm["qa_path_lift"]["lift"]),
            None if arm["seconds"] is None else round(arm["seconds"], 2),
        ])  # fmt: skip
    return _table(
        ["arm", "changes", "config fingerprint", "BLOCKs (verifier calls saved)", "total", "touched",
         "QA lift, all categories [95% CI]", "QA path lift [95% CI]", "seconds"],
        rows,
    )  # fmt: skip


def _paired(report: Mapping[str, Any]) -> str:
    out = []
    for paired in report["paired"]:
        rows = [
            [task, t["reference_pairs"], t["arm_pairs"], t["delta"], _pct(t["delta_pct"]), t["changed"],
             "; ".join(f"{m['reference']}→{m['arm']} {m['count']:,}" for m in t["transitions"]
                       if m["reference"] != m["arm"]) or "-"]
            for task, t in paired["tasks"].items()
        ]  # fmt: skip
        out.append(f"<h3>{escape(paired['arm'])} against {escape(paired['reference'])}</h3>")
        out.append(_table(
            ["stage", escape(paired["reference"]), escape(paired["arm"]), "Δ", "Δ%", "candidates changed",
             "decision changes (reference→arm)"],
            rows,
        ))  # fmt: skip
    return "".join(out)


def _confusion(arm: Mapping[str, Any]) -> str:
    out = []
    for task, table in arm["tag_confusion"].items():
        rows = table["rows"]
        body = [
            [side, f"{rows[side]['tagged']:,} ({_pct(rows[side]['tagged_pct'])})",
             f"{rows[side]['not_tagged']:,} ({_pct(rows[side]['not_tagged_pct'])})", rows[side]["total"]]
            for side in ("FAIL", "PASS")
        ]  # fmt: skip
        total = rows["total"]
        body.append(["column total", total["tagged"], total["not_tagged"], total["total"]])
        out.append(f"<h3>{escape(task)}: lift {escape(_lift(table['lift']))}</h3>")
        out.append(_table(["verifier verdict", "tagged", "not tagged", "row total"], body))
    return "".join(out)


def _categories(arm: Mapping[str, Any]) -> str:
    rows = [
        [r["category"], r["n_pass"], r["n_fail"],
         ("-" if r["coverage"] is None else f"{100 * r['coverage']:.1f}")
         + ("" if r["ner_bucket"] else " (no-NER)"),
         r["p_tag_pass"], r["p_tag_fail"], _lift(r["lift"]), r["regime"]]
        for r in arm["qa_categories"]
    ]  # fmt: skip
    return _table(
        ["category", "n PASS", "n FAIL", "cov%", "P(t|P)", "P(t|F)", "lift [95% CI]", "regime"], rows
    )


def lift_figure(rows: Sequence[Mapping[str, Any]]) -> str:
    """Inline SVG: one row per category, its lift and CI on a log axis, lines at 1 and at 1.5."""
    finite = [r for r in rows if r["lift"]["status"] == "finite"]
    bounds = [b for r in finite for b in (r["lift"]["ci_low"], r["lift"]["ci_high"])] + [0.5, 2.0]
    low, high = math.log(min(bounds)), math.log(max(bounds))
    left, width, row_h = 190, 420, 22
    height = row_h * (len(rows) + 2)

    def x(value: float) -> float:
        return left + (math.log(value) - low) / (high - low) * width

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 170}" height="{height}" '
             'font-size="12" font-family="sans-serif">']  # fmt: skip
    for value, dash in ((1.0, ""), (SELECTIVE_LIFT, ' stroke-dasharray="4 3"')):
        parts.append(f'<line x1="{x(value):.1f}" x2="{x(value):.1f}" y1="4" y2="{height - row_h}" '
                     f'stroke="#999"{dash}/><text x="{x(value):.1f}" y="{height - 6}" '
                     f'text-anchor="middle">{value:g}</text>')  # fmt: skip
    for i, r in enumerate(rows):
        y = row_h * (i + 1)
        lift = r["lift"]
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{escape(r["category"])}</text>')
        if lift["status"] == "finite":
            parts.append(
                f'<line x1="{x(lift["ci_low"]):.1f}" x2="{x(lift["ci_high"]):.1f}" y1="{y}" y2="{y}" '
                f'stroke="#246" stroke-width="2"/><circle cx="{x(lift["value"]):.1f}" cy="{y}" r="4" '
                f'fill="#246"/>'
            )
            label = f"{lift['value']:.2f} ({r['regime']})"
        else:
            label = f"{lift['status']} ({r['regime']})"
        parts.append(f'<text x="{left + width + 8}" y="{y + 4}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _provenance(arm: Mapping[str, Any]) -> str:
    rows = [
        [task, p["decision"], p["rule"], p["count"], _pct(100 * p["share"])]
        for task, entries in arm["provenance"]["tasks"].items()
        for p in entries
    ]
    return _table(["task", "decision", "rule", "decisions", "share of the task's decisions"], rows)


def _population(arm: Mapping[str, Any]) -> str:
    population = arm["population"]
    if population is None:
        return "<p>not measured</p>"
    rows = [
        [c["task"], c["fail_events"], c["patterns"], c["block_eligible"], c["downgrade_band"], c["whitelist"],
         c["status"]]
        for c in population["channels"]
    ]  # fmt: skip
    return _table(
        ["task", "fail events", "patterns", "≥ BLOCK", "DOWNGRADE band", "whitelist", "status"], rows
    )


def _qa_sources(part: Mapping[str, Any]) -> str:
    rows = [
        [
            row["signal"], row["name"], _lift(row["lift"]), _lift(row["path_lift"]),
            f"{row['tagged']['fail']:,} / {row['tagged']['fail_total']:,}",
            f"{row['tagged']['pass']:,} / {row['tagged']['pass_total']:,}",
            row["outcome"], row["paper"]["figure"], row["paper"]["failure_mode"], row["paper"]["basis"],
        ]
        for row in part["sources"]
    ]  # fmt: skip
    return _table(
        ["source", "Table 11", "lift, all QA pairs [95% CI]", "path lift [95% CI]", "FAIL tagged",
         "PASS tagged", "outcome", "paper", "paper's failure mode", "paper's basis"],
        rows,
    )  # fmt: skip


def _cohort(cohort: Mapping[str, Any]) -> str:
    rows = [
        [s["age_bucket"], s["gender"], s["length_tertile"], s["population"], s["floor"], s["allocated"]]
        for s in cohort["strata"]
    ]
    low, high = cohort["tertile_cut_points"]
    return (
        f"<p>{cohort['patients']:,} patients drawn from {cohort['population']:,} (seed {cohort['seed']}), "
        f"{cohort['n_strata']} non-empty strata, floor {cohort['floor']}; document-length tertiles "
        f"T1 ≤ {low:,} characters &lt; T2 ≤ {high:,} characters &lt; T3.</p>"
        + _table(["age", "gender", "length tertile", "population", "floor", "allocated"], rows)
    )


def render_html(report: Mapping[str, Any]) -> str:
    """The whole report as one HTML document (UTF-8 text)."""
    reference = report["arms"][0]
    sections = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>DBPM paired ablation</title>",
        f"<style>{_STYLE}</style></head><body><h1>DBPM paired ablation</h1>",
        f"<p>{report['candidates']:,} candidates per arm, run {escape(report.get('runtime', ''))}, "
        f"{report.get('seconds', 0):.1f} s in all. Tagged = DOWNGRADE or BLOCK; lift = P(tag | FAIL) / "
        "P(tag | PASS) (Eq. 10) with the delta-method 95% CI; a BLOCK is a verifier call saved.</p>",
        "<h2>Arms</h2>",
        _arms(report),
    ]
    if "qa_sources" in report:
        sections += [
            "<h2>The five QA signal sources (§4.8, §6.3, Figure 4, Table 11)</h2>",
            "<p class=note>One arm per source over the same stream; the paper's figure beside each.</p>",
            _qa_sources(report["qa_sources"]),
        ]
    sections += [
        f"<h2>Pair-count deltas against {escape(report['reference'])} (Table 9)</h2>",
        "<p class=note>Pairs are candidates not BLOCKed; a DOWNGRADE tags without removing, so a gate that "
        "only tags moves no pair count however many candidates it tags (§6.5).</p>",
        _paired(report),
        f"<h2>Per-category selectivity, {escape(reference['name'])} arm (Table 8)</h2>",
        "<p class=note>cov% = PASS pairs whose patient-level NER set covers the category's bucket. Regimes: "
        f"selective (lift &gt; {SELECTIVE_LIFT}), saturated (coverage ≥ 90%), no tagging, categorical "
        "(lift within [1/1.5, 1.5]), anti-selective, fallback (no NER bucket in the arm's "
        "configuration).</p>",
        lift_figure(reference["qa_categories"]),
        _categories(reference),
        f"<h2>Tag confusion, {escape(reference['name'])} arm (Table 10)</h2>",
        _confusion(reference),
        f"<h2>Provenance, {escape(reference['name'])} arm</h2>",
        _provenance(reference),
    ]
    for arm in report["arms"][1:]:
        sections += [
            f"<h2>Arm {escape(arm['name'])}</h2><p>{escape(arm['description'])}</p>",
            "<h3>Per-category selectivity</h3>", _categories(arm),
            _confusion(arm), "<h3>Provenance</h3>", _provenance(arm),
        ]  # fmt: skip
    sections.append("<h2>Channel population at the end of each arm</h2>")
    for arm in report["arms"]:
        sections += [f"<h3>{escape(arm['name'])}</h3>", _population(arm)]
    sections += ["<h2>Cohort (stratified, §5.1)</h2>", _cohort(report["cohort"])]
    sections.append("</body></html>\n")
    return "".join(sections)
