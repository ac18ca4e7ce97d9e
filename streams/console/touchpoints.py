"""The pharmacist's touchpoints before reasoning: the Query Gate and the Evidence Review.

The seed's pipeline validates its input by machine (staleness, age, medications, FHIR sanitisation) and
designed two touchpoints where a pharmacist validates it by clinical judgement (Supp. Note 2 §2e, §5c):
the reasoning step asks the wrong questions, or retrieves evidence too thin for the clinical question, in
ways no automated validator flags (a drug-centric anchor; an evidence budget spent before a relevant domain
was queried, ESC-004 and ESC-005). In clingate's data the clinical questions are a run's proposed evidence
queries (a :class:`~schemas.clinical.QueryProposal` the reasoning step publishes before retrieval), and the
retrieved evidence is the run's evidence bundle (the :class:`~schemas.clinical.EvidenceBundle` the clinical
workers check for must-retrieve sources, ESC-002). What holds:

* **The queues** (``/pharmacist/queries``, ``/pharmacist/evidence``) list each run's latest proposal or
  bundle (a later one of the run replaces it, as the pipeline's next bundle replaces a run's packets):
  the pending ones first, oldest first, then the others newest first, each with what became of it:
  pending, asked for (the pharmacist's request waits for the request runtime), or decided (the first
  decision on the topic, the one the pipeline acts on; the runtime carries out one per proposal or bundle).
* **The Query Gate** (``/pharmacist/queries/<patient>/<run>``) shows the proposed queries as rows the
  pharmacist edits (emptied, a query is removed; a blank row adds one) with an optional note. Its decision
  is ``APPROVED`` when the rows are the proposed queries, ``EDITED`` otherwise.
* **The Evidence Review** (``/pharmacist/evidence/<patient>/<run>``) shows every packet of the bundle with
  its text, and which of the patient's must-retrieve sources (the current assessment's) it names and which
  it lacks, by the clinical workers' own check (:func:`processors.drafts.run.missing_sources`). The
  pharmacist accepts or rejects each packet, then accepts the evidence (reasoning starts on the accepted
  packets) or rejects it (retrieval runs again; the note says what is missing).
* **A decision** is the record the pipeline reads (:class:`~schemas.clinical.QueryDecision`,
  :class:`~schemas.clinical.EvidenceReview`; the pharmacist is the signed-in user), refused with its
  model's reasons (400, nothing recorded) when it breaks its rules; then recorded on the audit trail
  (action ``query-decision`` or ``evidence-review``, target
  :func:`~streams.requests.check.touchpoint_target`), and asked for under that record's id once the record
  is acknowledged (:mod:`streams.console.requests`: the request runtime publishes it). A request Kafka does
  not acknowledge answers 503 and is recorded again as ``refused``. Only what is pending can be decided:
  409 when it was decided or asked for already, or when the form's proposal or bundle is no longer the
  run's latest; one request at a time (:data:`~streams.console.requests.ASKING`). A decision the request
  runtime refused leaves the run pending, and its page says why.

Only the pharmacist role opens these pages.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from aiohttp import web
from pydantic import ValidationError

from processors.drafts.citations import Evidence
from processors.drafts.run import missing_sources
from schemas.base import iso_utc
from schemas.clinical import (
    EvidenceBundle,
    EvidenceReview,
    EvidenceVerdict,
    QueryDecision,
    QueryProposal,
    QueryVerdict,
    ReviewedPacket,
)
from schemas.console import ConsoleAction, Role
from streams.console.assessments import ASSESSMENTS
from streams.console.audit import Action, Outcome, audit, record_refusal
from streams.console.auth import requires
from streams.console.delivery import NotAcknowledged
from streams.console.history import HISTORY, asked
from streams.console.pages import PageLink, render, segment
from streams.console.pharmacist import history
from streams.console.requests import ASKING, REQUESTS
from streams.console.sessions import SESSION
from streams.console.touchpoint_topics import TOUCHPOINTS, TouchpointLog, TouchpointSource
from streams.requests.check import PUBLICATIONS, REFUSED, RequestAction, touchpoint_target

QUERIES = PageLink("/pharmacist/queries", "Query gate", frozenset({Role.PHARMACIST}))
EVIDENCE = PageLink("/pharmacist/evidence", "Evidence review", frozenset({Role.PHARMACIST}))

QUERY_MAX = 1000
"""The longest query the Query Gate takes."""
BLANK_ROWS = 2
"""Rows the Query Gate offers beyond the proposed queries, for queries the pharmacist adds."""
NOTE_MAX = 2000
"""The longest note a decision takes."""

P = TypeVar("P", QueryProposal, EvidenceBundle)
D = TypeVar("D", QueryDecision, EvidenceReview)


@dataclass(frozen=True)
class Touchpoint(Generic[P, D]):
    """What a run put before the pharmacist (its latest proposal or bundle) and what became of it."""

    put: P
    target: str
    """:func:`~streams.requests.check.touchpoint_target` of it: what its decision is about."""
    decided: D | None
    """The first decision of it on the topic."""
    asked: ConsoleAction | None
    """The audit record of a decision asked for, not yet published nor refused by the request runtime."""

    @property
    def status(self) -> str:
        """``decided``, ``asked`` or ``pending``."""
        return "decided" if self.decided is not None else "asked" if self.asked is not None else "pending"


def touchpoints(
    log: TouchpointLog[P, D], kind: RequestAction, asks: Mapping[str, ConsoleAction]
) -> list[Touchpoint[P, D]]:
    """Each run's latest of ``log.put`` with what became of it, in queue order (module docstring);
    ``kind`` is the request that decides it, ``asks`` the decisions asked for by target."""
    latest = {(put.patient_id, put.run_id): put for put in log.put}
    decided: dict[str, D] = {}
    for record in log.decided:
        decided.setdefault(PUBLICATIONS[kind].identify(record).target, record)
    items = []
    for put in latest.values():
        target = touchpoint_target(put.patient_id, put.run_id, put.event_time)
        items.append(Touchpoint(put, target, decided.get(target), asks.get(target)))

    def order(item: Touchpoint[P, D]) -> tuple[datetime, str]:
        return item.put.event_time, item.target

    pending = sorted((i for i in items if i.status == "pending"), key=order)
    return pending + sorted((i for i in items if i.status != "pending"), key=order, reverse=True)


@dataclass(frozen=True)
class Board:
    """A touchpoint's runs now, and why the request runtime refused the last decision of each it refused."""

    items: list[Touchpoint[Any, Any]]
    unreadable: int
    refusals: dict[str, str]

    def item(self, patient_id: str, run_id: str) -> Touchpoint[Any, Any] | None:
        """The run's touchpoint (None: the run put nothing before the pharmacist)."""
        return next((i for i in self.items if (i.put.patient_id, i.put.run_id) == (patient_id, run_id)), None)


