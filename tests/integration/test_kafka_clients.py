"""Both Kafka client stacks clingate uses work against the broker we run.

aiokafka 0.14 is what faust-streaming 0.15 runs on (agents, tables, exactly-once); confluent-kafka
(librdkafka) is used by the admin code, the LLM consumer groups and the tools. Each test proves a
record crosses from one stack to the other, through a consumer group, and that transactions work
on the single-node broker (transaction state log replication 1, min ISR 1); a last test runs a
real faust agent with a table under exactly_once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer

pytestmark = pytest.mark.integration


def _confluent_consume(bootstrap: str, topic: str, count: int, **config: str) -> list[tuple[bytes, bytes]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{topic}.reader",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        **config,
    })  # fmt: skip
    consumer.subscribe([topic])
    records: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(60):
            for message in consumer.consume(num_messages=count, timeout=1.0):
                assert message.error() is None, message.error()
                records.append((message.key(), message.value()))
            if len(records) >= count:
                consumer.commit(asynchronous=False)
                break
    finally:
        consumer.close()
    return records


async def _aiokafka_consume(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, bytes]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}.aio-reader",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    records: list[tuple[bytes, bytes]] = []
    try:
        async with asyncio.timeout(60):
            async for message in consumer:
                records.append((message.key, message.value))
                if len(records) == count:
                    await consumer.commit()
                    break
    finally:
        await consumer.stop()
    return records


def test_confluent_producer_to_aiokafka_group_consumer_round_trip(
    kafka_bootstrap: str, new_topic: Callable[..., str]
):
    """Scenario: librdkafka writes, aiokafka reads in a consumer group and commits its offsets."""
    topic = new_topic("clients", partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True})
    sent = [(f"patient-{i}".encode(), f"value-{i}".encode()) for i in range(10)]
    for key, value in sent:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0

    received = asyncio.run(_aiokafka_consume(kafka_bootstrap, topic, len(sent)))

    assert sorted(received) == sorted(sent)


def test_aiokafka_producer_to_confluent_group_consumer_round_trip(
    kafka_bootstrap: str, new_topic: Callable[..., str]
):
    """Scenario: aiokafka writes with acks=all, librdkafka reads in a consumer group."""
    topic = new_topic("clients", partitions=3)
    sent = [(f"doc-{i}".encode(), f"value-{i}".encode()) for i in range(10)]

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            for key, value in sent:
                await producer.send_and_wait(topic, key=key, value=value)
        finally:
            await producer.stop()

    asyncio.run(produce())

    assert sorted(_confluent_consume(kafka_bootstrap, topic, len(sent))) == sorted(sent)


def test_confluent_transaction_commit_is_visible_and_abort_is_not(
    kafka_bootstrap: str, new_topic: Callable[..., str]
):
    """Scenario: a read_committed consumer sees the committed transaction, never the aborted one."""
    topic = new_topic("txn")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}.producer"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"aborted")
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"k", value=f"committed-{i}".encode())
    producer.commit_transaction(30)

    received = _confluent_consume(kafka_bootstrap, topic, 3, **{"isolation.level": "read_committed"})

    assert [value for _, value in received] == [b"committed-0", b"committed-1", b"committed-2"]


def test_aiokafka_transactional_producer_commits_like_faust_exactly_once(
    kafka_bootstrap: str, new_topic: Callable[..., str]
):
    """Scenario: aiokafka's transactional producer (faust's exactly_once path) commits on one node."""
    topic = new_topic("txn")

    async def produce_and_read() -> list[tuple[bytes, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic}.aio")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send(topic, key=b"k", value=f"v{i}".encode())
        finally:
            await producer.stop()
        return await _aiokafka_consume(kafka_bootstrap, topic, 3)

    received = asyncio.run(produce_and_read())

    assert [value for _, value in received] == [b"v0", b"v1", b"v2"]


def test_faust_exactly_once_agent_counts_into_a_table_and_forwards(
    kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path
):
    """Scenario: a faust-streaming agent under exactly_once creates its own changelog topic (broker
    auto-creation is off), counts into a table and forwards every record in committed transactions."""
    import faust

    source_name, sink_name = new_topic("faust", partitions=2), new_topic("faust", partitions=2)
    app = faust.App(
        f"clingate-test-{source_name}", broker=f"kafka://{kafka_bootstrap}", store="memory://",
        datadir=str(tmp_path), web_enabled=False, topic_partitions=2, topic_replication_factor=1,
        processing_guarantee="exactly_once",
    )  # fmt: skip
    raw = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}
    source, sink = app.topic(source_name, partitions=2, **raw), app.topic(sink_name, partitions=2, **raw)
    counts = app.Table("counts", default=int, partitions=2)

    @app.agent(source)
    async def count(stream: faust.StreamT) -> None:
        async for key, value in stream.items():
            counts[key] += 1
            await sink.send(key=key, value=value)

    async def run() -> dict[bytes, int]:
        await app.start()
        try:
            producer = Producer({"bootstrap.servers": kafka_bootstrap})
            for i in range(9):
                producer.produce(source_name, key=f"patient-{i % 3}".encode(), value=b"event")
            assert producer.flush(30) == 0
            async with asyncio.timeout(60):
                while sum(counts.values()) < 9:
                    await asyncio.sleep(0.1)
            return dict(counts.items())
        finally:
            await app.stop()

    assert asyncio.run(run()) == {b"patient-0": 3, b"patient-1": 3, b"patient-2": 3}
    forwarded = _confluent_consume(kafka_bootstrap, sink_name, 9, **{"isolation.level": "read_committed"})
    assert len(forwarded) == 9
