"""The clinician's agent page through HTTP (aiohttp's test client, the agent's topics in memory): a
question asked for as the AgentRequest the worker answers, audited first, in a request under the audit
record's id; the turn page while the request runtime has not published it (or once it refused it), while
the agent works (it says so and reloads itself) and once it answered (the answer, the path, every decision
in order, the tool calls with their results, the proposals), with the turn a real scripted run of the
graph made; the clinician's recent questions; and the refusals: another role, no CSRF token, no question,
a question Kafka does not acknowledge."""

from __future__ import annotations

import asyncio
import html as html_module
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from schemas.agent import AgentProposal
from schemas.console import ConsoleRequestOutcome, Role
from streams.agent.patients import BundlePatients
from streams.agent.runner import TurnResult
from streams.console.agent import asked_at, new_turn_id
from streams.console.agent_topics import Turn
from streams.data import CLINICAL
from streams.testing.agent_session import prescription_script, scripted_agent

from .conftest import PASSWORD, Console, csrf_of, sign_in

Client = TestClient[Any, Any]
ANSWER = "A draft warfarin prescription was proposed; the clinical gates mark the patient <b>RED</b>."
QUESTION, SCRIPT = prescription_script("PT-TEST-010", ANSWER)
AS_OF = datetime(2026, 3, 29, tzinfo=UTC)


@pytest.fixture(scope="module")
def scripted() -> tuple[TurnResult, list[AgentProposal]]:
    """The turn the graph makes of :data:`QUESTION` with the scripted model and PT-TEST-010's bundle."""
    bundle = json.loads((CLINICAL / "PT-TEST-010.json").read_text("utf-8"))

    async def main() -> tuple[TurnResult, list[AgentProposal]]:
        async with scripted_agent(SCRIPT, BundlePatients([bundle], AS_OF)) as session:
            return await session.ask(QUESTION, AS_OF)

    return asyncio.run(main())


@pytest.fixture
def site(console: Console) -> Console:
    """The console with a second clinician ``dr2``."""
    console.users.add("dr2", Role.CLINICIAN, PASSWORD)
    return console


def _ask(form: dict[str, str], *, name: str = "dr") -> Any:
    async def scenario(client: Client) -> tuple[int, str, str]:
        await sign_in(client, name)
        token = csrf_of(await (await client.get("/agent")).text())
        response = await client.post("/agent", data={"csrf_token": token, **form}, allow_redirects=False)
        return response.status, response.headers.get("Location", ""), await response.text()

    return scenario


def _get(path: str, name: str = "dr") -> Any:
    async def scenario(client: Client) -> tuple[int, str]:
        await sign_in(client, name)
        page = await client.get(path)
        return page.status, await page.text()

    return scenario


def test_a_question_is_audited_then_published_as_the_request_the_worker_answers(site: Console) -> None:
    before = datetime.now(UTC)
    status, location, _ = site.run(_ask({"query": f"  {QUESTION} ", "patient_id": " PT-TEST-010 "}))
    [(request, audited)] = site.agent.asked
    assert status == 303 and location == f"/agent/turn/{request.request_id}"
    assert request.conversation_id == request.request_id, "a conversation per question"
    assert (request.query, request.patient_id, request.history) == (QUESTION, "PT-TEST-010", [])
    assert before <= request.event_time <= datetime.now(UTC)
    asked = asked_at(request.request_id)
    assert asked is not None and abs(asked - request.event_time) < timedelta(milliseconds=1)
    [action] = [a for a in site.trail.records if a.action == "ask"]
    assert action in audited, "recorded before it was asked for"
    assert (action.user, action.role, action.target, action.outcome) == (
        "dr", "clinician", request.request_id, "ok",
    )  # fmt: skip
    [sent] = site.requests.produced
    assert (sent.request.request_id, sent.request.role, sent.request.target, sent.request.key) == (
        action.action_id, "clinician", request.request_id, request.conversation_id.encode(),
    )  # fmt: skip
    assert QUESTION not in action.detail and "PT-TEST-010" not in action.detail, "no question on the trail"


