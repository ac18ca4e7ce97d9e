"""The literature tools against the local fixture services: a real HTTP server on loopback, no mocks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from streams.agent.literature import MAX_AUTHORS, ServiceError, find_trials, search_literature
from streams.testing.fixture_services import FixtureServices

Tool = Callable[[aiohttp.ClientSession, FixtureServices], Awaitable[dict[str, Any]]]


def run(
    tool: Tool, services: FixtureServices, deadline_s: float = 10.0, session_timeout_s: float | None = None
) -> dict[str, Any]:
    """``tool`` in a fresh session and event loop, bounded like the runtime bounds a tool (``deadline_s``)."""

    async def main() -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(sock_read=session_timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            return await asyncio.wait_for(tool(session, services), deadline_s)

    return asyncio.run(main())


def literature(query: str, limit: int = 5) -> Tool:
    return lambda session, services: search_literature(session, services.pubmed_url, query, limit)


def trials(condition: str, status: str | None = None, limit: int = 5) -> Tool:
    return lambda session, services: find_trials(session, services.ctgov_url, condition, status, limit)


@pytest.fixture(scope="module")
def services():
    with FixtureServices() as running:
        yield running


def test_literature_search_returns_matching_articles_best_first(services):
    result = run(literature("warfarin amiodarone interaction"), services)
    assert result["query"] == "warfarin amiodarone interaction"
    assert result["total"] == 2
    first, second = result["articles"]
    assert (first["pmid"], second["pmid"]) == ("90000001", "90000002")
    assert "amiodarone" in first["title"].lower()
    assert first["journal"] == "J Synth Cardiol"
    assert first["year"] == 2021
    assert first["authors"] == ["Alvarez M", "Chen L", "Okafor B"]  # four in the record, three kept
    assert len(first["authors"]) == MAX_AUTHORS


def test_literature_limit_caps_articles_but_not_the_total(services):
    result = run(literature("metformin digoxin warfarin", limit=2), services)
    assert result["total"] == 6
    assert len(result["articles"]) == 2


def test_literature_requests_carry_the_documented_parameters():
    with FixtureServices() as fresh:
        run(literature("digoxin toxicity", limit=3), fresh)
        search, summary = fresh.requests
    assert search.path == "/pubmed/esearch.fcgi"
    assert search.params == {
        "db": "pubmed",
        "term": "digoxin toxicity",
        "retmode": "json",
        "retmax": "3",
        "tool": "clingate",
    }
    assert summary.path == "/pubmed/esummary.fcgi"
    assert summary.params == {
        "db": "pubmed",
        "id": "90000003,90000004",
        "retmode": "json",
        "tool": "clingate",
    }


def test_literature_without_a_match_is_not_found_and_skips_esummary():
    with FixtureServices() as fresh:
        with pytest.raises(ServiceError) as error:
            run(literature("quantum chromodynamics"), fresh)
        assert [r.path for r in fresh.requests] == ["/pubmed/esearch.fcgi"]
    assert error.value.error_type == "not_found"


def test_literature_parses_sparse_records_and_skips_unknown_pmids():
    sparse = {
        "1": {"uid": "1", "title": "Warfarin in a sparse record", "authors": "not a list", "pubdate": "n.d."},
        "2": {
            "uid": "2",
            "title": "Warfarin with a broken author",
            "authors": [{"name": " "}, 7, {}],
            "source": 3,
        },
    }
    with FixtureServices(literature=sparse) as fresh:
        result = run(literature("warfarin"), fresh)
    assert result["articles"] == [
        {"pmid": "1", "title": "Warfarin in a sparse record", "journal": None, "year": None, "authors": []},
        {"pmid": "2", "title": "Warfarin with a broken author", "journal": None, "year": None, "authors": []},
    ]


def test_trials_by_condition(services):
    result = run(trials("atrial fibrillation"), services)
    assert result["condition"] == "atrial fibrillation"
    assert result["status"] is None
    assert [t["nct_id"] for t in result["trials"]] == ["NCT09000001", "NCT09000002"]
    assert result["trials"][0] == {
        "nct_id": "NCT09000001",
        "title": "Left Atrial Appendage Closure Versus Anticoagulation in Atrial Fibrillation",
        "status": "RECRUITING",
        "phases": ["PHASE3"],
        "conditions": ["Atrial Fibrillation"],
    }


@pytest.mark.parametrize(
    ("status", "registry_status", "expected"),
    [
        ("recruiting", "RECRUITING", ["NCT09000003"]),
        ("completed", "COMPLETED", ["NCT09000004"]),
        ("active", "ACTIVE_NOT_RECRUITING", None),
    ],
)
def test_trials_status_filter(status, registry_status, expected):
    with FixtureServices() as fresh:
        if expected is None:
            with pytest.raises(ServiceError) as error:
                run(trials("heart failure", status), fresh)
            assert error.value.error_type == "not_found"
        else:
            result = run(trials("heart failure", status), fresh)
            assert result["status"] == status
            assert [t["nct_id"] for t in result["trials"]] == expected
            assert {t["status"] for t in result["trials"]} == {registry_status}
        (request,) = fresh.requests
    assert request.path == "/ctgov/studies"
    assert request.params == {
        "query.cond": "heart failure",
        "filter.overallStatus": registry_status,
        "pageSize": "5",
        "format": "json",
    }


def test_trials_without_status_send_no_filter_and_respect_the_limit():
    with FixtureServices() as fresh:
        result = run(trials("type 2 diabetes", limit=1), fresh)
        (request,) = fresh.requests
    assert len(result["trials"]) == 1
    assert "filter.overallStatus" not in request.params
    assert request.params["pageSize"] == "1"


def test_trials_skip_records_without_an_nct_id():
    records = {
        "a": {"protocolSection": {"conditionsModule": {"conditions": ["Gout"]}}},
        "b": {
            "protocolSection": {
                "identificationModule": {"nctId": "NCT09999999"},
                "conditionsModule": {"conditions": ["Gout"]},
                "designModule": {"phases": "PHASE2"},
            }
        },
    }
    with FixtureServices(trials=records) as fresh:
        result = run(trials("gout"), fresh)
    assert result["trials"] == [
        {"nct_id": "NCT09999999", "title": None, "status": None, "phases": [], "conditions": ["Gout"]}
    ]


def test_trials_with_an_unknown_status_fail_before_any_request():
    with FixtureServices() as fresh:
        with pytest.raises(ServiceError) as error:
            run(trials("gout", "withdrawn"), fresh)
        assert fresh.requests == []
    assert error.value.error_type == "invalid_args"


BOTH_TOOLS = [
    pytest.param(literature("warfarin"), id="literature"),
    pytest.param(trials("heart failure"), id="trials"),
]


@pytest.mark.parametrize("tool", BOTH_TOOLS)
@pytest.mark.parametrize(
    ("fail", "error_type"),
    [("rate_limit", "rate_limit"), ("server_error", "server_error"), ("garbage", "invalid_response")],
)
def test_fail_modes_map_to_their_error_type(tool, fail, error_type):
    with FixtureServices(fail=fail) as failing, pytest.raises(ServiceError) as error:
        run(tool, failing)
    assert error.value.error_type == error_type


@pytest.mark.parametrize("tool", BOTH_TOOLS)
@pytest.mark.parametrize(
    "bounds", [{"deadline_s": 0.3}, {"session_timeout_s": 0.3}], ids=["runtime-deadline", "session-timeout"]
)
def test_a_slow_service_times_out_through_the_tool(tool, bounds):
    # Timeouts are the runtime's to report, aiohttp's own (ServerTimeoutError) included: no ServiceError.
    with FixtureServices(fail="slow") as slow, pytest.raises(TimeoutError) as error:
        run(tool, slow, **bounds)
    assert not isinstance(error.value, ServiceError)


@pytest.mark.parametrize("tool", BOTH_TOOLS)
def test_a_refused_connection_is_service_unavailable(tool):
    stopped = FixtureServices().start()
    stopped.stop()  # its URLs stay, nothing listens there any more
    with pytest.raises(ServiceError) as error:
        run(tool, stopped)
    assert error.value.error_type == "service_unavailable"


def test_unknown_fail_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown fail mode"):
        FixtureServices(fail="flaky")
