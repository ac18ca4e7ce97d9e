"""The console's audit trail: one :class:`~schemas.console.ConsoleAction` on ``clingate.console.audit`` per
action, keyed by the user.

What holds: an action the console does for a person is recorded before it takes effect, and does not take
effect when the record is not acknowledged by Kafka. A sign-in creates its session only after its record
is acknowledged (:class:`AuditUnavailable` otherwise: the page says so, the person is not signed in); a
refused request (bad password, rate limit, missing role, missing or wrong CSRF token) is refused whether
or not its record could be written. A sign-out ends the session first and then records it: ending a
session is the safe side of a failure. The records carry no password and no patient data beyond the
request path or a reviewed document's id (the ``target``).

The event time is the wall clock's: the console is the source of these events, as ``clingate arbiter
review`` is of a review.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from aiohttp import web
from confluent_kafka import KafkaError

from schemas.console import ConsoleAction
from schemas.serde import Serde
from streams.console.sessions import SESSION
from streams.console.users import Role
from streams.runtime.kafka_clients import producer
from topics.catalog import CONSOLE_AUDIT

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 10.0
"""How long an audit record may wait for Kafka's acknowledgement before its action fails."""

ANONYMOUS = "-"
"""The ``user`` of an action without a signed-in person or a typed name (not a user name: names start
with a letter or digit)."""


class Action(StrEnum):
    """What a person did (``ConsoleAction.action``)."""

    SIGN_IN = "sign-in"
    SIGN_OUT = "sign-out"
    ACCESS_DENIED = "access-denied"
    """A page of another role asked for."""
    CSRF_REFUSED = "csrf-refused"
    """A POST without its session's CSRF token."""
    REVIEW = "review"
    """An SME's decision on a review packet (its target is the document id)."""
    PIN = "pin"
    """An operator's pin of a DBPM signature, or its removal (its target is ``task|signature``)."""


class Outcome(StrEnum):
    """Whether the action was done (``ConsoleAction.outcome``)."""

    OK = "ok"
    REFUSED = "refused"


class AuditUnavailable(RuntimeError):
    """An audit record was not acknowledged: the action it records must not take effect."""


class AuditTrail(Protocol):
    """Where the console's actions are recorded."""

    async def record(self, action: ConsoleAction) -> None:
        """Record ``action``; returns once it is durable.

        Raises:
            AuditUnavailable: it could not be recorded.
        """
        ...


class KafkaAuditTrail:
    """The audit topic, through one idempotent producer; each record is awaited until acknowledged."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        # librdkafka gives a record up at the deadline its action waits for, so that a record whose action
        # failed as not recorded is never delivered later (a refused sign-in never shows up as one).
        self._producer = producer(bootstrap, **{"message.timeout.ms": int(ACK_TIMEOUT_S * 1000)})
        self._serde = serde

    async def record(self, action: ConsoleAction) -> None:
        """Produce ``action`` keyed by its user and wait for its delivery report: acknowledged, or given up
        by librdkafka after :data:`ACK_TIMEOUT_S`."""
        reports: list[KafkaError | None] = []  # its delivery report's error (None: acknowledged)
        self._producer.produce(
            CONSOLE_AUDIT, key=action.user.encode(), value=self._serde.encode(action, topic=CONSOLE_AUDIT),
            on_delivery=lambda error, _message: reports.append(error),
        )  # fmt: skip
        while not reports:  # reports are served by poll(), in a thread: the event loop goes on meanwhile
            await asyncio.to_thread(self._producer.poll, 0.1)
        if reports[0] is not None:
            raise AuditUnavailable(f"{CONSOLE_AUDIT}: not recorded: {reports[0].str()}")

    def close(self) -> None:
        """Wait for the records still in flight (at most :data:`ACK_TIMEOUT_S`, librdkafka's own limit)."""
        if self._producer.flush(ACK_TIMEOUT_S + 1):
            log.error("console audit: records were not acknowledged at shutdown")


AUDIT = web.AppKey("audit", AuditTrail)
"""The application's audit trail."""


async def audit(
    request: web.Request,
    action: Action,
    outcome: Outcome,
    *,
    user: str | None = None,
    role: Role | None = None,
    target: str | None = None,
    **detail: object,
) -> ConsoleAction:
    """Record ``action`` on ``target`` (default: the request's path), by ``user`` in ``role`` (default: the
    session's person), with ``detail`` as a JSON object; returns the record (its ``action_id`` names it).

    Raises:
        AuditUnavailable: the record was not acknowledged.
    """
    session = request.get(SESSION)
    if user is None and session is not None:
        user, role = session.user, session.role
    record = ConsoleAction(
        action_id=secrets.token_urlsafe(16), event_time=datetime.now(UTC), user=user or ANONYMOUS,
        role=None if role is None else role.value, action=action.value, target=target or request.path,
        detail=json.dumps(detail, sort_keys=True), outcome=outcome.value,
    )  # fmt: skip
    await request.app[AUDIT].record(record)
    return record
