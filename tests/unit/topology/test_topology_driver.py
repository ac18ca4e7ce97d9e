"""The topology driver itself: Java's partitioner, offsets, routing, limits, determinism."""

from __future__ import annotations

import pytest

from schemas.common import DeadLetter
from schemas.dbpm import Candidate
from streams.runtime.dlq import RECORD_OVERHEAD_BYTES
from streams.runtime.settings import Settings
from streams.testing.dbpm_stream import generate_events
from streams.testing.driver import TopologyDriver
from streams.testing.driver_topics import RecordTooLargeError, Topic
from tests.clinical_scenario import concur_review, scenario
from topics.catalog import (
    CLINICAL_REVIEWS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    FHIR_UPDATES,
    build_catalog,
    dlq_name,
)
from topics.partitioner import partition_for


def test_the_driver_has_every_catalog_topic_with_its_partitions() -> None:
    """Every catalog topic at the settings' scale (DLQs with one partition), plus the tables' changelogs."""
    settings = Settings(CLINGATE_TOPIC_PARTITIONS=4)
    with TopologyDriver(settings) as driver:
        for spec in build_catalog(4):
            assert len(driver.topics[spec.name].partitions) == spec.partitions
        assert len(driver.memory.changelog.partitions) == len(driver.patients.changelog.partitions) == 4


def test_records_get_offsets_per_partition_in_order() -> None:
    topic = Topic("t", 3, 10_000)
    keys = [b"a", b"b", b"a", b"c", b"a"]
    stored = [topic.append(k, b"v") for k in keys]
    for p, records in enumerate(topic.partitions):
        assert [r.offset for r in records] == list(range(len(records)))
        assert all(r.partition == p for r in records)
    assert [r.partition for r in stored] == [partition_for(k, 3) for k in keys]
    assert topic.log == stored


def test_a_record_without_a_key_needs_a_partition_unless_the_topic_has_one() -> None:
    with pytest.raises(ValueError, match="explicit partition"):
        Topic("t", 3, 10_000).append(None, b"v")
    assert Topic("t", 3, 10_000).append(None, b"v", partition=2).partition == 2
    assert Topic("t", 1, 10_000).append(None, b"v").partition == 0


def test_a_record_larger_than_its_topic_admits_is_refused() -> None:
    with pytest.raises(RecordTooLargeError):
        Topic("t", 1, RECORD_OVERHEAD_BYTES + 10).append(b"key", b"value--", [("h", b"x")])


def test_outputs_go_to_the_partition_of_their_key_and_carry_their_inputs_timestamp() -> None:
    """A candidate's decision lands on its patient's partition of the decisions topic, and a bad record's
    dead letter on the DLQ with the source record's coordinates and timestamp as its event time."""
    event = next(e for e in generate_events(10) if e["kind"] == "gate")
    with TopologyDriver(Settings()) as driver:
        candidate = Candidate.model_validate({k: v for k, v in event.items() if k != "kind"})
        driver.pipe(DBPM_CANDIDATES, candidate.patient_id.encode(), candidate, timestamp_ms=1234)
        bad = driver.pipe(DBPM_CANDIDATES, b"p-bad", b"not avro", [("trace", b"1")], timestamp_ms=5678)
        [decision] = driver.records(DBPM_DECISIONS)
        [dead] = driver.dead_letters(DBPM_CANDIDATES)
        [dead_record] = driver.records(dlq_name(DBPM_CANDIDATES))

    assert decision.key == candidate.patient_id.encode()
    assert decision.partition == partition_for(decision.key, Settings().topic_partitions)
    assert decision.timestamp_ms == 1234
    assert (dead.letter.partition, dead.letter.offset) == (bad.partition, bad.offset)
    assert dead.letter.ts.timestamp() == 5.678
    assert [(h.key, h.value) for h in dead.letter.headers] == [("trace", b"1")]
    assert dead.headers["topic"] == DBPM_CANDIDATES and dead_record.key == b"p-bad"
    assert isinstance(dead.letter, DeadLetter)


def _every_record(driver: TopologyDriver) -> dict[str, list[tuple[object, ...]]]:
    return {
        name: [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in topic.log]
        for name, topic in driver.topics.items()
    }


def test_the_same_pipes_give_the_same_bytes_on_every_topic() -> None:
    """Two drivers, the same DBPM stream, clinical records and a bad record: every topic (changelogs
    included) holds the same records, byte for byte."""
    updates, _, _ = scenario()
    seen = []
    for _ in range(2):
        with TopologyDriver(Settings()) as driver:
            driver.replay(list(generate_events(300)))
            for update in updates:
                driver.pipe(FHIR_UPDATES, update.patient_id.encode(), update)
            review = concur_review()
            driver.pipe(CLINICAL_REVIEWS, review.patient_id.encode(), review)
            driver.pipe(FHIR_UPDATES, b"PT-X", b"\x00garbage")
            seen.append(_every_record(driver))
    assert seen[0] == seen[1]
    assert seen[0][DBPM_DECISIONS] and seen[0][dlq_name(FHIR_UPDATES)]
