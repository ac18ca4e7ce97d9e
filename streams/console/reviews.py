"""Where the SME's pages get the review packets and the reviews, and how they record a decision.

:class:`KafkaReviews` reads what ``clingate arbiter reviews`` reads, and follows it: the compacted
``clingate.docs.review-packets`` topic through the docs worker's own
:class:`~streams.groups.arbiter.PacketFollower` (the latest packet of every document; the pending ones,
oldest first, are :meth:`~streams.groups.arbiter.Packets.pending`), one that lives as long as the console
and catches up on each page load, and with it every review on ``clingate.docs.reviews`` (a
:class:`~streams.console.records.TopicFollower`), both ``read_committed``: the first page load reads them
from the beginning of each partition, every later one only what was committed since, each up to the end
it has when the page asks. :class:`KafkaReviewPublisher` publishes a decision as ``clingate arbiter
review`` does (:func:`~streams.groups.arbiter.review_record`, the docs worker's producer settings)
through an :class:`~streams.console.delivery.Outbox`: a decision the page reports as not recorded is never
delivered later.

A review record that cannot be decoded is skipped and counted (:attr:`ReviewLog.unreadable`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from schemas.docs import Review, ReviewPacket
from schemas.serde import Serde
from streams.console.delivery import Outbox
from streams.console.pages import read_in_thread
from streams.console.records import READ_TIMEOUT_S, TopicFollower
from streams.groups.arbiter import PacketFollower, producer_config, review_record
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


class ReviewPublisher(Protocol):
    """Where the SME's decisions go."""

    async def publish(self, review: Review) -> None:
        """Publish ``review``; returns once Kafka acknowledged it.

        Raises:
            NotAcknowledged: it was not acknowledged.
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


class KafkaReviewPublisher:
    """``clingate.docs.reviews`` through one idempotent producer; each review awaited until acknowledged."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._outbox = Outbox(producer_config(bootstrap), "reviews")
        self._serde = serde

    async def publish(self, review: Review) -> None:
        """Produce ``review`` and wait until Kafka acknowledged it (module docstring)."""
        await self._outbox.send(DOCS_REVIEWS, **review_record(self._serde, review))

    def close(self) -> None:
        """Wait for the reviews still in flight (:meth:`Outbox.close`)."""
        self._outbox.close()


REVIEWS = web.AppKey("reviews", ReviewSource)
"""The application's source of packets and reviews."""
PUBLISHER = web.AppKey("review_publisher", ReviewPublisher)
"""Where the application publishes the SME's decisions."""
