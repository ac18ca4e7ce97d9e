"""How the console writes a record to Kafka for a person: produce it, then wait for its delivery report.

What holds: :meth:`Outbox.send` returns only once librdkafka acknowledged the record, and raises
:class:`NotAcknowledged` once librdkafka gave it up; the event loop goes on meanwhile (the reports are
served by ``poll`` in a thread). Every outbox sets ``message.timeout.ms`` to :data:`ACK_TIMEOUT_S`, the
deadline a page waits for, so a record a page reported as not done is never delivered later. A record
librdkafka refuses before sending (larger than the producer admits, a full local queue) is reported as not
acknowledged too, never raised as librdkafka's own error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

log = logging.getLogger(__name__)

ACK_TIMEOUT_S = 10.0
"""How long a record may wait for Kafka's acknowledgement before the action it carries fails."""


class NotAcknowledged(RuntimeError):
    """Kafka did not acknowledge a record a person's action writes: the action was not done."""


class Outbox:
    """One producer of ``config`` (its delivery deadline set to :data:`ACK_TIMEOUT_S`) whose every record
    is awaited until acknowledged; ``what`` names its records in the log at shutdown."""

    def __init__(self, config: Mapping[str, Any], what: str) -> None:
        self._producer = Producer({**config, "message.timeout.ms": int(ACK_TIMEOUT_S * 1000)})
        self._what = what

    async def send(self, topic: str, **record: Any) -> None:
        """Produce ``record`` (key, value, headers, partition: ``Producer.produce``'s arguments) to
        ``topic`` and wait for its delivery report.

        Raises:
            NotAcknowledged: librdkafka gave the record up, or refused it.
        """
        reports: list[KafkaError | None] = []
        try:
            self._producer.produce(topic, on_delivery=lambda error, _message: reports.append(error), **record)
        except KafkaException as exc:
            reports.append(exc.args[0])
        except BufferError:
            reports.append(KafkaError(KafkaError._QUEUE_FULL))
        while not reports:
            await asyncio.to_thread(self._producer.poll, 0.1)
        if reports[0] is not None:
            where = f"{topic}[{record['partition']}]" if "partition" in record else topic
            raise NotAcknowledged(f"{where}: not acknowledged: {reports[0].str()}")

    def close(self) -> None:
        """Wait for the records still in flight (at most :data:`ACK_TIMEOUT_S`, librdkafka's own limit)."""
        if self._producer.flush(ACK_TIMEOUT_S + 1):
            log.error("console: %s were not acknowledged at shutdown", self._what)
