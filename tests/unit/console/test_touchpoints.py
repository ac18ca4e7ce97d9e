"""The pharmacist's Query Gate and Evidence Review through HTTP (aiohttp's test client, the touchpoints'
topics and the request sink faked): the queues pending first, a proposal approved as it is or edited and an
evidence bundle accepted or rejected packet by packet, each audited first and asked for as the record the
pipeline reads under the audit record's id; the must-retrieve sources the bundle lacks; and the refusals:
what the record's model refuses, a run decided or asked for already, a stale form, a decision the request
runtime refused, Kafka not acknowledging, no CSRF token, another role."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from schemas.clinical import (
    ClinicalAssessment,
    EvidenceBundle,
    EvidencePacket,
    EvidenceReview,
    EvidenceVerdict,
    QueryDecision,
    QueryProposal,
    QueryVerdict,
    ReviewedPacket,
)
from schemas.console import ConsoleAction, ConsoleRequestOutcome
from streams.requests.check import RequestAction, touchpoint_target

from .conftest import Console, csrf_of, sign_in

Client = TestClient[Any, Any]
PATIENT = "PT-TEST-010"
AT = datetime(2026, 3, 29, 9, 0, tzinfo=UTC)
QUERIES = [
    "digoxin toxicity management",
    "electrolyte correction in cardiac glycoside toxicity",
    "heart failure medication optimization",
]
"""The three queries the seed's PT-TEST-010 trace says the reasoning step generated."""


def _proposal(run: str = "run-1", at: datetime = AT, patient: str = PATIENT) -> QueryProposal:
    return QueryProposal(patient_id=patient, run_id=run, event_time=at, queries=QUERIES)


def _bundle(must: list[str], run: str = "run-1") -> EvidenceBundle:
    """A bundle with two of the patient's must-retrieve sources and an off-target label."""
    packets = [
        EvidencePacket(source=must[0], text="Digoxin: therapeutic range 0.5-2.0 ng/mL."),
        EvidencePacket(source="rivaroxaban label.pdf", text="Rivaroxaban is a factor Xa inhibitor."),
        EvidencePacket(source=must[3], text="Digoxin immune Fab for life-threatening toxicity."),
    ]
    return EvidenceBundle(patient_id=PATIENT, run_id=run, event_time=AT, packets=packets)


@pytest.fixture
def must(golden: dict[str, ClinicalAssessment]) -> list[str]:
    """PT-TEST-010's must-retrieve sources (NTI CRITICAL, digoxin: seven)."""
    return golden[PATIENT].nti.must_retrieve


def _page(path: str, name: str = "ph") -> Any:
    async def scenario(client: Client) -> tuple[int, str]:
        await sign_in(client, name)
        page = await client.get(path)
        return page.status, await page.text()

    return scenario


def _post(path: str, form: dict[str, str], *, name: str = "ph", at: str | None = None) -> Any:
    """Open ``path``, post its form with ``form`` over the page's own fields (its CSRF token, the time of
    what it shows, unless ``at`` says otherwise); (status, location, body)."""

    async def scenario(client: Client) -> tuple[int, str, str]:
        await sign_in(client, name)
        html = await (await client.get(path)).text()
        shown = re.search(r'name="at" value="([^"]+)"', html)
        fields = {"csrf_token": csrf_of(html), "at": at if at is not None else shown[1] if shown else ""}
        response = await client.post(path, data=fields | form, allow_redirects=False)
        return response.status, response.headers.get("Location", ""), await response.text()

    return scenario


def _rows(queries: list[str]) -> dict[str, str]:
    """The Query Gate's rows filled with ``queries`` (the rest left blank)."""
    rows = {f"query-{i}": "" for i in range(len(QUERIES) + 2)}
    return rows | {f"query-{i}": query for i, query in enumerate(queries)}


