"""What a hostile client cannot do to the console (aiohttp's test client and more browsers from other
loopback addresses, fakes for Kafka): stall the pages with sign-ins, lock a real user out from other
addresses, spray names from one address, write the audit trail before signing in, cancel a sign-in form in
use by opening many, get a 500 for a malformed request, send a link out of its page with an id, or learn
the server's software versions or a patient id from the access log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import pytest
from aiohttp.test_utils import TestClient

from streams.console import users
from streams.console.assessments import AssessmentLog
from streams.console.pages import TEMPLATES, read_in_thread
from streams.console.sessions import ADDRESS_FAILURES, NAME_ALERT, PAIR_FAILURES
from streams.console.users import CHECK_THREADS, CHECKS_WAITING

from .conftest import PASSWORD, Console, FakeAssessments, csrf_of, sign_in, visitor

Client = TestClient[Any, Any]
DEADLINE_S = 120.0
"""How long a condition the test waits for may take before the test fails (never how fast it must be)."""


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition`` holds (fail after :data:`DEADLINE_S`, saying ``what`` was awaited)."""
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"still waiting for {what}"
        await asyncio.sleep(0.01)


def _refused(metrics: str, reason: str) -> float:
    found = re.search(rf'clingate_console_refused_total{{reason="{reason}"}} (\S+)', metrics)
    assert found is not None, metrics
    return float(found.group(1))


@dataclass
class ThreadedAssessments(FakeAssessments):
    """The assessments read on asyncio's default thread pool, as the Kafka source reads them."""

    async def read(self) -> AssessmentLog:
        records = tuple(self.records)
        return await read_in_thread("clingate.clinical.assessments", AssessmentLog, records)


FLOOD = 40
"""Sign-in guesses at once: more than asyncio's default pool has threads on any machine."""
ADMITTED = CHECK_THREADS + CHECKS_WAITING
"""Guesses the password checks take (running or waiting); the rest are refused with 429 at once."""


@contextlib.asynccontextmanager
async def held_flood(
    client: Client, monkeypatch: pytest.MonkeyPatch, address: Callable[[int], str] | None = None
) -> AsyncIterator[list[str]]:
    """``ph`` signed in, then :data:`FLOOD` guesses (guess ``i`` from ``address(i)``, else from
    ``client``'s own address) while every password check is held; enters once the guesses beyond the
    checks' queue are refused and the checks started, yielding the passwords checked so far (in order).
    On exit the checks are released and every guess is refused: 401 once checked, else 429."""
    release, started = threading.Event(), []

    def held_check(password: str, stored: str) -> bool:
        started.append(password)
        release.wait()
        return password == PASSWORD

    async def attempt(index: int) -> int:
        source = () if address is None else (address(index),)
        async with visitor(client, *source) as browser:
            return (await sign_in(browser, f"guess-{index}", "not the password at all")).status

    assert (await sign_in(client, "ph")).status == 303
    monkeypatch.setattr(users, "verify_password", held_check)
    attempts = [asyncio.create_task(attempt(index)) for index in range(FLOOD)]
    try:
        await until(lambda: sum(a.done() for a in attempts) == FLOOD - ADMITTED, "the refusals")
        await until(lambda: len(started) == CHECK_THREADS, "the checks to start")
        yield started
    finally:
        release.set()
    statuses = await asyncio.gather(*attempts)
    assert sorted(statuses) == [401] * ADMITTED + [429] * (FLOOD - ADMITTED)


