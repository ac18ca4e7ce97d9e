"""Step 9's summary: throughput and latency per stream and every measure and check, one row each.

The same rows make the terminal tables and the report's tables (:mod:`streams.demo.report`).
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from processors.dbpm.config import DEFAULT_TASKS
from streams.demo.gate_runs import table4
from streams.demo.model import ProbeCall
from streams.demo.results import BulkFigures, DbpmResults, Results
from streams.testing.stats import percentile

STREAM_NAMES = {
    "generator": "generator (narrative -> first candidate)",
    "dbpm": "DBPM gate (candidate -> decision)",
    "verifier": "verifier (to-verify -> verdict)",
    "filter": "ontology filter (relation -> rule-based verdict)",
    "clinical": "clinical (FHIR update -> assessment)",
    "gates": "output gates (draft / audit / deliverable -> gated draft / route / safety audit)",
    "docs": "arbiter (classification -> disposition)",
}
"""What each stream's latency runs from and to."""


def print_summary(console: Console, results: Results) -> None:
    """The throughput and latency table, then the summary table."""
    streams = Table(
        "stream",
        "outputs",
        "throughput",
        "latency p50",
        "latency p99",
        title_justify="left",
        title="throughput and latency (produced -> output consumed)",
    )
    for row in stream_rows(results):
        streams.add_row(*row)
    console.print(streams)
    summary = Table("measure", "value", title="clingate demo summary", title_justify="left")
    for name, value in summary_rows(results):
        summary.add_row(name, value)
    console.print(summary)


def lights_text(lights: Counter[str]) -> str:
    """``RED n, YELLOW n, GREEN n``."""
    return ", ".join(f"{light} {lights[light]}" for light in ("RED", "YELLOW", "GREEN"))


def stream_rows(results: Results) -> list[tuple[str, str, str, str, str]]:
    """Per stream: outputs, throughput, latency p50 and p99 (produced -> output consumed)."""
    rows = []
    for name, flow in results.flows.items():
        st = flow.stats()
        rows.append(
            (
                STREAM_NAMES[name],
                f"{len(flow.outputs):,}",
                f"{st['rate']:,.0f}/s",
                f"{1000 * st['p50']:,.0f} ms",
                f"{1000 * st['p99']:,.0f} ms",
            )
        )
    return rows


def summary_rows(results: Results) -> list[tuple[str, str]]:
    """Every measure and check of the run, as (measure, value)."""
    dbpm = results.loop_results
    topics = Counter(t.outcome for t in results.topics)
    return [
        ("topics", ", ".join(f"{n} {o}" for o, n in sorted(topics.items()))),
        ("schemas round-tripped", f"{sum(r.ok for r in results.round_trips)}/{len(results.round_trips)}"),
        (
            "DBPM narratives / candidates / let through / verdicts",
            f"{dbpm.narratives} / {dbpm.gates:,} / {dbpm.let_through:,} / {dbpm.verdicts:,}",
        ),
        ("verifier calls saved (BLOCKs)", f"{dbpm.blocks:,}"),
        ("verdicts by source", ", ".join(f"{s} {n:,}" for s, n in verdict_sources(results).items())),
        ("QA coverage (NER-coverage join)", ", ".join(f"{c} {n:,}" for c, n in coverage(results).items())),
        (
            "blocklist patterns (the paper's cap)",
            ", ".join(
                f"{c.task} {c.patterns:,} ({DEFAULT_TASKS[c.task].cap})" for c in dbpm.population.channels
            ),
        ),
        (
            "LLM failures, dead-lettered (verifications / narratives)",
            f"{dbpm.failed_verifications} / {dbpm.failed_narratives}",
        ),
        (f"lockstep slice ({dbpm.lockstep} patients): Kafka vs in-process", _lockstep_text(dbpm)),
        *_bulk_rows(dbpm.bulk),
        ("inert channels", ", ".join(dbpm.population.inert_channels()) or "none"),
        (
            "clinical assessments (final lights)",
            f"{sum(results.lights.values())}: " + lights_text(results.lights),
        ),
        ("clinical worker = in-process", "yes" if results.clinical_same else "NO"),
        *_gate_rows(results),
        *(
            (
                f"agent: {r.question[:48]}",
                f"{r.path}, {r.llm_calls}/{r.budget} calls"
                + (", replayed" if r.replayed else ", NOT replayed"),
            )
            for r in results.agent
        ),
        *((f"not run: {what}", why) for what, why in results.not_run.items()),
        ("docs dispositions", str(sum(d.documents for d in results.dispositions))),
        ("dead letters added", str(sum(results.dead_letters.added.values()))),
        *(
            (f"{name}: throughput, p50, p99", f"{rate}, {p50}, {p99}")
            for name, _, rate, p50, p99 in stream_rows(results)
        ),
        *_model_rows(results.model_calls),
        *((f"time: {k}", f"{v:.1f} s") for k, v in results.timings.items()),
        ("checks", "all passed" if not results.failed else "FAILED: " + "; ".join(results.failed)),
    ]


def _gate_rows(results: Results) -> list[tuple[str, str]]:
    """The golden runs: per case, routes and final light; Table 4's citation totals."""
    rows = [
        (f"output gates {r.case}: routes -> light", " -> ".join(r.routes) + f" => {r.final_light}")
        for r in results.gate_runs
    ]
    totals = table4(results.gate_runs).get("all")
    if totals is not None:
        rows.append(
            ("output gates: citations (all revisions)", ", ".join(f"{k} {v}" for k, v in totals.items()))
        )
    return rows


