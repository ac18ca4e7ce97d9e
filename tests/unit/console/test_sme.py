"""The SME's review pages through HTTP (aiohttp's test client, fakes for the packet source and the request
sink): the queue oldest first, the packet with its context and issues, Agree and Correct asking for the
Review ``clingate arbiter review`` builds (audited first, under the audit record's id), CSRF, the role
guard, the rates of the recorded reviews."""

from __future__ import annotations

import html as html_module
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urljoin

import pytest
from aiohttp.test_utils import TestClient

from schemas.console import Role
from schemas.docs import DocumentType, Review, ReviewDecision, ReviewPacket, ReviewStatus
from streams.console.sme import marked, rates
from streams.demo.plan import verify_example
from streams.groups.arbiter import make_review
from streams.requests.check import RequestAction

from .conftest import PASSWORD, Console, csrf_of, sign_in

Client = TestClient[Any, Any]
CASES = ("fabricated", "quest", "requisition")
"""The demo's examples the rules-only arbiter escalates with page context."""


@pytest.fixture(scope="module")
def packets() -> dict[str, ReviewPacket]:
    """The rules-only arbiter's packets of the demo's examples, by case."""
    found = {}
    for case in CASES:
        _, finished = verify_example(case)
        assert finished.packet is not None
        found[case] = finished.packet
    return found


@pytest.fixture
def site(console: Console, packets: dict[str, ReviewPacket]) -> Console:
    """The console with an SME ``sam`` and the three packets, published newest first."""
    console.users.add("sam", Role.SME, PASSWORD)
    base = datetime(2025, 2, 18, 14, 30, tzinfo=UTC)
    for age, case in enumerate(CASES):  # fabricated oldest, requisition newest
        packet = packets[case].model_copy(update={"ts": base + timedelta(minutes=age)})
        console.reviews.packets[packet.doc_id] = packet
    console.reviews.packets = dict(reversed(console.reviews.packets.items()))
    return console


def _queue(html: str) -> list[str]:
    return re.findall(r'<tr data-doc="([^"]+)">', html)


def test_the_queue_lists_the_pending_packets_oldest_first(site: Console, packets: dict[str, Any]) -> None:
    reviewed = packets["quest"].model_copy(update={"review_status": ReviewStatus.REVIEWED})
    site.reviews.packets[reviewed.doc_id] = reviewed

    async def scenario(client: Client) -> str:
        await sign_in(client, "sam", target="/sme")
        page = await client.get("/sme")
        assert page.status == 200
        return await page.text()

    html = site.run(scenario)
    assert _queue(html) == [packets["fabricated"].doc_id, packets["requisition"].doc_id]
    row = html[html.index(f'data-doc="{packets["fabricated"].doc_id}"') :].split("</tr>")[0]
    assert "Genomic Report" in row and "<td>1</td>" in row and "<td>2</td>" in row, "type, rule, issues"
    assert "No review has been recorded yet." in html


def test_the_packet_page_shows_the_classification_every_issue_and_the_context(
    site: Console, packets: dict[str, ReviewPacket]
) -> None:
    packet = packets["fabricated"]

    async def scenario(client: Client) -> str:
        await sign_in(client, "sam")
        page = await client.get(f"/sme/packet/{packet.doc_id}")
        assert page.status == 200
        assert (await client.get("/sme/packet/nobody")).status == 404
        return html_module.unescape(await page.text())

    html = site.run(scenario)
    assert "Genomic Report" in html and "V5 rule 1" in html
    assert re.findall(r'data-issue="([^"]+)"', html) == [issue.id for issue in packet.issues]
    for issue in packet.issues:
        assert issue.message in html
    for context in packet.contexts:
        for paragraph in context.paragraphs:
            assert paragraph.text in re.sub(r"</?mark>", "", html), "every paragraph of the context"
    assert "<mark>Variant Classification</mark>" in html, "the located text in its paragraph"
    assert "<mark>BRCA1" not in html, "the fabricated evidence is found nowhere on the page"
    assert 'value="AGREES"' in html and 'value="CORRECTS"' in html
    assert all(f'<option value="{t.value}">' in html for t in DocumentType)


