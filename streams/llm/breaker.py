"""The circuit breaker of one LLM server: stop sending to a server that keeps failing, probe it later.

A breaker opens after ``threshold`` consecutive failed attempts and then refuses every attempt until
``reset_s`` have passed; it then lets exactly one probe through (half-open), whose outcome closes or
re-opens it. One probe, not a burst: a server that is still down costs one attempt per ``reset_s``,
not one per waiting call. What counts as a failed attempt is the caller's call policy
(:class:`streams.llm.client.LlmClient` counts timeouts, connection errors and 5xx; any other answer
proves the server alive); the breaker only counts.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


class CircuitState(StrEnum):
    """States of a circuit breaker."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Consecutive-failure circuit breaker with a single half-open probe.

    Not thread-safe; it lives on one event loop, where each method runs without interleaving.
    """

    def __init__(self, threshold: int, reset_s: float, clock: Callable[[], float]) -> None:
        """Create a closed breaker.

        Args:
            threshold: consecutive failures that open the circuit (>= 1).
            reset_s: seconds the circuit stays open before a probe is allowed.
            clock: monotonic clock in seconds.
        """
        self._threshold = threshold
        self._reset_s = reset_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probe_in_flight = False

    @property
    def state(self) -> CircuitState:
        """The current state (an open circuit whose reset time has passed reads as half-open)."""
        if self._opened_at is None:
            return CircuitState.CLOSED
        if self._probe_in_flight or self._clock() - self._opened_at >= self._reset_s:
            return CircuitState.HALF_OPEN
        return CircuitState.OPEN

    def allow(self) -> bool:
        """Ask to send one attempt; a True answer MUST be followed by one ``record_*`` call."""
        state = self.state
        if state is CircuitState.CLOSED:
            return True
        if state is CircuitState.HALF_OPEN and not self._probe_in_flight:
            self._probe_in_flight = True
            return True
        return False

    def record_success(self) -> None:
        """The server answered: close the circuit."""
        self._failures = 0
        self._opened_at = None
        self._probe_in_flight = False

    def record_failure(self) -> None:
        """The attempt failed at the server or network: count it, open (or re-open) when due."""
        self._failures += 1
        if self._probe_in_flight or self._failures >= self._threshold:
            self._opened_at = self._clock()
        self._probe_in_flight = False

    def record_abandoned(self) -> None:
        """The attempt was cancelled by the caller: no judgement, free the probe slot."""
        self._probe_in_flight = False