def test_a_question_not_published_yet_is_waited_for_one_refused_says_why_one_no_longer_kept_is_404(
    site: Console,
) -> None:
    site.agent.published = False
    site.run(_ask({"query": QUESTION}))
    [(request, _)] = site.agent.asked
    status, html = site.run(_get(f"/agent/turn/{request.request_id}"))
    assert status == 200 and "has not published the question" in html
    assert '<meta http-equiv="refresh" content="2">' in html
    [action] = [a for a in site.trail.records if a.action == "ask"]
    site.trail.request_outcomes.append(
        ConsoleRequestOutcome(
            request_id=action.action_id, event_time=action.event_time, user="dr", action="ask",
            target=action.target, topic="clingate.agent.requests", outcome="refused",
            reason="its value is not a clingate.agent.AgentRequest",
        )
    )  # fmt: skip
    status, html = site.run(_get(f"/agent/turn/{request.request_id}"))
    assert status == 200 and "refused the question" in html and "not a clingate.agent.AgentRequest" in html
    assert "http-equiv" not in html
    site.trail.request_outcomes[-1] = site.trail.request_outcomes[-1].model_copy(update={"outcome": "ok"})
    status, html = site.run(_get(f"/agent/turn/{request.request_id}"))
    assert status == 404 and "is no longer on the agent" in html, "published, not kept"


def test_the_turn_page_says_the_agent_is_working_and_reloads_itself(site: Console) -> None:
    site.run(_ask({"query": QUESTION}))
    [(request, _)] = site.agent.asked
    status, html = site.run(_get(f"/agent/turn/{request.request_id}"))
    assert status == 200 and "Not answered yet" in html and QUESTION in html
    assert '<meta http-equiv="refresh" content="2">' in html
    assert "<script" not in html


def test_the_answered_turn_shows_the_answer_path_every_decision_tool_calls_and_proposals(
    site: Console, scripted: tuple[TurnResult, list[AgentProposal]]
) -> None:
    result, proposals = scripted
    site.run(_ask({"query": QUESTION}))
    [(request, _)] = site.agent.asked
    response = result.response(request)
    site.agent.turns[request.request_id] = Turn(request, response, tuple(result.traces), tuple(proposals))
    status, html = site.run(_get(f"/agent/turn/{request.request_id}"))
    assert status == 200 and "http-equiv" not in html
    assert "&lt;b&gt;RED&lt;/b&gt;" in html and "<b>RED</b>" not in html, "the answer, escaped"
    assert " → ".join(response.path) in html
    assert re.search(r'class="llm-calls">5<', html)
    rows = re.findall(r'<tr data-step="(\d+)" data-node="([A-Z_]+)">', html)
    assert rows == [(str(t.step), t.node) for t in result.traces], "every decision, in order"
    assert all(trace.decision in html_module.unescape(html) for trace in result.traces)
    tool = html[html.index('<tr data-tool="prescribe_medication">') :].split("</tr>")[0]
    assert "success" in tool and "warfarin" in tool and "proposal_id" in tool, "the call and its result"
    [proposal] = proposals
    assert f'data-proposal="{proposal.proposal_id}"' in html and "MedicationRequest" in html


def test_a_turn_that_asks_back_shows_the_written_question_and_why(
    site: Console, scripted: tuple[TurnResult, list[AgentProposal]]
) -> None:
    """The model writes the clarification question (the response's answer); the page shows it as what
    the agent asks, with the deterministic message it was written from."""
    result, _ = scripted
    site.run(_ask({"query": QUESTION}))
    [(request, _)] = site.agent.asked
    response = result.response(request).model_copy(
        update={"answer": "Which Smith do you mean?", "clarification": "Found 3 patients named Smith."}
    )
    site.agent.turns[request.request_id] = Turn(request, response, tuple(result.traces), ())
    status, html = site.run(_get(f"/agent/turn/{request.request_id}"))
    assert status == 200
    asks = r'<dt>The agent asks</dt><dd class="clarification"><pre[^>]*>Which Smith do you mean\?<'
    assert re.search(asks, html)
    assert "Found 3 patients named Smith." in html and "<dt>Answer</dt>" not in html


