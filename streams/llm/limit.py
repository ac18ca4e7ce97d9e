"""How many requests one LLM server gets at once: adapted to what it answers within the timeout (AIMD).

A fixed bound (the paper's 64, Appendix A.3) suits a GPU server answering in parallel. A model on a
CPU (SmolLM2 through ``clingate llm serve --backend smollm2``, one thread) answers one request at a
time, seconds apart: given 64, it queues them, and the client's timeout, which runs from the moment a
request is sent, expires in the server's queue, not in its work. So the bound adapts, as TCP's
congestion window does: every attempt that times out halves it (never below one), every answer
raises it by one over the bound (one per bound's worth of answers), up to the ceiling. Waiting for a
slot happens in the client, where it costs no timeout, and in arrival order.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

log = logging.getLogger(__name__)


class AdaptiveLimit:
    """The requests in flight to one server, between 1 and ``ceiling``.

    Args:
        ceiling: the most requests in flight (``CLINGATE_LLM_MAX_IN_FLIGHT``).
        name: the server, for the log line when the bound falls.
    """

    def __init__(self, ceiling: int, name: str = "") -> None:
        self.ceiling = ceiling
        self.limit = float(ceiling)
        self.in_flight = 0
        self._name = name
        self._waiters: deque[asyncio.Future[None]] = deque()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one slot for the body (a call's attempts and backoff)."""
        await self._acquire()
        try:
            yield
        finally:
            self.in_flight -= 1
            self._wake()

    def timed_out(self) -> None:
        """An attempt got no answer within the timeout: halve the bound."""
        bound = int(self.limit)
        self.limit = max(1.0, self.limit / 2)
        if int(self.limit) < bound:
            log.warning("%s timed out: at most %d requests in flight to it now", self._name, int(self.limit))

    def answered(self) -> None:
        """An attempt got an answer: raise the bound by one over the bound."""
        self.limit = min(float(self.ceiling), self.limit + 1 / self.limit)
        self._wake()

    async def _acquire(self) -> None:
        if not self._waiters and self.in_flight < int(self.limit):
            self.in_flight += 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():  # granted as it was cancelled: give it back
                self.in_flight -= 1
                self._wake()
            else:
                self._waiters.remove(granted)
            raise

    def _wake(self) -> None:
        while self._waiters and self.in_flight < int(self.limit):
            granted = self._waiters.popleft()
            if not granted.done():
                self.in_flight += 1
                granted.set_result(None)
