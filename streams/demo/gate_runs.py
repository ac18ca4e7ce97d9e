"""Step 5, the output gates: the golden runs as the worker published them, against the pure gates.

Per golden case: each revision's citation outcomes (the supplement's Supplementary Table 4), revision
0's lint, each route with its overrides, the deliverable's SCDA result and the tracked items it flags,
and the final light. Checks: the worker published exactly what the pure stream processor publishes
for the runs (gated drafts, routes, safety audits), and each golden patient's final assessment, whose
Rule B inputs came from its run's routes, equals the one under its published review inputs.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from schemas.clinical import ClinicalAssessment, GatedDraft, RevisionRoute, SafetyAudit
from streams.demo.plan import Plan, last_per_patient
from streams.demo.results import GateRunRow, Results

OUTCOMES = ("verified", "ellipsis_trimmed", "paraphrase_converted", "wrong_attribution", "fabricated_quote")
"""A citation's outcomes, in the contract's order (observations last)."""


def gate_run_rows(
    published: list[GatedDraft | RevisionRoute | SafetyAudit], final: dict[str, ClinicalAssessment]
) -> list[GateRunRow]:
    """One row per golden case of ``published`` (the worker's outputs for the runs), read from the case's
    safety audit, whose run record holds each revision's gate activations and route."""
    rows = []
    for audit in sorted((o for o in published if isinstance(o, SafetyAudit)), key=lambda a: a.patient_id):
        revisions = audit.run.revisions if audit.run is not None else []
        first = revisions[0] if revisions else None
        case = audit.patient_id
        rows.append(
            GateRunRow(
                case=case,
                citations=[{"checked": r.checked, **{o: getattr(r, o) for o in OUTCOMES}} for r in revisions],
                transforms=first.transforms if first else 0,
                imperative_warnings=first.imperative_warnings if first else 0,
                routes=[str(r.route) + "".join(f" ({o})" for o in r.overrides) for r in revisions if r.route],
                final_light=str(final[case].traffic_light.light) if case in final else "none",
                scda_passed=audit.passed,
                flagged=[f"{t.item} {t.status}" for t in audit.tracked if t.status in ("WARN", "ESCALATE")],
            )
        )
    return rows


def table4(rows: list[GateRunRow]) -> dict[str, dict[str, int]]:
    """Citation outcomes summed over the cases per revision (``rev0``, ``rev1``, ...) and in ``all``."""
    totals: dict[str, dict[str, int]] = {}
    for row in rows:
        for revision, counts in enumerate(row.citations):
            for key in (f"rev{revision}", "all"):
                column = totals.setdefault(key, dict.fromkeys(counts, 0))
                for name, n in counts.items():
                    column[name] += n
    return dict(sorted(totals.items()))


def step_output_gates(console: Console, plan: Plan, results: Results) -> None:
    """Print the golden runs' table and Table 4's totals; check the worker against the pure gates."""
    published = list(results.flows["gates"].outputs)
    final = last_per_patient(results.flows["clinical"].outputs)
    results.gate_runs = rows = gate_run_rows(published, final)
    table = Table(
        "case", "rev", "chk", "ok", "trim", "para", "wrong", "fab", "route (overrides)",
        title="golden runs through the output gates: citations per revision (Supplementary Table 4)",
        caption="chk checked, ok verified, trim ellipsis trimmed, para paraphrase converted, wrong wrong "
        "attribution, fab fabricated quote", title_justify="left", caption_justify="left",
        box=box.SIMPLE_HEAD, pad_edge=False,
    )  # fmt: skip
    table.columns[-1].overflow = "fold"
    for row in rows:
        for revision, counts in enumerate(row.citations):
            route = row.routes[revision] if revision < len(row.routes) else "not routed"
            cells = [str(n) for n in counts.values()]
            table.add_row(row.case if revision == 0 else "", str(revision), *cells, route)
    console.print(table)
    for row in rows:
        console.print(
            f"  {row.case}: lint (rev 0) header transforms {row.transforms}, imperative warnings "
            f"{row.imperative_warnings}; final light {row.final_light}; deliverable SCDA "
            + ("PASS" if row.scda_passed else "[red]HARD_FAIL[/]")
            + f"; tracked items flagged: {', '.join(row.flagged) or 'none'}"
        )
    totals = table4(rows)
    console.print(
        "  citations per revision: "
        + "; ".join(f"{k} " + "/".join(str(n) for n in v.values()) for k, v in totals.items())
        + " (checked/"
        + "/".join(OUTCOMES)
        + ")"
    )
    same = sorted(o.model_dump_json() for o in published) == sorted(
        o.model_dump_json() for o in plan.gates_expected
    )
    console.print(
        f"  {len(published)} gated drafts, routes and safety audits from the worker vs the in-process stream "
        f"processor: {'[green]equal[/]' if same else '[red]DIFFERENT[/]'}"
    )
    results.check("gates_equal", same, "the golden runs' outputs differ from the in-process stream processor")
    golden = {case: final.get(case) for case in plan.published}
    rule_b = golden == plan.published
    console.print(
        "  golden lights with Rule B fed by the runs' routes vs the published review inputs: "
        + ("[green]equal[/]" if rule_b else "[red]DIFFERENT[/]")
    )
    results.check("gates_rule_b", rule_b, "a golden run's routes do not give its published Rule B inputs")
    results.check("gates_scda", all(r.scda_passed for r in rows), "a golden deliverable failed the SCDA")
