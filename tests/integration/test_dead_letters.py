"""Bad records go to the dead-letter topic, whole, and processing continues: through the real broker.

Large values need two limits raised (librdkafka's and the broker's defaults are ~1 MB; each alone
fails with MSG_SIZE_TOO_LARGE): the topic-level ``max.message.bytes`` of the source AND of its ``.dlq``
topic (a dead letter carries the original value, so it is slightly larger), and the producer's
``message.max.bytes``. The broker-wide ``message.max.bytes`` can stay at its default (the topic
setting overrides it), and a default consumer reads 5 MB (librdkafka grows its fetch size); the test
still sets ``fetch.message.max.bytes`` so the large records do not cost extra fetch rounds.
"""

from __future__ import annotations

import io
import json
import os
from datetime import UTC, datetime

import fastavro
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from schemas.common import DeadLetter
from schemas.dbpm import Candidate, NerPayload, Verdict, VerdictLabel
from schemas.registry import load_registry
from schemas.serde import SINGLE_OBJECT_MAGIC, SingleObjectSerde
from streams.runtime.dlq import DeadLetterDeliveryError, DeadLetterRouter, SourceRecord, header_map
from streams.runtime.kafka_config import admin_client
from topics.admin import TopicStatus, ensure_topics
from topics.catalog import TopicSpec, dlq_name

pytestmark = pytest.mark.integration

MAX_BYTES = 8 * 1024 * 1024
FIVE_MB = 5 * 1024 * 1024
SERDE = SingleObjectSerde()
TS = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


def _candidate(n: int, entity: str = "fever") -> Candidate:
    return Candidate(ts=TS, task="ner", patient_id=f"p-{n}", candidate_id=f"c-{n}",
                     payload=NerPayload(entity=entity, category="Symptoms"))  # fmt: skip


def _candidate_missing_candidate_id() -> bytes:
    """A producer with a hand-edited Candidate schema: same name and header, no candidate_id."""
    entry = load_registry().for_model(Candidate)
    schema = {**entry.current.schema, "fields": [f for f in entry.current.schema["fields"]
                                                  if f["name"] != "candidate_id"]}  # fmt: skip
    datum = {k: v for k, v in _candidate(99).model_dump(mode="json").items() if k != "candidate_id"}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), datum)
    return SINGLE_OBJECT_MAGIC + entry.current.fingerprint + buffer.getvalue()


def _create_topics(bootstrap: str, source: str) -> None:
    spec = TopicSpec(source, "test key", "test", partitions=1, consumed=True, max_message_bytes=MAX_BYTES)
    assert spec.dlq is not None  # its limit is derived from the source's, with headroom
    specs = [spec, spec.dlq]
    assert all(r.outcome is TopicStatus.CREATED for r in ensure_topics(admin_client(bootstrap), specs))


def _drain(bootstrap: str, topic: str, group: str, count: int) -> list:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "fetch.message.max.bytes": MAX_BYTES,
    })  # fmt: skip
    consumer.subscribe([topic])
    messages = []
    try:
        for _ in range(120):
            message = consumer.poll(1.0)
            if message is not None:
                assert message.error() is None, message.error()
                messages.append(message)
            if len(messages) == count:
                break
    finally:
        consumer.close()
    return messages