class Invalid(ValueError):
    """What the pharmacist typed cannot be a decision; the message says why."""


Form = Mapping[str, Any]
"""A posted form's fields."""


@dataclass(frozen=True)
class Desk:
    """One touchpoint: its pages, what they read, show, record and ask for."""

    page: PageLink
    action: Action
    kind: RequestAction
    put: str
    """What a run puts before the pharmacist, in words."""
    template: str
    read: Callable[[TouchpointSource], Awaitable[TouchpointLog[Any, Any]]]
    shown: Callable[[web.Request, Any], Awaitable[dict[str, Any]]]
    """What the run's page shows of its item beyond the item, and the form as the page fills it."""
    typed: Callable[[Form], dict[str, Any]]
    """The form as the pharmacist filled it, to show again when their decision is refused."""
    make: Callable[[Any, Form, str, datetime], Any]
    """The decision the form makes of the item, by the user at the time given.

    Raises:
        Invalid, ValidationError: it cannot be one (its model's rules, the page's limits).
    """
    ident: str
    """The decision's field that carries the audit record's id."""


def _note(form: Form) -> str:
    note = str(form.get("note", "")).strip()
    if len(note) > NOTE_MAX:
        raise Invalid(f"A note is up to {NOTE_MAX} characters.")
    return note


async def _proposal_shown(_request: web.Request, proposal: QueryProposal) -> dict[str, Any]:
    return {"rows": [*proposal.queries, *[""] * BLANK_ROWS]}


