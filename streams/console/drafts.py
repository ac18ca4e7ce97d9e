"""Where the pharmacist's patient page gets the output gates' work on the LLM's drafts:
``clingate.clinical.gated-drafts`` and ``clingate.clinical.revision-routes``, as the clinical workers
published them.

What holds: a patient's runs are grouped by run id, the newest run (by its latest record's event time,
then run id) first; within a run, revisions ascend, and each revision shows the last gated draft and the
last route published for it (an upstream that sends a revision again gets it gated again; the latest is
what the pharmacist acts on). A revision gated but not yet audited has no route, and the page says so.
Both topics are followed (:class:`~streams.console.records.TopicFollower`), as the pharmacist's
assessments are: the first page load reads them whole, every later one only what was committed since;
what was read is kept until the console restarts, which for their 365 days of retention is the size of
what they retain (a console for a very large ward would keep them in a table on disk instead). Records
that cannot be decoded are counted and the page says how many.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from aiohttp import web

from schemas.clinical import GatedDraft, RevisionRoute
from schemas.serde import Serde
from streams.console.pages import read_in_thread
from streams.console.records import TopicFollower
from topics.catalog import CLINICAL_GATED_DRAFTS, CLINICAL_REVISION_ROUTES


@dataclass(frozen=True)
class DraftLog:
    """The gated drafts and routes now on their topics, each partition's in publication order."""

    gated: tuple[GatedDraft, ...]
    routes: tuple[RevisionRoute, ...]
    unreadable: int = 0
    """Records of either topic skipped because they could not be decoded."""


@dataclass(frozen=True)
class Revision:
    """One revision of a run: its gated draft and, once audited, its route."""

    number: int
    gated: GatedDraft | None
    route: RevisionRoute | None


@dataclass(frozen=True)
class Run:
    """One run of a patient's drafts through the output gates."""

    run_id: str
    latest: datetime
    revisions: tuple[Revision, ...]


class DraftSource(Protocol):
    """What the patient page reads of the output gates."""

    async def read(self) -> DraftLog:
        """Every gated draft and route now on their topics.

        Raises:
            Unavailable: a topic could not be read.
        """
        ...


def runs_of(log: DraftLog, patient_id: str) -> list[Run]:
    """The runs of ``patient_id`` in ``log``, newest first (module docstring)."""
    gated = {(g.run_id, g.revision): g for g in log.gated if g.patient_id == patient_id}
    routes = {(r.run_id, r.revision): r for r in log.routes if r.patient_id == patient_id}
    by_run: dict[str, list[tuple[int, GatedDraft | None, RevisionRoute | None]]] = {}
    for run_id, number in sorted(gated.keys() | routes.keys()):
        by_run.setdefault(run_id, []).append(
            (number, gated.get((run_id, number)), routes.get((run_id, number)))
        )
    runs = []
    for run_id, revisions in by_run.items():
        times = [record.event_time for _, *records in revisions for record in records if record is not None]
        runs.append(Run(run_id, max(times), tuple(Revision(*revision) for revision in revisions)))
    return sorted(runs, key=lambda run: (run.latest, run.run_id), reverse=True)


class KafkaDrafts:
    """The gated-draft and route topics followed to their end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._gated = TopicFollower(bootstrap, serde, CLINICAL_GATED_DRAFTS, GatedDraft)
        self._routes = TopicFollower(bootstrap, serde, CLINICAL_REVISION_ROUTES, RevisionRoute)

    async def read(self) -> DraftLog:
        """Every committed gated draft and route now (read in a thread: the event loop goes on)."""
        return await read_in_thread(f"{CLINICAL_GATED_DRAFTS} or {CLINICAL_REVISION_ROUTES}", self._read)

    def _read(self) -> DraftLog:
        gated, routes = self._gated.read(), self._routes.read()
        return DraftLog(tuple(gated.values()), tuple(routes.values()), gated.unreadable + routes.unreadable)


DRAFTS = web.AppKey("drafts", DraftSource)
"""The application's source of gated drafts and routes."""
