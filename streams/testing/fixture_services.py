"""Local stand-ins for PubMed E-utilities and the ClinicalTrials.gov v2 API, for tests, the demo and a local
``clingate agent ask``.

One aiohttp application (:func:`fixture_app`) serves both services under their own prefixes, so one base
URL each goes to :func:`streams.agent.literature.search_literature` and
:func:`~streams.agent.literature.find_trials`:

* ``/pubmed/esearch.fcgi`` and ``/pubmed/esummary.fcgi`` answer like E-utilities with ``retmode=json``
  (https://www.ncbi.nlm.nih.gov/books/NBK25499/): ``esearchresult`` with ``count`` as a string and an
  ``idlist``, then ``result`` with ``uids`` and one document summary per PMID (``{"uid", "error"}`` for a
  PMID it does not know, as NCBI answers);
* ``/ctgov/studies`` answers like ClinicalTrials.gov's ``GET /api/v2/studies``
  (https://clinicaltrials.gov/data-api/api): ``query.cond``, ``filter.overallStatus`` (comma- or
  pipe-separated), ``pageSize`` (default 10) and ``format=json``; ``{"studies": [...]}``, one page only.

The data are synthetic (made-up PMIDs from 90000001 and NCT IDs from NCT09000001, beyond those assigned):
articles on the warfarin–amiodarone interaction, digoxin toxicity and metformin in chronic kidney disease;
trials in atrial fibrillation, heart failure and type 2 diabetes. A search matches a record that shares a
word with it, case-insensitively and stop words aside: an article by its title, a trial by its conditions
and brief title; more shared words rank first. Requests the real services would reject (a missing ``term``
or ``id``, another ``db``, XML, an unknown status) get HTTP 400, so a client that drifts from the
documented parameters fails here too. Every request is recorded (:data:`REQUESTS`).

``fail`` makes every request fail one way, for the error paths of the tools: ``rate_limit`` (429, NCBI's
body), ``server_error`` (503), ``slow`` (the answer after :data:`SLOW_S`, longer than any tool deadline)
and ``garbage`` (200 with an HTML page, as a proxy answers during an outage).

:class:`FixtureServices` runs the application on a free loopback port in a thread of its own (its own event
loop), so synchronous tests and asyncio code alike can call it: ``with FixtureServices() as services:
services.pubmed_url, services.ctgov_url``. As a process, ``python -m streams.testing.fixture_services
[--port P]`` prints ``listening http://127.0.0.1:P`` once it listens and serves until Ctrl-C; the bases are
that URL with ``/pubmed`` and ``/ctgov``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

PUBMED_PREFIX: Final = "/pubmed"
CTGOV_PREFIX: Final = "/ctgov"
FAIL_MODES: Final = frozenset({"rate_limit", "server_error", "slow", "garbage"})
SLOW_S: Final = 30.0
"""How long a ``slow`` request waits before its answer."""

CTGOV_STATUSES: Final = frozenset(
    {
        "ACTIVE_NOT_RECRUITING",
        "COMPLETED",
        "ENROLLING_BY_INVITATION",
        "NOT_YET_RECRUITING",
        "RECRUITING",
        "SUSPENDED",
        "TERMINATED",
        "WITHDRAWN",
        "AVAILABLE",
        "NO_LONGER_AVAILABLE",
        "TEMPORARILY_NOT_AVAILABLE",
        "APPROVED_FOR_MARKETING",
        "WITHHELD",
        "UNKNOWN",
    }
)
"""``filter.overallStatus`` values the v2 API accepts (its ``Status`` enum)."""

_STOP_WORDS: Final = frozenset(
    {"a", "an", "and", "are", "as", "at", "by", "for", "from", "in", "is", "of", "on", "or", "the", "to"}
    | {"versus", "vs", "when", "with", "without"}
)
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the fixtures received: its path and its query parameters (the first of repeated ones)."""

    path: str
    params: dict[str, str]


REQUESTS: Final = web.AppKey("requests", list[RecordedRequest])
"""The application's record of requests, in arrival order (``app[REQUESTS]``)."""


@dataclass(frozen=True, slots=True)
class _Data:
    articles: Mapping[str, Mapping[str, Any]]
    studies: Mapping[str, Mapping[str, Any]]
    fail: str | None


