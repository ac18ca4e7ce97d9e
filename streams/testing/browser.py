"""``clingate console`` as a person meets it: the console as a child process, users made by its command,
and Debian's Chromium driven by Playwright. Shared by the browser tests and the demo's screenshots.

What holds: the browser is always ``/usr/bin/chromium`` (the Debian package), headless; Playwright only
drives it and never downloads one, so where either is missing :func:`sync_playwright` raises
:class:`BrowserUnavailable` with the reason (the tests skip with it, the demo prints it). The console is
``clingate console --port 0`` exactly as an operator runs it, and its users are made with ``clingate
console users add`` with the password on standard input: there is no other way in.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streams.local.process import SOURCE_ROOT, ProcessError, ProcessHandle, python_module

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium (``apt-get install chromium``; ``make test`` installs it where it can)."""
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]  # fmt: skip
"""Headless, offline, no first-run work; no sandbox, since test machines and containers often run as
root, where Chromium refuses its sandbox."""
READY_S = 120.0
"""Longest wait for the console to say it is listening (it creates missing topics first)."""


class BrowserUnavailable(RuntimeError):
    """Chromium or Playwright is not installed here; the message says which and how to get it."""


def sync_playwright() -> Callable[[], Any]:
    """Playwright's synchronous entry point, once Chromium and Playwright are both here.

    Raises:
        BrowserUnavailable: either is missing.
    """
    if not CHROMIUM.exists():
        raise BrowserUnavailable(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        module = importlib.import_module("playwright.sync_api")
    except ImportError as error:
        raise BrowserUnavailable("Playwright is not installed (the test extra)") from error
    entry: Callable[[], Any] = module.sync_playwright
    return entry


def launch(playwright: Any) -> Any:
    """Debian's Chromium, headless, through ``playwright`` (a started :func:`sync_playwright`)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium, launched headless through Playwright for the block and closed after it.

    Raises:
        BrowserUnavailable: Chromium or Playwright is missing (before anything is started).
    """
    entry = sync_playwright()
    with entry() as playwright:
        launched = launch(playwright)
        try:
            yield launched
        finally:
            launched.close()


def console_env(bootstrap: str, users_file: Path) -> dict[str, str]:
    """The environment of a console (and of its users command) on ``bootstrap`` with ``users_file``."""
    return {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CLINGATE_CONSOLE_USERS": str(users_file)}


def add_user(env: Mapping[str, str], name: str, role: str, password: str) -> None:
    """``clingate console users add NAME --role ROLE`` with ``password`` on standard input.

    Raises:
        ProcessError: the command refused (its message says why).
    """
    done = subprocess.run(
        python_module("streams.cli", "console", "users", "add", name, "--role", role),
        input=password + "\n", env=dict(env), cwd=SOURCE_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode != 0:
        raise ProcessError(f"console users add {name}: {done.stderr.strip()}", done.returncode)


@contextmanager
def running_console(env: Mapping[str, str], log: Path) -> Iterator[str]:
    """``clingate console --port 0`` with ``env``, its output in ``log``; yields its URL once it listens,
    and stops it on exit.

    Raises:
        ProcessError: it exited or did not listen within :data:`READY_S`.
    """
    argv = python_module("streams.cli", "console", "--port", "0")
    console = ProcessHandle("console", argv, env=dict(env), cwd=SOURCE_ROOT, log=log).start()
    try:
        console.wait_for_output(b"listening http://", timeout_s=READY_S)
        found = re.search(rb"listening (http://\S+)", console.output())
        if found is None:
            raise ProcessError(f"the console did not say where it listens; see {log}", None)
        yield found.group(1).decode()
    finally:
        console.stop(grace_s=15)


def sign_in(page: Any, url: str, name: str, password: str, path: str = "/") -> Any:
    """Open ``path``, which sends an anonymous visitor to the sign-in page, and sign in as ``name``;
    returns the response of the page signed in to."""
    page.goto(url + path)
    if not page.url.startswith(url + "/login"):
        raise RuntimeError(f"{path} did not send an anonymous visitor to /login but to {page.url}")
    page.fill("input[name=name]", name)
    page.fill("input[name=password]", password)
    with page.expect_navigation() as navigation:
        page.click("button[type=submit]")
    return navigation.value
