"""The pharmacist's board: every patient's current assessment, the most urgent first, and each patient's
history.

What holds: a patient's current assessment is the last one the clinical workers published for them (the
topic is keyed by patient, so their records are in publication order, :mod:`streams.console.assessments`).
The board orders patients by traffic light (RED, YELLOW, GREEN), then by the NTI drug gate's severity
(CRITICAL, ELEVATED, NORMAL), then by patient id, so that the same assessments always give the same
board. A patient's page shows their current assessment, then what the output gates did to the LLM's
drafts of their runs (each revision's lint, citation observations, SCDA assertions and route,
:mod:`streams.console.drafts`), then their earlier assessments still on the topic, newest first. Both
pages are the pharmacist role's only.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from schemas.clinical import ClinicalAssessment
from schemas.console import Role
from streams.console.assessments import ASSESSMENTS
from streams.console.auth import requires
from streams.console.drafts import DRAFTS, runs_of
from streams.console.pages import PageLink, render

PAGE = PageLink("/pharmacist", "Pharmacist board", frozenset({Role.PHARMACIST}))

LIGHT_RANK = {"RED": 0, "YELLOW": 1, "GREEN": 2}
SEVERITY_RANK = {"CRITICAL": 0, "ELEVATED": 1, "NORMAL": 2}


def board(records: Iterable[ClinicalAssessment]) -> list[ClinicalAssessment]:
    """The current assessment of each patient of ``records`` (in publication order), in board order."""
    current = {record.patient_id: record for record in records}
    return sorted(
        current.values(),
        key=lambda a: (LIGHT_RANK[a.traffic_light.light], SEVERITY_RANK[a.nti.severity], a.patient_id),
    )


def history(records: Iterable[ClinicalAssessment], patient_id: str) -> list[ClinicalAssessment]:
    """The assessments of ``patient_id`` among ``records`` (in publication order), newest first."""
    return [record for record in records if record.patient_id == patient_id][::-1]


@requires(*PAGE.roles)
async def board_page(request: web.Request) -> web.StreamResponse:
    """``GET /pharmacist``: the board."""
    log = await request.app[ASSESSMENTS].read()
    return render(request, "board.html", title=PAGE.title, rows=board(log.records), unreadable=log.unreadable)


@requires(*PAGE.roles)
async def patient_page(request: web.Request) -> web.StreamResponse:
    """``GET /pharmacist/patient/{patient_id}``: one patient's assessments, newest first, and their runs
    through the output gates (404: neither)."""
    patient_id = request.match_info["patient_id"]
    log = await request.app[ASSESSMENTS].read()
    drafts = await request.app[DRAFTS].read()
    records = history(log.records, patient_id)
    runs = runs_of(drafts, patient_id)
    return render(
        request, "patient.html", status=200 if records or runs else 404, title=f"Patient {patient_id}",
        patient_id=patient_id, records=records, unreadable=log.unreadable, runs=runs,
        drafts_unreadable=drafts.unreadable,
    )  # fmt: skip


def add_routes(app: web.Application) -> None:
    """The pharmacist's pages."""
    app.router.add_get(PAGE.path, board_page)
    app.router.add_get(PAGE.path + "/patient/{patient_id}", patient_page)
