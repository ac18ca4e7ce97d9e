"""The console's application through HTTP (aiohttp's test client, fakes for Kafka): the role guard, CSRF,
sign-in and sign-out, cookies, session expiry, the audit trail, the pharmacist's pages and the headers."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from yarl import URL

from streams.console.app import HEADERS
from streams.console.auth import SESSION_COOKIE
from streams.console.sessions import FIRST_LOCK_S, PAIR_FAILURES

from .conftest import IDLE_S, LIFETIME_S, PASSWORD, Console, csrf_of, sign_in

Client = TestClient[Any, Any]


def _rows(html: str) -> list[tuple[str, str]]:
    """(patient, light) of each row of the board, in order."""
    return re.findall(r'data-patient="([^"]+)" data-light="([A-Z]+)"', html)


@pytest.mark.parametrize("path", ["/", "/pharmacist", "/pharmacist/patient/PT-TEST-010"])
def test_without_a_session_a_page_redirects_to_the_sign_in_page_never_its_content(
    console: Console, path: str
) -> None:
    async def scenario(client: Client) -> None:
        response = await client.get(path, allow_redirects=False)
        assert response.status == 302
        location = URL(response.headers["Location"])
        assert location.path == "/login" and location.query["next"] == path
        assert "PT-TEST" not in await response.text()

    console.run(scenario)


def test_a_pharmacist_signs_in_and_sees_the_board_most_urgent_first(console: Console) -> None:
    async def scenario(client: Client) -> None:
        signed = await sign_in(client, "ph", target="/pharmacist")
        assert signed.status == 303 and signed.headers["Location"] == "/pharmacist"
        board = await client.get("/pharmacist")
        html = await board.text()
        assert board.status == 200
        # RED, then YELLOW by severity and id, then GREEN: whatever order they were published in.
        assert _rows(html) == [("PT-TEST-010", "RED"), ("PT-TEST-008", "YELLOW"), ("PT-TEST-009", "YELLOW"),
                               ("PT-TEST-012", "GREEN")]  # fmt: skip
        assert "Rule C: NTI CRITICAL" in html and "CRITICAL" in html
        assert "PHASE 0 DATA READINESS: STALE" in html, "the staleness banner"

    console.run(scenario)
    [action] = console.trail.records
    assert (action.user, action.role, action.action, action.outcome) == ("ph", "pharmacist", "sign-in", "ok")
    assert action.target == "/login" and PASSWORD not in action.model_dump_json()


def test_the_board_shows_each_patients_latest_assessment_and_the_patient_page_its_history(
    console: Console, golden: dict[str, Any]
) -> None:
    later = golden["PT-TEST-012"].model_copy(
        update={"as_of": "2026-04-02T00:00:00Z", "traffic_light": golden["PT-TEST-010"].traffic_light}
    )
    console.assessments.records.append(later)

    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        rows = _rows(await (await client.get("/pharmacist")).text())
        assert rows[:2] == [("PT-TEST-010", "RED"), ("PT-TEST-012", "RED")] and len(rows) == 4
        page = await client.get("/pharmacist/patient/PT-TEST-012")
        assert page.status == 200
        assert re.findall(r'data-as-of="([^"]+)"', await page.text()) == [
            "2026-04-02T00:00:00Z",
            "2026-03-29T00:00:00Z",
        ], "newest first"
        assert (await client.get("/pharmacist/patient/PT-NOBODY")).status == 404

    console.run(scenario)


def test_another_role_gets_403_never_the_content_and_the_refusal_is_recorded(console: Console) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "dr")
        for path in ("/pharmacist", "/pharmacist/patient/PT-TEST-010"):
            response = await client.get(path, allow_redirects=False)
            assert response.status == 403
            html = await response.text()
            assert "PT-TEST-010" not in html and "Rule C" not in html
            assert "not for the clinician role" in html
        home = await (await client.get("/")).text()
        assert 'href="/agent"' in home and 'href="/pharmacist"' not in home

    console.run(scenario)
    denied = [a for a in console.trail.records if a.action == "access-denied"]
    assert [(a.user, a.role, a.target, a.outcome) for a in denied] == [
        ("dr", "clinician", "/pharmacist", "refused"),
        ("dr", "clinician", "/pharmacist/patient/PT-TEST-010", "refused"),
    ]


def test_the_home_page_links_the_pages_of_the_role(console: Console) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        html = await (await client.get("/")).text()
        assert 'href="/pharmacist"' in html and "Pharmacist board" in html

    console.run(scenario)


@pytest.mark.parametrize("token", [None, "forged"])
def test_a_post_without_the_sessions_csrf_token_is_refused(console: Console, token: str | None) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        form = {} if token is None else {"csrf_token": token}
        refused = await client.post("/logout", data=form, allow_redirects=False)
        assert refused.status == 403
        assert (await client.get("/pharmacist")).status == 200, "the session was not ended"
        page = await client.get("/login", params={"next": "/"}, allow_redirects=False)
        assert page.status == 302, "still signed in"

    console.run(scenario)
    refused = [a for a in console.trail.records if a.action == "csrf-refused"]
    assert [(a.user, a.target, a.outcome) for a in refused] == [("ph", "/logout", "refused")]
    assert ("missing" if token is None else "wrong") in refused[0].detail


def test_the_sign_in_form_needs_its_csrf_token_too(console: Console) -> None:
    async def scenario(client: Client) -> None:
        await client.get("/login")
        form = {"name": "ph", "password": PASSWORD}
        response = await client.post("/login", data=form, allow_redirects=False)
        assert response.status == 403
        assert (await client.get("/pharmacist", allow_redirects=False)).status == 302

    console.run(scenario)


def test_another_sessions_csrf_token_is_refused(console: Console) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        own = csrf_of(await (await client.get("/pharmacist")).text())
        client.session.cookie_jar.clear()
        await sign_in(client, "ph")
        response = await client.post("/logout", data={"csrf_token": own}, allow_redirects=False)
        assert response.status == 403

    console.run(scenario)


def test_signing_out_ends_the_session_and_is_recorded(console: Console) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        token = csrf_of(await (await client.get("/pharmacist")).text())
        response = await client.post("/logout", data={"csrf_token": token}, allow_redirects=False)
        assert response.status == 303 and response.headers["Location"] == "/login"
        assert (await client.get("/pharmacist", allow_redirects=False)).status == 302

    console.run(scenario)
    assert [(a.action, a.user) for a in console.trail.records] == [("sign-in", "ph"), ("sign-out", "ph")]
    assert len(console.sessions) == 0


def test_a_wrong_password_is_refused_not_recorded_and_logged_under_a_keyed_hash_of_the_name(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    """A name typed may be a password typed in the wrong field (any passphrase of letters, digits and
    ``. _ @ -`` is a valid name): the log shows a keyed hash of it, the same for the same name, and the
    audit trail nothing; the refusals are counted."""
    secret = "correct.horse.battery@staple"

    async def scenario(client: Client) -> str:
        for name in ("ph", "nobody", secret, secret):
            response = await sign_in(client, name, "not the password at all")
            assert response.status == 401
            assert "Wrong name or password." in await response.text()
        assert (await client.get("/pharmacist", allow_redirects=False)).status == 302
        return await (await client.get("/metrics")).text()

    with caplog.at_level(logging.WARNING, logger="streams.console.auth"):
        metrics = console.run(scenario)
    assert console.trail.records == []
    assert 'clingate_console_refused_total{reason="wrong-password"} 4.0' in metrics
    tags = re.findall(r"sign-in of (#[0-9a-f]{16}) from 127\.0\.0\.1 refused", caplog.text)
    assert len(tags) == 4 and len(set(tags)) == 3 and tags[2] == tags[3], "one tag per name"
    assert "'ph'" not in caplog.text and "nobody" not in caplog.text and "horse" not in caplog.text
    assert "not the password" not in caplog.text


def test_a_name_that_cannot_be_a_user_is_neither_logged_nor_recorded(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(client: Client) -> None:
        assert (await sign_in(client, "my secret passphrase", PASSWORD)).status == 401

    with caplog.at_level(logging.WARNING, logger="streams.console.auth"):
        console.run(scenario)
    assert console.trail.records == []
    assert "not a user name" in caplog.text and "secret" not in caplog.text


def test_a_name_with_too_many_failures_from_an_address_is_refused_even_with_the_right_password(
    console: Console,
) -> None:
    async def scenario(client: Client) -> None:
        for _ in range(PAIR_FAILURES):
            assert (await sign_in(client, "ph", "not the password at all")).status == 401
        refused = await sign_in(client, "ph")
        assert refused.status == 429 and refused.headers["Retry-After"] == str(int(FIRST_LOCK_S))
        assert (await sign_in(client, "dr")).status == 303, "another name is not throttled"
        console.clock.now += FIRST_LOCK_S
        client.session.cookie_jar.clear()
        assert (await sign_in(client, "ph")).status == 303, "the lock ended"

    console.run(scenario)
    assert [(a.user, a.action, a.outcome) for a in console.trail.records] == [
        ("dr", "sign-in", "ok"), ("ph", "sign-in", "ok"),
    ]  # fmt: skip


def test_a_session_expires_when_idle_and_at_its_lifetime(console: Console) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        console.clock.now += IDLE_S - 1
        assert (await client.get("/pharmacist")).status == 200
        console.clock.now += IDLE_S
        expired = await client.get("/pharmacist", allow_redirects=False)
        assert expired.status == 302 and expired.headers["Location"].startswith("/login")
        await sign_in(client, "ph")
        for _ in range(int(LIFETIME_S // (IDLE_S / 2))):
            console.clock.now += IDLE_S / 2
            await client.get("/", allow_redirects=False)
        assert (await client.get("/pharmacist", allow_redirects=False)).status == 302, "lifetime over"

    console.run(scenario)


@pytest.mark.parametrize("secure", [False, True])
def test_the_session_cookie_is_httponly_samesite_strict_and_secure_when_asked(
    tmp_path: Path, secure: bool
) -> None:
    """The sign-in page's anonymous session's cookie (a Secure one the test client, on plain HTTP, would
    not send back, so the signed-in one is not reached here; both are set by the same code)."""
    site = Console(tmp_path, secure_cookies=secure)

    async def scenario(client: Client) -> str:
        return (await client.get("/login")).headers["Set-Cookie"]

    cookie = site.run(scenario)
    assert cookie.startswith(SESSION_COOKIE + "=")
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "path"} <= attributes
    assert "SameSite=Strict" in cookie and "Path=/" in cookie
    assert ("secure" in attributes) is secure


def test_signing_in_replaces_the_anonymous_session(console: Console) -> None:
    async def scenario(client: Client) -> None:
        await client.get("/login")
        anonymous = client.session.cookie_jar.filter_cookies(client.make_url("/"))[SESSION_COOKIE].value
        await sign_in(client, "ph")
        signed_in = client.session.cookie_jar.filter_cookies(client.make_url("/"))[SESSION_COOKIE].value
        assert signed_in != anonymous
        assert console.sessions.get(signed_in).user == "ph" and console.sessions.get(anonymous).user is None

    console.run(scenario)


@pytest.mark.parametrize("target", ["//evil.example/", "https://evil.example/", "/\\evil.example"])
def test_sign_in_never_redirects_to_another_site(console: Console, target: str) -> None:
    async def scenario(client: Client) -> None:
        response = await sign_in(client, "ph", target=target)
        assert response.status == 303 and response.headers["Location"] == "/"

    console.run(scenario)


def test_no_session_is_made_when_the_sign_in_cannot_be_recorded(console: Console) -> None:
    console.trail.down = True

    async def scenario(client: Client) -> None:
        response = await sign_in(client, "ph")
        assert response.status == 503
        assert (await client.get("/pharmacist", allow_redirects=False)).status == 302

    console.run(scenario)


def test_a_page_kafka_does_not_answer_for_is_a_503_with_the_reason(console: Console) -> None:
    console.assessments.down = True

    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        response = await client.get("/pharmacist")
        assert response.status == 503 and "could not be read from Kafka" in await response.text()

    console.run(scenario)


def test_an_unreadable_users_file_refuses_every_sign_in_with_503(console: Console) -> None:
    console.users.path.write_text("not json")

    async def scenario(client: Client) -> None:
        response = await sign_in(client, "ph")
        assert response.status == 503 and "users file cannot be read" in await response.text()
        assert str(console.users.path) not in await response.text(), "the path is the log's, not the page's"
        assert (await client.get("/pharmacist", allow_redirects=False)).status == 302

    console.run(scenario)


def test_every_response_carries_the_security_headers_and_pages_are_not_cached(console: Console) -> None:
    async def scenario(client: Client) -> None:
        page = await client.get("/login")
        style = await client.get("/static/console.css")
        assert style.status == 200 and "text/css" in style.headers["Content-Type"]
        for response in (page, style):
            assert {name: response.headers.get(name) for name in HEADERS} == HEADERS
        assert page.headers["Cache-Control"] == "no-store"
        assert "script-src" not in HEADERS["Content-Security-Policy"], "no script may run"

    console.run(scenario)
