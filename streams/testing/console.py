"""``clingate console`` for the browser tests: users made with the command, the console as a child
process, Debian's Chromium driven by Playwright, and the audit trail read back.

Chromium is ``/usr/bin/chromium`` (the Debian package), never a browser Playwright downloads;
:func:`sync_playwright` skips the calling test, saying why, where Chromium or Playwright is absent.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from schemas.console import ConsoleAction
from schemas.serde import make_serde
from streams.runtime.kafka_clients import read_to_end, reader
from streams.testing.process import SOURCE_ROOT, ProcessHandle, python_module
from topics.catalog import CONSOLE_AUDIT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]  # fmt: skip
PASSWORD = "correct horse battery staple"
"""Every test user's password."""


def sync_playwright() -> Any:
    """Playwright's ``sync_playwright``; skips the test where Chromium or Playwright is absent."""
    import pytest

    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    module = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (the test extra)")
    return module.sync_playwright


def launch(playwright: Any) -> Any:
    """Headless Chromium (:data:`CHROMIUM`)."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


def console_env(bootstrap: str, users_file: Path) -> dict[str, str]:
    """The environment of ``clingate console`` and its users command on ``bootstrap``."""
    return {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "CLINGATE_CONSOLE_USERS": str(users_file)}


def add_user(env: dict[str, str], name: str, role: str) -> None:
    """``clingate console users add NAME --role ROLE`` with :data:`PASSWORD` on standard input."""
    done = subprocess.run(
        python_module("streams.cli", "console", "users", "add", name, "--role", role),
        input=PASSWORD + "\n", env=env, cwd=SOURCE_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


@contextmanager
def running_console(env: dict[str, str], log: Path) -> Iterator[str]:
    """``clingate console --port 0`` as a child process; yields its URL once it listens."""
    argv = python_module("streams.cli", "console", "--port", "0")
    console = ProcessHandle("console", argv, env=env, cwd=SOURCE_ROOT, log=log).start()
    try:
        console.wait_for_output(b"listening http://", timeout_s=120)
        found = re.search(rb"listening (http://\S+)", console.output())
        assert found is not None
        yield found.group(1).decode()
    finally:
        console.stop(grace_s=15)


def sign_in(page: Any, url: str, name: str, path: str) -> Any:
    """Open ``path`` (sent to the sign-in page first) and sign in as ``name``; returns the response."""
    page.goto(url + path)
    assert page.url.startswith(url + "/login"), page.url
    page.fill("input[name=name]", name)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation() as navigation:
        page.click("button[type=submit]")
    return navigation.value


def audit_trail(bootstrap: str, users: Collection[str]) -> dict[str, list[ConsoleAction]]:
    """The audit records of each of ``users``, in order (one user's records are one partition's)."""
    serde = make_serde(None)
    consumer = reader(bootstrap, "console-test-audit", **{"isolation.level": "read_committed"})
    try:
        actions = [serde.decode(m.value(), ConsoleAction, topic=CONSOLE_AUDIT)
                   for m in read_to_end(consumer, {CONSOLE_AUDIT: {}}, 30)]  # fmt: skip
    finally:
        consumer.close()
    return {user: [a for a in actions if a.user == user] for user in users}