def test_pages_answer_while_a_flood_of_sign_ins_holds_every_password_check(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forty anonymous sign-ins at once, more than asyncio's default pool has threads on any machine:
    while every password check they started is held, a signed-in pharmacist's board, whose read runs on
    that default pool, answers; the sign-ins beyond the checks' queue are refused with 429 at once."""
    console.assessments = ThreadedAssessments(console.assessments.records)

    async def scenario(client: Client) -> None:
        async with held_flood(client, monkeypatch) as started:
            board = await asyncio.wait_for(client.get("/pharmacist"), DEADLINE_S)
            assert board.status == 200 and "PT-TEST-010" in await board.text()
            assert console.checks.pending == ADMITTED and len(started) == CHECK_THREADS, "still held"

    console.run(scenario)


def test_a_flood_of_sign_ins_from_many_addresses_never_keeps_a_known_user_out(
    console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Guesses from forty addresses fill the checks' queue; ``ph``, signing in again from where they did
    before, still waits for a check instead of a 429, and their check runs before every waiting guess."""

    async def scenario(client: Client) -> None:
        async with held_flood(client, monkeypatch, lambda index: f"127.0.4.{index + 1}") as started:
            owner = asyncio.create_task(sign_in(client, "ph"))
            await until(lambda: console.checks.pending == ADMITTED + 1, "the owner's check to wait")
        assert (await owner).status == 303
        assert started.index(PASSWORD) <= CHECK_THREADS + 1, "before the guesses that waited"

    console.run(scenario)


def test_failures_of_a_name_from_other_addresses_never_lock_its_owner_out(console: Console) -> None:
    """The OWASP cheat sheet's warning about lockout: wrong passwords for ``ph`` from many addresses lock
    those addresses out of ``ph``, more strictly once the name is under attack, and never ``ph``'s owner."""
    attackers = NAME_ALERT // PAIR_FAILURES + 2

    async def scenario(client: Client) -> list[int]:
        statuses = []
        for index in range(attackers):
            async with visitor(client, f"127.0.1.{index + 1}") as attacker:
                for _ in range(PAIR_FAILURES):
                    statuses.append((await sign_in(attacker, "ph", "not the password at all")).status)
        assert (await sign_in(client, "ph")).status == 303, "the owner, at an address of their own"
        return statuses

    statuses = console.run(scenario)
    per_address = [statuses[i : i + PAIR_FAILURES] for i in range(0, len(statuses), PAIR_FAILURES)]
    before, after = per_address[: NAME_ALERT // PAIR_FAILURES], per_address[NAME_ALERT // PAIR_FAILURES :]
    assert before == [[401] * PAIR_FAILURES] * len(before), "each address's allowed failures"
    assert after == [[401] + [429] * (PAIR_FAILURES - 1)] * 2, "one try per address once under attack"


def test_an_address_trying_many_names_is_refused_and_others_are_not(console: Console) -> None:
    async def scenario(client: Client) -> None:
        async with visitor(client, "127.0.2.1") as sprayer:
            for index in range(ADDRESS_FAILURES):
                assert (await sign_in(sprayer, f"user-{index}", "Summer2026!")).status == 401
            for index in range(ADDRESS_FAILURES, ADDRESS_FAILURES + 5):
                refused = await sign_in(sprayer, f"user-{index}", "Summer2026!")
                assert refused.status == 429 and int(refused.headers["Retry-After"]) > 0
            assert (await sign_in(sprayer, "ph")).status == 429, "whatever the name"
        assert (await sign_in(client, "nobody", "Summer2026!")).status == 401, "another address"
        assert (await sign_in(client, "ph")).status == 303

    console.run(scenario)


async def _sign_in_via(client: Client, forwarded: str, password: str) -> int:
    """Sign ``ph`` in with ``password`` through a proxy that says the client is ``forwarded``."""
    headers = {"X-Forwarded-For": forwarded}
    page = await client.get("/login", headers=headers)
    form = {"csrf_token": csrf_of(await page.text()), "name": "ph", "password": password, "next": "/"}
    return (await client.post("/login", data=form, headers=headers, allow_redirects=False)).status


@pytest.mark.parametrize("proxies", [0, 1, 2])
def test_x_forwarded_for_names_the_client_only_behind_trusted_proxies(console: Console, proxies: int) -> None:
    """Behind N trusted proxies the throttle counts the N-th X-Forwarded-For entry from the right, so a
    client locked out there does not lock out another client of the same proxy; with none (the default)
    the header is anyone's text and changes nothing, and an entry that is not an address does not count."""
    console.trusted_proxies = proxies
    chain = ", ".join(["198.51.100.7"] + ["10.0.0.1"] * (proxies - 1))  # what the proxies appended

    async def scenario(client: Client) -> tuple[list[int], int, int]:
        wrong = [
            await _sign_in_via(client, f"203.0.113.9, {chain}", "not the password")
            for _ in range(PAIR_FAILURES)
        ]
        other = await _sign_in_via(
            client, f"203.0.113.9, {chain}".replace("198.51.100.7", "198.51.100.8"), PASSWORD
        )
        forged = await _sign_in_via(client, "not-an-address", PASSWORD)
        return wrong, other, forged

    wrong, other, forged = console.run(scenario)
    assert wrong == [401] * PAIR_FAILURES
    if proxies:
        assert other == 303, "another client of the proxies is not the locked one"
    else:
        assert other == 429, "without trusted proxies every client is the peer: the header changes nothing"
    assert forged == (303 if proxies else 429), "a malformed entry is the peer's address"


def test_posts_refused_before_sign_in_are_counted_never_audited(console: Console) -> None:
    """A sign-in form without its token, a forged token, a post with no session at all, to any path: 403,
    counted at ``/metrics``; only the signed-in person's refused post is on the audit trail."""

    async def scenario(client: Client) -> str:
        await client.get("/login")
        for path in ("/login", "/logout", "/dead-letters/x/0/0", "/" + "a" * 4000):
            assert (await client.post(path, data={"name": "ph"}, allow_redirects=False)).status == 403
            forged = {"csrf_token": "forged", "name": "ph", "password": PASSWORD}
            assert (await client.post(path, data=forged, allow_redirects=False)).status == 403
        async with visitor(client) as stranger:  # no session at all
            assert (await stranger.post("/login", data={"name": "ph"})).status == 403
        await sign_in(client, "ph")
        assert (await client.post("/logout", data={}, allow_redirects=False)).status == 403
        return await (await client.get("/metrics")).text()

    metrics = console.run(scenario)
    assert _refused(metrics, "csrf") == 9
    assert [(a.user, a.action) for a in console.trail.records] == [("ph", "sign-in"), ("ph", "csrf-refused")]


def test_a_flood_of_sign_in_pages_neither_cancels_a_form_in_use_nor_keeps_a_visitor_out(
    console: Console,
) -> None:
    """Sign-in forms keep no state on the server: after thousands opened by a client that never sends
    its cookie back, the form opened first still signs in, a new visitor still gets one, and nothing
    was kept."""

    async def scenario(client: Client) -> None:
        token = csrf_of(await (await client.get("/login")).text())  # the real user's form
        async with visitor(client) as flood:
            for _ in range(2_000):
                assert (await flood.get("/login")).status == 200
                flood.cookie_jar.clear()
            assert len(console.sessions) == 0, "no form is kept"
            form = {"csrf_token": token, "name": "ph", "password": PASSWORD, "next": "/"}
            assert (await client.post("/login", data=form, allow_redirects=False)).status == 303
        async with visitor(client) as newcomer:
            assert (await sign_in(newcomer, "ph")).status == 303

    console.run(scenario)


_FORM = "application/x-www-form-urlencoded"
_PART = b'--x\r\nContent-Disposition: form-data; name="csrf_token"'


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Content-Type": _FORM}, b"csrf_token=\xff\xfe&name=ph"),
        ({"Content-Type": _FORM + "; charset=no-such-charset"}, b"csrf_token=x"),
        ({"Content-Type": _FORM, "Content-Encoding": "gzip"}, b"csrf_token=x, not gzip"),
        ({"Content-Type": _FORM, "Content-Encoding": "deflate"}, b"not deflate either"),
        ({"Content-Type": "multipart/form-data"}, _PART + b"\r\n\r\nb\r\n--x--\r\n"),
        ({"Content-Type": "multipart/form-data; boundary=x"}, b"no boundary in here"),
        ({"Content-Type": "multipart/form-data; boundary=x"}, _PART + b"\r\n\r\n\xff\r\n--x--\r\n"),
        ({"Content-Type": "multipart/form-data; boundary=x"},
         _PART + b'; filename="t"\r\n\r\nthe token as a file\r\n--x--\r\n'),
        ({"Content-Type": "multipart/form-data; boundary=x"},
         _PART + b"\r\nContent-Type: application/octet-stream\r\n\r\nbytes\r\n--x--\r\n"),
    ],
)  # fmt: skip
def test_a_body_that_is_not_a_form_of_text_gets_400_before_and_after_sign_in(
    console: Console, headers: dict[str, str], body: bytes
) -> None:
    """Bytes not of their charset, an unknown charset, a Content-Encoding the body is not in, multipart
    without its boundary, a file or a part that is not text: 400, whatever the fields say."""

    async def scenario(client: Client) -> None:
        await client.get("/login")
        assert (await client.post("/login", data=body, headers=headers)).status == 400
        await sign_in(client, "ph")
        assert (await client.post("/logout", data=body, headers=headers)).status == 400
        assert (await client.get("/pharmacist")).status == 200, "still signed in"
        assert _refused(await (await client.get("/metrics")).text(), "malformed") == 2

    console.run(scenario)
    assert [a.action for a in console.trail.records] == ["sign-in"]


def test_an_id_with_slashes_is_one_path_segment_in_its_link_and_reaches_its_page(
    console: Console, golden: dict[str, Any]
) -> None:
    """A patient id ``../../dead-letters`` links to its own page, as a browser resolves the link."""
    hostile = golden["PT-TEST-010"].model_copy(update={"patient_id": "../../dead-letters?x=1#y"})
    console.assessments.records.append(hostile)

    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        board = await (await client.get("/pharmacist")).text()
        [href] = [h for h in re.findall(r'href="(/pharmacist/patient/[^"]+)"', board) if "dead" in h]
        assert href == "/pharmacist/patient/..%2F..%2Fdead-letters%3Fx%3D1%23y"
        assert urljoin("https://console.example.org/pharmacist", href).endswith(href), "no dot segment"
        page = await client.get(href)
        assert page.status == 200 and "Patient ../../dead-letters?x=1#y" in await page.text()

    console.run(scenario)


def test_no_response_names_a_software_version(console: Console) -> None:
    async def scenario(client: Client) -> None:
        responses = [
            await client.get("/login"), await client.get("/static/console.css"), await client.get("/nowhere"),
            await client.get("/pharmacist", allow_redirects=False), await client.post("/login", data={}),
            await client.get("/metrics"), await client.put("/login"),
        ]  # fmt: skip
        assert [r.status for r in responses] == [200, 200, 404, 302, 403, 200, 405]
        assert {r.headers["Server"] for r in responses} == {"clingate"}

    console.run(scenario)


@pytest.mark.parametrize(
    "raw",
    [b"NOT HTTP AT ALL\r\n\r\n", b"GET /login HTTP/9.9\r\n\r\n", b"GET /\x00 HTTP/1.1\r\nHost: x\r\n\r\n",
     b"GET /login HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n"],
)  # fmt: skip
def test_aiohttps_own_answer_to_an_unparsable_request_names_no_version(console: Console, raw: bytes) -> None:
    """A request aiohttp cannot parse is answered (400) before any route or middleware runs; its
    ``Server`` header is still the console's, read here from the raw socket."""

    async def scenario(client: Client) -> bytes:
        reader, writer = await asyncio.open_connection(client.host, client.port)
        writer.write(raw)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), DEADLINE_S)
        writer.close()
        return answer

    answer = console.run(scenario)
    head = answer.split(b"\r\n\r\n")[0].decode("latin-1")
    assert re.match(r"HTTP/1\.[01] 400 ", head), head
    assert re.search(r"(?im)^server: clingate$", head), head
    assert "aiohttp" not in answer.decode("latin-1") and "Python" not in answer.decode("latin-1")


