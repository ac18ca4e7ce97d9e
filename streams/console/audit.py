"""The console's audit trail: one :class:`~schemas.console.ConsoleAction` on ``clingate.console.audit`` per
action, keyed by the user.

What holds: an action the console does for a person is recorded before it takes effect, and does not take
effect when the record is not acknowledged by Kafka. A sign-in creates its session only after its record
is acknowledged (:class:`AuditUnavailable` otherwise: the page says so, the person is not signed in); a
signed-in person's refused request (missing role, missing or wrong CSRF token) is refused whether or not
its record could be written. A sign-out ends the session first and then records it: ending a session is
the safe side of a failure. Every record is a signed-in person's: what is refused before anyone signed in
(a failed or throttled sign-in, a sign-in form without its token) is counted by
:mod:`streams.console.metrics` instead, so that no anonymous client writes this topic. The records carry
no password and no patient data beyond the request path, a reviewed document's id, a dead letter's
coordinates, an agent turn's id or a patient's run decided on (the ``target``); a re-drive's ``detail``
holds the note its operator typed.

The event time is the wall clock's: the console is the source of these events, as ``clingate arbiter
review`` is of a review.
"""

from __future__ import annotations

import json
import logging
import secrets
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from aiohttp import web

from schemas.console import ConsoleAction, Role
from schemas.serde import Serde
from streams.console.delivery import NotAcknowledged, Outbox
from streams.console.sessions import SESSION
from streams.runtime.kafka_clients import producer_config
from topics.catalog import CONSOLE_AUDIT

log = logging.getLogger(__name__)

ANONYMOUS = "-"
"""The ``user`` of an action without a user (not a user name: names start with a letter or digit)."""


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
    REDRIVE = "redrive"
    """An operator's re-drive of a dead letter to its source topic (its target is the dead letter's
    coordinates, ``<dlq topic>[<partition>]@<offset>``)."""
    ASK = "ask"
    """A clinician's question to the agent (its target is the turn id)."""
    QUERY_DECISION = "query-decision"
    """A pharmacist's Query Gate decision on a run's proposed evidence queries (its target is
    ``patient|run|<time of the proposal>``)."""
    EVIDENCE_REVIEW = "evidence-review"
    """A pharmacist's Evidence Review of a run's evidence bundle (its target is
    ``patient|run|<time of the bundle>``)."""


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
        # A record whose action failed as not recorded is never delivered later (an Outbox gives it up at
        # the deadline the action waits for), so a refused sign-in never shows up as one.
        self._outbox = Outbox(producer_config(bootstrap), "audit records")
        self._serde = serde

    async def record(self, action: ConsoleAction) -> None:
        """Produce ``action`` keyed by its user and wait until Kafka acknowledged it."""
        value = self._serde.encode(action, topic=CONSOLE_AUDIT)
        try:
            await self._outbox.send(CONSOLE_AUDIT, key=action.user.encode(), value=value)
        except NotAcknowledged as exc:
            raise AuditUnavailable(str(exc)) from exc

    def close(self) -> None:
        """Wait for the records still in flight (:meth:`Outbox.close`)."""
        self._outbox.close()


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


async def record_refusal(request: web.Request, action: Action, **detail: object) -> None:
    """Record ``action`` as refused (``detail`` as :func:`audit` takes it: ``user``, ``target`` and the
    rest); the request is refused whether or not the record could be written (a failure is logged)."""
    try:
        await audit(request, action, Outcome.REFUSED, **detail)
    except AuditUnavailable as exc:
        log.error("console: a refused %s was not recorded: %s", action.value, exc)