def test_the_query_gate_lists_pending_proposals_first_oldest_first(console: Console) -> None:
    decided = _proposal("run-0", AT - timedelta(days=1))
    console.touchpoints.proposals = [
        decided, _proposal("run-2", AT + timedelta(hours=1)), _proposal("run-1"), _proposal("run-1", AT),
    ]  # fmt: skip
    console.touchpoints.decisions = [
        QueryDecision(
            patient_id=PATIENT, run_id="run-0", event_time=AT, proposed_at=decided.event_time,
            pharmacist="ph2", decision_id="a-0", decision=QueryVerdict.APPROVED, proposed=QUERIES,
            queries=QUERIES,
        )
    ]  # fmt: skip
    status, html = console.run(_page("/pharmacist/queries"))
    assert status == 200
    rows = re.findall(r'<tr data-patient="PT-TEST-010" data-run="([^"]+)" data-status="([a-z]+)">', html)
    assert rows == [("run-1", "pending"), ("run-2", "pending"), ("run-0", "decided")]
    assert "APPROVED</span> by ph2" in html
    assert 'href="/pharmacist/queries"' in html and 'href="/pharmacist/evidence"' in html, "in the navigation"


def test_a_proposal_left_as_it_is_is_approved_audited_first_under_the_audit_records_id(
    console: Console,
) -> None:
    console.touchpoints.proposals = [_proposal()]
    before = datetime.now(UTC)
    status, location, _ = console.run(_post("/pharmacist/queries/PT-TEST-010/run-1", _rows(QUERIES)))
    assert status == 303 and location == "/pharmacist/queries/PT-TEST-010/run-1"
    [(decision, sent)] = console.requests.records(RequestAction.QUERY_DECISION)
    [action] = [a for a in console.trail.records if a.action == "query-decision"]
    target = touchpoint_target(PATIENT, "run-1", AT)
    assert (action.user, action.role, action.target, action.outcome) == ("ph", "pharmacist", target, "ok")
    assert action in sent.audited, "recorded before it was asked for"
    assert (decision.decision, decision.queries, decision.proposed) == (
        QueryVerdict.APPROVED,
        QUERIES,
        QUERIES,
    )
    assert (decision.pharmacist, decision.decision_id, decision.proposed_at) == ("ph", action.action_id, AT)
    assert before <= decision.event_time == action.event_time <= datetime.now(UTC)
    request = sent.request
    assert (request.request_id, request.role, request.target, request.key, request.topic) == (
        action.action_id, "pharmacist", target, PATIENT.encode(), "clingate.clinical.query-decisions",
    )  # fmt: skip


def test_edited_queries_are_the_ones_retrieval_runs_with_the_pharmacists_note(console: Console) -> None:
    """The sepsis catch: drug-centric queries widened to the infection the clinical situation warrants."""
    console.touchpoints.proposals = [_proposal()]
    edited = [QUERIES[0], "", QUERIES[2], "sepsis source and empiric antibiotics in CKD 3b"]
    form = _rows(edited) | {"note": " anchor bias: fever and hypotension "}
    status, _, _ = console.run(_post("/pharmacist/queries/PT-TEST-010/run-1", form))
    assert status == 303
    [(decision, sent)] = console.requests.records(RequestAction.QUERY_DECISION)
    assert decision.decision is QueryVerdict.EDITED
    assert decision.queries == [QUERIES[0], QUERIES[2], edited[3]] and decision.proposed == QUERIES
    assert decision.note == sent.request.note == "anchor bias: fever and hypotension"
    assert '"decision": "EDITED"' in console.trail.records[-1].detail


def test_a_decision_without_a_query_is_refused_with_the_records_reason_and_nothing_recorded(
    console: Console,
) -> None:
    console.touchpoints.proposals = [_proposal()]
    status, _, html = console.run(_post("/pharmacist/queries/PT-TEST-010/run-1", _rows([])))
    assert status == 400 and "at least one query" in html
    long = console.run(_post("/pharmacist/queries/PT-TEST-010/run-1", _rows(["x" * 1001])))
    assert long[0] == 400 and "up to 1000 characters" in long[2]
    assert not console.requests.produced and not [a for a in console.trail.records if a.action != "sign-in"]


