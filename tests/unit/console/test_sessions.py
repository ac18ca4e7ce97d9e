"""Sessions expire by lifetime and by idleness on an injected clock; each has its own CSRF token; the
anonymous sessions are bounded; failed sign-ins are throttled per name."""

from __future__ import annotations

import pytest

from streams.console import sessions as sessions_module
from streams.console.sessions import FAILURE_WINDOW_S, FAILURES_ALLOWED, Sessions, SignInThrottle
from streams.console.users import Role

from .conftest import FakeClock

LIFETIME_S, IDLE_S = 100.0, 30.0


def _sessions() -> tuple[Sessions, FakeClock]:
    clock = FakeClock()
    return Sessions(LIFETIME_S, IDLE_S, clock), clock


def test_a_session_unused_for_the_idle_timeout_is_gone() -> None:
    sessions, clock = _sessions()
    session = sessions.start("ph", Role.PHARMACIST)
    clock.now += IDLE_S - 1
    assert sessions.get(session.id) is session
    clock.now += IDLE_S - 1
    assert sessions.get(session.id) is session, "each use restarts the idle timeout"
    clock.now += IDLE_S
    assert sessions.get(session.id) is None
    assert len(sessions) == 0, "an expired session is forgotten"


def test_a_session_ends_at_its_lifetime_however_active() -> None:
    sessions, clock = _sessions()
    session = sessions.start("ph", Role.PHARMACIST)
    while clock.now + 20 < session.started + LIFETIME_S:
        clock.now += 20
        assert sessions.get(session.id) is session
    clock.now = session.started + LIFETIME_S
    assert sessions.get(session.id) is None


def test_expired_sessions_are_swept_when_a_session_starts() -> None:
    sessions, clock = _sessions()
    sessions.start("ph", Role.PHARMACIST)
    sessions.start()
    clock.now += IDLE_S
    kept = sessions.start("dr", Role.CLINICIAN)
    assert len(sessions) == 1 and sessions.get(kept.id) is kept


def test_ids_and_csrf_tokens_are_random_and_each_sessions_own() -> None:
    sessions, _ = _sessions()
    first, second = sessions.start("ph", Role.PHARMACIST), sessions.start("ph", Role.PHARMACIST)
    assert len({first.id, second.id, first.csrf, second.csrf}) == 4
    assert len(first.id) >= 43 and len(first.csrf) >= 43, "32 random bytes, URL-safe base64"
    assert first.csrf_matches(first.csrf)
    assert not first.csrf_matches(second.csrf) and not first.csrf_matches(None) and not first.csrf_matches("")


def test_unknown_and_ended_sessions_are_none() -> None:
    sessions, _ = _sessions()
    session = sessions.start("ph", Role.PHARMACIST)
    assert sessions.get(None) is None and sessions.get("made-up") is None
    sessions.end(session.id)
    assert sessions.get(session.id) is None


def test_the_oldest_anonymous_sessions_go_beyond_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions_module, "ANONYMOUS_LIMIT", 3)
    sessions, _ = _sessions()
    signed_in = sessions.start("ph", Role.PHARMACIST)
    anonymous = [sessions.start() for _ in range(5)]
    assert [sessions.get(s.id) is not None for s in anonymous] == [False, False, True, True, True]
    assert sessions.get(signed_in.id) is signed_in, "a signed-in session is never pushed out"


def test_a_name_is_refused_after_its_allowed_failures_until_the_window_passes() -> None:
    clock = FakeClock()
    throttle = SignInThrottle(clock=clock)
    for count in range(1, FAILURES_ALLOWED + 1):
        assert not throttle.refused("ph")
        assert throttle.failed("ph") == count
        clock.now += 1
    assert throttle.refused("ph") and not throttle.refused("dr"), "per name"
    clock.now += FAILURE_WINDOW_S - FAILURES_ALLOWED
    assert not throttle.refused("ph"), "the oldest failure left the window"


def test_a_sign_in_clears_the_names_failures() -> None:
    throttle = SignInThrottle(clock=FakeClock())
    for _ in range(FAILURES_ALLOWED - 1):
        throttle.failed("ph")
    throttle.succeeded("ph")
    assert throttle.failed("ph") == 1


def test_names_whose_failures_left_the_window_are_forgotten() -> None:
    clock = FakeClock()
    throttle = SignInThrottle(clock=clock)
    for index in range(100):
        throttle.failed(f"user-{index}")
    clock.now += FAILURE_WINDOW_S
    throttle.failed("ph")
    assert len(throttle) == 1
