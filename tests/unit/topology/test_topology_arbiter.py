"""The arbiter group through the topology driver: its outputs are the in-process arbiter's.

The driver runs the deployed handler (:class:`~streams.groups.arbiter.DocsWorker`, rules only) under
the ordered loop's rules, with the review packets it needs read from the driver's compacted packet
topic (:class:`~streams.testing.driver_topics.TopicPackets`, the in-memory
:class:`~streams.groups.arbiter.Packets`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from processors.docs.packet import ground_truth
from schemas.docs import (
    ArbiterDecision,
    Disposition,
    DocumentType,
    GroundTruth,
    GroundTruthSource,
    Review,
    ReviewDecision,
    ReviewPacket,
    ReviewStatus,
)
from streams.data import DOCS_EXAMPLES
from streams.demo.plan import verify_example
from streams.runtime.settings import Settings
from streams.testing.driver import TopologyDriver
from topics.catalog import (
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
)

REVIEWED_AT = datetime(2025, 2, 19, 9, 0, tzinfo=UTC)


def _review(packet: ReviewPacket, index: int) -> Review:
    """An SME's review of ``packet``: agreeing, or (every other one) correcting the type to OTHER."""
    agree = Review(doc_id=packet.doc_id, ts=REVIEWED_AT, reviewer="sme-1", decision=ReviewDecision.AGREES)
    if index % 2 == 0:
        return agree
    update = {"decision": ReviewDecision.CORRECTS, "corrected_dominant_type": DocumentType.OTHER}
    return Review.model_validate({**agree.model_dump(), **update, "notes": "routine CBC, not genomic"})


def test_the_demos_examples_give_the_in_process_arbiters_outputs_and_reviews_close_their_packets() -> None:
    """Scenario: every classification example of the demo (trap cases included), then an SME review of
    every escalated one.

    Each disposition, keyed by its document, is the in-process arbiter's (rules only), and so is each
    pending packet; each review publishes the ground truth and the reviewed packet that
    :func:`processors.docs.packet.ground_truth` gives, after which nothing is pending.
    """
    cases = [verify_example(case) for case in DOCS_EXAMPLES]
    with TopologyDriver(Settings()) as driver:
        for request, _ in cases:
            driver.pipe(DOCS_CLASSIFICATIONS, request.doc_id.encode(), request)
        dispositions = driver.values(DOCS_DISPOSITIONS, Disposition)
        keys = [r.key for r in driver.records(DOCS_DISPOSITIONS)]
        pending = driver.values(DOCS_REVIEW_PACKETS, ReviewPacket)
        reviews = [_review(packet, i) for i, packet in enumerate(pending)]
        for review in reviews:
            driver.pipe(DOCS_REVIEWS, review.doc_id.encode(), review)
        truths = driver.values(DOCS_GROUND_TRUTH, GroundTruth)
        reviewed = driver.values(DOCS_REVIEW_PACKETS, ReviewPacket)[len(pending) :]
        still_pending = driver.packets.pending()
        decided = sum(s.value for m in driver.docs_metrics.dispositions.collect() for s in m.samples
                      if s.name.endswith("_total"))  # fmt: skip

    assert dispositions == [finished.disposition for _, finished in cases]
    assert keys == [request.doc_id.encode() for request, _ in cases]
    assert pending == [finished.packet for _, finished in cases if finished.packet is not None]
    assert {d.decision for d in dispositions} >= {
        ArbiterDecision.AUTO_ACCEPT,
        ArbiterDecision.ESCALATE_TO_SME,
    }
    closed = [ground_truth(packet, review) for packet, review in zip(pending, reviews, strict=True)]
    assert truths == [truth for _, truth in closed]
    assert reviewed == [packet for packet, _ in closed]
    assert {t.ground_truth_source for t in truths} == {
        GroundTruthSource.SME_VALIDATED,
        GroundTruthSource.SME_CORRECTED,
    }
    assert all(p.review_status is ReviewStatus.REVIEWED for p in reviewed) and still_pending == []
    assert decided == len(cases)


def test_a_review_closes_a_packet_another_worker_published_and_one_without_a_packet_is_a_dead_letter() -> (
    None
):
    """Scenario: a packet on the packet topic that this worker did not decide (another member of the
    group, before a rebalance), a review of it, and a review of a document that has no packet.

    The first review catches the packet reader up with the topic and closes the packet; the second is
    a dead letter of stage ``process`` (``LookupError``) and the worker goes on.
    """
    _, finished = verify_example("quest")
    packet = finished.packet
    assert packet is not None
    review = _review(packet, 1)
    orphan = review.model_copy(update={"doc_id": "no-such-document"})
    with TopologyDriver(Settings()) as driver:
        driver.pipe(DOCS_REVIEW_PACKETS, packet.doc_id.encode(), packet)
        driver.pipe(DOCS_REVIEWS, orphan.doc_id.encode(), orphan)
        driver.pipe(DOCS_REVIEWS, review.doc_id.encode(), review)
        [truth] = driver.values(DOCS_GROUND_TRUTH, GroundTruth)
        [dead] = driver.dead_letters(DOCS_REVIEWS)

    assert truth == ground_truth(packet, review)[1]
    assert (dead.headers["stage"], dead.headers["exception"]) == ("process", "LookupError")
    assert dead.letter.key == b"no-such-document"
