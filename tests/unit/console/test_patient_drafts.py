"""The pharmacist's patient page shows the output gates' work on the patient's drafts: PT-TEST-010's
golden run (streams/data/runs/) through the pure clinical stream processor, as the clinical workers
publish it, gives three revisions with their citation observations, lint, SCDA assertions and routes."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import cache
from typing import Any

from aiohttp.test_utils import TestClient

from schemas.clinical import GatedDraft, RevisionRoute
from streams.console.drafts import DraftLog, runs_of
from streams.demo.runs import golden_runs, run_stages
from streams.runtime.settings import Settings
from streams.testing.clinical_reference import pure_outputs
from tests.unit.console.conftest import Console, sign_in

Client = TestClient[Any, Any]
WHEN = datetime(2026, 3, 29, tzinfo=UTC)


@cache
def published(case: str) -> tuple[tuple[GatedDraft, ...], tuple[RevisionRoute, ...]]:
    """The gated drafts and routes the pure stream processor publishes for ``case``'s golden run."""
    events = [record for _topic, records in run_stages(golden_runs([case], WHEN), []) for record in records]
    outputs = pure_outputs(events, Settings())
    gated = tuple(o for o in outputs if isinstance(o, GatedDraft))
    return gated, tuple(o for o in outputs if isinstance(o, RevisionRoute))


def test_a_patients_runs_group_each_revisions_last_gated_draft_and_route_newest_run_first() -> None:
    gated, routes = published("PT-TEST-010")
    later = gated[0].model_copy(
        update={"run_id": "PT-TEST-010-run-2", "event_time": datetime(2026, 4, 1, tzinfo=UTC)}
    )
    again = gated[1].model_copy(update={"restored": True})
    other = gated[0].model_copy(update={"patient_id": "PT-TEST-008"})
    runs = runs_of(DraftLog((*gated, later, again, other), routes), "PT-TEST-010")
    assert [run.run_id for run in runs] == ["PT-TEST-010-run-2", "PT-TEST-010-demo-run"]
    assert [(rev.number, rev.route) for rev in runs[0].revisions] == [(0, None)], "gated, not yet audited"
    old = runs[1].revisions
    assert [rev.number for rev in old] == [0, 1, 2]
    assert old[1].gated == again, "the last gated draft of a revision"
    assert [rev.route.route for rev in old if rev.route] == ["CLL_REVISION", "CLL_REVISION", "PROCEED"]


def test_the_patient_page_shows_each_revisions_citation_observations_lint_and_route(console: Console) -> None:
    gated, routes = published("PT-TEST-010")
    console.drafts.gated, console.drafts.routes = list(gated), list(routes)

    async def scenario(client: Client) -> str:
        await sign_in(client, "ph")
        page = await client.get("/pharmacist/patient/PT-TEST-010")
        assert page.status == 200
        return await page.text()

    html = console.run(scenario)
    assert re.findall(r'data-revision="(\d)" data-route="([A-Z_]+)"', html) == [
        ("0", "CLL_REVISION"), ("1", "CLL_REVISION"), ("2", "PROCEED"),
    ]  # fmt: skip
    assert html.count('data-kind="wrong_attribution"') == 12, "4 wrong attributions in each revision"
    assert "12 checked: 1 verified" in " ".join(html.split())
    assert "zero_violations" in html and "REVISION_REQUIRED" in html
    assert html.index("(current)") < html.index("Drafts through the output gates")
    quote = gated[0].citations.observations[0].quote
    assert quote.replace('"', "&#34;") in html or quote in html


def test_a_patient_with_drafts_but_no_assessment_has_a_page_and_an_unreadable_topic_answers_503(
    console: Console,
) -> None:
    gated, routes = published("PT-TEST-010")
    console.assessments.records = []
    console.drafts.gated, console.drafts.routes = list(gated), list(routes)

    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        page = await client.get("/pharmacist/patient/PT-TEST-010")
        assert page.status == 200 and "No assessment of PT-TEST-010" in await page.text()
        assert (await client.get("/pharmacist/patient/PT-NOBODY")).status == 404
        console.drafts.down = True
        assert (await client.get("/pharmacist/patient/PT-TEST-010")).status == 503

    console.run(scenario)
