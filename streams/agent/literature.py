"""The agent's two literature tools over HTTP: PubMed through E-utilities, trials through ClinicalTrials.gov.

``search_medical_literature(query)`` is :func:`search_literature` and ``find_clinical_trials(condition,
status)`` is :func:`find_trials`; each takes the service's base URL, so the same code runs against the
public services and against the local fixtures (:mod:`streams.testing.fixture_services`).

PubMed, two E-utilities calls (https://www.ncbi.nlm.nih.gov/books/NBK25499/, "The E-utilities In-Depth:
Parameters, Syntax and More"):

* ``GET {base}/esearch.fcgi?db=pubmed&term=…&retmode=json&retmax=N&tool=clingate`` answers
  ``{"esearchresult": {"count": "<total, a string>", "idlist": ["<pmid>", …]}}``;
* ``GET {base}/esummary.fcgi?db=pubmed&id=<pmid>,<pmid>&retmode=json&tool=clingate`` answers
  ``{"result": {"uids": [...], "<pmid>": {"title", "pubdate", "source", "authors": [{"name"}], …}}}``; a
  PMID it has no summary for comes back as ``{"uid", "error"}`` and is skipped.

The same page asks every request to name its application with ``tool`` (a string without spaces). Its other
such parameter, ``email``, names a person NCBI can contact; the project has no setting for one, so it is
not sent.

ClinicalTrials.gov, one call to the v2 API (https://clinicaltrials.gov/data-api/api):
``GET {base}/studies?query.cond=…&filter.overallStatus=RECRUITING&pageSize=N&format=json`` answers
``{"studies": [{"protocolSection": {"identificationModule": {"nctId", "briefTitle"}, "statusModule":
{"overallStatus"}, "designModule": {"phases"}, "conditionsModule": {"conditions"}}}], "nextPageToken"?}``;
the first page is all a tool result needs, so ``nextPageToken`` is ignored.

Failures are :class:`ServiceError` with an :data:`~processors.agent.tools.ErrorType`, which the runtime
puts in ``ToolOutcome.error_type`` so the graph can tell a retryable failure from a final one: HTTP 429 is
``rate_limit``, 5xx ``server_error``, a refused or broken connection ``service_unavailable``, any other
status or a body that is not the expected JSON ``invalid_response``, and an empty result ``not_found``.
Timeouts pass through untouched (``TimeoutError``, aiohttp's own included): the runtime bounds each tool by
its deadline and reports ``timeout`` itself. Parsing is defensive: a record missing optional fields
still yields an entry (``None`` or an empty list for what is missing), and records without an identifier
are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

import aiohttp

from processors.agent.tools import ErrorType

TOOL: Final = "clingate"
"""The ``tool`` parameter of every E-utilities request (NCBI's usage policy)."""

MAX_AUTHORS: Final = 3
"""Authors kept per article: a citation's "first three, et al."."""

TRIAL_STATUSES: Final[dict[str, str]] = {
    "active": "ACTIVE_NOT_RECRUITING",
    "recruiting": "RECRUITING",
    "completed": "COMPLETED",
}
"""``ClinicalTrialsArgs.status`` to ClinicalTrials.gov's ``overallStatus`` enum."""

_YEAR = re.compile(r"\b(\d{4})\b")


class ServiceError(Exception):
    """A literature service failed; ``error_type`` says how (module docstring), the message says where.

    Attributes:
        error_type: what the runtime reports as ``ToolOutcome.error_type``.
        message: a short description for logs (never shown to a model: the graph pre-formats errors).
    """

    def __init__(self, error_type: ErrorType, message: str) -> None:
        """Carry ``error_type`` and ``message``."""
        super().__init__(message)
        self.error_type: ErrorType = error_type
        self.message = message


async def _get_json(session: aiohttp.ClientSession, service: str, url: str, params: dict[str, str]) -> Any:
    """The decoded JSON body of ``GET url?params``, or :class:`ServiceError` by status and body."""
    try:
        async with session.get(url, params=params) as response:
            status = response.status
            body = await response.read()
    except TimeoutError:
        raise
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as error:
        raise ServiceError("service_unavailable", f"{service} unreachable: {type(error).__name__}") from error
    if status == 429:
        raise ServiceError("rate_limit", f"{service} answered HTTP 429")
    if status >= 500:
        raise ServiceError("server_error", f"{service} answered HTTP {status}")
    if status != 200:
        raise ServiceError("invalid_response", f"{service} answered HTTP {status}")
    try:
        return json.loads(body)
    except ValueError as error:
        raise ServiceError("invalid_response", f"{service} answered a body that is not JSON") from error


def _section(value: Any, key: str) -> Mapping[str, Any]:
    """``value[key]`` when both are JSON objects, else an empty mapping (optional parts of a record)."""
    part = value.get(key) if isinstance(value, Mapping) else None
    return part if isinstance(part, Mapping) else {}


def _text(value: Any) -> str | None:
    """A non-blank string, stripped; anything else is missing."""
    return (value.strip() or None) if isinstance(value, str) else None


def _texts(value: Any) -> list[str]:
    """The non-blank strings of a JSON list (a missing or malformed list is empty)."""
    if not isinstance(value, list):
        return []
    return [text for text in map(_text, value) if text is not None]


def _year(*dates: Any) -> int | None:
    """The first four-digit year among E-utilities dates (``"2021 Mar 4"``, ``"2021/03/04 00:00"``)."""
    for date in dates:
        match = _YEAR.search(date) if isinstance(date, str) else None
        if match:
            return int(match.group(1))
    return None


def _article(pmid: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    authors = summary.get("authors")
    names = (
        _texts([a.get("name") for a in authors if isinstance(a, Mapping)])
        if isinstance(authors, list)
        else []
    )
    return {
        "pmid": pmid,
        "title": _text(summary.get("title")),
        "journal": _text(summary.get("source")) or _text(summary.get("fulljournalname")),
        "year": _year(summary.get("pubdate"), summary.get("sortpubdate")),
        "authors": names[:MAX_AUTHORS],
    }


async def search_literature(
    session: aiohttp.ClientSession, base_url: str, query: str, limit: int = 5
) -> dict[str, Any]:
    """Search PubMed for ``query``: the total hit count and the first ``limit`` articles, in PubMed's order.

    Args:
        session: the HTTP session (its own timeouts, if any, raise ``TimeoutError`` through this call).
        base_url: the E-utilities base, e.g. ``https://eutils.ncbi.nlm.nih.gov/entrez/eutils``.
        query: the search term, passed to ESearch as typed (PubMed's query syntax applies).
        limit: how many articles to summarise (ESearch's ``retmax``).

    Returns:
        ``{"query", "total", "articles": [{"pmid", "title", "journal", "year", "authors"}]}``, with at most
        :data:`MAX_AUTHORS` author names per article.

    Raises:
        ServiceError: a failed call, an unreadable answer, or no article (``not_found``); ESummary is not
            called when ESearch finds nothing.
    """
    base = base_url.rstrip("/")
    common = {"db": "pubmed", "retmode": "json", "tool": TOOL}
    found = await _get_json(
        session, "PubMed ESearch", f"{base}/esearch.fcgi", {**common, "term": query, "retmax": str(limit)}
    )
    search = _section(found, "esearchresult")
    ids = search.get("idlist")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ServiceError("invalid_response", "PubMed ESearch answered without an idlist")
    ids = ids[:limit]
    if not ids:
        raise ServiceError("not_found", "PubMed ESearch found no articles")
    count = search.get("count")
    total = int(str(count)) if str(count).isdigit() else len(ids)

    summaries = await _get_json(
        session, "PubMed ESummary", f"{base}/esummary.fcgi", {**common, "id": ",".join(ids)}
    )
    result = _section(summaries, "result")
    if not result:
        raise ServiceError("invalid_response", "PubMed ESummary answered without a result")
    uids = _texts(result.get("uids")) or ids
    articles = [
        _article(uid, result[uid])
        for uid in uids
        if isinstance(result.get(uid), Mapping) and "error" not in result[uid]
    ]
    if not articles:
        raise ServiceError("not_found", "PubMed ESummary had no summary for the articles found")
    return {"query": query, "total": total, "articles": articles}


def _trial(study: Any) -> dict[str, Any] | None:
    protocol = _section(study, "protocolSection")
    identification = _section(protocol, "identificationModule")
    nct_id = _text(identification.get("nctId"))
    if nct_id is None:
        return None
    return {
        "nct_id": nct_id,
        "title": _text(identification.get("briefTitle")) or _text(identification.get("officialTitle")),
        "status": _text(_section(protocol, "statusModule").get("overallStatus")),
        "phases": _texts(_section(protocol, "designModule").get("phases")),
        "conditions": _texts(_section(protocol, "conditionsModule").get("conditions")),
    }


async def find_trials(
    session: aiohttp.ClientSession, base_url: str, condition: str, status: str | None, limit: int = 5
) -> dict[str, Any]:
    """Search ClinicalTrials.gov for trials of ``condition``, optionally in one recruitment status.

    Args:
        session: the HTTP session.
        base_url: the v2 API base, e.g. ``https://clinicaltrials.gov/api/v2``.
        condition: the condition searched (``query.cond``: conditions, titles and keywords).
        status: ``active``, ``recruiting``, ``completed`` (:data:`TRIAL_STATUSES`) or None for any status.
        limit: how many trials to return (``pageSize``).

    Returns:
        ``{"condition", "status", "trials": [{"nct_id", "title", "status", "phases", "conditions"}]}`` with
        ``status`` as asked and each trial's ``status`` as the registry spells it (``RECRUITING``).

    Raises:
        ServiceError: a failed call, an unreadable answer, no trial (``not_found``), or a status outside
            :data:`TRIAL_STATUSES` (``invalid_args``, before any request).
    """
    params = {"query.cond": condition, "pageSize": str(limit), "format": "json"}
    if status is not None:
        if status not in TRIAL_STATUSES:
            raise ServiceError("invalid_args", f"unknown trial status {status!r}")
        params["filter.overallStatus"] = TRIAL_STATUSES[status]
    found = await _get_json(session, "ClinicalTrials.gov", f"{base_url.rstrip('/')}/studies", params)
    studies = found.get("studies") if isinstance(found, Mapping) else None
    if not isinstance(studies, list):
        raise ServiceError("invalid_response", "ClinicalTrials.gov answered without a studies list")
    trials = [trial for trial in map(_trial, studies[:limit]) if trial is not None]
    if not trials:
        raise ServiceError("not_found", "ClinicalTrials.gov found no trials")
    return {"condition": condition, "status": status, "trials": trials}
