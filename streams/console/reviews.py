"""Where the SME's pages get the review packets and the reviews, and how they record a decision.

:class:`KafkaReviews` reads, on every page load, what ``clingate arbiter reviews`` reads: the compacted
``clingate.docs.review-packets`` topic through the docs worker's own
:class:`~streams.groups.arbiter.PacketFollower` (the latest packet of every document; the pending ones,
oldest first, are :meth:`~streams.groups.arbiter.Packets.pending`), and with it every review already on
``clingate.docs.reviews``, both ``read_committed`` from the beginning of each partition up to the end they
have when the page asks. :class:`KafkaReviewPublisher` publishes a decision as ``clingate arbiter
review`` does (:func:`~streams.groups.arbiter.produce_review`, the docs worker's producer settings) and
waits for its delivery report: acknowledged, or given up by librdkafka after :data:`ACK_TIMEOUT_S`, so a
decision the page reports as not recorded is never delivered later.

A review record that cannot be decoded is skipped and counted (:attr:`ReviewLog.unreadable`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from confluent_kafka import KafkaError, Producer

from schemas.docs import Review, ReviewPacket
from schemas.serde import Serde
from streams.console.pages import read_in_thread
from streams.console.records import READ_TIMEOUT_S, read_records
from streams.groups.arbiter import PacketFollower, produce_review, producer_config
from topics.catalog import DOCS_REVIEW_PACKETS, DOCS_REVIEWS

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 10.0
"""How long a review may wait for Kafka's acknowledgement before the page says it was not recorded."""


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
            ReviewNotRecorded: it was not acknowledged.
        """
        ...


class ReviewNotRecorded(RuntimeError):
    """A review was not acknowledged by Kafka: the decision is not recorded."""


class KafkaReviews:
    """The packet and review topics read to their end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._bootstrap = bootstrap
        self._serde = serde

    async def read(self) -> ReviewLog:
        """Every committed packet and review now (read in a thread: the event loop goes on)."""
        return await read_in_thread(f"{DOCS_REVIEW_PACKETS} or {DOCS_REVIEWS}", self._read)

    def _read(self) -> ReviewLog:
        follower = PacketFollower(self._bootstrap, self._serde, group_prefix="clingate-console-packets-")
        try:
            follower.catch_up(READ_TIMEOUT_S)
            packets = dict(follower.packets)
        finally:
            follower.close()
        reviews = read_records(self._bootstrap, self._serde, DOCS_REVIEWS, Review)
        return ReviewLog(packets, tuple(reviews.values()), reviews.unreadable)


class KafkaReviewPublisher:
    """``clingate.docs.reviews`` through one idempotent producer; each review awaited until acknowledged."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        config = producer_config(bootstrap)
        config["message.timeout.ms"] = int(ACK_TIMEOUT_S * 1000)
        self._producer = Producer(config)
        self._serde = serde

    async def publish(self, review: Review) -> None:
        """Produce ``review`` and wait for its delivery report (module docstring)."""
        reports: list[KafkaError | None] = []
        produce_review(self._producer, self._serde, review,
                       on_delivery=lambda error, _message: reports.append(error))  # fmt: skip
        while not reports:
            await asyncio.to_thread(self._producer.poll, 0.1)
        if reports[0] is not None:
            raise ReviewNotRecorded(f"{DOCS_REVIEWS}: not recorded: {reports[0].str()}")

    def close(self) -> None:
        """Wait for the reviews still in flight (at most :data:`ACK_TIMEOUT_S`, librdkafka's own limit)."""
        if self._producer.flush(ACK_TIMEOUT_S + 1):
            log.error("console: reviews were not acknowledged at shutdown")


REVIEWS = web.AppKey("reviews", ReviewSource)
"""The application's source of packets and reviews."""
PUBLISHER = web.AppKey("review_publisher", ReviewPublisher)
"""Where the application publishes the SME's decisions."""
