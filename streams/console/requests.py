"""How the console asks for a write its Kafka principal may not make: one
:class:`~schemas.console.ConsoleRequest` on ``clingate.console.requests``.

The console's principal (``clingate-console``) writes no input topic of any runtime. Every record its people
make is a request, keyed by its target, that the request runtime (:mod:`streams.requests.runtime`, a
principal of its own) checks and carries out, recording each outcome on
``clingate.console.request-outcomes``: a re-drive of a dead letter (:meth:`Requests.send`, the dead
letter's coordinates), and a person's own record (:meth:`Requests.publish`: an operator's pin, an SME's
review, a clinician's question to the agent, a pharmacist's query decision or evidence review), keyed and
targeted by :func:`streams.requests.check.publication_request` as the runtime's check requires. A request is
published only after the action's audit record is acknowledged, with that record's id as its own, so the
audit trail names every request and the outcome names the audit record.

:class:`KafkaRequests` produces through an :class:`~streams.console.delivery.Outbox`: a request the page
reports as not sent is never delivered later.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from aiohttp import web

from schemas.base import AvroModel
from schemas.console import ConsoleAction, ConsoleRequest
from schemas.serde import Serde
from streams.console.delivery import Outbox
from streams.requests.check import RequestAction, publication_request
from streams.runtime.kafka_clients import producer_config
from topics.catalog import CONSOLE_REQUESTS


class Requests(Protocol):
    """Where the console's requests go."""

    async def send(self, request: ConsoleRequest) -> None:
        """Publish ``request``; returns once Kafka acknowledged it.

        Raises:
            NotAcknowledged: it was not acknowledged.
        """
        ...

    async def publish(
        self, action: ConsoleAction, kind: RequestAction, record: AvroModel, note: str = ""
    ) -> None:
        """Ask for ``record``, the record the person of the audit record ``action`` made, to be published
        (a request of ``kind`` under ``action``'s id, :func:`person_request`); returns once Kafka
        acknowledged the request.

        Raises:
            NotAcknowledged: it was not acknowledged.
        """
        ...


def person_request(
    action: ConsoleAction, kind: RequestAction, record: AvroModel, serde: Serde, note: str = ""
) -> ConsoleRequest:
    """The request that asks for ``record``, made by the person of the audit record ``action``: its id,
    user, role and time are the audit record's."""
    return publication_request(
        kind, record, serde, request_id=action.action_id, user=action.user, role=action.role or "",
        at=action.event_time, note=note,
    )  # fmt: skip


class KafkaRequests:
    """``clingate.console.requests`` through one idempotent producer, each request awaited until
    acknowledged."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._outbox = Outbox(producer_config(bootstrap), "requests")
        self._serde = serde

    async def send(self, request: ConsoleRequest) -> None:
        """Produce ``request`` keyed by its target and wait for its delivery report."""
        value = self._serde.encode(request, topic=CONSOLE_REQUESTS)
        await self._outbox.send(CONSOLE_REQUESTS, key=request.target.encode(), value=value)

    async def publish(
        self, action: ConsoleAction, kind: RequestAction, record: AvroModel, note: str = ""
    ) -> None:
        """Send :func:`person_request` of ``record`` (:meth:`Requests.publish`)."""
        await self.send(person_request(action, kind, record, self._serde, note))

    def close(self) -> None:
        """Wait for the requests still in flight (:meth:`Outbox.close`)."""
        self._outbox.close()


ASKING = web.AppKey("asking", asyncio.Lock)
"""Held around a page's check that its target was not asked for yet and its asking, so that two people's
clicks cannot both pass the check (one request at a time: they are a person's actions)."""

REQUESTS = web.AppKey("requests", Requests)
"""Where the application sends its requests (re-drives, reviews, questions, the pharmacist's decisions; the
memory explorer's pins go there too)."""