def test_a_proposal_decided_asked_for_or_replaced_cannot_be_decided(console: Console) -> None:
    console.touchpoints.proposals = [_proposal()]
    path = "/pharmacist/queries/PT-TEST-010/run-1"
    stale = console.run(_post(path, _rows(QUERIES), at="2026-03-28T09:00:00Z"))
    assert stale[0] == 409 and "A newer query proposal of this run arrived" in stale[2]
    assert console.run(_post(path, _rows(QUERIES)))[0] == 303
    asked = console.run(_post(path, _rows(QUERIES)))
    assert asked[0] == 409 and "ph asked for a decision on this query proposal already" in asked[2]
    [(decision, _)] = console.requests.records(RequestAction.QUERY_DECISION)
    console.touchpoints.decisions = [decision]
    status, html = console.run(_page(path))
    assert status == 200 and 'name="decide"' not in html and "APPROVED</span> by ph" in html
    assert console.run(_post(path, _rows(QUERIES), at=decision.proposed_at.isoformat()))[0] == 409
    assert len(console.requests.produced) == 1


def test_a_decision_the_request_runtime_refused_leaves_the_run_pending_and_says_why(console: Console) -> None:
    console.touchpoints.proposals = [_proposal()]
    path = "/pharmacist/queries/PT-TEST-010/run-1"
    console.run(_post(path, _rows(QUERIES)))
    [action] = [a for a in console.trail.records if a.action == "query-decision"]
    console.trail.request_outcomes.append(_refused(action, "the role 'pharmacist' may not query-decision"))
    status, html = console.run(_page(path))
    assert status == 200 and 'name="decide"' in html and "may not query-decision" in html
    assert console.run(_post(path, _rows(QUERIES)))[0] == 303, "asked for again"


def _refused(action: ConsoleAction, reason: str) -> ConsoleRequestOutcome:
    return ConsoleRequestOutcome(
        request_id=action.action_id, event_time=action.event_time, user=action.user, action=action.action,
        target=action.target, topic="clingate.clinical.query-decisions", outcome="refused", reason=reason,
    )  # fmt: skip


def test_the_evidence_review_shows_the_must_retrieve_sources_the_bundle_lacks(
    console: Console, must: list[str]
) -> None:
    console.touchpoints.bundles = [_bundle(must)]
    status, html = console.run(_page("/pharmacist/evidence/PT-TEST-010/run-1"))
    assert status == 200
    assert "2 of the patient's 7 in the bundle" in html
    for source in must[1:3] + must[4:]:
        assert source in html.split('class="missing"')[1].split("</dd>")[0]
    assert html.count("(must-retrieve)") == 2 and "Rivaroxaban is a factor Xa inhibitor." in html


def test_evidence_accepted_without_an_off_target_packet_is_the_review_reasoning_starts_on(
    console: Console, must: list[str]
) -> None:
    console.touchpoints.bundles = [_bundle(must)]
    form = {"packet-0": "accept", "packet-1": "reject", "packet-2": "accept", "decision": "ACCEPTED"}
    status, _, _ = console.run(_post("/pharmacist/evidence/PT-TEST-010/run-1", form))
    assert status == 303
    [(review, sent)] = console.requests.records(RequestAction.EVIDENCE_REVIEW)
    [action] = [a for a in console.trail.records if a.action == "evidence-review"]
    assert action in sent.audited and action.target == touchpoint_target(PATIENT, "run-1", AT)
    assert (review.decision, review.review_id, review.pharmacist, review.bundle_time) == (
        EvidenceVerdict.ACCEPTED, action.action_id, "ph", AT,
    )  # fmt: skip
    assert review.packets == [
        ReviewedPacket(source=must[0], accepted=True),
        ReviewedPacket(source="rivaroxaban label.pdf", accepted=False),
        ReviewedPacket(source=must[3], accepted=True),
    ]


