"""Server-side sessions of the console, each with its CSRF token, and the throttle on failed sign-ins.

What holds:

* **A session is known to this process only** (a dictionary in memory): its id, 32 random bytes
  (``secrets.token_urlsafe(32)``), is all the browser holds (the cookie :mod:`streams.console.auth` sets),
  so nothing a browser sends can make up a user or a role. A restart of the console ends every session.
* **Sessions expire**: a session older than its lifetime (``CLINGATE_CONSOLE_SESSION_S``, 8 h) or unused
  for longer than the idle timeout (``CLINGATE_CONSOLE_IDLE_S``, 30 min) is gone at its next use, and
  swept when a session starts. Time is the injected ``clock`` (``time.monotonic``: a wall-clock step
  neither ends nor prolongs a session), so the tests move it by hand.
* **Every session has its own CSRF token** (another 32 random bytes), embedded in every form its pages
  render and compared in constant time on every POST (:meth:`Session.csrf_matches`). A visitor who has
  not signed in gets an anonymous session on the sign-in page, so that the sign-in form carries a token
  too; signing in replaces that session by a new one (a new id and token: no session fixation).
* **Failed sign-ins are throttled per name** (:class:`SignInThrottle`): after :data:`FAILURES_ALLOWED`
  failures within :data:`FAILURE_WINDOW_S`, a name is refused without its password being checked until
  the oldest failure leaves the window.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from streams.console.users import Role

Clock = Callable[[], float]
"""Seconds, monotonic: when a session started and was last used."""

FAILURES_ALLOWED = 5
"""Failed sign-ins of one name within :data:`FAILURE_WINDOW_S` before that name is refused."""
FAILURE_WINDOW_S = 60.0

ANONYMOUS_LIMIT = 10_000
"""Anonymous sessions (the sign-in page's) kept at most; the oldest go first, so a client that fetches the
sign-in page in a loop cannot grow the console's memory without bound."""


@dataclass
class Session:
    """One browser's session: anonymous (``user`` None: the sign-in page's) or a signed-in person's."""

    id: str
    csrf: str
    started: float
    used: float
    user: str | None = None
    role: Role | None = None

    def csrf_matches(self, token: str | None) -> bool:
        """Whether ``token`` is this session's CSRF token (compared in constant time)."""
        return token is not None and hmac.compare_digest(token.encode(), self.csrf.encode())


SESSION = web.RequestKey("session", Session)
"""The request's valid session, when it has one (set by the console's guard)."""


class Sessions:
    """The sessions of this process (module docstring)."""

    def __init__(self, lifetime_s: float, idle_s: float, clock: Clock = time.monotonic) -> None:
        self.lifetime_s = lifetime_s
        self.idle_s = idle_s
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.started >= self.lifetime_s or now - session.used >= self.idle_s

    def get(self, session_id: str | None) -> Session | None:
        """The session ``session_id`` names, marked used now; None when there is none or it expired
        (then it is forgotten)."""
        session = self._sessions.get(session_id) if session_id else None
        if session is None:
            return None
        now = self._clock()
        if self._expired(session, now):
            del self._sessions[session.id]
            return None
        session.used = now
        return session

    def start(self, user: str | None = None, role: Role | None = None) -> Session:
        """A new session with a new id and CSRF token: a signed-in person's, or anonymous (no user)."""
        now = self._clock()
        self._sweep(now)
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now, user, role)
        self._sessions[session.id] = session
        return session

    def end(self, session_id: str) -> None:
        """Forget a session (sign-out, or replaced at sign-in)."""
        self._sessions.pop(session_id, None)

    def _sweep(self, now: float) -> None:
        for session in [s for s in self._sessions.values() if self._expired(s, now)]:
            del self._sessions[session.id]
        anonymous = [s.id for s in self._sessions.values() if s.user is None]  # oldest first
        for session_id in anonymous[: max(0, len(anonymous) + 1 - ANONYMOUS_LIMIT)]:
            del self._sessions[session_id]


@dataclass
class SignInThrottle:
    """Failed sign-ins per name within the last :data:`FAILURE_WINDOW_S` (module docstring)."""

    clock: Clock = time.monotonic
    allowed: int = FAILURES_ALLOWED
    window_s: float = FAILURE_WINDOW_S
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def __len__(self) -> int:
        """Names with failures counted (some may have left the window since)."""
        return len(self._failures)

    def _recent(self, name: str) -> deque[float]:
        failures = self._failures.get(name, deque())
        horizon = self.clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            self._failures.pop(name, None)
        return failures

    def refused(self, name: str) -> bool:
        """Whether ``name`` has used up its failures: refuse it without checking a password."""
        return len(self._recent(name)) >= self.allowed

    def failed(self, name: str) -> int:
        """Count a failed sign-in of ``name``; returns its failures within the window.

        The names whose failures all left the window are forgotten meanwhile, so that many names tried
        once do not accumulate (each try costs a password check, which bounds how many a minute holds).
        """
        for other in list(self._failures):
            self._recent(other)
        failures = self._recent(name)
        failures.append(self.clock())
        self._failures[name] = failures
        return len(failures)

    def succeeded(self, name: str) -> None:
        """``name`` signed in: its earlier failures no longer count."""
        self._failures.pop(name, None)