def _lockstep_text(dbpm: DbpmResults) -> str:
    decisions = "decisions equal" if dbpm.same else "decisions DIFFER"
    differences = len(dbpm.memory_differences)
    memory = f"differs on {differences} entries (measured)" if differences else "equal"
    return f"{decisions}; memory {memory}"


def _bulk_rows(bulk: BulkFigures | None) -> list[tuple[str, str]]:
    if bulk is None:
        return []
    differing = sum(bulk.differing.values())
    memory = "equal" if bulk.same_state else "differs"
    return [
        (
            f"bulk phase ({bulk.patients:,} patients): throughput",
            f"{bulk.patients_per_s:.1f} patients/s, {bulk.candidates_per_s:,.0f} candidates/s "
            f"({bulk.span:.1f} s)",
        ),
        (
            "bulk phase: latency p50 / p99 (narrative -> last output)",
            f"{bulk.patient_p50:.1f} / {bulk.patient_p99:.1f} s",
        ),
        (
            "bulk phase vs in-process (reported)",
            f"{differing:,} of {bulk.candidates:,} decisions differ; memory {memory}",
        ),
    ]


def _model_rows(calls: list[ProbeCall]) -> list[tuple[str, str]]:
    if not calls:
        return []
    valid = sum(1 for c in calls if c.outcome == "valid")
    latencies = sorted(c.latency_s for c in calls)
    return [
        (
            "real model (SmolLM2): valid calls, latency p50 / max",
            f"{valid}/{len(calls)}, {percentile(latencies, 0.5):.1f} / {latencies[-1]:.1f} s",
        )
    ]


def summary_json(results: Results) -> dict[str, object]:
    """The summary as JSON data (``summary.json`` in the ``clingate demo --out`` folder), what tests and
    dashboards read instead of the terminal text: every check by name, and the DBPM loop's figures.

    ``dbpm.lift`` maps each QA category to ``{"lift": x, "ci": [lo, hi], "status": ...}`` (``lift`` and
    ``ci`` null where the lift is degenerate, ``status`` and ``reason`` say why), ``dbpm.verdicts_by_source``
    counts the verdicts published on the loop (the verifier's and the Ontology-Violation Filter's),
    ``dbpm.patterns`` the blocklist patterns per task in the final memory, ``dbpm.verifier_calls_saved``
    the BLOCKs, and ``dbpm.coverage`` how the QA candidates' NER coverage was settled.
    ``output_gates.cases`` has, per golden case, each revision's citation counts, revision 0's lint,
    each route (with its overrides), the final light, the deliverable's SCDA result and the tracked
    items it flags; ``output_gates.citations`` sums the citation counts per revision and overall.
    """
    dbpm = results.loop_results
    flows = results.flows
    lifts = {}
    for cell in dbpm.selectivity.cells:
        if cell.task == "qa":
            lift = cell.counts.lift()
            ci = None if lift.ci_low is None else [lift.ci_low, lift.ci_high]
            lifts[cell.category] = {
                "lift": lift.value,
                "ci": ci,
                "status": lift.status.value,
                "reason": lift.reason,
            }
    decided = list(flows["dbpm"].latest.values())
    return {
        "passed": not results.failed,
        "checks": dict(results.checks),
        "failures": list(results.failed),
        "console": {
            "url": results.console_url,
            "pages": [
                {
                    "name": p.name,
                    "path": p.path,
                    "status": p.status,
                    "shows": p.shows,
                    "screenshot": p.screenshot,
                }
                for p in results.console_pages
            ],
        },
        "dbpm": {
            "patients": dbpm.patients,
            "candidates": dbpm.gates,
            "config": sorted({d.config for d in decided if d.config is not None}),
            "decisions": {
                task: {decision: n for (t, decision), n in sorted(dbpm.per_task.items()) if t == task}
                for task in sorted({t for t, _ in dbpm.per_task})
            },
            "lift": lifts,
            "verdicts_by_source": verdict_sources(results),
            "patterns": {c.task: c.patterns for c in dbpm.population.channels},
            "block_eligible": {c.task: c.block_eligible for c in dbpm.population.channels},
            "verifier_calls_saved": dbpm.blocks,
            "coverage": coverage(results),
            "lockstep_decisions_equal": dbpm.same,
            "lockstep_memory_differences": len(dbpm.memory_differences),
        },
        "output_gates": {
            "cases": {r.case: r.json() for r in results.gate_runs},
            "citations": table4(results.gate_runs),
        },
        "agent": [
            {
                "question": r.question,
                "path": r.path,
                "llm_calls": r.llm_calls,
                "budget": r.budget,
                "tools": r.tools,
                "answer": r.answer,
                "proposals": r.proposals,
                "lights": r.lights,
                "replayed": r.replayed,
            }
            for r in results.agent
        ],
        "not_run": dict(results.not_run),
        "timings_s": dict(results.timings),
    }


def verdict_sources(results: Results) -> dict[str, int]:
    """Verdicts published on the loop by source: the verifier's and the Ontology-Violation Filter's."""
    flows = results.flows
    return dict(
        sorted(Counter(v.source for v in (*flows["verifier"].outputs, *flows["filter"].outputs)).items())
    )


def coverage(results: Results) -> dict[str, int]:
    """QA decisions by how the NER-coverage join settled their coverage (``off``: the join is off)."""
    decided = results.flows["dbpm"].latest.values()
    return dict(sorted(Counter(str(d.coverage) for d in decided if d.coverage is not None).items()))
