"""The console's page sources follow their topics on a real broker: the first read is the whole topic,
each later one only what was committed since; a tombstone read later still removes its patient's earlier
assessments; a transactional topic's follower resumes past the commit marker; a topic deleted and
created again is read whole again, nothing of the old one kept; the SME's source finds the packets and
reviews published between two reads."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer, TopicPartition

from schemas.base import AvroModel
from schemas.clinical import ClinicalAssessment
from schemas.docs import Review, ReviewDecision
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.bench.review_packets import packets
from streams.console.assessments import KafkaAssessments
from streams.console.records import TopicFollower, read_records
from streams.console.reviews import KafkaReviews
from streams.demo.samples import golden_assessment
from streams.runtime.kafka_clients import produce_in_transaction, produce_waiting, producer_config, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from topics.admin import TopicStatus, ensure_topics
from topics.catalog import CLINICAL_ASSESSMENTS, DOCS_REVIEW_PACKETS, DOCS_REVIEWS, TopicSpec, build_catalog

pytestmark = pytest.mark.integration


def _in_transaction(
    bootstrap: str, serde: Serde, topic: str, records: Sequence[tuple[str, AvroModel | None]]
) -> None:
    """``records`` (key, value; None: a tombstone) on ``topic`` in one transaction, as the workers write."""
    encoded = [
        (key.encode(), None if value is None else serde.encode(value, topic=topic)) for key, value in records
    ]
    produce_in_transaction(bootstrap, topic, encoded, "followers-test")


def test_the_assessments_are_followed_tombstones_included(kafka_bootstrap: str) -> None:
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    serde = make_serde(None)
    run = uuid.uuid4().hex[:8]
    a, b = f"PT-{run}-A", f"PT-{run}-B"
    base = golden_assessment("PT-TEST-010", reviewed=False)

    def assessment(patient_id: str) -> ClinicalAssessment:
        return base.model_copy(update={"patient_id": patient_id})

    source = KafkaAssessments(kafka_bootstrap, serde)

    def mine() -> Counter[str]:
        log = asyncio.run(source.read())
        return Counter(r.patient_id for r in log.records if run in r.patient_id)

    _in_transaction(kafka_bootstrap, serde, CLINICAL_ASSESSMENTS, [(a, assessment(a)), (b, assessment(b))])
    assert mine() == Counter({a: 1, b: 1})
    _in_transaction(kafka_bootstrap, serde, CLINICAL_ASSESSMENTS, [(a, None), (b, assessment(b))])
    assert mine() == Counter({b: 2})
    assert mine() == Counter({b: 2})  # nothing new: nothing read twice

    whole = read_records(kafka_bootstrap, serde, CLINICAL_ASSESSMENTS, ClinicalAssessment)
    consumer = reader(kafka_bootstrap, "followers")
    try:
        for partition, resume in whole.next_offsets.items():
            _low, end = consumer.get_watermark_offsets(TopicPartition(CLINICAL_ASSESSMENTS, partition), 30)
            assert resume == end  # past the commit marker, which is never a record
    finally:
        consumer.close()


def test_a_topic_deleted_and_created_again_is_followed_from_its_beginning(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> None:
    serde = make_serde(None)
    topic = new_topic("followers")
    base = golden_assessment("PT-TEST-010", reviewed=False)
    follower = TopicFollower(kafka_bootstrap, serde, topic, ClinicalAssessment)

    def publish(*patients: str) -> None:
        writer = Producer(producer_config(kafka_bootstrap))
        for patient in patients:
            value = serde.encode(base.model_copy(update={"patient_id": patient}), topic=CLINICAL_ASSESSMENTS)
            produce_waiting(writer, topic, key=patient.encode(), value=value)
        assert writer.flush(30) == 0

    publish("a", "b", "c")
    assert [r.patient_id for r in follower.read().values()] == ["a", "b", "c"]
    admin = admin_client(kafka_bootstrap)
    for future in admin.delete_topics([topic]).values():
        future.result()
    spec = TopicSpec(name=topic, key="test key", value_schema="test", partitions=1)
    deadline = time.monotonic() + 60
    while ensure_topics(admin, [spec])[0].outcome is not TopicStatus.CREATED:  # until the deletion is done
        assert time.monotonic() < deadline, f"{topic} not created again within 60 s"
        time.sleep(0.5)
    publish("d")
    assert [r.patient_id for r in follower.read().values()] == ["d"]


def test_the_sme_source_finds_what_was_published_between_two_reads(kafka_bootstrap: str) -> None:
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    serde = make_serde(None)
    run = uuid.uuid4().hex[:8]
    made = [p.model_copy(update={"doc_id": f"{run}-{i}"}) for i, p in enumerate(packets(3))]
    source = KafkaReviews(kafka_bootstrap, serde)

    def mine() -> tuple[set[str], list[str]]:
        log = asyncio.run(source.read())
        return {d for d in log.packets if d.startswith(run)}, [
            r.doc_id for r in log.reviews if r.doc_id.startswith(run)
        ]

    try:
        _in_transaction(kafka_bootstrap, serde, DOCS_REVIEW_PACKETS, [(p.doc_id, p) for p in made[:2]])
        assert mine() == ({made[0].doc_id, made[1].doc_id}, [])
        _in_transaction(kafka_bootstrap, serde, DOCS_REVIEW_PACKETS, [(made[2].doc_id, made[2])])
        review = Review(
            doc_id=made[0].doc_id, ts=datetime.now(UTC), reviewer="sam", decision=ReviewDecision.AGREES
        )
        writer = Producer(producer_config(kafka_bootstrap))
        value = serde.encode(review, topic=DOCS_REVIEWS)
        produce_waiting(writer, DOCS_REVIEWS, key=review.doc_id.encode(), value=value)
        assert writer.flush(30) == 0
        assert mine() == ({p.doc_id for p in made}, [made[0].doc_id])
        assert mine() == ({p.doc_id for p in made}, [made[0].doc_id])
    finally:
        source.close()