def test_the_recent_questions_are_the_clinicians_own(site: Console) -> None:
    site.run(_ask({"query": QUESTION}))
    site.run(_ask({"query": "What is hypertension?"}, name="dr2"))
    status, html = site.run(_get("/agent"))
    assert status == 200 and QUESTION in html and "What is hypertension?" not in html
    [(request, _), _] = site.agent.asked
    assert f'href="/agent/turn/{request.request_id}"' in html


@pytest.mark.parametrize(
    "form", [{}, {"query": "   "}, {"query": "x" * 4001}, {"query": QUESTION, "patient_id": "P" * 129}]
)
def test_a_question_without_what_it_needs_is_refused_and_not_published(
    site: Console, form: dict[str, str]
) -> None:
    status, _, html = site.run(_ask(form))
    assert status == 400 and "error" in html
    assert not site.agent.asked and not [a for a in site.trail.records if a.action == "ask"]


def test_a_question_kafka_does_not_acknowledge_is_a_503_and_audited_as_refused(site: Console) -> None:
    site.requests.down = True
    status, _, html = site.run(_ask({"query": QUESTION}))
    assert status == 503 and "was not done" in html
    assert [a.outcome for a in site.trail.records if a.action == "ask"] == ["ok", "refused"]


def test_a_question_without_the_csrf_token_is_refused(site: Console) -> None:
    async def scenario(client: Client) -> int:
        await sign_in(client, "dr")
        response = await client.post("/agent", data={"query": QUESTION}, allow_redirects=False)
        return response.status

    assert site.run(scenario) == 403 and not site.agent.asked


def test_a_pharmacist_gets_403_on_the_agent_pages(site: Console) -> None:
    turn = new_turn_id(datetime.now(UTC))

    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        for path in ("/agent", f"/agent/turn/{turn}"):
            response = await client.get(path, allow_redirects=False)
            assert response.status == 403 and "Ask the agent" not in await response.text()
        token = csrf_of(await (await client.get("/pharmacist")).text())
        form = {"csrf_token": token, "query": QUESTION}
        assert (await client.post("/agent", data=form, allow_redirects=False)).status == 403
        assert 'href="/agent"' not in await (await client.get("/")).text()

    site.run(scenario)
    assert not site.agent.asked
    assert len([a for a in site.trail.records if a.action == "access-denied"]) == 3


def test_a_turn_is_shown_only_to_the_clinician_who_asked_it(site: Console) -> None:
    site.run(_ask({"query": QUESTION}))
    [(request, _)] = site.agent.asked
    status, html = site.run(_get(f"/agent/turn/{request.request_id}", name="dr2"))
    assert status == 403 and QUESTION not in html
    [denied] = [a for a in site.trail.records if a.action == "access-denied"]
    assert (denied.user, denied.target, denied.outcome) == (
        "dr2",
        f"/agent/turn/{request.request_id}",
        "refused",
    )
    assert site.run(_get(f"/agent/turn/{request.request_id}"))[0] == 200


def test_an_unknown_or_malformed_turn_is_404(site: Console) -> None:
    assert site.run(_get(f"/agent/turn/{new_turn_id(datetime.now(UTC))}"))[0] == 404
    assert site.run(_get("/agent/turn/not-a-turn"))[0] == 404


def test_turn_ids_carry_the_time_they_were_asked() -> None:
    asked = datetime(2026, 5, 4, 10, 0, 0, 123000, tzinfo=UTC)
    turn = new_turn_id(asked)
    assert asked_at(turn) == asked and new_turn_id(asked) != turn
    assert asked_at("1777-x") is None and asked_at(turn + "x") is None
