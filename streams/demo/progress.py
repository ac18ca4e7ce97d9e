"""Step 3's progress bars, one per stream, and when the streams are complete.

Where the output is not a terminal (``make demo | tee demo.log``, CI) the bars cannot redraw, so the
watch prints where each stream stands as plain lines every :data:`PLAIN_EVERY_S` instead.

Dead-lettered LLM work counts as done, with failure (docs/demo.md, "Done, with failure"), so every
bar reaches its total and says how much was dead-lettered. The watch fails at once when a feeder, the
tap or a started process fails, rather than waiting out the streams' timeout.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from streams.demo.calls import LlmCalls, Stall
from streams.demo.errors import DemoError
from streams.demo.feed import Feeder
from streams.demo.plan import Plan, last_per_patient
from streams.demo.results import DeadLettered
from streams.demo.services import ServiceProcess
from streams.demo.tap import Flow, Tap
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_VERDICTS,
    DOCS_DISPOSITIONS,
)

PLAIN_EVERY_S = 10.0
"""How often the watch prints plain progress lines where the output is not a terminal."""

_TITLES = {
    "generator": f"candidates ({DBPM_CANDIDATES})",
    "dbpm": f"DBPM gate decisions ({DBPM_DECISIONS})",
    "verifier": f"verdicts on let-through ({DBPM_VERDICTS})",
}
_FAILURE = {"generator": "narratives", "dbpm": "narratives", "verifier": "verifications"}
_GROUP = {"generator": "generator", "verifier": "verifier-1"}
"""The LLM group (its log's name, :class:`streams.demo.calls.LlmCalls`) whose calls a bar shows."""


@dataclass(frozen=True)
class LoopProgress:
    """Where one DBPM progress bar stands: work done (dead-lettered work included), its total, and how
    much of the done work was dead-lettered (None total: not known in advance, a real model's)."""

    done: int
    total: int | None
    dead_lettered: int


def loop_progress(plan: Plan, flows: dict[str, Flow], dead: DeadLettered) -> dict[str, LoopProgress]:
    """The DBPM bars (generator, gate, verifier), counting dead-lettered LLM work as done with failure.

    A planned candidate of a dead-lettered narrative that has not come (the generator published only
    the candidates of the calls that succeeded) is done for the generator and the gate bars; a
    dead-lettered verification is done for the verifier bar, whose total is the candidates let through
    (counted on ``clingate.dbpm.to-verify``, the verifier's input: no walk over every decision per tick).
    """
    planned = plan.llm_url is None
    never = (
        sum(
            1
            for patient in list(dead.narratives.consumed)
            for c in plan.loop.candidates.get(patient, [])
            if c.candidate_id not in flows["dbpm"].produced
        )
        if planned
        else 0
    )
    total = plan.gates if planned else None
    failed_narratives = len(dead.narratives.consumed)
    let_through = len(flows["verifier"].produced)  # the to-verify records: the gate's ALLOW and DOWNGRADE
    failed = len(dead.verifications.consumed)
    return {
        "generator": LoopProgress(len(flows["generator"].outputs) + never, total, failed_narratives),
        "dbpm": LoopProgress(len(flows["dbpm"].consumed) + never, total, failed_narratives),
        "verifier": LoopProgress(len(flows["verifier"].consumed) + failed, let_through, failed),
    }


class StreamWatch:
    """The progress bars of step 3 until the streams are complete (:meth:`run`).

    Args:
        feeders: the threads producing the inputs.
        services: the processes whose exit fails the run at once.
    """

    def __init__(
        self,
        plan: Plan,
        flows: dict[str, Flow],
        dead: DeadLettered,
        feeders: Sequence[Feeder],
        tap: Tap,
        services: Sequence[ServiceProcess],
        calls: LlmCalls,
    ) -> None:
        self._plan, self._flows, self._dead = plan, flows, dead
        self._feeders, self._tap, self._services = feeders, tap, services
        self._calls = calls

    def run(self, console: Console, timeout_s: float) -> None:
        """Show the bars until every feeder finished and every expected output arrived.

        Raises:
            DemoError: a feeder, the tap or a service failed, or nothing progressed for ``timeout_s``
                (longer when the LLM groups' calls are slow: :class:`streams.demo.calls.Stall`).
        """
        columns = (
            TextColumn("{task.description:<46}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        stall = Stall(self._calls, timeout_s)
        printed = time.monotonic()
        with Progress(*columns, console=console) as progress:
            bars = self._bars(progress)
            while True:
                self._update(progress, bars)
                self._check_failures()
                if self._complete():
                    break
                if not console.is_terminal and time.monotonic() - printed >= PLAIN_EVERY_S:
                    printed = time.monotonic()
                    for line in plain_lines(progress):
                        console.print(line, markup=False, highlight=False)
                if stall.expired(self._done()):
                    raise DemoError(
                        f"streams not complete: no progress for {stall.window_s:.0f} s: {self._state()}"
                    )
                time.sleep(0.3)

    def _bars(self, progress: Progress) -> dict[str, TaskID]:
        plan = self._plan
        return {
            **{name: progress.add_task(title, total=None) for name, title in _TITLES.items()},
            "clinical": progress.add_task(
                f"assessments ({CLINICAL_ASSESSMENTS})", total=plan.clinical_outputs
            ),
            "gates": progress.add_task(
                "golden runs: gated drafts, routes, safety audits", total=len(plan.gates_expected)
            ),
            "docs": progress.add_task(f"documents ({DOCS_DISPOSITIONS})", total=len(plan.documents)),
        }

    def _done(self) -> tuple[int, ...]:
        """What has been done so far, every stream: it changes whenever anything progresses."""
        return tuple(len(flow.consumed) for flow in self._flows.values())

    def _update(self, progress: Progress, bars: dict[str, TaskID]) -> None:
        calls = self._calls.groups()
        for name, at in loop_progress(self._plan, self._flows, self._dead).items():
            failed = f" [{at.dead_lettered} {_FAILURE[name]} dead-lettered]" if at.dead_lettered else ""
            group = _GROUP.get(name)
            busy = f" ({calls[group].text()})" if group in calls and calls[group].done else ""
            progress.update(
                bars[name], completed=at.done, total=at.total, description=_TITLES[name] + failed + busy
            )
        progress.update(bars["clinical"], completed=len(self._flows["clinical"].outputs))
        progress.update(bars["gates"], completed=len(self._flows["gates"].consumed))
        progress.update(bars["docs"], completed=len(self._flows["docs"].consumed))

    def _check_failures(self) -> None:
        failed = [f.error for f in self._feeders if f.error is not None]
        if failed:
            raise failed[0]
        if self._tap.error is not None:
            raise DemoError(f"the demo's consumer failed: {self._tap.error}")
        for service in self._services:
            service.check_running()

    def _complete(self) -> bool:
        if any(f.is_alive() for f in self._feeders):
            return False
        last = last_per_patient(self._flows["clinical"].outputs)
        clinical_done = all(last.get(pid) == a for pid, a in self._plan.clinical_expected.items())
        gates_done = len(self._flows["gates"].consumed) == len(self._plan.gates_expected)
        return clinical_done and gates_done and len(self._flows["docs"].consumed) == len(self._plan.documents)

    def _state(self) -> dict[str, object]:
        """What is missing, for the timeout's message."""
        expected = self._plan.clinical_expected
        last = last_per_patient(self._flows["clinical"].outputs)
        return {
            "producers running": [f.name for f in self._feeders if f.is_alive()],
            "patients without their final assessment": len(expected)
            - sum(1 for p, a in last.items() if expected.get(p) == a),
            "golden-run outputs missing": len(self._plan.gates_expected) - len(self._flows["gates"].consumed),
            "documents without a disposition": len(self._plan.documents) - len(self._flows["docs"].consumed),
        }


def plain_lines(progress: Progress) -> list[str]:
    """Where each bar stands, one line each (``<description>: <done>/<total>``, ``?`` for a total not
    known yet), for an output that is not a terminal."""
    lines = []
    for task in progress.tasks:
        total = "?" if task.total is None else f"{task.total:,.0f}"
        lines.append(f"{task.description.strip()}: {task.completed:,.0f}/{total}")
    return lines
