"""Faust's aiokafka producer, made to say what it is waiting for when a flush stalls.

Faust commits a partition's offsets only after ``producer.flush()`` returns, and aiokafka's flush waits,
without a deadline, for every batch the producer holds. A batch that never completes (a request that is
never answered, a metadata update that never ends, a leader that is never found) therefore stops every
commit of the worker, and Faust's flight recorder says so only after five minutes, without saying what
the producer holds.

:class:`StallReportingProducer` runs the same flush; every :data:`FLUSH_REPORT_S` seconds that it is
still waiting, it logs what aiokafka holds: the batches queued and in flight, the nodes with a request
in flight, the age of the oldest batch, and the state of the sender and metadata tasks. It changes
nothing else: the flush still has no deadline, since giving up on a batch would lose its records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

log = logging.getLogger(__name__)

#: Seconds between two reports of a flush that is still waiting (a healthy flush takes milliseconds).
FLUSH_REPORT_S = 30.0


def _task_state(task: asyncio.Future[Any] | None) -> str:
    if task is None:
        return "not started"
    if not task.done():
        return "running"
    if task.cancelled():
        return "cancelled"
    error = task.exception()
    return "ended" if error is None else f"failed: {type(error).__name__}: {error}"


def describe(producer: Any) -> str:
    """What an ``aiokafka.AIOKafkaProducer`` holds, for a log line (its private state, read defensively)."""
    accumulator = getattr(producer, "_message_accumulator", None)
    sender = getattr(producer, "_sender", None)
    client = getattr(producer, "client", None)
    if accumulator is None or sender is None or client is None:
        return "the producer has not started"
    queued = {tp: len(batches) for tp, batches in accumulator._batches.items() if batches}
    in_flight = list(accumulator._pending_batches)
    now = time.monotonic()
    held = [*in_flight, *(batch for batches in accumulator._batches.values() for batch in batches)]
    ages = [now - batch._ctime for batch in held]
    partitions = ", ".join(f"{tp.topic}[{tp.partition}]×{count}" for tp, count in sorted(queued.items()))
    return (
        f"{sum(queued.values())} batch(es) queued ({partitions or 'none'}), {len(in_flight)} in flight to "
        f"node(s) {sorted(sender._in_flight)}, muted partitions {len(sender._muted_partitions)}, oldest "
        f"batch {max(ages, default=0.0):.0f} s; sender task {_task_state(sender.sender_task)}; metadata "
        f"update {'pending' if client._md_update_fut is not None else 'idle'}, metadata task "
        f"{_task_state(client._sync_task)}"
    )


class StallReportingProducer(faust_aiokafka.Producer):
    """Faust's aiokafka producer whose flush reports, while it waits, what it is waiting for."""

    async def flush(self) -> None:
        """Faust's flush; a warning with :func:`describe` every :data:`FLUSH_REPORT_S` s it still runs."""
        flushing = asyncio.ensure_future(super().flush())
        waited = 0.0
        try:
            while not (await asyncio.wait({flushing}, timeout=FLUSH_REPORT_S))[0]:
                waited += FLUSH_REPORT_S
                log.warning("producer flush still waiting after %.0f s: %s", waited, describe(self._producer))
        except asyncio.CancelledError:
            flushing.cancel()
            raise
        flushing.result()
