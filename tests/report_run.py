"""A small run of ``clingate demo`` as its report shows it, built without running the demo: enough for
every chart of ``report.html`` to draw every kind of series (the unit tests of the charts and the
browser test of the report read it)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from processors.dbpm.extraction import QA_TEMPLATES
from processors.dbpm.measurement import (
    ChannelPopulation,
    PopulationReport,
    SelectivityCell,
    SelectivityCounts,
    TagCounts,
)
from streams.demo.results import DbpmResults, MemoryPoint, PatientRow, Results, WeekLights
from streams.demo.streams import FLOWS
from streams.demo.tap import Flow

TASKS = ("ner", "re", "qa")
SIGNATURES = {
    "ner": ("n1", "n2"),
    "re": ("r1", "TESTS|ASSOCIATED_WITH|DIAGNOSIS"),
    "qa": ("q1", "qa::outcome_clinicalstatus|unsupported"),
}
"""Six blocklist signatures, so the trajectory chart leaves one out (``ner n1``, the smallest); the
second of each task's its largest, two of them as long as the demo's longest."""
SNAPSHOT_HOURS = (0, 1, 2, 3)
"""The event times of the snapshots, in hours (in time order, as
:func:`streams.demo.plan.memory_over_time` takes them)."""
CATEGORIES = tuple(QA_TEMPLATES)
"""The QA categories of the lift chart: eleven, some with long names."""


def small_run() -> Results:
    """A run of four memory snapshots, every QA category (the last one's lift undefined), three weeks of
    lights and the demo's five streams: enough for every chart of the report to draw every kind of
    series. Severity x count at the end differs between signatures, so the top five are certain."""
    snapshots = [
        MemoryPoint(
            3600.0 * hours,
            {
                task: {
                    sig: ((index + 1) / 4 * (0.1 * (k + 1) + 0.03 * t), index + k + 1)
                    for k, sig in enumerate(SIGNATURES[task])
                }
                for t, task in enumerate(TASKS)
            },
            {task: 500 * index + i for i, task in enumerate(TASKS)},
        )
        for index, hours in enumerate(SNAPSHOT_HOURS)
    ]
    selectivity = [
        SelectivityCell("qa", c, TagCounts(2 + i, 12, 1 + i % 3, 10)) for i, c in enumerate(CATEGORIES)
    ]
    selectivity[-1] = SelectivityCell("qa", CATEGORIES[-1], TagCounts(1, 3, 0, 0))
    dbpm = DbpmResults(
        patients=3, narratives=3, gates=12, same=True, per_task=Counter({("ner", "BLOCK"): 2}),
        population=PopulationReport.of(None, [ChannelPopulation(t, 4, 2, 1, 1, 1) for t in TASKS]),
        selectivity=SelectivityCounts.from_cells(selectivity),
        snapshots=snapshots, differing=0, lockstep=1, lockstep_gates=4, same_state=True,
        memory_differences=[], verdicts=10,
        lockstep_s=1.0, blocks=2, let_through=10, failed_verifications=0, failed_narratives=0, bulk=None,
    )  # fmt: skip
    flows = {}
    sources = {"verifier": "verifier_mmed", "filter": "rule_based"}
    for i, name in enumerate(FLOWS):
        flow = Flow(name, produced={"a": 0.0, "b": 0.5}, consumed={"a": 0.1 * (i + 1), "b": 1.0 + i})
        flow.outputs = [SimpleNamespace(source=sources[name])] * 2 if name in sources else ["a", "b"]
        flows[name] = flow
    weeks = [Counter(RED=1, YELLOW=3, GREEN=6), Counter(RED=2, YELLOW=4, GREEN=4), Counter(RED=4, GREEN=6)]
    return Results(
        dbpm=dbpm,
        lights=weeks[-1],
        lights_by_week=[WeekLights(week, lights, 1) for week, lights in enumerate(weeks)],
        golden=[PatientRow("p1", 70, "high", ["warfarin"], "RED", "RED", ["interaction"])],
        flows=flows,
    )
