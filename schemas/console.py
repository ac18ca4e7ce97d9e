"""Events of the web console (``clingate console``): the audit trail of what the people in the loop did,
and what they ask to be written where the console's principal may not write.

Every action the console takes for a person (a sign-in, a failed one, a sign-out, a refused request, a
posted form) is one :class:`ConsoleAction` on ``clingate.console.audit``, keyed by the user, so one
person's actions are in one partition, in order.

A re-drive of a dead letter and an operator's pin write input topics of the workers, which the console's
principal may not write: each is a :class:`ConsoleRequest` on ``clingate.console.requests`` that the
request runtime (``clingate worker --role requests``, :mod:`streams.requests`) checks and carries out, and
what it did is a :class:`ConsoleRequestOutcome` on ``clingate.console.request-outcomes``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from schemas.base import AvroModel, EventTime, JsonText, RawBytes


class Role(StrEnum):
    """What a person does in the loop (a console user's role, a request's ``role``); each console page
    admits the roles that do its work."""

    SME = "sme"
    PHARMACIST = "pharmacist"
    OPERATOR = "operator"
    CLINICIAN = "clinician"


class ConsoleAction(AvroModel):
    """One action of a person in the console, and whether it was done."""

    avro_name = "clingate.console.ConsoleAction"

    action_id: str
    event_time: EventTime
    user: str
    role: str | None = None
    action: str
    target: str
    detail: JsonText
    outcome: str


class ConsoleRequest(AvroModel):
    """A write a person asked for through the console, carried out only once the runtime checked it."""

    avro_name = "clingate.console.ConsoleRequest"

    request_id: str
    event_time: EventTime
    user: str
    role: str
    action: str
    target: str
    topic: str
    key: RawBytes | None = None
    value: RawBytes | None = None
    note: str


class ConsoleRequestOutcome(AvroModel):
    """What the request runtime did with one :class:`ConsoleRequest`."""

    avro_name = "clingate.console.ConsoleRequestOutcome"

    request_id: str
    event_time: EventTime
    user: str
    action: str
    target: str
    topic: str
    partition: int | None = Field(default=None, ge=0, le=2**31 - 1)
    outcome: str
    reason: str
