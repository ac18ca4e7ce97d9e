"""The clinician's agent page: ask a question, and see the answer with its path and each node's decision.

What holds:

* **Asking** asks for one :class:`~schemas.agent.AgentRequest` (a new conversation per question: its
  conversation and request id are the turn id, :func:`new_turn_id`; the event time now; the question and
  the patient in context, if given) for ``clingate agent worker`` to answer: the request runtime checks
  the request that carries it and publishes it (:mod:`streams.console.requests`). It is recorded on the
  audit trail first (action ``ask``, target the turn id: no question text, no patient id), and asked for
  only once that is acknowledged, under that record's id; a request Kafka does not acknowledge answers
  503 and is recorded again as ``refused``. The page then goes to the turn's page.
* **The turn page** (``/agent/turn/<turn id>``) shows the question, then the answer or the agent's
  clarification question, the path, the model-call count, every decision in step order (node, decision,
  schema, the model's raw answer, the event it took: a tool's result summarised, :func:`event_summary`),
  each tool call with its arguments, outcome and result summarised, and the proposals its write tools
  made. Until the agent has answered it says so, shows the decisions made so far, and reloads itself
  every :data:`REFRESH_S` seconds (``<meta http-equiv="refresh">``: no script, which the CSP forbids).
  A turn id is 72 random bits, with the time it was asked (where its records are looked for). A turn is
  its clinician's: the page shows it only to the user whose ``ask`` record on the audit trail names it;
  another clinician gets 403 (recorded as ``access-denied``), and a turn no one asked through the console
  is 404. Until the request runtime has published the question, the page says it waits for it and
  reloads itself, or says why the runtime refused it; a question published but no longer on the topic
  (its retention) is 404 too.
* **The recent turns** on ``/agent`` are the signed-in clinician's last :data:`RECENT` questions, from
  their ``ask`` records on the audit trail, with each question read back from the requests topic.

Only the clinician role opens these pages.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import UTC, datetime

from aiohttp import web

from processors.agent.state import ToolOutcome
from schemas.agent import AgentRequest, AgentTrace
from schemas.console import ConsoleAction, Role
from streams.agent.runner import event_of, trace_events
from streams.console.agent_topics import AGENT
from streams.console.audit import Action, Outcome, audit, record_refusal
from streams.console.auth import requires
from streams.console.delivery import NotAcknowledged
from streams.console.history import HISTORY
from streams.console.pages import PageLink, render, segment
from streams.console.requests import REQUESTS
from streams.console.sessions import SESSION
from streams.requests.check import REFUSED, RequestAction

PAGE = PageLink("/agent", "Agent", frozenset({Role.CLINICIAN}))

QUERY_MAX = 4000
"""The longest question the page takes."""
PATIENT_ID_MAX = 128
REFRESH_S = 2
"""Seconds between two loads of a turn page the agent has not answered yet."""
RECENT = 20
"""Recent turns listed on ``/agent``."""
SUMMARY_CHARS = 300
"""Characters of a tool result, a model answer or a proposal a page shows."""

TURN_ID = re.compile(r"(?P<ms>\d{13})-[A-Za-z0-9_-]{12}")
"""A turn id: the time it was asked (ms since the epoch) and 72 random bits."""


def new_turn_id(asked: datetime) -> str:
    """A turn id for a question asked at ``asked`` (:data:`TURN_ID`)."""
    return f"{int(asked.timestamp() * 1000):013d}-{secrets.token_urlsafe(9)}"


def asked_at(turn_id: str) -> datetime | None:
    """When the turn ``turn_id`` was asked (None: not a turn id)."""
    found = TURN_ID.fullmatch(turn_id)
    return None if found is None else datetime.fromtimestamp(int(found["ms"]) / 1000, tz=UTC)


def cut(text: str, limit: int = SUMMARY_CHARS) -> str:
    """``text`` up to ``limit`` characters, saying how many were left out."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def outcome_summary(outcome: ToolOutcome) -> str:
    """A tool's outcome in a line: its error, or its result as compact JSON (cut)."""
    if outcome.error is not None:
        return cut(f"{outcome.error_type or 'error'}: {outcome.error}")
    return cut(json.dumps(outcome.result, sort_keys=True, separators=(",", ":")))


def event_summary(trace: AgentTrace) -> str:
    """What the decision took (the event its trace record carries), in a line."""
    if trace.event is None:
        return ""
    event = event_of(trace.event)
    return outcome_summary(event) if isinstance(event, ToolOutcome) else "the model's answer"


@requires(*PAGE.roles)
async def ask_page(request: web.Request) -> web.StreamResponse:
    """``GET /agent``: the question form and the clinician's recent turns."""
    return await _ask_form(request)