_DATA: Final = web.AppKey("fixture_data", _Data)


def _summary(pmid: str, title: str, journal: str, pubdate: str, authors: Sequence[str]) -> dict[str, Any]:
    """An ESummary document summary (the fields a PubMed DocSum carries that the tools read)."""
    return {
        "uid": pmid,
        "pubdate": pubdate,
        "source": journal,
        "authors": [{"name": name, "authtype": "Author", "clusterid": ""} for name in authors],
        "title": title,
        "fulljournalname": journal,
        "sortpubdate": f"{pubdate[:4]}/01/01 00:00",
    }


def _study(
    nct_id: str, title: str, status: str, phases: Sequence[str], conditions: Sequence[str]
) -> dict[str, Any]:
    """A v2 study record with the modules the tools read."""
    return {
        "protocolSection": {
            "identificationModule": {"nctId": nct_id, "briefTitle": title},
            "statusModule": {"overallStatus": status},
            "conditionsModule": {"conditions": list(conditions)},
            "designModule": {"studyType": "INTERVENTIONAL", "phases": list(phases)},
        },
        "hasResults": status == "COMPLETED",
    }


ARTICLES: Final[dict[str, dict[str, Any]]] = {
    doc["uid"]: doc
    for doc in (
        _summary(
            "90000001",
            "Warfarin and amiodarone interaction: INR rise after starting amiodarone in atrial fibrillation",
            "J Synth Cardiol",
            "2021 Mar",
            ["Alvarez M", "Chen L", "Okafor B", "Lindqvist E"],
        ),
        _summary(
            "90000002",
            "Empirical warfarin dose reduction when starting amiodarone: a synthetic cohort",
            "Synth Thromb Rep",
            "2019 Nov 4",
            ["Novak P", "Haddad R"],
        ),
        _summary(
            "90000003",
            "Digoxin toxicity in older adults with renal impairment: presentation and management",
            "Synth Geriatr Med",
            "2020 Jun",
            ["Iwata K", "Mensah A", "Roy S"],
        ),
        _summary(
            "90000004",
            "Serum digoxin concentration and mortality in heart failure: a synthetic review",
            "J Synth Cardiol",
            "2018",
            ["Fischer T"],
        ),
        _summary(
            "90000005",
            "Metformin in chronic kidney disease: eGFR thresholds and lactic acidosis risk",
            "Synth Nephrol Dial",
            "2022 Jan 15",
            ["Osei D", "Park J", "Moreau C", "Singh V", "Kowalski A"],
        ),
        _summary(
            "90000006",
            "Metformin dose adjustment in stage 3 CKD with type 2 diabetes: a synthetic randomised trial",
            "Synth Diabetes Care",
            "2023 Aug",
            ["Tanaka H", "Ibrahim N", "Costa F"],
        ),
    )
}
"""The built-in articles, ESummary documents by PMID."""

STUDIES: Final[dict[str, dict[str, Any]]] = {
    study["protocolSection"]["identificationModule"]["nctId"]: study
    for study in (
        _study(
            "NCT09000001",
            "Left Atrial Appendage Closure Versus Anticoagulation in Atrial Fibrillation",
            "RECRUITING",
            ["PHASE3"],
            ["Atrial Fibrillation"],
        ),
        _study(
            "NCT09000002",
            "Early Rhythm Control by Ablation in Paroxysmal Atrial Fibrillation",
            "ACTIVE_NOT_RECRUITING",
            ["NA"],
            ["Atrial Fibrillation", "Paroxysmal Atrial Fibrillation"],
        ),
        _study(
            "NCT09000003",
            "Two Doses of an SGLT2 Inhibitor in Heart Failure With Preserved Ejection Fraction",
            "RECRUITING",
            ["PHASE2", "PHASE3"],
            ["Heart Failure", "Heart Failure With Preserved Ejection Fraction"],
        ),
        _study(
            "NCT09000004",
            "Digoxin Withdrawal in Stable Heart Failure With Reduced Ejection Fraction",
            "COMPLETED",
            ["PHASE4"],
            ["Heart Failure"],
        ),
        _study(
            "NCT09000005",
            "Metformin Continuation in Type 2 Diabetes With Moderate Chronic Kidney Disease",
            "RECRUITING",
            ["PHASE4"],
            ["Diabetes Mellitus, Type 2", "Chronic Kidney Disease"],
        ),
        _study(
            "NCT09000006",
            "Once-Weekly Basal Insulin in Type 2 Diabetes",
            "COMPLETED",
            ["PHASE3"],
            ["Type 2 Diabetes"],
        ),
    )
}
"""The built-in trials, v2 study records by NCT ID."""


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOP_WORDS)


