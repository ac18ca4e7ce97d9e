"""The LLM groups' calls as the demo sees them, scraped from each group's ``/metrics``: the demo's waits
follow them.

A model on a CPU answers in seconds to minutes, not milliseconds, and the groups queue its calls, so
no fixed wait fits every model: a wait is extended by every sign of progress (a candidate done, an
LLM call finished) and fails only after a stall: no progress for :data:`STALL_FLOOR_S`, one attempt's
timeout or :data:`STALL_CALLS` mean call latencies, whichever is longest.
The progress bars show each group's calls in flight and their mean latency. Every client of the
model counts: the docs worker's LLM phases share the server with the generator and the verifier.

Scraped at most once per :data:`SCRAPE_EVERY_S`; a scrape that fails (a group restarting) keeps the
last figures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from streams.testing.metrics import scraped

STALL_FLOOR_S = 120.0
"""The shortest stall a wait tolerates, however fast the calls have been: a worker or group start-up
or a rebalance makes no progress for tens of seconds without being stuck."""

STALL_CALLS = 6.0
"""A wait tolerates this many mean call latencies without progress (a QA ensemble is four calls)."""

SCRAPE_EVERY_S = 1.0


@dataclass(frozen=True)
class GroupCalls:
    """One LLM group's calls: in flight now, finished, and their mean latency (None: none finished)."""

    in_flight: int
    done: int
    mean_s: float | None

    def text(self) -> str:
        """``in flight 3, 41 calls, 2.1 s each``."""
        mean = "" if self.mean_s is None else f", {self.mean_s:.1f} s each"
        return f"in flight {self.in_flight}, {self.done} calls{mean}"


class LlmCalls:
    """The calls of the LLM clients whose metrics ports are ``ports`` (process name -> port).

    Args:
        ports: the generator's, the verifier's and the docs worker's ``/metrics`` ports.
        attempt_s: the clients' timeout of one attempt (``CLINGATE_LLM_TIMEOUT_S``): a call in flight
            is not overdue before it, so no wait gives up sooner.
    """

    def __init__(self, ports: dict[str, int], attempt_s: float = 0.0) -> None:
        self._ports = ports
        self._attempt_s = attempt_s
        self._last: dict[str, GroupCalls] = {name: GroupCalls(0, 0, None) for name in ports}
        self._scraped_at = float("-inf")

    def groups(self) -> dict[str, GroupCalls]:
        """Each group's calls, scraped at most once per :data:`SCRAPE_EVERY_S`."""
        if time.monotonic() - self._scraped_at >= SCRAPE_EVERY_S:
            self._scraped_at = time.monotonic()
            for name, port in self._ports.items():
                try:
                    found = scraped(port, timeout_s=2.0)
                except OSError:  # starting or restarting: keep the last figures
                    continue
                count = found.get("clingate_llm_call_seconds_count", 0.0)
                mean = found.get("clingate_llm_call_seconds_sum", 0.0) / count if count else None
                self._last[name] = GroupCalls(int(found.get("clingate_llm_in_flight", 0.0)), int(count), mean)
        return dict(self._last)

    def done(self) -> int:
        """Calls finished by every group: a wait's sign of progress."""
        return sum(g.done for g in self.groups().values())

    def stall_s(self) -> float:
        """How long a wait tolerates no progress: the floor, one attempt's timeout, or
        :data:`STALL_CALLS` of the slowest client's mean call latency, whichever is longest."""
        means = [g.mean_s for g in self.groups().values() if g.mean_s is not None]
        return max(STALL_FLOOR_S, self._attempt_s, STALL_CALLS * max(means, default=0.0))

    def text(self) -> str:
        """Every group's calls, for an error message."""
        return "; ".join(f"{name}: {calls.text()}" for name, calls in self.groups().items())


class Stall:
    """A deadline that every sign of progress pushes out by :meth:`LlmCalls.stall_s`.

    Args:
        calls: the groups' calls (their count is progress, their latency sets the window).
        limit_s: the first window (before any progress).
    """

    def __init__(self, calls: LlmCalls, limit_s: float) -> None:
        self._calls = calls
        self._seen: tuple[object, int] | None = None
        self._deadline = time.monotonic() + limit_s
        self.window_s = limit_s

    def expired(self, progress: object) -> bool:
        """Whether the deadline passed; ``progress`` is anything that changes when work gets done."""
        now = time.monotonic()
        seen = (progress, self._calls.done())
        if seen != self._seen:
            self._seen = seen
            self.window_s = max(self.window_s, self._calls.stall_s())
            self._deadline = max(self._deadline, now + self.window_s)
        return now > self._deadline
