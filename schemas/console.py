"""Events of the web console (``clingate console``): the audit trail of what the people in the loop did.

Every action the console takes for a person (a sign-in, a failed one, a sign-out, a refused request, a
posted form) is one :class:`ConsoleAction` on ``clingate.console.audit``, keyed by the user, so one
person's actions are in one partition, in order.
"""

from __future__ import annotations

from schemas.base import AvroModel, EventTime, JsonText


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
