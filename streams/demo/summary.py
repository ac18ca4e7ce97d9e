"""Step 9's summary: throughput and latency per stream and every measure and check, one row each.

The same rows make the terminal tables and the report's tables (:mod:`streams.demo.report`).
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from streams.bench.stats import percentile
from streams.demo.model import ProbeCall
from streams.demo.results import BulkFigures, Results

STREAM_NAMES = {
    "generator": "generator (narrative -> first candidate)",
    "dbpm": "DBPM gate (candidate -> decision)",
    "verifier": "verifier (to-verify -> verdict)",
    "filter": "ontology filter (relation -> rule-based verdict)",
    "clinical": "clinical (FHIR update -> assessment)",
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
        (
            "LLM failures, dead-lettered (verifications / narratives)",
            f"{dbpm.failed_verifications} / {dbpm.failed_narratives}",
        ),
        (f"lockstep slice ({dbpm.lockstep} patients): Kafka = in-process", "yes" if dbpm.same else "NO"),
        *_bulk_rows(dbpm.bulk),
        ("inert channels", ", ".join(dbpm.population.inert_channels()) or "none"),
        (
            "clinical assessments (final lights)",
            f"{sum(results.lights.values())}: " + lights_text(results.lights),
        ),
        ("clinical worker = in-process", "yes" if results.clinical_same else "NO"),
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
