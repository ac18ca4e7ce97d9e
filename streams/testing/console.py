"""``clingate console`` as a child process for the browser tests: users made by the command, the console
started on a free port, sign-in through a Playwright page, and the audit trail read back.

The browser is Debian's Chromium (:data:`CHROMIUM`), never one Playwright downloads; the tests skip where it
or Playwright is absent (``tests/integration/conftest.py``).
"""

from __future__ import annotations

import re
import subprocess
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


def add_user(env: dict[str, str], name: str, role: str) -> None:
    """``clingate console users add NAME --role ROLE`` with :data:`PASSWORD` on standard input."""
    done = subprocess.run(
        python_module("streams.cli", "console", "users", "add", name, "--role", role),
        input=PASSWORD + "\n", env=env, cwd=SOURCE_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def start_console(env: dict[str, str], log: Path) -> tuple[ProcessHandle, str]:
    """``clingate console --port 0`` with ``env``, once it listens; returns it and its URL."""
    argv = python_module("streams.cli", "console", "--port", "0")
    console = ProcessHandle("console", argv, env=env, cwd=SOURCE_ROOT, log=log).start()
    try:
        console.wait_for_output(b"listening http://", timeout_s=120)
        found = re.search(rb"listening (http://\S+)", console.output())
        assert found is not None
    except BaseException:
        console.stop(grace_s=15)
        raise
    return console, found.group(1).decode()


def sign_in(page: Any, url: str, name: str, path: str) -> Any:
    """Open ``path`` (sent to the sign-in page first) and sign in as ``name``; returns the response."""
    page.goto(url + path)
    assert page.url.startswith(url + "/login"), page.url
    page.fill("input[name=name]", name)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation() as navigation:
        page.click("button[type=submit]")
    return navigation.value


def audit_records(bootstrap: str, users: set[str]) -> dict[str, list[ConsoleAction]]:
    """Each of ``users``' audit records, in order (one user's records are one partition's)."""
    serde = make_serde(None)
    consumer = reader(bootstrap, "console-test-audit", **{"isolation.level": "read_committed"})
    try:
        actions = [serde.decode(m.value(), ConsoleAction, topic=CONSOLE_AUDIT)
                   for m in read_to_end(consumer, {CONSOLE_AUDIT: {}}, 30)]  # fmt: skip
    finally:
        consumer.close()
    return {user: [a for a in actions if a.user == user] for user in users}