async def _ask_form(
    request: web.Request, *, status: int = 200, error: str = "", query: str = "", patient_id: str = ""
) -> web.Response:
    user = request[SESSION].user
    mine = [
        a for a in await request.app[HISTORY].actions({Action.ASK}) if a.user == user and a.outcome == "ok"
    ]
    recent = sorted(mine, key=lambda a: a.event_time, reverse=True)[:RECENT]
    questions = await request.app[AGENT].requests(
        {a.target for a in recent}, min((a.event_time for a in recent), default=datetime.now(UTC))
    )
    turns = [(a, questions.get(a.target)) for a in recent]
    return render(
        request, "agent.html", status=status, title=PAGE.title, turns=turns, error=error, query=query,
        patient_id=patient_id, query_max=QUERY_MAX, patient_id_max=PATIENT_ID_MAX, cut=cut,
    )  # fmt: skip


@requires(*PAGE.roles)
async def ask(request: web.Request) -> web.StreamResponse:
    """``POST /agent``: publish the question (module docstring), then to its turn's page."""
    form = await request.post()
    query = str(form.get("query", "")).strip()
    patient_id = str(form.get("patient_id", "")).strip()
    if not query or len(query) > QUERY_MAX:
        error = f"Ask a question (1 to {QUERY_MAX} characters)."
        return await _ask_form(request, status=400, error=error, query=query, patient_id=patient_id)
    if len(patient_id) > PATIENT_ID_MAX or not patient_id.isprintable():
        error = f"A patient id is up to {PATIENT_ID_MAX} printable characters."
        return await _ask_form(request, status=400, error=error, query=query, patient_id=patient_id)
    asked = datetime.now(UTC)
    turn_id = new_turn_id(asked)
    question = AgentRequest(
        conversation_id=turn_id,
        request_id=turn_id,
        event_time=asked,
        query=query,
        patient_id=patient_id or None,
    )
    record = await audit(request, Action.ASK, Outcome.OK, target=turn_id)
    try:
        await request.app[REQUESTS].publish(record, RequestAction.ASK, question)
    except NotAcknowledged:
        await record_refusal(request, Action.ASK, target=turn_id, reason="not acknowledged")
        raise
    raise web.HTTPSeeOther(f"{PAGE.path}/turn/{segment(turn_id)}")


@requires(*PAGE.roles)
async def turn_page(request: web.Request) -> web.StreamResponse:
    """``GET /agent/turn/{turn_id}``: the turn, answered or not yet (module docstring)."""
    turn_id = request.match_info["turn_id"]
    asked = asked_at(turn_id)
    asks = [] if asked is None else await _asks(request, turn_id)
    if asks and request[SESSION].user not in {a.user for a in asks}:
        await record_refusal(request, Action.ACCESS_DENIED, reason="another clinician's turn")
        return render(request, "error.html", status=403, title="Not your turn",
                      message="This question was asked by another clinician.")  # fmt: skip
    if asked is None or not asks:
        return render(request, "error.html", status=404, title="No such turn",
                      message="No question of that turn was asked through the console.")  # fmt: skip
    # The outcome is read before the turn: the request runtime commits a question and its outcome in one
    # transaction, so a question whose outcome was read is on the requests topic for the read after it.
    # The other order would see the outcome of a question published between the two reads and call it gone.
    outcome = (await request.app[HISTORY].outcomes()).get(asks[-1].action_id)
    turn = await request.app[AGENT].turn(turn_id, turn_id, asked)
    if turn is None:  # not published yet, refused by the request runtime, or no longer kept
        if outcome is not None and outcome.outcome != REFUSED:
            return render(request, "error.html", status=404, title="No such turn",
                          message="The question is no longer on the agent's requests topic.")  # fmt: skip
        refused = "" if outcome is None else outcome.reason
        return render(request, "agent_asked.html", title="Agent turn", refused=refused, refresh_s=REFRESH_S)
    calls = []
    if turn.response is not None:
        outcomes = [e for e in trace_events(turn.traces) if isinstance(e, ToolOutcome)]
        calls = list(zip(turn.response.tool_calls, map(outcome_summary, outcomes), strict=True))
    return render(
        request, "agent_turn.html", title="Agent turn", turn=turn, calls=calls, event_summary=event_summary,
        cut=cut, refresh_s=REFRESH_S,
    )  # fmt: skip


async def _asks(request: web.Request, turn_id: str) -> list[ConsoleAction]:
    """The ``ask`` records of ``turn_id`` on the audit trail (who asked it through the console)."""
    asks = await request.app[HISTORY].actions({Action.ASK})
    return [a for a in asks if a.target == turn_id and a.outcome == "ok"]


def add_routes(app: web.Application) -> None:
    """The clinician's agent pages."""
    app.router.add_get(PAGE.path, ask_page)
    app.router.add_post(PAGE.path, ask)
    app.router.add_get(PAGE.path + "/turn/{turn_id}", turn_page)