def _ranked(
    query: str, records: Mapping[str, Mapping[str, Any]], text: Callable[[Mapping[str, Any]], str]
) -> list[str]:
    """Keys of the records sharing a word with ``query``, most shared words first (ties in record order)."""
    wanted = _words(query)
    scores = {key: len(wanted & _words(text(record))) for key, record in records.items()}
    return sorted((key for key, score in scores.items() if score), key=lambda key: -scores[key])


def _article_text(doc: Mapping[str, Any]) -> str:
    return str(doc.get("title") or "")


def _protocol(study: Mapping[str, Any]) -> Mapping[str, Any]:
    return study.get("protocolSection") or {}


def _study_text(study: Mapping[str, Any]) -> str:
    protocol = _protocol(study)
    conditions = (protocol.get("conditionsModule") or {}).get("conditions") or []
    title = (protocol.get("identificationModule") or {}).get("briefTitle") or ""
    return " ".join([*map(str, conditions), str(title)])


def _study_status(study: Mapping[str, Any]) -> str | None:
    return (_protocol(study).get("statusModule") or {}).get("overallStatus")


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=message)


def _expect(request: web.Request, **values: str) -> None:
    """HTTP 400 unless each named parameter has the given value."""
    for name, value in values.items():
        if request.query.get(name) != value:
            raise _bad_request(f"{name} must be {value}")


def _count(request: web.Request, name: str, default: int, high: int) -> int:
    """An integer parameter in ``0..high`` (HTTP 400 otherwise), ``default`` when absent."""
    raw = request.query.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) > high:
        raise _bad_request(f"{name} must be an integer from 0 to {high}")
    return int(raw)


