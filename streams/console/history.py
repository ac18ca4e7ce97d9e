"""What the console reads back of its own audit trail: the re-drives done and the questions asked.

:class:`KafkaHistory` reads ``clingate.console.audit`` whole on every call
(:func:`~streams.console.records.read_records`) and returns the records of the actions asked for. The
topic is keyed by user, so one person's records are one partition's, in the order they were recorded: a
``refused`` record that follows an ``ok`` one of the same person on the same target (an action Kafka
then did not take) comes after it. The known cost: a page load reads the whole retained trail (365
days); a console for a large deployment would keep the few actions it looks up in a table following the
topic instead.

A record that cannot be decoded is skipped and logged: the trail's records are the console's own.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from aiohttp import web

from schemas.console import ConsoleAction
from schemas.serde import Serde
from streams.console.audit import Action
from streams.console.pages import read_in_thread
from streams.console.records import read_records
from topics.catalog import CONSOLE_AUDIT


class History(Protocol):
    """The console's audit trail, read back."""

    async def actions(self, kinds: Collection[Action]) -> list[ConsoleAction]:
        """The recorded actions of ``kinds``, each person's in the order they were recorded.

        Raises:
            Unavailable: the audit topic could not be read.
        """
        ...


class KafkaHistory:
    """``clingate.console.audit`` read to its end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._bootstrap = bootstrap
        self._serde = serde

    async def actions(self, kinds: Collection[Action]) -> list[ConsoleAction]:
        """The committed records of ``kinds`` now on the topic (read in a thread: the event loop goes on)."""
        return await read_in_thread(CONSOLE_AUDIT, self._read, frozenset(kind.value for kind in kinds))

    def _read(self, kinds: frozenset[str]) -> list[ConsoleAction]:
        trail = read_records(self._bootstrap, self._serde, CONSOLE_AUDIT, ConsoleAction)
        return [action for action in trail.values() if action.action in kinds]


HISTORY = web.AppKey("history", History)
"""The application's read-back of its audit trail."""
