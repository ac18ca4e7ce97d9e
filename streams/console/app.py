"""The console as an aiohttp application: its routes, its middlewares and the headers of every response.

:func:`build_app` takes what the pages read and write as arguments (users, sessions, the audit trail, the
assessments, the review packets and reviews, the requests, the gated drafts and routes, the touchpoints'
topics), so the tests build the same application around fakes of the Kafka parts
(:mod:`streams.console.server` builds it around the real ones).

What holds for every response: a Content-Security-Policy that lets a page load only this site's stylesheet
and images and post forms only to this site (no script at all, no frame), ``X-Content-Type-Options:
nosniff``, no referrer, a ``Server`` header that names no software version, and, for the pages (which show
patients), ``Cache-Control: no-store``. The ``Server`` header holds for aiohttp's own answers too (a 400 to a
request line it cannot parse, given before any route or middleware runs): aiohttp fills a response's
missing ``Server`` header from its module's default, which :func:`build_app` sets to the console's.

A page whose data Kafka did not give in time answers 503 with what failed, never a partial page; an
unreadable users file answers 503 too (and is logged), rather than letting anyone in or out silently.

What is logged of a request (the access log, :class:`AccessLogger`, and the failures above) names its
route, never its path: ``/pharmacist/patient/{patient_id}``, not the patient.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web, web_response
from aiohttp.abc import AbstractAccessLogger

from schemas.console import Role
from streams.console import agent, dead_letters, memory, pharmacist, sme, touchpoints
from streams.console.agent_topics import AGENT, AgentDesk
from streams.console.assessments import ASSESSMENTS, AssessmentSource
from streams.console.audit import AUDIT, AuditTrail, AuditUnavailable
from streams.console.auth import ACCESS, Access, Handler, guard, requires, sign_in, sign_in_page, sign_out
from streams.console.dead_letter_queues import DEAD_LETTERS, DeadLetterSource
from streams.console.delivery import NotAcknowledged
from streams.console.drafts import DRAFTS, DraftSource
from streams.console.history import HISTORY, History
from streams.console.metrics import METRICS, ConsoleMetrics, metrics_page
from streams.console.pages import NAVIGATION, STATIC, Unavailable, render
from streams.console.requests import ASKING, REQUESTS, Requests
from streams.console.reviews import REVIEWS, ReviewSource
from streams.console.touchpoint_topics import TOUCHPOINTS, TouchpointSource
from streams.console.users import UserError

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 * 1024
"""The largest request body the console reads: its forms are a few fields."""

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Server": "clingate",
}


UNAVAILABLE: dict[type[Exception], str] = {
    Unavailable: "What this page shows could not be read from Kafka: try again shortly.",
    AuditUnavailable: "This could not be recorded on the audit trail, so it was not done: try again shortly.",
    UserError: "The console's users file cannot be read: tell an operator.",
    NotAcknowledged: "Kafka did not acknowledge it, so it was not done: try again shortly.",
}
"""What a 503 page says for each failure (what exactly failed is in the console's log, not on the page)."""


def route_of(request: web.BaseRequest) -> str:
    """The route ``request`` took, as declared (``/pharmacist/patient/{patient_id}``), never the path
    with its ids; ``-`` when it took none (a path no route has, a request that could not be read)."""
    try:
        match_info = getattr(request, "match_info", None)
    except AssertionError:  # aiohttp's own answer to a request it could not parse: no route was matched
        match_info = None
    resource = None if match_info is None else match_info.route.resource
    return "-" if resource is None else resource.canonical


class AccessLogger(AbstractAccessLogger):
    """aiohttp's access log, one line a request: the client's address, the method, the route
    (:func:`route_of`), the status, the bytes sent and the seconds taken."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """Log one request (module docstring)."""
        self.logger.info(
            '%s "%s %s" %d %d %.3f', request.remote, request.method, route_of(request), response.status,
            response.body_length, time,
        )  # fmt: skip


@web.middleware
async def unavailable(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page whose data, audit record, request or other record Kafka did not take, or an unreadable users
    file: 503, logged."""
    try:
        return await handler(request)
    except tuple(UNAVAILABLE) as exc:
        log.error("console: %s %s: %s", request.method, route_of(request), exc)
        return render(request, "error.html", status=503, title="Unavailable", message=UNAVAILABLE[type(exc)])


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers.update(HEADERS)
    if not request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"


@requires(*Role)
async def home(request: web.Request) -> web.StreamResponse:
    """``GET /``: links to the pages of the session's role."""
    return render(request, "home.html", title="Home")


def build_app(
    access: Access,
    audit: AuditTrail,
    assessments: AssessmentSource,
    reviews: ReviewSource,
    *,
    history: History,
    dead_letter_source: DeadLetterSource,
    requests: Requests,
    agent_desk: AgentDesk,
    drafts: DraftSource,
    explorer: memory.Explorer,
    touchpoint_source: TouchpointSource,
) -> web.Application:
    """The console's application around its users and sessions, audit trail (and its read-back),
    assessments, review packets and reviews, the dead letters, where every record of its people is asked
    for (the requests), the agent's topics, the gated drafts and routes, the memory explorer's sources and
    the topics of the pharmacist's touchpoints. Serve it with :class:`AccessLogger` as the runner's
    ``access_log_class``."""
    # aiohttp's answers to what it cannot parse skip the application's hooks; their Server header comes
    # from this default (``Python/<v> aiohttp/<v>`` otherwise).
    web_response.SERVER_SOFTWARE = HEADERS["Server"]
    app = web.Application(middlewares=[unavailable, guard], client_max_size=MAX_REQUEST_BYTES)
    app[ACCESS] = access
    app[METRICS] = ConsoleMetrics()
    app[AUDIT] = audit
    app[ASSESSMENTS] = assessments
    app[REVIEWS] = reviews
    app[DRAFTS] = drafts
    app[HISTORY] = history
    app[DEAD_LETTERS] = dead_letter_source
    app[REQUESTS] = requests
    app[ASKING] = asyncio.Lock()
    app[AGENT] = agent_desk
    app[TOUCHPOINTS] = touchpoint_source
    app[NAVIGATION] = (
        pharmacist.PAGE, touchpoints.QUERIES, touchpoints.EVIDENCE, sme.PAGE, memory.PAGE, dead_letters.PAGE,
        agent.PAGE,
    )  # fmt: skip
    app.router.add_get("/", home)
    app.router.add_get("/login", sign_in_page)
    app.router.add_post("/login", sign_in)
    app.router.add_post("/logout", sign_out)
    app.router.add_get("/metrics", metrics_page)
    pharmacist.add_routes(app)
    touchpoints.add_routes(app)
    sme.add_routes(app)
    memory.add_routes(app, explorer)
    dead_letters.add_routes(app)
    agent.add_routes(app)
    app.router.add_static("/static/", STATIC)
    app.on_response_prepare.append(_headers)
    return app
