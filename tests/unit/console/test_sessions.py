"""Sessions expire by lifetime and by idleness on an injected clock, without a sweep of the table; each has
its own CSRF token; an anonymous session is signed, not kept, so that none can push another out; failed
sign-ins are throttled by name and address, by address, and more strictly under attack, with locks that
double."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schemas.console import Role
from streams.console import sessions as sessions_module
from streams.console.sessions import (
    ADDRESS_FAILURES,
    FIRST_LOCK_S,
    GLOBAL_ALERT,
    NAME_ALERT,
    OBSERVATION_WINDOW_S,
    PAIR_FAILURES,
    Budget,
    Sessions,
    SignInThrottle,
)

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


def test_idle_sessions_are_forgotten_when_a_session_starts() -> None:
    sessions, clock = _sessions()
    sessions.start("ph", Role.PHARMACIST)
    clock.now += IDLE_S
    kept = sessions.start("dr", Role.CLINICIAN)
    assert len(sessions) == 1 and sessions.get(kept.id) is kept


def test_starting_a_session_looks_at_the_idle_ones_only_not_the_whole_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sessions are kept least recently used first, so a new session stops at the first one in use: a
    table of a thousand costs what a table of one does."""
    sessions, clock = _sessions()
    for index in range(1000):
        sessions.start(f"user-{index}", Role.SME)
    clock.now += 1
    looked_at: list[str] = []
    expired = Sessions._expired

    def counting(self: Sessions, session: sessions_module.Session, now: float) -> bool:
        looked_at.append(session.id)
        return expired(self, session, now)

    monkeypatch.setattr(Sessions, "_expired", counting)
    sessions.start("dr", Role.CLINICIAN)
    assert len(looked_at) == 1, "one session looked at"
    assert len(sessions) == 1001


def test_using_a_session_puts_it_behind_the_idle_ones() -> None:
    sessions, clock = _sessions()
    first, second = sessions.start("ph", Role.PHARMACIST), sessions.start("dr", Role.CLINICIAN)
    clock.now += IDLE_S - 1
    assert sessions.get(first.id) is first
    clock.now += 1
    sessions.start("op", Role.OPERATOR)  # forgets the second, idle since it started; stops at the first
    assert sessions.get(second.id) is None and sessions.get(first.id) is first


def test_an_anonymous_session_is_signed_not_kept_and_none_pushes_another_out() -> None:
    """Any number of sign-in forms keep no state, and every one of them stays valid until the idle
    timeout after it was opened; its id and CSRF token are its own."""
    sessions, clock = _sessions()
    forms = [sessions.start() for _ in range(20_000)]
    assert len(sessions) == 0, "nothing kept"
    assert len({s.id for s in forms}) == len({s.csrf for s in forms}) == len(forms)
    clock.now += IDLE_S - 1
    first = sessions.get(forms[0].id)
    assert first is not None and first.user is None and first.csrf_matches(forms[0].csrf)
    assert not first.csrf_matches(forms[1].csrf)
    clock.now += 1
    assert sessions.get(forms[0].id) is None and sessions.get(forms[-1].id) is None, "expired"


def _reopened(session_id: str) -> str:
    """The id with a later opening time and the HMAC it had."""
    anon, nonce, opened, mac = session_id.split(".")
    return ".".join((anon, nonce, str(int(opened) + 60_000), mac))


@pytest.mark.parametrize(
    "forge",
    [
        lambda i: i[:-1] + ("0" if i[-1] != "0" else "1"),  # its HMAC altered
        _reopened,
        lambda i: ".".join(("anon", "chosen-nonce", *i.split(".")[2:])),  # another nonce
        lambda i: i + ".x",
        lambda i: "anon.x.1e9.y",
    ],
)
def test_a_forged_or_altered_anonymous_session_is_none(forge: Callable[[str], str]) -> None:
    sessions, _ = _sessions()
    assert sessions.get(forge(sessions.start().id)) is None
    other, _ = _sessions()
    assert other.get(sessions.start().id) is None, "another process's key (a restart)"


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


