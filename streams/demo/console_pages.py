"""Step 9: the console as the people in the loop see this run, photographed next to report.html (and,
once the report is written, the report itself: :func:`shoot_report`).

``clingate console`` runs on the demo's broker as an operator runs it (:mod:`streams.testing.browser`),
with the DBPM workers' ``CLINGATE_APP_ID`` (the memory explorer reads their memory), one user per role
made by ``clingate console users add`` under a random password (there is no default one), and Debian's
Chromium signs in as each person and opens their pages, each page written as ``console-<page>.png`` next
to report.html. The console's address is printed when it is up; with ``clingate demo --serve`` it stays
up, with the rest of the run, until Ctrl-C, and the step prints the users' passwords so a person can sign
in.

What each page must show is checked (``console_pages``): the sign-in page; the pharmacist's board with
PT-TEST-010, and its patient page with its golden run's revisions through the output gates; the SME's
queue and the oldest pending packet; the operator's memory explorer on the first candidate step 4's gate
BLOCKed from the memory (rule ``block``; in a run too small to BLOCK, the first one decided): why, from
its provenance, and its signature's trajectory; the operator's dead letters and the newest dead letter of
``clingate.fhir.updates`` (step 8's) with its re-drive form; the clinician's agent page. Where Chromium or
Playwright is missing the step says why and takes no screenshot (``make demo`` installs Chromium where it
can), and the check is not made.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console

from schemas.console import Role
from schemas.dbpm import GateDecision
from streams.demo.errors import DemoError
from streams.demo.results import ConsolePage, Results
from streams.local.process import ProcessError
from streams.testing import browser

_VIEWPORT = {"width": 1280, "height": 900}
"""The browser window every screenshot is taken in (a page longer than it is photographed whole)."""

Visit = Callable[[Any, str], None]
"""Open a page: ``(playwright page, console URL)``."""


@dataclass(frozen=True)
class Shot:
    """One page of one role: how to open it, what it must show, where its screenshot goes."""

    name: str
    role: Role | None
    """Who opens it (None: a visitor not signed in)."""
    visit: Visit
    expect: str
    """Text the page must show."""


def _goto(path: str) -> Visit:
    def visit(page: Any, url: str) -> None:
        page.goto(url + path)

    return visit


def _first_link(path: str, selector: str) -> Visit:
    """Open ``path``, then the first link ``selector`` finds there (the page stays on ``path`` if none)."""

    def visit(page: Any, url: str) -> None:
        page.goto(url + path)
        links = page.locator(selector)
        if links.count():
            links.first.click()
            page.wait_for_load_state()

    return visit


def shots(explained: GateDecision | None) -> tuple[Shot, ...]:
    """Every page the step photographs, in the order a reader of the report meets them; ``explained`` is
    the decision the memory explorer explains (None: the run decided nothing, which its check reports)."""
    candidate_id, why = ("", "by rule") if explained is None else (
        explained.candidate_id, f"{explained.decision.value} by rule {explained.rule}:"
    )  # fmt: skip
    candidate = f"/memory/candidate/{quote(candidate_id, safe='')}"
    return (
        *SHOTS[:5],
        Shot("operator-memory-candidate", Role.OPERATOR, _goto(candidate), why),
        Shot("operator-memory-signature", Role.OPERATOR, _first_link(candidate, "a.signature"), "Trajectory"),
        *SHOTS[5:],
    )


SHOTS = (
    Shot("login", None, _goto("/login"), "Sign in"),
    Shot("pharmacist-board", Role.PHARMACIST, _goto("/pharmacist"), "PT-TEST-010"),
    Shot("pharmacist-patient", Role.PHARMACIST, _goto("/pharmacist/patient/PT-TEST-010"), "PROCEED"),
    Shot("sme-queue", Role.SME, _goto("/sme"), "Pending review packets"),
    Shot("sme-packet", Role.SME, _first_link("/sme", "table.queue a"), "The LLM's classification"),
    Shot("operator-dead-letters", Role.OPERATOR, _goto("/dead-letters"), "clingate.fhir.updates.dlq"),
    Shot(
        "operator-dead-letter",
        Role.OPERATOR,
        _first_link(
            "/dead-letters/clingate.fhir.updates.dlq", "a[href^='/dead-letters/clingate.fhir.updates.dlq/']"
        ),
        "Re-drive",
    ),
    Shot("clinician-agent", Role.CLINICIAN, _goto("/agent"), "Your recent questions"),
)
"""The pages the step photographs whatever the run decided (:func:`shots` adds the memory explorer's)."""


def step_console(
    console: Console,
    bootstrap: str,
    app_id: str,
    workdir: Path,
    report_dir: Path,
    stack: ExitStack,
    results: Results,
) -> dict[Role, tuple[str, str]]:
    """Start the console on ``bootstrap`` for the workers of ``app_id`` (stopped with ``stack``),
    photograph every page of :func:`shots` into ``report_dir`` and check them; returns each role's user
    name and password."""
    env = {**browser.console_env(bootstrap, workdir / "console-users.json"), "CLINGATE_APP_ID": app_id}
    users = {role: (f"demo-{role.value}", secrets.token_urlsafe(18)) for role in Role}
    try:
        for role, (name, password) in users.items():
            browser.add_user(env, name, role.value, password)
        url = stack.enter_context(browser.running_console(env, workdir / "console.log"))
    except ProcessError as error:
        raise DemoError(f"the console did not start: {error}") from error
    results.console_url = url
    console.print(f"  the console is up: {url} (users demo-<role>, one per role; --serve keeps it up)")
    try:
        with browser.chromium() as chromium:
            pages = shots(_explained(results))
            results.console_pages = [_shoot(chromium, url, shot, users, report_dir) for shot in pages]
    except browser.BrowserUnavailable as reason:
        console.print(f"  [yellow]no screenshots:[/] {reason}")
        return users
    for shown in results.console_pages:
        mark = "[green]ok[/]" if shown.shows else "[red]MISSING[/]"
        console.print(f"  {shown.name:<26} {shown.status} {mark} {shown.path}  -> {shown.screenshot}")
    missing = [p.name for p in results.console_pages if p.status != 200 or not p.shows]
    results.check(
        "console_pages", not missing, f"console pages not 200 or without what they must show: {missing}"
    )
    return users


def shoot_report(report: Path) -> str:
    """Photograph ``report`` (report.html, opened from its file in Chromium at the width the console's
    pages are taken) as ``report.png`` beside it; returns that file's path, or why there is none."""
    shot = report.with_name("report.png")
    try:
        with browser.chromium() as chromium:
            page = chromium.new_context(viewport=_VIEWPORT).new_page()
            page.goto(report.resolve().as_uri())
            page.screenshot(path=str(shot), full_page=True)
    except browser.BrowserUnavailable as reason:
        return f"none ({reason})"
    return str(shot)


def _explained(results: Results) -> GateDecision | None:
    """The first candidate the gate BLOCKed from the memory's blocklist (rule ``block``); in a run too
    small for the blocklist to BLOCK (a few patients), the first candidate decided."""
    decided = list(results.flows["dbpm"].latest.values())
    blocked = (d for d in decided if str(d.decision) == "BLOCK" and d.rule == "block")
    return next(blocked, decided[0] if decided else None)


def _shoot(
    chromium: Any, url: str, shot: Shot, users: dict[Role, tuple[str, str]], report_dir: Path
) -> ConsolePage:
    page = chromium.new_context(viewport=_VIEWPORT).new_page()
    try:
        if shot.role is not None:
            name, password = users[shot.role]
            browser.sign_in(page, url, name, password)
        response: list[int] = []
        page.on(
            "response", lambda r: response.append(r.status) if r.request.is_navigation_request() else None
        )
        shot.visit(page, url)
        file = f"console-{shot.name}.png"
        page.screenshot(path=str(report_dir / file), full_page=True)
        path = page.url.removeprefix(url)
        return ConsolePage(
            shot.name, path, response[-1] if response else 0, shot.expect in page.content(), file
        )
    finally:
        page.context.close()