def test_the_context_is_escaped(site: Console, packets: dict[str, ReviewPacket]) -> None:
    packet = packets["quest"]
    context = packet.contexts[0]
    paragraphs = [
        p.model_copy(update={"text": "<script>alert(1)</script> " + p.text}) for p in context.paragraphs
    ]
    hostile = packet.model_copy(update={"contexts": [context.model_copy(update={"paragraphs": paragraphs})]})
    site.reviews.packets[packet.doc_id] = hostile

    async def scenario(client: Client) -> str:
        await sign_in(client, "sam")
        return await (await client.get(f"/sme/packet/{packet.doc_id}")).text()

    html = site.run(scenario)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _decide(doc_id: str, **form: str) -> Any:
    async def scenario(client: Client) -> Any:
        await sign_in(client, "sam")
        page = await client.get(f"/sme/packet/{doc_id}")
        data = {"csrf_token": csrf_of(await page.text()), **form}
        response = await client.post(f"/sme/packet/{doc_id}", data=data, allow_redirects=False)
        await response.read()
        queue = await client.get(response.headers.get("Location", "/sme"))
        return response, await queue.text()

    return scenario


def test_agree_publishes_the_review_the_arbiter_command_builds_and_audits_it(
    site: Console, packets: dict[str, ReviewPacket]
) -> None:
    doc_id = packets["quest"].doc_id
    before = datetime.now(UTC)
    response, queue = site.run(_decide(doc_id, decision="AGREES", corrected_type="OTHER"))
    assert response.status == 303 and response.headers["Location"].startswith("/sme?")
    assert f"Review of {doc_id} recorded (AGREES)." in queue
    [(review, sent)] = site.requests.records(RequestAction.REVIEW)
    expected = make_review(doc_id, "sam", ReviewDecision.AGREES)
    assert review.model_dump(exclude={"ts"}) == expected.model_dump(exclude={"ts"}), "no corrected type"
    assert before <= review.ts <= datetime.now(UTC)
    [action] = [a for a in site.trail.records if a.action == "review"]
    assert (action.user, action.role, action.target, action.outcome) == ("sam", "sme", doc_id, "ok")
    assert '"decision": "AGREES"' in action.detail
    assert action in sent.audited, "recorded before it was asked for"
    assert (sent.request.request_id, sent.request.role, sent.request.target, sent.request.key) == (
        action.action_id, "sme", doc_id, doc_id.encode(),
    )  # fmt: skip


def test_correct_publishes_the_corrected_type_and_notes(
    site: Console, packets: dict[str, ReviewPacket]
) -> None:
    doc_id = packets["requisition"].doc_id
    response, _ = site.run(
        _decide(doc_id, decision="CORRECTS", corrected_type="OTHER", notes=" a requisition ")
    )
    assert response.status == 303
    [(review, _)] = site.requests.records(RequestAction.REVIEW)
    assert (review.reviewer, review.decision, review.corrected_dominant_type, review.notes) == (
        "sam", ReviewDecision.CORRECTS, DocumentType.OTHER, "a requisition",
    )  # fmt: skip
    assert [(a.action, a.outcome, a.target) for a in site.trail.records][-1] == ("review", "ok", doc_id)


@pytest.mark.parametrize(
    ("form", "status"),
    [({"decision": "CORRECTS"}, 400), ({"decision": "MAYBE"}, 400), ({}, 400)],
)
def test_a_decision_without_what_it_needs_is_refused_and_not_published(
    site: Console, packets: dict[str, ReviewPacket], form: dict[str, str], status: int
) -> None:
    response, _ = site.run(_decide(packets["quest"].doc_id, **form))
    assert response.status == status
    assert not site.requests.produced and not [a for a in site.trail.records if a.action == "review"]


def test_a_packet_already_reviewed_cannot_be_decided_again(site: Console, packets: dict[str, Any]) -> None:
    reviewed = packets["quest"].model_copy(update={"review_status": ReviewStatus.REVIEWED})
    site.reviews.packets[reviewed.doc_id] = reviewed
    response, _ = site.run(_decide(reviewed.doc_id, decision="AGREES"))
    assert response.status == 409 and not site.requests.produced


def test_a_decision_without_the_csrf_token_is_refused(
    site: Console, packets: dict[str, ReviewPacket]
) -> None:
    doc_id = packets["quest"].doc_id

    async def scenario(client: Client) -> None:
        await sign_in(client, "sam")
        for token in (None, "forged"):
            form = {"decision": "AGREES"} | ({} if token is None else {"csrf_token": token})
            response = await client.post(f"/sme/packet/{doc_id}", data=form, allow_redirects=False)
            assert response.status == 403

    site.run(scenario)
    assert not site.requests.produced
    assert [(a.action, a.target) for a in site.trail.records if a.outcome == "refused"] == [
        ("csrf-refused", f"/sme/packet/{doc_id}")
    ] * 2