def test_the_access_log_and_the_errors_name_a_pages_route_never_a_patient(
    console: Console, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(client: Client) -> None:
        await sign_in(client, "ph")
        assert (await client.get("/pharmacist/patient/PT-TEST-010")).status == 200
        console.drafts.down = True
        assert (await client.get("/pharmacist/patient/PT-TEST-008")).status == 503

    with caplog.at_level(logging.INFO):
        console.run(scenario)
    assert '"GET /pharmacist/patient/{patient_id}" 200' in caplog.text
    assert "console: GET /pharmacist/patient/{patient_id}: clingate.clinical.gated-drafts" in caplog.text
    assert "PT-TEST-010" not in caplog.text and "PT-TEST-008" not in caplog.text


def test_every_template_puts_a_value_into_a_links_path_as_one_segment() -> None:
    """Each ``{{ ... }}`` in the path of an ``href`` or a form's ``action`` goes through the ``segment``
    filter, but for the paths that are whole (the navigation's, a touchpoint's page in it, a signature
    page's URL with its query)."""
    whole = {"page.path", "desk.page.path", "signature_url"}
    unencoded = [
        (template.name, value)
        for template in sorted(TEMPLATES.glob("*.html"))
        for attribute in re.findall(r'(?:href|action)="([^"?]*)', template.read_text(encoding="utf-8"))
        for value in re.findall(r"{{\s*(.*?)\s*}}", attribute)
        if not value.endswith("| segment") and value not in whole
    ]
    assert unencoded == []
