"""The SME's review pages: the review queue, one packet with its context, and the decision on it.

What holds: the queue is what ``clingate arbiter reviews`` lists, the pending packets oldest first
(:meth:`streams.groups.arbiter.Packets.pending`), and a decision is the record ``clingate arbiter review``
asks for (:func:`streams.groups.arbiter.make_review`: the reviewer is the signed-in user, the event time
now), published on ``clingate.docs.reviews`` by the request runtime once it checked the request that
carries it (:mod:`streams.console.requests`: the console's principal may not write the reviews); the docs
worker turns it into the ground truth and marks the packet reviewed, the page does neither. A decision is
recorded on the audit trail (action ``review``, target the document) before it is asked for, under that
record's id, and is not asked for when that record is not acknowledged; a request Kafka did not
acknowledge answers 503 and is recorded on the trail as refused. Only a pending packet can be decided
(409 otherwise).

The packet page shows what slides 9-10 give the SME: the LLM's classification, every V1-V5 issue as the
seed formats it, and for each issue the document's real text around its evidence (the paragraphs the
arbiter put in the packet's contexts, those ``clingate arbiter show-packet`` renders), the located text
marked. A correction may also correct the segments and the mixture (:mod:`streams.console.corrections`),
as ``clingate arbiter review --corrected-segments --corrected-mixture`` does. The rates table counts, per
rule fired and per classified document type, the latest review of each document whose packet is known:
how many agreed and how many corrected.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiohttp import web
from pydantic import ValidationError

from processors.docs.packet import format_issue
from schemas.console import Role
from schemas.docs import (
    DOCUMENT_TYPE_NAMES,
    DocumentType,
    PresenceLevel,
    Review,
    ReviewDecision,
    ReviewPacket,
    ReviewStatus,
)
from streams.console.audit import Action, Outcome, audit, record_refusal
from streams.console.auth import requires
from streams.console.corrections import CorrectionError, Corrections, read_corrections
from streams.console.delivery import NotAcknowledged
from streams.console.pages import PageLink, render
from streams.console.requests import REQUESTS
from streams.console.reviews import REVIEWS
from streams.console.sessions import SESSION
from streams.groups.arbiter import make_review, pending
from streams.requests.check import RequestAction

PAGE = PageLink("/sme", "SME review", frozenset({Role.SME}))

_DECISIONS = frozenset(d.value for d in ReviewDecision)
_TYPES = frozenset(t.value for t in DocumentType)

NOTES_MAX = 2000
"""The longest notes a decision takes."""


@dataclass(frozen=True)
class Rate:
    """The decisions on the documents of one rule or one document type."""

    group: str
    agreed: int
    corrected: int

    @property
    def reviewed(self) -> int:
        return self.agreed + self.corrected

    @property
    def agreement(self) -> float:
        return self.agreed / self.reviewed

    @property
    def correction(self) -> float:
        return self.corrected / self.reviewed


def rates(packets: Mapping[str, ReviewPacket], reviews: Iterable[Review]) -> tuple[list[Rate], list[Rate]]:
    """Agreement and correction per rule fired and per classified type (module docstring)."""
    latest = {review.doc_id: review for review in reviews}
    by_rule: dict[str, Counter[ReviewDecision]] = {}
    by_type: dict[str, Counter[ReviewDecision]] = {}
    for doc_id, review in latest.items():
        packet = packets.get(doc_id)
        if packet is None:
            continue
        by_rule.setdefault(f"rule {packet.rule_fired}", Counter())[review.decision] += 1
        dominant = DOCUMENT_TYPE_NAMES[packet.classification.dominant_type_overall]
        by_type.setdefault(dominant, Counter())[review.decision] += 1

    def table(groups: dict[str, Counter[ReviewDecision]]) -> list[Rate]:
        return [
            Rate(g, c[ReviewDecision.AGREES], c[ReviewDecision.CORRECTS]) for g, c in sorted(groups.items())
        ]

    return table(by_rule), table(by_type)


def marked(text: str, located: str | None) -> list[tuple[str, bool]]:
    """``text`` in pieces, each with whether it is ``located`` (matched without regard to case)."""
    if not located:
        return [(text, False)]
    pieces = re.split(f"({re.escape(located)})", text, flags=re.IGNORECASE)
    return [(piece, index % 2 == 1) for index, piece in enumerate(pieces) if piece]


@requires(*PAGE.roles)
async def queue_page(request: web.Request) -> web.StreamResponse:
    """``GET /sme``: the pending packets, oldest first, and the rates of the reviews recorded."""
    log_ = await request.app[REVIEWS].read()
    queue = pending(log_.packets.values())
    by_rule, by_type = rates(log_.packets, log_.reviews)
    recorded = request.query.get("recorded")
    decision = request.query.get("decision")
    confirmation = (
        f"Review of {recorded} recorded ({decision})." if recorded and decision in _DECISIONS else ""
    )
    return render(
        request, "sme.html", title=PAGE.title, pending=queue, names=DOCUMENT_TYPE_NAMES,
        by_rule=by_rule, by_type=by_type, unreadable=log_.unreadable, confirmation=confirmation,
    )  # fmt: skip


@requires(*PAGE.roles)
async def packet_page(request: web.Request) -> web.StreamResponse:
    """``GET /sme/packet/{doc_id}``: one packet with its issues and context, and the decision forms."""
    return await _packet(request)


async def _packet(request: web.Request, *, status: int = 200, error: str = "") -> web.Response:
    doc_id = request.match_info["doc_id"]
    packet = (await request.app[REVIEWS].read()).packets.get(doc_id)
    if packet is None:
        return render(request, "error.html", status=404, title="No such packet",
                      message=f"There is no review packet for {doc_id}.")  # fmt: skip
    contexts = {context.issue_id: context for context in packet.contexts}
    issues = [(issue, format_issue(issue), contexts.get(issue.id)) for issue in packet.issues]
    return render(
        request, "packet.html", status=status, title=f"Review packet {doc_id}", packet=packet,
        issues=issues, names=DOCUMENT_TYPE_NAMES, types=list(DocumentType), marked=marked, error=error,
        presences=list(PresenceLevel),
        mixture={entry.document_type: entry for entry in packet.classification.document_mixture},
    )  # fmt: skip


@requires(*PAGE.roles)
async def decide(request: web.Request) -> web.StreamResponse:
    """``POST /sme/packet/{doc_id}``: ask for the SME's decision to be published, then back to the queue."""
    doc_id = request.match_info["doc_id"]
    form = await request.post()
    decision_field, type_field = str(form.get("decision", "")), str(form.get("corrected_type", ""))
    notes = str(form.get("notes", "")).strip()
    decision = ReviewDecision(decision_field) if decision_field in _DECISIONS else None
    corrected = DocumentType(type_field) if type_field in _TYPES else None
    if decision is None or len(notes) > NOTES_MAX:
        return await _packet(
            request, status=400, error="Choose Agree or Correct (notes up to 2000 characters)."
        )
    if decision is ReviewDecision.AGREES:
        corrected = None
    packet = (await request.app[REVIEWS].read()).packets.get(doc_id)
    if packet is None or packet.review_status is not ReviewStatus.PENDING:
        return await _packet(
            request, status=409 if packet else 404, error="This packet is not pending review."
        )
    corrections = Corrections(None, None)
    if decision is ReviewDecision.CORRECTS:
        try:
            corrections = read_corrections({k: v for k, v in form.items() if isinstance(v, str)}, packet)
        except CorrectionError as error:
            return await _packet(request, status=400, error="The correction was not recorded: "
                                 + "; ".join(error.reasons) + ".")  # fmt: skip
    try:
        review = make_review(
            doc_id, request[SESSION].user, decision, corrected_type=corrected,
            corrected_segments=corrections.segments, corrected_mixture=corrections.mixture, notes=notes,
        )  # fmt: skip
    except ValidationError:
        return await _packet(request, status=400, error="A correction needs the corrected dominant type.")
    detail = {
        "decision": decision.value,
        "corrected_type": corrected.value if corrected else None,
        "corrected_segments": corrections.segments is not None,
        "corrected_mixture": corrections.mixture is not None,
    }
    record = await audit(request, Action.REVIEW, Outcome.OK, target=doc_id, **detail)
    try:
        await request.app[REQUESTS].publish(record, RequestAction.REVIEW, review, note=notes)
    except NotAcknowledged:
        await record_refusal(request, Action.REVIEW, target=doc_id, reason="not acknowledged")
        raise
    query = {"recorded": doc_id, "decision": decision.value}
    raise web.HTTPSeeOther(request.app.router["sme"].url_for().with_query(query))


def add_routes(app: web.Application) -> None:
    """The SME's pages."""
    app.router.add_get(PAGE.path, queue_page, name="sme")
    app.router.add_get(PAGE.path + "/packet/{doc_id}", packet_page)
    app.router.add_post(PAGE.path + "/packet/{doc_id}", decide)
