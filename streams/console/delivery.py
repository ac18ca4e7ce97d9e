"""How the console writes a record to Kafka for a person: produce it, then wait for its delivery report.

What holds: :func:`deliver` returns only once librdkafka reported on the record, acknowledged (``None``)
or given up (the error); the event loop goes on meanwhile (the reports are served by ``poll`` in a
thread). Every producer of the console sets ``message.timeout.ms`` to the deadline its page waits for, so
a record a page reported as not done is never delivered later. A record librdkafka refuses before
sending (larger than the producer admits, a full local queue) is reported as its error too, never
raised.
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

ACK_TIMEOUT_S = 10.0
"""How long a record may wait for Kafka's acknowledgement before the action it carries fails."""


class NotAcknowledged(RuntimeError):
    """Kafka did not acknowledge a record a person's action writes: the action was not done."""


async def deliver(producer: Producer, topic: str, **record: Any) -> KafkaError | None:
    """Produce ``record`` (key, value, headers, partition: ``Producer.produce``'s arguments) to ``topic``
    and wait for its delivery report: None when acknowledged, else librdkafka's error."""
    reports: list[KafkaError | None] = []
    try:
        producer.produce(topic, on_delivery=lambda error, _message: reports.append(error), **record)
    except KafkaException as exc:
        return exc.args[0]  # type: ignore[no-any-return]
    except BufferError:
        return KafkaError(KafkaError._QUEUE_FULL)
    while not reports:
        await asyncio.to_thread(producer.poll, 0.1)
    return reports[0]