def test_evidence_rejected_needs_a_note_saying_what_is_missing(console: Console, must: list[str]) -> None:
    console.touchpoints.bundles = [_bundle(must)]
    path = "/pharmacist/evidence/PT-TEST-010/run-1"
    status, _, html = console.run(_post(path, {"decision": "REJECTED"}))
    assert (
        status == 400 and "says in its note what the evidence lacks" in html and not console.requests.produced
    )
    every = {f"packet-{i}": "reject" for i in range(3)}
    status, _, html = console.run(_post(path, every | {"decision": "ACCEPTED"}))
    assert status == 400 and "accepts at least one packet" in html
    assert console.run(_post(path, {"decision": "MAYBE"}))[0] == 400
    note = "no renal dosing evidence for an eGFR of 36"
    assert console.run(_post(path, every | {"decision": "REJECTED", "note": note}))[0] == 303
    [(review, _)] = console.requests.records(RequestAction.EVIDENCE_REVIEW)
    assert (review.decision, review.note) == (EvidenceVerdict.REJECTED, note)
    assert not any(packet.accepted for packet in review.packets)
    console.touchpoints.reviews = [review]
    status, html = console.run(_page(path))
    assert status == 200 and "REJECTED</span> by ph" in html and html.count(">rejected<") == 3


def test_a_decision_kafka_does_not_acknowledge_is_a_503_and_audited_as_refused(console: Console) -> None:
    console.touchpoints.proposals = [_proposal()]
    console.requests.down = True
    status, _, html = console.run(_post("/pharmacist/queries/PT-TEST-010/run-1", _rows(QUERIES)))
    assert status == 503 and "was not done" in html
    assert [a.outcome for a in console.trail.records if a.action == "query-decision"] == ["ok", "refused"]


def test_a_run_with_nothing_before_the_pharmacist_is_404_and_unreadable_topics_503(console: Console) -> None:
    assert console.run(_page("/pharmacist/queries/PT-TEST-010/run-9"))[0] == 404
    console.touchpoints.down = True
    assert console.run(_page("/pharmacist/evidence"))[0] == 503


def test_a_decision_without_the_csrf_token_or_by_another_role_is_refused(console: Console) -> None:
    console.touchpoints.proposals = [_proposal()]
    path = "/pharmacist/queries/PT-TEST-010/run-1"

    async def scenario(client: Client) -> list[int]:
        await sign_in(client, "ph")
        statuses = [(await client.post(path, data=_rows(QUERIES), allow_redirects=False)).status]
        await client.post("/logout", data={"csrf_token": csrf_of(await (await client.get("/")).text())})
        await sign_in(client, "dr")
        for page in ("/pharmacist/queries", path, "/pharmacist/evidence"):
            response = await client.get(page, allow_redirects=False)
            statuses.append(response.status)
            assert QUERIES[0] not in await response.text()
        return statuses

    assert console.run(scenario) == [403, 403, 403, 403]
    assert not console.requests.produced
    refused = [(a.user, a.action) for a in console.trail.records if a.outcome == "refused"]
    assert refused == [("ph", "csrf-refused")] + [("dr", "access-denied")] * 3


def test_an_evidence_review_and_a_decision_hold_their_rules_as_records() -> None:
    """The rules the pages rely on are the records' own, so a request carrying a record that breaks them
    does not decode (the request runtime refuses it)."""
    base: dict[str, Any] = {
        "patient_id": PATIENT, "run_id": "r", "event_time": AT, "proposed_at": AT, "pharmacist": "ph",
        "decision_id": "a", "proposed": QUERIES,
    }  # fmt: skip
    with pytest.raises(ValueError, match="APPROVED exactly"):
        QueryDecision(**base, decision=QueryVerdict.APPROVED, queries=QUERIES[:1])
    with pytest.raises(ValueError, match="APPROVED exactly"):
        QueryDecision(**base, decision=QueryVerdict.EDITED, queries=QUERIES)
    with pytest.raises(ValueError, match="no blank one"):
        QueryDecision(**base, decision=QueryVerdict.EDITED, queries=[" "])
    with pytest.raises(ValueError, match="note"):
        EvidenceReview(
            patient_id=PATIENT, run_id="r", event_time=AT, bundle_time=AT, pharmacist="ph", review_id="a",
            decision=EvidenceVerdict.REJECTED, packets=[],
        )  # fmt: skip
