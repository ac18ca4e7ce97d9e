"""Server-side sessions of the console, each with its CSRF token, and the throttle on failed sign-ins.

What holds:

* **A signed-in session is known to this process only** (a table in memory): its id, 32 random bytes
  (``secrets.token_urlsafe(32)``), is all the browser holds (the cookie :mod:`streams.console.auth` sets),
  so nothing a browser sends can make up a user or a role. A restart of the console ends every session
  (the anonymous ones too: their key is the process's).
* **Sessions expire**: a session older than its lifetime (``CLINGATE_CONSOLE_SESSION_S``, 8 h) or unused
  for longer than the idle timeout (``CLINGATE_CONSOLE_IDLE_S``, 30 min) is gone at its next use. Time is
  the injected ``clock`` (``time.monotonic``: a wall-clock step neither ends nor prolongs a session), so
  the tests move it by hand.
* **Expiry costs no sweep of the table.** The signed-in sessions are kept in the order of last use, so
  the sessions idle the longest are at the front: starting a session forgets the idle ones at the front
  and stops at the first that is not, a constant amortised cost however many sessions there are. A
  session that outlived its lifetime while in use is forgotten at its next use, or once it is idle.
* **Every session has its own CSRF token** (another 32 random bytes, or an anonymous one's HMAC),
  embedded in every form its pages render and compared in constant time on every POST
  (:meth:`Session.csrf_matches`). A visitor who has
  not signed in gets an anonymous session on the sign-in page, so that the sign-in form carries a token
  too; signing in replaces it by a new session (a new id and token: no session fixation).
* **An anonymous session is no state on the server**, so no number of sign-in pages fetched can fill a
  table, push out a form in use or keep a visitor from opening one: its id is a random nonce, when it
  was opened and an HMAC-SHA256 of both under the process's own key (:data:`ANONYMOUS`), and its CSRF
  token another HMAC of the nonce (OWASP's signed double-submit cookie). Anyone can get one, and it
  allows nothing but a sign-in attempt (which the throttle and the password checks bound); a forged or
  altered one fails its HMAC, and one opened :attr:`Sessions.idle_s` ago or earlier has expired.
* **Failed sign-ins are throttled** (:class:`SignInThrottle`, docs/console.md "Failed sign-ins" for the
  design and the OWASP guidance it follows) by the pair of name and address, by address, and, when a name
  or the whole console sees many failures, more strictly for clients without a sign-in history, with
  locks that double. A real user at an address of their own is never refused for what other addresses do.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiohttp import web

from schemas.console import Role

Clock = Callable[[], float]
"""Seconds, monotonic: when a session started and was last used, when a sign-in failed."""

ANONYMOUS = "anon"
"""The first part of an anonymous session's id: ``anon.<nonce>.<opened, ms>.<HMAC>``."""


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
        self._key = secrets.token_bytes(32)
        """Signs the anonymous sessions; this process's own, never written anywhere."""
        self._signed_in: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        """Signed-in sessions kept (anonymous ones are not kept)."""
        return len(self._signed_in)

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.started >= self.lifetime_s or now - session.used >= self.idle_s

    def _mac(self, *parts: str) -> str:
        return hmac.new(self._key, ".".join(parts).encode(), hashlib.sha256).hexdigest()

    def _anonymous(self, nonce: str, opened_ms: int, now: float) -> Session:
        session_id = ".".join((ANONYMOUS, nonce, str(opened_ms), self._mac(ANONYMOUS, nonce, str(opened_ms))))
        return Session(session_id, self._mac("csrf", nonce), opened_ms / 1000, now)

    def _opened(self, session_id: str, now: float) -> Session | None:
        """The anonymous session ``session_id`` names, if its HMAC holds and it was opened less than the
        idle timeout ago."""
        parts = session_id.split(".")
        if len(parts) != 4 or not (parts[2].isascii() and parts[2].isdecimal()) or len(parts[2]) > 16:
            return None
        session = self._anonymous(parts[1], int(parts[2]), now)
        if not hmac.compare_digest(session.id.encode(), session_id.encode()):
            return None
        return session if 0 <= now - session.started < min(self.idle_s, self.lifetime_s) else None

    def get(self, session_id: str | None) -> Session | None:
        """The session ``session_id`` names, a signed-in one marked used now; None when there is none or
        it expired (then it is forgotten)."""
        if not session_id:
            return None
        now = self._clock()
        if session_id.startswith(ANONYMOUS + "."):
            return self._opened(session_id, now)
        session = self._signed_in.get(session_id)
        if session is None:
            return None
        if self._expired(session, now):
            del self._signed_in[session.id]
            return None
        session.used = now
        self._signed_in.move_to_end(session.id)
        return session

    def start(self, user: str | None = None, role: Role | None = None) -> Session:
        """A new session with a new id and CSRF token: a signed-in person's, or anonymous (no user)."""
        now = self._clock()
        if user is None:
            return self._anonymous(secrets.token_urlsafe(16), math.floor(now * 1000), now)
        while self._signed_in and self._expired(oldest := next(iter(self._signed_in.values())), now):
            del self._signed_in[oldest.id]
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now, user, role)
        self._signed_in[session.id] = session
        return session

    def end(self, session_id: str) -> None:
        """Forget a signed-in session (sign-out)."""
        self._signed_in.pop(session_id, None)


K = TypeVar("K", bound=Hashable)