def _rows_typed(form: Form) -> dict[str, Any]:
    return {"rows": [str(v) for k, v in form.items() if k.startswith("query-")], "note": form.get("note", "")}


def _query_decision(proposal: QueryProposal, form: Form, user: str, now: datetime) -> QueryDecision:
    rows = (str(form.get(f"query-{i}", "")).strip() for i in range(len(proposal.queries) + BLANK_ROWS))
    queries = [query for query in rows if query]
    if any(len(query) > QUERY_MAX for query in queries):
        raise Invalid(f"A query is up to {QUERY_MAX} characters.")
    verdict = QueryVerdict.APPROVED if queries == proposal.queries else QueryVerdict.EDITED
    return QueryDecision(
        patient_id=proposal.patient_id, run_id=proposal.run_id, event_time=now,
        proposed_at=proposal.event_time, pharmacist=user, decision_id="", decision=verdict,
        proposed=proposal.queries, queries=queries, note=_note(form),
    )  # fmt: skip


async def _bundle_shown(request: web.Request, bundle: EvidenceBundle) -> dict[str, Any]:
    """The patient's must-retrieve sources (their current assessment's) and those the bundle lacks."""
    assessments = history((await request.app[ASSESSMENTS].read()).records, bundle.patient_id)
    must = assessments[0].nti.must_retrieve if assessments else []
    missing = missing_sources([Evidence(packet.source, packet.text) for packet in bundle.packets], must)
    return {"must": must, "missing": missing, "accepted": [True] * len(bundle.packets)}


def _packets_typed(form: Form) -> dict[str, Any]:
    accepted = [form[k] != "reject" for k in form if k.startswith("packet-")]
    return {"accepted": accepted, "note": form.get("note", "")}


def _evidence_review(bundle: EvidenceBundle, form: Form, user: str, now: datetime) -> EvidenceReview:
    verdict = str(form.get("decision", ""))
    if verdict not in EvidenceVerdict.__members__:
        raise Invalid("Accept or reject the evidence.")
    packets = [
        ReviewedPacket(source=packet.source, accepted=form.get(f"packet-{i}") != "reject")
        for i, packet in enumerate(bundle.packets)
    ]
    return EvidenceReview(
        patient_id=bundle.patient_id, run_id=bundle.run_id, event_time=now, bundle_time=bundle.event_time,
        pharmacist=user, review_id="", decision=EvidenceVerdict(verdict), packets=packets, note=_note(form),
    )  # fmt: skip


QUERY_GATE = Desk(
    QUERIES, Action.QUERY_DECISION, RequestAction.QUERY_DECISION, "query proposal", "query_gate.html",
    lambda source: source.queries(), _proposal_shown, _rows_typed, _query_decision, "decision_id",
)  # fmt: skip
EVIDENCE_REVIEW = Desk(
    EVIDENCE, Action.EVIDENCE_REVIEW, RequestAction.EVIDENCE_REVIEW, "evidence bundle",
    "evidence_review.html", lambda source: source.evidence(), _bundle_shown, _packets_typed,
    _evidence_review, "review_id",
)  # fmt: skip


async def board(request: web.Request, desk: Desk) -> Board:
    """What ``desk``'s pages show now: its topics, the decisions asked for on the audit trail and the
    request runtime's outcomes."""
    log = await desk.read(request.app[TOUCHPOINTS])
    trail = request.app[HISTORY]
    outcomes = await trail.outcomes()
    actions = await trail.actions({desk.action})
    refusals = {
        a.target: outcome.reason
        for a in actions
        if a.outcome == Outcome.OK and (outcome := outcomes.get(a.action_id)) and outcome.outcome == REFUSED
    }
    return Board(touchpoints(log, desk.kind, asked(desk.action, actions, outcomes)), log.unreadable, refusals)


def _run_of(request: web.Request) -> tuple[str, str]:
    return request.match_info["patient_id"], request.match_info["run_id"]


