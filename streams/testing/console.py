"""The browser tests' side of :mod:`streams.testing.browser`: one password for every test user, a test
skipped (saying why) where Chromium or Playwright is absent, the request runtime that carries out what the
console's people ask for, the audit trail read back, and a colour as the browser computes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from schemas.console import ConsoleAction
from schemas.wire import make_serde
from streams.console.records import read_records
from streams.replay.kafka import commit_end_offsets
from streams.requests.runtime import group_id
from streams.runtime.kafka_clients import ensure_catalog
from streams.runtime.settings import get_settings
from streams.testing import browser
from streams.testing.browser import console_env, running_console
from streams.testing.worker import WorkerProcess
from topics.catalog import CONSOLE_AUDIT, CONSOLE_REQUESTS

__all__ = ["PASSWORD", "add_user", "audit_trail", "chromium", "console_env", "request_runtime", "rgb",
           "running_console", "sign_in"]  # fmt: skip

PASSWORD = "correct horse battery staple"
"""Every test user's password."""


def chromium() -> AbstractContextManager[Any]:
    """Debian's Chromium for a ``with`` block (:func:`streams.testing.browser.chromium`); skips the
    calling test where Chromium or Playwright is absent, at the call, before the test starts anything
    (the block is entered later)."""
    try:
        browser.sync_playwright()
    except browser.BrowserUnavailable as reason:
        pytest.skip(str(reason))
    return browser.chromium()


def rgb(colour: str) -> str:
    """``#rrggbb`` as a browser's computed style writes it: what a drawn mark's colour is compared with."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def add_user(env: Mapping[str, str], name: str, role: str) -> None:
    """``clingate console users add NAME --role ROLE`` with :data:`PASSWORD` on standard input."""
    browser.add_user(env, name, role, PASSWORD)


def sign_in(page: Any, url: str, name: str, path: str) -> Any:
    """Open ``path`` (sent to the sign-in page first) and sign in as ``name``; returns the response."""
    return browser.sign_in(page, url, name, PASSWORD, path)


@contextmanager
def request_runtime(bootstrap: str, app_id: str, directory: Path) -> Iterator[WorkerProcess]:
    """``clingate worker --role requests`` of ``app_id`` (its data directory ``directory``), its group
    started at the end of the requests topic, so that it carries out the requests made from then on and
    none of an earlier test on the session broker; stopped on exit. The catalog's topics are made first
    where they are missing (a fresh broker: the console, which would make them, starts later)."""
    ensure_catalog(get_settings(), bootstrap)
    commit_end_offsets(bootstrap, group_id(app_id), [CONSOLE_REQUESTS])
    runtime = WorkerProcess(bootstrap, app_id, directory, {}, role="requests")
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()


def audit_trail(bootstrap: str, users: Collection[str]) -> dict[str, list[ConsoleAction]]:
    """The audit records of each of ``users``, in order (one user's records are one partition's)."""
    trail = read_records(bootstrap, make_serde(None), CONSOLE_AUDIT, ConsoleAction)
    assert not trail.unreadable, f"{trail.unreadable} unreadable audit records"
    actions = trail.values()
    return {user: [a for a in actions if a.user == user] for user in users}