def test_bad_records_are_dead_lettered_with_reason_and_coordinates_and_good_ones_flow_in_order(
    kafka_bootstrap: str,
):
    """Scenario: a candidates topic carries good records interleaved with random bytes, a valid Avro
    record of the wrong schema (a Verdict), JSON instead of Avro, an Avro record missing a required
    field and a 5 MB value, plus a 5 MB good record. A consumer decodes each record through the
    decode step, dead-letters failures to <topic>.dlq (waiting for the broker's acknowledgement) and
    commits every offset. Good records arrive in order; each bad one is on the DLQ with its original
    bytes, reason and coordinates in both the DeadLetter and the KIP-1034-style headers; the group's
    committed offset is past the last record; every offset is accounted for exactly once.
    """
    source = f"test.dlq-source.{os.urandom(6).hex()}"
    _create_topics(kafka_bootstrap, source)
    verdict = Verdict(ts=TS, task="ner", verdict=VerdictLabel.SUCCESS, source="verifier_mmed",
                      patient_id="p-1", payload=NerPayload(entity="x", category="y"))  # fmt: skip
    wrong_schema = SERDE.encode(verdict)
    bad = {
        "random bytes": os.urandom(64),
        "wrong schema": wrong_schema,
        "json": json.dumps(_candidate(1).model_dump(mode="json")).encode(),
        "missing field": _candidate_missing_candidate_id(),
        "5 MB": SINGLE_OBJECT_MAGIC + os.urandom(FIVE_MB),
    }
    big_good = _candidate(500, entity="x" * FIVE_MB)
    goods = [_candidate(n) for n in range(len(bad))] + [big_good]
    sequence: list[tuple[str, bytes]] = []
    for good, (label, value) in zip(goods, bad.items(), strict=False):
        sequence += [("good", SERDE.encode(good)), (label, value)]
    sequence.append(("good", SERDE.encode(big_good)))

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": MAX_BYTES,
                         "acks": "all", "enable.idempotence": True})  # fmt: skip
    for label, value in sequence:
        producer.produce(source, key=label.encode(), value=value, headers=[("label", label.encode())])
    assert producer.flush(30) == 0

    router = DeadLetterRouter(producer, SERDE)
    consumer = Consumer({
        "bootstrap.servers": kafka_bootstrap, "group.id": f"{source}.gate", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "fetch.message.max.bytes": MAX_BYTES,
    })  # fmt: skip
    consumer.subscribe([source])
    processed: list[tuple[int, Candidate]] = []
    seen: list[int] = []
    try:
        for _ in range(120):
            message = consumer.poll(1.0)
            if message is None:
                if len(seen) == len(sequence):
                    break
                continue
            assert message.error() is None, message.error()
            record = SourceRecord.from_message(message)
            value = router.route(record, Candidate)
            if value is not None:
                processed.append((record.offset, value))
            seen.append(record.offset)
            consumer.commit(message=message, asynchronous=False)
        committed = consumer.committed([TopicPartition(source, 0)], timeout=10)
    finally:
        consumer.close()

    assert seen == list(range(len(sequence)))
    assert [value for _, value in processed] == goods
    assert committed[0].offset == len(sequence)

    letters = _drain(kafka_bootstrap, dlq_name(source), f"{source}.dlq-reader", len(bad))
    by_label = {}
    for message in letters:
        letter = SERDE.decode(message.value(), DeadLetter)
        headers = header_map(message.headers())
        by_label[message.key().decode()] = (letter, headers)
        assert (letter.topic, letter.partition) == (source, 0)
        assert sequence[letter.offset][1] == letter.value
        assert headers["offset"] == str(letter.offset) and headers["topic"] == source
        assert headers["partition"] == "0" and headers["exception"] == "SchemaDecodeError"
        assert headers["message"] == letter.error
        assert [(h.key, h.value) for h in letter.headers] == [("label", message.key())]
    assert set(by_label) == set(bad)
    assert sorted({o for o, _ in processed} | {letter.offset for letter, _ in by_label.values()}) == seen
    assert by_label["random bytes"][1]["reason"] == "bad_magic"
    assert by_label["wrong schema"][1]["reason"] == "wrong_schema"
    assert by_label["json"][1]["reason"] == "bad_magic" and "looks like JSON" in by_label["json"][0].error
    assert by_label["missing field"][1]["reason"] in {"malformed", "invalid"}
    assert by_label["5 MB"][1]["reason"] == "unknown_schema"
    assert len(by_label["5 MB"][0].value or b"") == FIVE_MB + 2


def test_a_dead_letter_the_broker_refuses_leaves_the_offset_uncommitted_and_says_which_limit(
    kafka_bootstrap: str,
):
    """Scenario: a bad value just under the source topic's default 1 MB limit arrives; its dead letter
    (value plus reason and coordinates) is over the .dlq topic's default limit. The router raises
    DeadLetterDeliveryError naming max.message.bytes, the consumer does not commit, and the record is
    still there for the next poll once the operator raises the limit: nothing is skipped.
    """
    source = f"test.dlq-limit.{os.urandom(6).hex()}"
    specs = [TopicSpec(name, "test key", "test", partitions=1) for name in (source, dlq_name(source))]
    ensure_topics(admin_client(kafka_bootstrap), specs)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": MAX_BYTES})
    producer.produce(source, value=b"\x00" * 1_048_000)
    assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{source}.gate",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([source])
    try:
        message = None
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None:
                break
        assert message is not None and message.error() is None
        router = DeadLetterRouter(producer, SERDE, timeout_s=20)
        with pytest.raises(DeadLetterDeliveryError, match=r"raise max\.message\.bytes of .*\.dlq"):
            router.route(SourceRecord.from_message(message), Candidate)
        [committed] = consumer.committed([TopicPartition(source, 0)], timeout=10)
        assert committed.offset < 0  # nothing committed: the record will be read again
    finally:
        consumer.close()