def test_a_pharmacist_gets_403_on_the_sme_pages(site: Console, packets: dict[str, ReviewPacket]) -> None:
    doc_id = packets["quest"].doc_id

    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        for path in ("/sme", f"/sme/packet/{doc_id}"):
            response = await client.get(path, allow_redirects=False)
            assert response.status == 403 and doc_id not in await response.text()
        token = csrf_of(await (await client.get("/pharmacist")).text())
        form = {"csrf_token": token, "decision": "AGREES"}
        assert (await client.post(f"/sme/packet/{doc_id}", data=form, allow_redirects=False)).status == 403
        assert 'href="/sme"' not in await (await client.get("/")).text()

    site.run(scenario)
    assert not site.requests.produced
    assert {a.target for a in site.trail.records if a.action == "access-denied"} == {
        "/sme",
        f"/sme/packet/{doc_id}",
    }


def test_a_review_kafka_does_not_acknowledge_is_a_503_and_audited_as_refused(
    site: Console, packets: dict[str, ReviewPacket]
) -> None:
    site.requests.down = True
    doc_id = packets["quest"].doc_id
    response, _ = site.run(_decide(doc_id, decision="AGREES"))
    assert response.status == 503 and "so it was not done" in response._body.decode()
    assert [(a.action, a.outcome) for a in site.trail.records if a.action == "review"] == [
        ("review", "ok"), ("review", "refused"),
    ]  # fmt: skip


def test_the_rates_count_each_documents_latest_review_by_rule_and_type(
    site: Console, packets: dict[str, ReviewPacket]
) -> None:
    fabricated, quest, requisition = (packets[c].doc_id for c in CASES)
    site.reviews.reviews = [
        make_review(fabricated, "sam", ReviewDecision.CORRECTS, corrected_type=DocumentType.OTHER),
        make_review(fabricated, "sam", ReviewDecision.AGREES),  # the latest counts
        make_review(quest, "sam", ReviewDecision.CORRECTS, corrected_type=DocumentType.OTHER),
        make_review(requisition, "sam", ReviewDecision.AGREES),
        make_review("unknown-doc", "sam", ReviewDecision.AGREES),  # no packet: not counted
    ]
    by_rule, by_type = rates(site.reviews.packets, site.reviews.reviews)
    assert [(r.group, r.agreed, r.corrected) for r in by_rule] == [("rule 1", 2, 1)]
    assert [(r.group, r.agreed, r.corrected) for r in by_type] == [
        ("Genomic Report", 1, 1), ("Pathology Report", 1, 0),
    ]  # fmt: skip

    async def scenario(client: Client) -> str:
        await sign_in(client, "sam")
        return await (await client.get("/sme")).text()

    html = site.run(scenario)
    row = html[html.index('data-group="rule 1"') :].split("</tr>")[0]
    assert "<td>3</td><td>2</td><td>1</td>" in row and "67%" in row and "33%" in row


def test_marked_splits_out_the_located_text_whatever_its_case() -> None:
    assert marked("Quest Diagnostics, quest", "QUEST") == [
        ("Quest", True),
        (" Diagnostics, ", False),
        ("quest", True),
    ]
    assert marked("text", None) == [("text", False)]


def test_reviews_are_the_records_the_arbiter_command_builds() -> None:
    review = make_review("doc", "sam", ReviewDecision.CORRECTS, corrected_type=DocumentType.OTHER, notes="n")
    assert isinstance(review, Review) and review.ts.tzinfo is UTC


def test_a_packet_whose_id_climbs_out_of_its_page_is_linked_reached_and_decided(
    site: Console, packets: dict[str, ReviewPacket]
) -> None:
    """A packet id ``../../dead-letters`` is one path segment in the queue's link and the forms' action,
    as a browser resolves them, so the SME reaches that packet and decides it (not ``/dead-letters``)."""
    hostile = packets["fabricated"].model_copy(update={"doc_id": "../../dead-letters"})
    site.reviews.packets = {hostile.doc_id: hostile}

    async def scenario(client: Client) -> tuple[str, str, int, int]:
        await sign_in(client, "sam")
        queue = await (await client.get("/sme")).text()
        [href] = re.findall(r'href="(/sme/packet/[^"]+)"', queue)
        page = await client.get(urljoin("/sme", href))
        html = await page.text()
        [action] = set(re.findall(r'action="(/sme/packet/[^"]+)"', html))
        form = {"csrf_token": csrf_of(html), "decision": "AGREES"}
        decided = await client.post(urljoin(href, action), data=form, allow_redirects=False)
        return href, action, page.status, decided.status

    href, action, status, decided = site.run(scenario)
    assert href == action == "/sme/packet/..%2F..%2Fdead-letters"
    assert status == 200 and decided == 303
    [(review, _)] = site.requests.records(RequestAction.REVIEW)
    assert review.doc_id == "../../dead-letters"