def test_a_pair_is_locked_at_its_allowed_failures_and_each_next_lock_is_twice_as_long() -> None:
    clock = FakeClock()
    throttle = SignInThrottle(clock)
    for _ in range(PAIR_FAILURES - 1):
        assert throttle.failed("#ph", "10.0.0.1") == 0
        assert throttle.refused("#ph", "10.0.0.1") == 0
    assert throttle.failed("#ph", "10.0.0.1") == FIRST_LOCK_S
    assert throttle.refused("#ph", "10.0.0.1") == FIRST_LOCK_S
    assert throttle.refused("#ph", "10.0.0.2") == 0, "the same name from another address"
    assert throttle.refused("#dr", "10.0.0.1") == 0, "another name from the same address"
    clock.now += FIRST_LOCK_S
    assert throttle.refused("#ph", "10.0.0.1") == 0
    assert throttle.failed("#ph", "10.0.0.1") == 2 * FIRST_LOCK_S, "backoff"
    clock.now += 2 * FIRST_LOCK_S
    assert throttle.failed("#ph", "10.0.0.1") == 4 * FIRST_LOCK_S


def test_a_lock_never_outlasts_the_observation_window_and_is_forgotten_with_its_failures() -> None:
    clock = FakeClock()
    budget: Budget[str] = Budget(clock)
    locks = []
    for _ in range(12):
        locks.append(budget.fail("k", allowed=1))
        clock.now += budget.locked_for("k")
    assert locks[:4] == [FIRST_LOCK_S, 2 * FIRST_LOCK_S, 4 * FIRST_LOCK_S, 8 * FIRST_LOCK_S]
    assert max(locks) == OBSERVATION_WINDOW_S
    clock.now += OBSERVATION_WINDOW_S
    assert len(budget) == 0 and budget.total() == 0 and budget.locked_for("k") == 0


def test_an_address_is_locked_after_its_failures_whatever_the_names() -> None:
    throttle = SignInThrottle(FakeClock())
    for index in range(ADDRESS_FAILURES):
        assert throttle.refused(f"#name-{index}", "10.0.0.9") == 0
        throttle.failed(f"#name-{index}", "10.0.0.9")
    assert throttle.refused("#a-new-name", "10.0.0.9") == FIRST_LOCK_S
    assert throttle.refused("#a-new-name", "10.0.0.10") == 0


def test_failures_of_a_name_from_many_addresses_never_lock_its_owner_out() -> None:
    """The lockout campaign of the OWASP cheat sheet's warning: every address the attacker has gets one
    try once the name is under attack, and the owner, at an address of their own, signs in."""
    throttle = SignInThrottle(FakeClock())
    for index in range(NAME_ALERT):
        assert throttle.failed("#ph", f"10.1.0.{index}") == 0
    assert throttle.failed("#ph", "10.1.1.1") == FIRST_LOCK_S, "under attack: one try per address"
    assert throttle.refused("#ph", "10.1.1.1") and not throttle.refused("#ph", "192.168.7.7")


def test_under_a_global_attack_an_address_with_a_failure_is_locked_at_once_unless_it_is_known() -> None:
    throttle = SignInThrottle(FakeClock())
    throttle.succeeded("#ph", "192.168.7.7")
    for index in range(GLOBAL_ALERT):
        throttle.failed(f"#name-{index}", f"10.2.{index // 250}.{index % 250}")
    assert throttle.failed("#dr", "10.3.0.1") == FIRST_LOCK_S
    assert throttle.failed("#ph", "192.168.7.7") == 0, "a pair that signed in keeps its allowed failures"
    assert throttle.refused("#ph", "192.168.7.7") == 0


def test_a_sign_in_clears_its_pairs_failures_and_its_address_lock_no_longer_stops_it() -> None:
    throttle = SignInThrottle(FakeClock())
    for _ in range(PAIR_FAILURES - 1):
        throttle.failed("#ph", "10.0.0.1")
    throttle.succeeded("#ph", "10.0.0.1")
    assert throttle.failed("#ph", "10.0.0.1") == 0, "a fresh count of failures"
    for index in range(ADDRESS_FAILURES):
        throttle.failed(f"#name-{index}", "10.0.0.1")
    assert throttle.refused("#other", "10.0.0.1") > 0 and throttle.refused("#ph", "10.0.0.1") == 0


def test_failures_that_left_the_window_are_forgotten() -> None:
    clock = FakeClock()
    throttle = SignInThrottle(clock)
    for index in range(100):
        throttle.failed(f"#user-{index}", "10.0.0.1")
    clock.now += OBSERVATION_WINDOW_S
    throttle.failed("#ph", "10.0.0.2")
    assert (len(throttle.pairs), len(throttle.addresses), len(throttle.names)) == (1, 1, 1)
