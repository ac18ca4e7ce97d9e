"""The browser tests' side of :mod:`streams.testing.browser`: one password for every test user, a test
skipped (saying why) where Chromium or Playwright is absent, and the audit trail read back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import pytest

from schemas.console import ConsoleAction
from schemas.serde import make_serde
from streams.console.records import read_records
from streams.testing import browser
from streams.testing.browser import console_env, launch, running_console
from topics.catalog import CONSOLE_AUDIT

__all__ = ["PASSWORD", "add_user", "audit_trail", "console_env", "launch", "running_console", "sign_in",
           "sync_playwright"]  # fmt: skip

PASSWORD = "correct horse battery staple"
"""Every test user's password."""


def sync_playwright() -> Callable[[], Any]:
    """Playwright's ``sync_playwright``; skips the calling test where Chromium or Playwright is absent."""
    try:
        return browser.sync_playwright()
    except browser.BrowserUnavailable as reason:
        pytest.skip(str(reason))


def add_user(env: Mapping[str, str], name: str, role: str) -> None:
    """``clingate console users add NAME --role ROLE`` with :data:`PASSWORD` on standard input."""
    browser.add_user(env, name, role, PASSWORD)


def sign_in(page: Any, url: str, name: str, path: str) -> Any:
    """Open ``path`` (sent to the sign-in page first) and sign in as ``name``; returns the response."""
    return browser.sign_in(page, url, name, PASSWORD, path)


def audit_trail(bootstrap: str, users: Collection[str]) -> dict[str, list[ConsoleAction]]:
    """The audit records of each of ``users``, in order (one user's records are one partition's)."""
    trail = read_records(bootstrap, make_serde(None), CONSOLE_AUDIT, ConsoleAction)
    assert not trail.unreadable, f"{trail.unreadable} unreadable audit records"
    actions = trail.values()
    return {user: [a for a in actions if a.user == user] for user in users}