@web.middleware
async def _record_and_fail(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Record the request, then fail it the way the application's ``fail`` mode says (or answer it)."""
    request.app[REQUESTS].append(RecordedRequest(request.path, dict(request.query)))
    fail = request.app[_DATA].fail
    if fail == "rate_limit":
        return web.json_response({"error": "API rate limit exceeded", "count": "4", "limit": "3"}, status=429)
    if fail == "server_error":
        return web.Response(status=503, text="Service Temporarily Unavailable")
    if fail == "garbage":
        return web.Response(text="<html><body><h1>Maintenance</h1></body></html>", content_type="text/html")
    if fail == "slow":
        await asyncio.sleep(SLOW_S)
    return await handler(request)


async def _esearch(request: web.Request) -> web.Response:
    _expect(request, db="pubmed", retmode="json")
    term = request.query.get("term", "").strip()
    if not term:
        raise _bad_request("term is required")
    retmax = _count(request, "retmax", 20, 10_000)
    ids = _ranked(term, request.app[_DATA].articles, _article_text)
    result = {
        "count": str(len(ids)),
        "retmax": str(min(retmax, len(ids))),
        "retstart": "0",
        "idlist": ids[:retmax],
        "translationset": [],
        "querytranslation": term,
    }
    return web.json_response({"header": {"type": "esearch", "version": "0.3"}, "esearchresult": result})


async def _esummary(request: web.Request) -> web.Response:
    _expect(request, db="pubmed", retmode="json")
    ids = [pmid.strip() for pmid in request.query.get("id", "").split(",") if pmid.strip()]
    if not ids:
        raise _bad_request("id is required")
    articles = request.app[_DATA].articles
    result: dict[str, Any] = {"uids": ids}
    for pmid in ids:
        result[pmid] = articles.get(pmid, {"uid": pmid, "error": "cannot get document summary"})
    return web.json_response({"header": {"type": "esummary", "version": "0.3"}, "result": result})


async def _studies(request: web.Request) -> web.Response:
    if request.query.get("format", "json") != "json":
        raise _bad_request("format must be json")
    statuses = {s for s in re.split(r"[,|]", request.query.get("filter.overallStatus", "")) if s}
    if statuses - CTGOV_STATUSES:
        raise _bad_request(f"unknown filter.overallStatus {sorted(statuses - CTGOV_STATUSES)}")
    page_size = _count(request, "pageSize", 10, 1000)
    studies = request.app[_DATA].studies
    condition = request.query.get("query.cond", "").strip()
    keys = _ranked(condition, studies, _study_text) if condition else list(studies)
    found = [studies[key] for key in keys if not statuses or _study_status(studies[key]) in statuses]
    return web.json_response({"studies": found[:page_size]})


def fixture_app(
    literature: dict[str, Any] | None = None, trials: dict[str, Any] | None = None, *, fail: str | None = None
) -> web.Application:
    """The fixture services as one application (module docstring).

    Args:
        literature: ESummary documents by PMID, in place of :data:`ARTICLES` (a search matches ``title``).
        trials: v2 study records by NCT ID, in place of :data:`STUDIES`.
        fail: None to answer, or one of :data:`FAIL_MODES` to fail every request that way.

    Returns:
        The application; ``app[REQUESTS]`` records what it receives.

    Raises:
        ValueError: ``fail`` is not a known mode.
    """
    if fail is not None and fail not in FAIL_MODES:
        raise ValueError(f"unknown fail mode {fail!r}; expected one of {sorted(FAIL_MODES)}")
    app = web.Application(middlewares=[_record_and_fail])
    app[_DATA] = _Data(
        ARTICLES if literature is None else literature, STUDIES if trials is None else trials, fail
    )
    app[REQUESTS] = []
    app.router.add_get(f"{PUBMED_PREFIX}/esearch.fcgi", _esearch)
    app.router.add_get(f"{PUBMED_PREFIX}/esummary.fcgi", _esummary)
    app.router.add_get(f"{CTGOV_PREFIX}/studies", _studies)
    return app


async def serve(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, str]:
    """Start ``app`` on ``host:port`` (0: a free port); returns its runner (to clean up) and its root URL."""
    # handler_cancellation: a client that gives up on a ``slow`` answer cancels its handler.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    return runner, f"http://{bound_host}:{bound_port}"


class FixtureServices:
    """The fixture application on a free loopback port, served by a background thread's event loop.

    ``with FixtureServices(fail="rate_limit") as services: services.pubmed_url`` (the arguments are
    :func:`fixture_app`'s). The thread makes the server independent of the caller's loop: a test may drive
    the tools with ``asyncio.run`` while the server keeps answering.
    """

    def __init__(
        self,
        literature: dict[str, Any] | None = None,
        trials: dict[str, Any] | None = None,
        *,
        fail: str | None = None,
    ) -> None:
        """Build the application (start it with :meth:`start` or ``with``)."""
        self.app = fixture_app(literature, trials, fail=fail)
        self.base_url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def pubmed_url(self) -> str:
        """The E-utilities base (``search_literature``'s ``base_url``)."""
        return f"{self.base_url}{PUBMED_PREFIX}"

    @property
    def ctgov_url(self) -> str:
        """The ClinicalTrials.gov v2 base (``find_trials``'s ``base_url``)."""
        return f"{self.base_url}{CTGOV_PREFIX}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, in arrival order."""
        return self.app[REQUESTS]

    def start(self) -> FixtureServices:
        """Start the loop thread and listen; returns ``self`` once the port is bound."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fixture-services", daemon=True)
        self._thread.start()
        try:
            self._runner, self.base_url = asyncio.run_coroutine_threadsafe(
                serve(self.app), self._loop
            ).result(10)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop listening (pending handlers are cancelled), then stop and close the loop."""
        if self._loop is None or self._thread is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> FixtureServices:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


async def _serve_forever(port: int) -> None:
    runner, base_url = await serve(fixture_app(), port=port)
    print(f"listening {base_url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m streams.testing.fixture_services [--port P]``: serve the fixtures until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m streams.testing.fixture_services",
        description="Serve synthetic PubMed E-utilities (/pubmed) and ClinicalTrials.gov v2 (/ctgov).",
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port (default 0: a free one)")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(args.port))


if __name__ == "__main__":
    main()
