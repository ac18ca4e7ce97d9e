"""Where the SME's pages get the review packets and the reviews.

:class:`KafkaReviews` reads what ``clingate arbiter reviews`` reads, and follows it: the compacted
``clingate.docs.review-packets`` topic through the docs worker's own
:class:`~streams.groups.arbiter.PacketFollower` (the latest packet of every document; the pending ones,
oldest first, are :meth:`~streams.groups.arbiter.Packets.pending`), one that lives as long as the console
and catches up on each page load, and with it every review on ``clingate.docs.reviews`` (a
:class:`~streams.console.records.TopicFollower`), both ``read_committed``: the first page load reads them
from the beginning of each partition, every later one only what was committed since, each up to the end
it has when the page asks. A decision is asked for as every record of the console's people is
(:mod:`streams.console.requests`).

A review record that cannot be decoded is skipped and counted (:attr:`ReviewLog.unreadable`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from schemas.docs import Review, ReviewPacket
from schemas.serde import Serde
from streams.console.pages import read_in_thread
from streams.console.records import READ_TIMEOUT_S, TopicFollower
from streams.groups.arbiter import PacketFollower
from topics.catalog import DOCS_REVIEW_PACKETS, DOCS_REVIEWS


@dataclass(frozen=True)
class ReviewLog:
    """The packets and the reviews now on their topics."""

    packets: dict[str, ReviewPacket]
    """The latest packet of every document (pending or reviewed)."""
    reviews: tuple[Review, ...]
    """Every review, each partition's in publication order."""
    unreadable: int = 0
    """Review records skipped because they could not be decoded."""


class ReviewSource(Protocol):
    """What the SME's pages read."""

    async def read(self) -> ReviewLog:
        """Every packet and review now on their topics.

        Raises:
            Unavailable: a topic could not be read.
        """
        ...


class KafkaReviews:
    """The packet and review topics followed to their end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._bootstrap = bootstrap
        self._serde = serde
        self._lock = threading.Lock()
        self._packets: PacketFollower | None = None
        self._reviews = TopicFollower(bootstrap, serde, DOCS_REVIEWS, Review)

    async def read(self) -> ReviewLog:
        """Every committed packet and review now (read in a thread: the event loop goes on)."""
        return await read_in_thread(f"{DOCS_REVIEW_PACKETS} or {DOCS_REVIEWS}", self._read)

    def _read(self) -> ReviewLog:
        with self._lock:
            if self._packets is None:  # made on the first read, which the page's thread waits for
                self._packets = PacketFollower(
                    self._bootstrap, self._serde, group_prefix="clingate-console-packets-"
                )
            self._packets.catch_up(READ_TIMEOUT_S)
            packets = dict(self._packets.packets)
        reviews = self._reviews.read()
        return ReviewLog(packets, tuple(reviews.values()), reviews.unreadable)

    def close(self) -> None:
        """Close the packet reader (the next read would make another)."""
        with self._lock:
            if self._packets is not None:
                self._packets.close()
                self._packets = None


REVIEWS = web.AppKey("reviews", ReviewSource)
"""The application's source of packets and reviews."""
