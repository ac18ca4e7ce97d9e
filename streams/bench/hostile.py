"""``clingate bench console --hostile``: a scripted hostile client against ``clingate console`` on a real
broker, each attack reported as held or not.

The bench starts a console of its own (``clingate console --port 0``, a users file of its own, the
process's Kafka settings) with a pharmacist, an operator, an SME and a victim, and plays, from loopback
addresses of its own (any 127.0.0.0/8 address reaches a console on 127.0.0.1):

1. **sign-in flood**: :attr:`Scale.flood` anonymous sign-ins at once, each from its own address and
   under a new name, while a signed-in pharmacist loads the board. Held: the board answers within
   :data:`PAGE_BOUND_S` (and within ten times its own time before the flood) all along.
2. **lockout campaign**: wrong passwords for the victim from :attr:`Scale.attackers` addresses, five
   each. Held: the victim then signs in from an address of their own.
3. **name spray**: one address tries more names than an address may fail. Held: it is refused (429)
   before the end.
4. **swapped fields**: a passphrase typed into the name field. Held: it is neither in the console's log
   nor on the audit trail.
5. **CSRF flood**: :attr:`Scale.csrf_posts` anonymous posts without a token to 8 KB paths. Held: the audit
   trail has no more records than before, and ``/metrics`` counted every one.
6. **session flood**: a sign-in form is opened, then :attr:`Scale.sessions` anonymous ones. Held: the
   first form still signs in.
7. **malformed requests**: bodies that are no form (bytes not of their charset, an unknown charset,
   multipart without its boundary) and the dead-letter pages' numbers (``²``, 5,000 digits). Held:
   every answer is 4xx.
8. **ids with '/'**: a review packet whose id is ``../../dead-letters/<run>``, published on the review
   packets' topic (the bench writes it there: run the bench on a broker of its own). Held: the SME's queue
   links it as one encoded path segment, and the link opens the packet.
9. **software versions**: a request line aiohttp cannot parse, and a page. Held: no ``Server`` header
   names a version.
10. **forged Kafka write**: with the process's Kafka credentials (run the bench as ``clingate-console``
    on a secured cluster), a verifier's verdict on ``clingate.dbpm.verdicts``. Held: the broker refuses
    it. Not run where the process has no credentials (a broker without an authorizer lets anyone write).
11. **weak passwords**: ``clingate console users add`` with twelve spaces, ``aaaaaaaaaaaa``, the user's
    name, a common password. Held: each is refused.

Each report says what was measured; the command prints them as a table (``--json PATH``: as JSON too) and
exits 1 if one did not hold.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import ClientSession, CookieJar, DummyCookieJar, TCPConnector
from confluent_kafka import KafkaError, Producer

from schemas.console import ConsoleAction
from schemas.dbpm import Verdict, VerdictLabel
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.bench.review_packets import packets
from streams.console.records import read_records
from streams.console.sessions import ADDRESS_FAILURES, PAIR_FAILURES
from streams.local.process import ProcessError
from streams.runtime.kafka_clients import produce_in_transaction
from streams.runtime.kafka_config import client_config
from streams.runtime.settings import get_settings
from streams.testing.browser import add_user, console_env, running_console
from topics.catalog import CONSOLE_AUDIT, DBPM_VERDICTS, DOCS_REVIEW_PACKETS, FHIR_UPDATES, dlq_name

PAGE_BOUND_S = 3.0
"""The longest a signed-in page may take while the sign-in flood runs."""
WEAK_PASSWORDS = (" " * 12, "a" * 12, "{name}", "Password1234!")
"""What ``users add`` must refuse (``{name}``: the user's name as the password)."""


@dataclasses.dataclass(frozen=True)
class Scale:
    """How hard the bench attacks (the defaults replay the attacks' full size)."""

    flood: int = 40
    """Anonymous sign-ins at once."""
    attackers: int = 6
    """Addresses of the lockout campaign."""
    csrf_posts: int = 500
    """Anonymous posts without a CSRF token."""
    sessions: int = 10_500
    """Anonymous sign-in forms opened after the one that must still sign in."""


SHORT = Scale(flood=12, attackers=3, csrf_posts=40, sessions=300)
"""The short form ``make test`` runs."""


@dataclasses.dataclass(frozen=True)
class Attack:
    """One attack and what became of it."""

    name: str
    held: bool | None
    """True: the console held; False: it did not; None: not run (``detail`` says why)."""
    detail: str

    @property
    def verdict(self) -> str:
        """``held``, ``NOT HELD`` or ``not run``."""
        return {True: "held", False: "NOT HELD", None: "not run"}[self.held]


@dataclasses.dataclass
class _Site:
    url: str
    log: Path
    bootstrap: str
    serde: Serde
    passwords: dict[str, str]
    run: str
    hosts: int = 0

    def browser(self, *, cookies: bool = True) -> ClientSession:
        """A browser of its own from a loopback address no other browser of the bench used."""
        self.hosts += 1
        address = f"127.{10 + self.hosts // 250}.{self.hosts % 250 + 1}.1"
        jar = CookieJar(unsafe=True) if cookies else DummyCookieJar()
        return ClientSession(self.url, connector=TCPConnector(local_addr=(address, 0)), cookie_jar=jar)

    async def sign_in(self, browser: ClientSession, name: str, password: str | None = None) -> int:
        """Open the sign-in page and post its form; the answer's status (303: signed in)."""
        token = _token(await (await browser.get("/login")).text())
        form = {"csrf_token": token, "name": name, "password": password or self.passwords[name], "next": "/"}
        async with browser.post("/login", data=form, allow_redirects=False) as answer:
            return answer.status

    def audit(self) -> list[ConsoleAction]:
        return read_records(self.bootstrap, self.serde, CONSOLE_AUDIT, ConsoleAction).values()


def _token(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    if found is None:
        raise RuntimeError("the page carries no CSRF token")
    return found.group(1)


async def _timed(call: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    started = time.perf_counter()
    status = await call()
    return time.perf_counter() - started, status


async def _sign_in_flood(site: _Site, scale: Scale) -> Attack:
    async with site.browser() as pharmacist:
        if await site.sign_in(pharmacist, "ph") != 303:
            raise RuntimeError("the pharmacist could not sign in")

        async def board() -> int:
            async with pharmacist.get("/pharmacist") as page:
                await page.read()
                return page.status

        before = sorted([(await _timed(board))[0] for _ in range(3)])[1]
        browsers = [site.browser() for _ in range(scale.flood)]
        try:
            tokens = [_token(await (await b.get("/login")).text()) for b in browsers]

            async def attempt(browser: ClientSession, token: str) -> int:
                name = f"nobody-{secrets.token_hex(4)}"
                form = {"csrf_token": token, "name": name, "password": secrets.token_hex(8), "next": "/"}
                async with browser.post("/login", data=form, allow_redirects=False) as answer:
                    return answer.status

            flood = asyncio.gather(*(attempt(b, t) for b, t in zip(browsers, tokens, strict=True)))
            during: list[tuple[float, int]] = []
            waiting = asyncio.ensure_future(flood)
            while not waiting.done():
                during.append(await _timed(board))
            statuses = await waiting
        finally:
            for browser in browsers:
                await browser.close()
    worst = max(seconds for seconds, _ in during)
    held = all(status == 200 for _, status in during) and worst <= max(PAGE_BOUND_S, 10 * before)
    busy = statuses.count(429)
    detail = (
        f"{scale.flood} sign-ins at once: the board took {worst:.2f} s at worst ({before:.2f} s before), "
        f"{len(during)} loads; {busy} sign-ins refused 429"
    )
    return Attack("sign-in flood", held, detail)


async def _lockout(site: _Site, scale: Scale) -> Attack:
    statuses = []
    for _ in range(scale.attackers):
        async with site.browser() as attacker:
            for _ in range(PAIR_FAILURES):
                statuses.append(await site.sign_in(attacker, "victim", "not the password at all"))
    async with site.browser() as owner:
        status = await site.sign_in(owner, "victim")
    detail = (
        f"{len(statuses)} wrong passwords from {scale.attackers} addresses ({statuses.count(429)} refused "
        f"429); the victim's own sign-in: {status}"
    )
    return Attack("lockout campaign", status == 303, detail)


async def _spray(site: _Site) -> Attack:
    async with site.browser() as sprayer:
        statuses = [
            await site.sign_in(sprayer, f"user-{i}", "Summer2026!") for i in range(ADDRESS_FAILURES + 3)
        ]
    limited = statuses.index(429) if 429 in statuses else None
    detail = f"{len(statuses)} names from one address: " + (
        "never limited" if limited is None else f"refused (429) from attempt {limited + 1} on"
    )
    return Attack("name spray", limited is not None, detail)


async def _swapped(site: _Site) -> Attack:
    passphrase = f"correct.horse.battery.staple-{secrets.token_hex(6)}"
    async with site.browser() as browser:
        status = await site.sign_in(browser, passphrase, "ph")
    logged = passphrase in site.log.read_text(encoding="utf-8", errors="replace")
    recorded = any(passphrase in f"{a.user} {a.target} {a.detail}" for a in site.audit())
    detail = f"answered {status}; in the console's log: {logged}; on the audit trail: {recorded}"
    return Attack("swapped name and password", status == 401 and not logged and not recorded, detail)


async def _refused_csrf(browser: ClientSession) -> float:
    async with browser.get("/metrics") as page:
        found = re.search(r'clingate_console_refused_total\{reason="csrf"\} (\S+)', await page.text())
    return float(found.group(1)) if found else 0.0


async def _csrf_flood(site: _Site, scale: Scale) -> Attack:
    before = len(site.audit())
    async with site.browser() as attacker:
        counted = await _refused_csrf(attacker)
        statuses = []
        for i in range(scale.csrf_posts):
            path = f"/{i}-" + "x" * 8000
            async with attacker.post(path, data={"note": "n\n" * 10}, allow_redirects=False) as answer:
                statuses.append(answer.status)
        counted = await _refused_csrf(attacker) - counted
    added = len(site.audit()) - before
    held = added == 0 and counted >= scale.csrf_posts and set(statuses) == {403}
    detail = (
        f"{scale.csrf_posts} posts: answers {sorted(set(statuses))}, {added} audit records added, "
        f"{counted:.0f} counted at /metrics"
    )
    return Attack("CSRF-failing post flood", held, detail)


async def _session_flood(site: _Site, scale: Scale) -> Attack:
    async with site.browser() as person, site.browser(cookies=False) as flood:
        token = _token(await (await person.get("/login")).text())
        opened = asyncio.Semaphore(16)
        statuses: list[int] = []

        async def open_form() -> None:
            async with opened, flood.get("/login") as page:
                await page.read()
                statuses.append(page.status)

        started = time.perf_counter()
        await asyncio.gather(*(open_form() for _ in range(scale.sessions)))
        seconds = time.perf_counter() - started
        form = {"csrf_token": token, "name": "ph", "password": site.passwords["ph"], "next": "/"}
        async with person.post("/login", data=form, allow_redirects=False) as answer:
            status = answer.status
    refused = len(statuses) - statuses.count(200)
    detail = (
        f"{scale.sessions} sign-in forms opened in {seconds:.1f} s ({refused} refused); the form opened "
        f"first then signed in: {status}"
    )
    return Attack("anonymous session flood", status == 303, detail)


async def _malformed(site: _Site) -> Attack:
    answers: dict[str, int] = {}
    async with site.browser() as anonymous:
        token = _token(await (await anonymous.get("/login")).text())
        form, field = "application/x-www-form-urlencoded", b"csrf_token=" + token.encode()
        bodies = {
            "non-UTF-8 form": (field + b"&name=\xff\xfe", form),
            "unknown charset": (field, form + "; charset=x-nope"),
            "multipart without boundary": (b"--x\r\n", "multipart/form-data"),
        }
        for name, (body, kind) in bodies.items():
            async with anonymous.post("/login", data=body, headers={"Content-Type": kind}) as answer:
                answers[name] = answer.status
    dlq = dlq_name(FHIR_UPDATES)
    async with site.browser() as operator:
        await site.sign_in(operator, "op")
        pages = {
            "?partition=²": f"/dead-letters/{dlq}?partition=²", "?before=²": f"/dead-letters/{dlq}?before=²",
            "?before=5,000 digits": f"/dead-letters/{dlq}?before={'9' * 5000}",
            "offset of 5,000 digits": f"/dead-letters/{dlq}/0/{'9' * 5000}",
        }  # fmt: skip
        for name, path in pages.items():
            async with operator.get(path, allow_redirects=False) as answer:
                answers[name] = answer.status
    held = all(400 <= status < 500 for status in answers.values())
    return Attack("malformed requests", held, ", ".join(f"{k}: {v}" for k, v in answers.items()))


async def _slashes(site: _Site, packet_id: str) -> Attack:
    async with site.browser() as sme:
        await site.sign_in(sme, "sme")
        deadline = time.monotonic() + 60
        links: list[str] = []
        while not links and time.monotonic() < deadline:
            queue = await (await sme.get("/sme")).text()
            # This run's packet only (its id ends in the run's token, encoded or not): a broker reused
            # across runs holds the earlier runs' hostile packets too.
            links = [
                h for h in re.findall(r'href="([^"]+)"', queue) if h.startswith("/sme") and site.run in h
            ]
            if not links:
                await asyncio.sleep(1)
        if not links:
            return Attack("ids with '/'", False, "the hostile packet never reached the SME's queue")
        async with sme.get(links[0], allow_redirects=False) as page:
            opened = page.status == 200 and site.run in await page.text()
    encoded = links[0].startswith("/sme/packet/") and "/" not in links[0][len("/sme/packet/") :]
    return Attack("ids with '/'", encoded and opened, f"packet {packet_id!r} linked as {links[0]}; "
                  f"the link opens the packet: {opened}")  # fmt: skip


async def _versions(site: _Site) -> Attack:
    host, port = site.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    await writer.drain()
    raw = (await asyncio.wait_for(reader.read(65536), 30)).decode("latin-1")
    writer.close()
    async with site.browser() as anonymous, anonymous.get("/nowhere") as page:
        servers = {page.headers.get("Server", "")}
    servers |= set(re.findall(r"(?im)^server: (.*?)\r?$", raw))
    held = all("/" not in s and "aiohttp" not in s.lower() and "python" not in s.lower() for s in servers)
    return Attack("software versions", held, f"Server headers: {sorted(servers)}")


def _forged_write(bootstrap: str, serde: Serde) -> Attack:
    settings = get_settings()
    if not settings.kafka_username:
        why = (
            "the process has no Kafka credentials: run the bench as clingate-console on a secured cluster "
            "(tests/integration/test_security_acls.py does)"
        )
        return Attack("forged Kafka write", None, why)
    verdict = Verdict.model_validate({
        "ts": "2026-05-04T10:00:00Z", "task": "ner", "verdict": VerdictLabel.HARD_FAIL,
        "source": "verifier_mmed", "patient_id": "p-hostile",
        "payload": {"entity": "patient", "category": "Diagnosis"},
    })  # fmt: skip
    producer = Producer(client_config(bootstrap, **{"message.timeout.ms": 15000}))
    reports: list[KafkaError | None] = []
    producer.produce(DBPM_VERDICTS, key=b"ner|patient", value=serde.encode(verdict, topic=DBPM_VERDICTS),
                     on_delivery=lambda error, _message: reports.append(error))  # fmt: skip
    producer.flush(20)
    error = reports[0] if reports else None
    refused = error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    outcome = "refused by the broker" if refused else "accepted" if error is None else error.str()
    return Attack(
        "forged Kafka write", refused, f"a verifier_mmed verdict as {settings.kafka_username}: {outcome}"
    )


def _weak_passwords(env: dict[str, str]) -> Attack:
    accepted = []
    for template in WEAK_PASSWORDS:
        password = template.format(name="weakling1")
        try:
            add_user(env, "weakling1", "pharmacist", password)
            accepted.append(repr(password))
        except ProcessError:
            pass
    detail = f"{len(WEAK_PASSWORDS)} weak passwords: " + (
        f"accepted {', '.join(accepted)}" if accepted else "each refused"
    )
    return Attack("weak passwords", not accepted, detail)


def hostile_bench(bootstrap: str, workdir: Path, scale: Scale = Scale()) -> list[Attack]:
    """Start a console of its own in ``workdir`` on ``bootstrap`` and play every attack (module docstring)."""
    serde = make_serde(get_settings().schema_registry_url)
    env = console_env(bootstrap, workdir / "users.json")
    passwords = {name: secrets.token_urlsafe(18) for name in ("ph", "op", "sme", "victim")}
    roles = {"ph": "pharmacist", "op": "operator", "sme": "sme", "victim": "pharmacist"}
    for name, password in passwords.items():
        add_user(env, name, roles[name], password)
    run = secrets.token_hex(4)
    packet = next(iter(packets(1))).model_copy(update={"doc_id": f"../../dead-letters/{run}"})
    attacks = [_weak_passwords(env)]
    with running_console(env, workdir / "console.log") as url:
        # Once the console has made the catalog's topics (a broker may not create them on a write).
        hostile = [(packet.doc_id.encode(), serde.encode(packet, topic=DOCS_REVIEW_PACKETS))]
        produce_in_transaction(bootstrap, DOCS_REVIEW_PACKETS, hostile, "bench-hostile")
        attacks.append(_forged_write(bootstrap, serde))
        site = _Site(url, workdir / "console.log", bootstrap, serde, passwords, run)

        async def play() -> list[Attack]:
            return [
                await _sign_in_flood(site, scale), await _lockout(site, scale), await _spray(site),
                await _swapped(site), await _csrf_flood(site, scale), await _session_flood(site, scale),
                await _malformed(site), await _slashes(site, packet.doc_id), await _versions(site),
            ]  # fmt: skip

        attacks = asyncio.run(play()) + attacks
    return attacks


def run_hostile(bootstrap: str, scale: Scale = Scale()) -> list[Attack]:
    """:func:`hostile_bench` in a temporary directory of its own."""
    with tempfile.TemporaryDirectory(prefix="clingate-hostile-") as directory:
        return hostile_bench(bootstrap, Path(directory), scale)