async def _run(
    request: web.Request,
    desk: Desk,
    *,
    status: int = 200,
    error: str = "",
    typed: dict[str, Any] | None = None,
) -> web.Response:
    """The run's page of ``desk`` (404: the run put nothing before the pharmacist), with ``error`` and the
    form as the pharmacist ``typed`` it when their decision was refused."""
    patient_id, run_id = _run_of(request)
    now = await board(request, desk)
    item = now.item(patient_id, run_id)
    if item is None:
        return render(request, "error.html", status=404, title="No such run",
                      message=f"Run {run_id} of {patient_id} has no {desk.put} on its topic.")  # fmt: skip
    form = {"note": ""} | await desk.shown(request, item.put) | (typed or {})
    return render(
        request, desk.template, status=status, title=f"{desk.page.title}: run {run_id}", desk=desk, item=item,
        refusal=now.refusals.get(item.target, "") if item.status == "pending" else "", error=error,
        at=iso_utc(item.put.event_time), query_max=QUERY_MAX, note_max=NOTE_MAX, **form,
    )  # fmt: skip


def _conflict(desk: Desk, item: Touchpoint[Any, Any], at: str) -> str:
    """Why ``item`` cannot be decided from a form that showed what was put at ``at`` (empty: it can)."""
    if item.decided is not None:
        decided = item.decided
        return f"This {desk.put} was decided already ({decided.decision.value}, by {decided.pharmacist})."
    if item.asked is not None:
        return f"{item.asked.user} asked for a decision on this {desk.put} already: it waits for the runtime."
    if at != iso_utc(item.put.event_time):
        return f"A newer {desk.put} of this run arrived since the page was shown: decide on that one."
    return ""


def _reasons(error: ValidationError) -> str:
    """What a model refused, in its own words."""
    return "; ".join(str(e.get("ctx", {}).get("error", e["msg"])) for e in error.errors())


async def _decide(request: web.Request, desk: Desk) -> web.StreamResponse:
    """Record and ask for the pharmacist's decision on the run's pending item, then back to the run's page
    (module docstring). The decision's id and time are the audit record's."""
    patient_id, run_id = _run_of(request)
    form = await request.post()
    async with request.app[ASKING]:
        item = (await board(request, desk)).item(patient_id, run_id)
        if item is None:
            return await _run(request, desk)
        conflict = _conflict(desk, item, str(form.get("at", "")))
        if conflict:
            return await _run(request, desk, status=409, error=conflict, typed=desk.typed(form))
        try:
            decision = desk.make(item.put, form, request[SESSION].user, datetime.now(UTC))
        except (Invalid, ValidationError) as refused:
            why = _reasons(refused) + "." if isinstance(refused, ValidationError) else str(refused)
            return await _run(request, desk, status=400, error=f"Not recorded: {why}", typed=desk.typed(form))
        action = await audit(
            request, desk.action, Outcome.OK, target=item.target, decision=decision.decision.value
        )
        record = decision.model_copy(update={desk.ident: action.action_id, "event_time": action.event_time})
        try:
            await request.app[REQUESTS].publish(action, desk.kind, record, note=decision.note)
        except NotAcknowledged:
            await record_refusal(request, desk.action, target=item.target, reason="not acknowledged")
            raise
    raise web.HTTPSeeOther(f"{desk.page.path}/{segment(patient_id)}/{segment(run_id)}")


def add_routes(app: web.Application) -> None:
    """The Query Gate's and the Evidence Review's pages."""
    for desk in (QUERY_GATE, EVIDENCE_REVIEW):

        @requires(*desk.page.roles)
        async def queue_page(request: web.Request, desk: Desk = desk) -> web.StreamResponse:
            """The touchpoint's queue (module docstring)."""
            return render(
                request,
                "touchpoints.html",
                title=desk.page.title,
                desk=desk,
                board=await board(request, desk),
            )

        @requires(*desk.page.roles)
        async def run_page(request: web.Request, desk: Desk = desk) -> web.StreamResponse:
            """One run's proposal or bundle, what became of it, and the decision form while it is pending."""
            return await _run(request, desk)

        @requires(*desk.page.roles)
        async def decide(request: web.Request, desk: Desk = desk) -> web.StreamResponse:
            """The pharmacist's decision on the run's pending item (module docstring)."""
            return await _decide(request, desk)

        app.router.add_get(desk.page.path, queue_page)
        app.router.add_get(desk.page.path + "/{patient_id}/{run_id}", run_page)
        app.router.add_post(desk.page.path + "/{patient_id}/{run_id}", decide)