OBSERVATION_WINDOW_S = 15 * 60.0
"""How long a failed sign-in counts (OWASP's observation window)."""
FIRST_LOCK_S = 60.0
"""The first lock of a pair or an address; each next one within the window lasts twice as long, up to
the window itself."""
PAIR_FAILURES = 5
"""Failures of one name from one address within the window before that pair is locked."""
ADDRESS_FAILURES = 20
"""Failures from one address, whatever the names, within the window before that address is locked."""
NAME_ALERT = 10
"""Failures of one name within the window, from any addresses, from which on the name is under attack."""
GLOBAL_ALERT = 100
"""Failures within the window, of any names from any addresses, from which on the console is."""
TRUST_S = 30 * 24 * 3600.0
"""How long a name stays known at an address after it signed in from there."""


@dataclass
class _Count:
    failures: int = 0
    """Within the window."""
    forgiven: int = 0
    """The oldest of them, which a sign-in cleared."""
    locked_until: float = 0.0
    locks: int = 0


class Budget(Generic[K]):
    """Failures per key within the observation window, and each key's lock.

    A failure that brings a key's count to the number allowed locks the key for :data:`FIRST_LOCK_S`, the
    next one within the window for twice as long, and so on up to the window: a lock never outlasts the
    failure that set it, so a key is forgotten with its last failure. Failures are kept in one queue in
    the order they happened, and each call first forgets those that left the window: a constant amortised
    cost, and no more memory than the failures of one window (each of which cost a password check).
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._counts: dict[K, _Count] = {}
        self._failures: deque[tuple[float, K]] = deque()

    def __len__(self) -> int:
        """Keys with failures within the window."""
        self._forget(self._clock())
        return len(self._counts)

    def _forget(self, now: float) -> None:
        while self._failures and self._failures[0][0] <= now - OBSERVATION_WINDOW_S:
            _, key = self._failures.popleft()
            count = self._counts[key]
            count.failures -= 1
            count.forgiven = max(0, count.forgiven - 1)
            if count.failures == 0:
                del self._counts[key]

    def failures(self, key: K) -> int:
        """``key``'s failures within the window (those before a :meth:`clear` not counted)."""
        self._forget(self._clock())
        count = self._counts.get(key)
        return 0 if count is None else count.failures - count.forgiven

    def total(self) -> int:
        """Every key's failures within the window, cleared ones included."""
        self._forget(self._clock())
        return len(self._failures)

    def locked_for(self, key: K) -> float:
        """Seconds until ``key``'s lock ends (0: not locked)."""
        now = self._clock()
        self._forget(now)
        count = self._counts.get(key)
        return 0.0 if count is None else max(0.0, count.locked_until - now)

    def fail(self, key: K, allowed: float = math.inf) -> float:
        """Count a failure of ``key``, locking it once it has ``allowed`` (default: never); returns the
        seconds of the lock it set (0: none)."""
        now = self._clock()
        self._forget(now)
        count = self._counts.setdefault(key, _Count())
        count.failures += 1
        self._failures.append((now, key))
        if count.failures - count.forgiven < allowed:
            return 0.0
        lock_s = min(FIRST_LOCK_S * 2**count.locks, OBSERVATION_WINDOW_S)
        count.locked_until, count.locks = now + lock_s, count.locks + 1
        return lock_s

    def clear(self, key: K) -> None:
        """Lift ``key``'s lock and stop counting its failures so far (:meth:`total` still does)."""
        count = self._counts.get(key)
        if count is not None:
            count.forgiven, count.locked_until, count.locks = count.failures, 0.0, 0


class SignInThrottle:
    """Failed sign-ins by name and address (module docstring; docs/console.md "Failed sign-ins").

    A name is the keyed hash :mod:`streams.console.auth` logs it under, never the name typed. An attempt
    is refused without its password being checked while its (name, address) pair is locked, or its address
    is (unless the name signed in from that address within :data:`TRUST_S`). A failure counts against the
    pair, the address, the name and the console: the pair is locked at :data:`PAIR_FAILURES`, or at its
    first failure when the name (:data:`NAME_ALERT`) or the console (:data:`GLOBAL_ALERT`) is under attack
    and the pair has no sign-in history; the address at :data:`ADDRESS_FAILURES`.
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.pairs: Budget[tuple[str, str]] = Budget(clock)
        self.addresses: Budget[str] = Budget(clock)
        self.names: Budget[str] = Budget(clock)
        self._known: OrderedDict[tuple[str, str], float] = OrderedDict()
        """Pairs that signed in, least recently first, with when."""

    def known(self, name: str, address: str) -> bool:
        """Whether ``name`` signed in from ``address`` within :data:`TRUST_S`."""
        horizon = self._clock() - TRUST_S
        while self._known and next(iter(self._known.values())) <= horizon:
            self._known.popitem(last=False)
        return (name, address) in self._known

    def refused(self, name: str, address: str) -> int:
        """Whole seconds ``name`` must wait before signing in from ``address`` again (0: go on)."""
        wait = self.pairs.locked_for((name, address))
        if not self.known(name, address):
            wait = max(wait, self.addresses.locked_for(address))
        return math.ceil(wait)

    def failed(self, name: str, address: str) -> float:
        """Count a failed sign-in of ``name`` from ``address``; returns the seconds of the lock it set on
        the pair or the address (0: none)."""
        pair = (name, address)
        attacked = self.names.failures(name) >= NAME_ALERT or self.names.total() >= GLOBAL_ALERT
        self.names.fail(name)
        allowed = 1 if attacked and not self.known(name, address) else PAIR_FAILURES
        return max(self.pairs.fail(pair, allowed), self.addresses.fail(address, ADDRESS_FAILURES))

    def succeeded(self, name: str, address: str) -> None:
        """``name`` signed in from ``address``: the pair's failures no longer lock it, and the pair is known
        (an address's lock no longer stops it) for :data:`TRUST_S`."""
        pair = (name, address)
        self.pairs.clear(pair)
        self._known[pair] = self._clock()
        self._known.move_to_end(pair)
