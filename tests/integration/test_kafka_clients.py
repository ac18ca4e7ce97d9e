"""The Kafka client clingate uses (confluent-kafka, librdkafka) against the broker we run: transactions
work on the single-node broker (transaction state log replication 1, min ISR 1), and a
``read_committed`` consumer sees a committed transaction and never an aborted one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer

from streams.runtime.transactions import Batch, TransactionalProducer

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


def test_a_batch_its_loop_no_longer_confirms_is_aborted_and_the_producer_goes_on(
    kafka_bootstrap: str, new_topic: Callable[..., str]
):
    """Scenario: a batch written whole but not confirmed at its commit (its loop learnt meanwhile that
    the partitions are no longer its own) is aborted; the same producer commits the next batch, and a
    ``read_committed`` reader sees only that one."""
    topic = new_topic("txn-confirm")
    transactions = TransactionalProducer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}.producer"}, "test"
    )

    def fill(value: bytes) -> Callable[[Batch], None]:
        return lambda batch: batch.produce(topic, value, b"k")

    assert transactions.run(fill(b"not confirmed"), lambda: False) is None
    assert transactions.run(fill(b"confirmed"), lambda: True) is not None

    received = _confluent_consume(kafka_bootstrap, topic, 1, **{"isolation.level": "read_committed"})
    assert [value for _, value in received] == [b"confirmed"]
