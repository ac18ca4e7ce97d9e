"""What the console reads back of its own audit trail (the re-drives, questions and pharmacist's decisions
asked for) and of its requests' outcomes (what the request runtime did with each request).

:class:`KafkaHistory` follows ``clingate.console.audit`` (a
:class:`~streams.console.records.TopicFollower`): its first call reads the retained trail (365 days), and
every later call only what was recorded since, so a page that reloads itself every few seconds costs the
new records only. It keeps the records of the actions read back (:data:`READ_BACK`: re-drives, questions
and the pharmacist's decisions, a few per person and day) and returns those asked for. The topic is keyed
by user, so one person's records are one partition's, in the order they were recorded: a ``refused``
record that follows an ``ok`` one of the same person on the same target (an action Kafka then did not
take) comes after it. Records retention deletes stay kept until the console restarts.

The request runtime's outcomes (``clingate.console.request-outcomes``) are followed the same way, every
outcome kept by its request's id (the audit record's ``action_id``).

What was asked for and is still standing (:func:`asked`): a target's request was asked for when the last
record of its action of some person on it is ``ok`` (a ``refused`` one after it says Kafka did not take the
request) and the request runtime has not refused that request.

A record that cannot be decoded is skipped and logged: the trail's records are the console's own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from aiohttp import web

from schemas.console import ConsoleAction, ConsoleRequestOutcome
from schemas.serde import Serde
from streams.console.audit import Action, Outcome
from streams.console.pages import read_in_thread
from streams.console.records import TopicFollower
from streams.requests.check import REFUSED
from topics.catalog import CONSOLE_AUDIT, CONSOLE_REQUEST_OUTCOMES

READ_BACK = frozenset({Action.REDRIVE, Action.ASK, Action.QUERY_DECISION, Action.EVIDENCE_REVIEW})
"""The actions the console reads back of its trail (the others are written, never looked up)."""


class History(Protocol):
    """The console's audit trail, read back."""

    async def actions(self, kinds: Collection[Action]) -> list[ConsoleAction]:
        """The recorded actions of ``kinds`` (of :data:`READ_BACK`), each person's in the order they were
        recorded.

        Raises:
            Unavailable: the audit topic could not be read.
        """
        ...

    async def outcomes(self) -> dict[str, ConsoleRequestOutcome]:
        """What the request runtime did with each request so far, by the request's id.

        Raises:
            Unavailable: the outcome topic could not be read.
        """
        ...


class KafkaHistory:
    """``clingate.console.audit`` followed to its end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._trail = TopicFollower(
            bootstrap, serde, CONSOLE_AUDIT, ConsoleAction, keep=lambda action: action.action in READ_BACK
        )
        self._outcomes = TopicFollower(bootstrap, serde, CONSOLE_REQUEST_OUTCOMES, ConsoleRequestOutcome)

    async def actions(self, kinds: Collection[Action]) -> list[ConsoleAction]:
        """The committed records of ``kinds`` now on the topic (read in a thread: the event loop goes on)."""
        if not set(kinds) <= READ_BACK:
            raise ValueError(f"only {sorted(READ_BACK)} are read back, not {sorted(set(kinds) - READ_BACK)}")
        return await read_in_thread(CONSOLE_AUDIT, self._read, frozenset(kind.value for kind in kinds))

    def _read(self, kinds: frozenset[str]) -> list[ConsoleAction]:
        return [action for action in self._trail.read().values() if action.action in kinds]

    async def outcomes(self) -> dict[str, ConsoleRequestOutcome]:
        """The committed outcomes now on the topic, by request id (read in a thread)."""
        return await read_in_thread(CONSOLE_REQUEST_OUTCOMES, self._read_outcomes)

    def _read_outcomes(self) -> dict[str, ConsoleRequestOutcome]:
        return {outcome.request_id: outcome for outcome in self._outcomes.read().values()}


def asked(
    kind: Action, actions: Iterable[ConsoleAction], outcomes: Mapping[str, ConsoleRequestOutcome]
) -> dict[str, ConsoleAction]:
    """The targets whose request of ``kind`` was asked for and not refused by the request runtime, each with
    the record of the ask (module docstring); ``actions`` in the order each person's were recorded,
    ``outcomes`` by request id."""
    last: dict[tuple[str, str], ConsoleAction] = {}
    for action in actions:
        if action.action == kind:
            last[(action.target, action.user)] = action
    return {
        target: action
        for (target, _), action in last.items()
        if action.outcome == Outcome.OK
        and getattr(outcomes.get(action.action_id), "outcome", None) != REFUSED
    }


HISTORY = web.AppKey("history", History)
"""The application's read-back of its audit trail."""
