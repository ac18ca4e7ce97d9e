"""How the console asks for a write its Kafka principal may not make: one
:class:`~schemas.console.ConsoleRequest` on ``clingate.console.requests``.

The console's principal (``clingate-console``) writes no input topic of the workers. A re-drive of a dead
letter and an operator's pin are requests, keyed by their target (the dead letter's coordinates, the
pin's ``task|signature``), that the request runtime (:mod:`streams.requests.runtime`, a principal of its
own) checks and carries out, recording each outcome on ``clingate.console.request-outcomes``. A request
is published only after the action's audit record is acknowledged, with that record's id as its own, so
the audit trail names every request and the outcome names the audit record.

:class:`KafkaRequests` produces through an :class:`~streams.console.delivery.Outbox`: a request the page
reports as not sent is never delivered later.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from schemas.console import ConsoleRequest
from schemas.serde import Serde
from streams.console.delivery import Outbox
from streams.runtime.kafka_clients import producer_settings
from topics.catalog import CONSOLE_REQUESTS


class Requests(Protocol):
    """Where the console's requests go."""

    async def send(self, request: ConsoleRequest) -> None:
        """Publish ``request``; returns once Kafka acknowledged it.

        Raises:
            NotAcknowledged: it was not acknowledged.
        """
        ...


class KafkaRequests:
    """``clingate.console.requests`` through one idempotent producer, each request awaited until
    acknowledged."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._outbox = Outbox(producer_settings(bootstrap), "requests")
        self._serde = serde

    async def send(self, request: ConsoleRequest) -> None:
        """Produce ``request`` keyed by its target and wait for its delivery report."""
        value = self._serde.encode(request, topic=CONSOLE_REQUESTS)
        await self._outbox.send(CONSOLE_REQUESTS, key=request.target.encode(), value=value)

    def close(self) -> None:
        """Wait for the requests still in flight (:meth:`Outbox.close`)."""
        self._outbox.close()


REQUESTS = web.AppKey("requests", Requests)
"""Where the application sends its requests (re-drives; the memory explorer's pins go there too)."""
