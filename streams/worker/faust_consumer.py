"""Faust's aiokafka consumer, made to keep its place in every partition across rebalances and seeks.

Faust (0.15.3) fetches a batch from aiokafka in a background loop and hands its records to the
streams one by one. Taking a batch out of aiokafka advances aiokafka's position past every record
in it, but Faust hands over only part of a batch when the flow stops or the group generation changes
in the middle of it, or when a record belongs to a partition that is paused at that moment
(recovery pauses and resumes partitions while the batch is in flight). The rest of the batch is
dropped without moving the position back. Faust relies on the seek to the committed offsets at the
end of each recovery to repair that, but the seek runs concurrently with the fetch loop, so a batch
fetched before it can be dropped after it, and then nothing repairs it.

Found by the takeover scenario of ``tests/integration/test_chaos.py`` (about one run in ten,
docs/faust-runtime.md section 6): after the generation-3 rebalance the survivor's
aiokafka positions stood at the end of the verdict partitions while Faust had delivered nothing past
the committed offsets, so the memory agent waited for records that would never come and the group
never committed again. In a live pipeline the next records would be delivered past the hole, the
agent's input-offset boundary would pass it, and the hole's verdicts would be skipped for good as
"already applied" after the next restart: a silent loss, not only a stall.

The fix keeps one rule: **a record taken out of aiokafka is either handed to the streams or the
partition's position is moved back to it.** Two changes to the consumer, nothing else:

* :meth:`PositionSafeConsumer.getmany` rewinds every partition whose records it did not hand over
  (flow stopped, generation changed, partition not active) to the first record it kept back, so
  aiokafka returns the same records again when the partition flows.
* Moving a position (``perform_seek``, ``seek``, ``seek_wait``) and fetching-then-handing-over a
  batch exclude each other (one ``asyncio.Lock``), so a seek can neither be undone by a rewind of a
  batch fetched before it nor be followed by records of that older batch. ``seek_wait`` (used by
  recovery for changelog partitions) also resets the partition's read offset, as ``seek`` does, so
  records before a stale read offset are not dropped as already read.

The lock is never held while the fetch loop waits for the flow to resume (recovery seeks while the
flow is stopped, and would otherwise wait for the fetch loop forever), and a fetch holds it at most
for the fetch timeout plus the hand-over of one batch.

:class:`Transport` is Faust's aiokafka transport with this consumer and the flush-reporting producer
of :mod:`streams.worker.faust_producer`; :func:`register` makes it available under the broker URL scheme
:data:`TRANSPORT_SCHEME`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

from aiokafka.errors import IllegalStateError
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import TRANSPORTS
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message

from streams.worker.faust_producer import StallReportingProducer

log = logging.getLogger(__name__)

#: Broker URL scheme of :class:`Transport` (``clingate-kafka://host:port``).
TRANSPORT_SCHEME = "clingate-kafka"


class PositionSafeConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer that never drops a fetched record without rewinding to it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._positions = asyncio.Lock()

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        """Fetch one batch and hand over its records; rewind to the first record kept back per partition."""
        if not self.flow_active:
            await self.wait(self.can_resume_flow)  # type: ignore[arg-type]
        async with self._positions:
            if not self.flow_active or self.should_stop:
                return  # the flow stopped again before the fetch: nothing taken, nothing to undo
            records, active = await self._wait_next_records(timeout)
            if not records:
                return
            generation = self.app.consumer_generation_id
            kept_back: dict[TP, int] = {}
            for tp, record in self.scheduler.iterate(records):
                if tp in kept_back or not self._deliverable(tp, active, generation):
                    kept_back.setdefault(tp, record.offset)
                    continue
                self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                yield tp, self._to_message(tp, record)
            await self._rewind(kept_back)

    def _deliverable(self, tp: TP, active: set[TP] | None, generation: int) -> bool:
        """Whether a fetched record of ``tp`` may be handed over now (Faust's own three conditions)."""
        return (
            self.flow_active
            and not self.should_stop
            and self.app.consumer_generation_id == generation
            and (active is None or tp in active or tp in self._buffered_partitions)
        )

    async def _rewind(self, kept_back: Mapping[TP, int]) -> None:
        """Move each partition back to the first record it kept back (if it is still assigned)."""
        if not kept_back:
            return
        assigned = self.assignment()
        for tp, offset in kept_back.items():
            if tp not in assigned:
                continue  # revoked: its next owner starts from the committed offset
            try:
                await faust_consumer.Consumer.seek(self, tp, offset)
            except IllegalStateError:
                continue  # revoked while we looked (aiokafka's own thread changes the assignment)
        log.info("rewound %d partition(s) to records fetched but not handed over", len(kept_back))

    async def perform_seek(self) -> None:
        """Seek every assigned partition to its committed offset, between two batches."""
        async with self._positions:
            await super().perform_seek()

    async def seek(self, partition: TP, offset: int) -> None:
        """Seek one partition, between two batches."""
        async with self._positions:
            await super().seek(partition, offset)

    async def seek_wait(self, partitions: Mapping[TP, int]) -> None:
        """Seek partitions and wait for their positions, between two batches; reset their read offsets."""
        async with self._positions:
            await super().seek_wait(partitions)
            for tp, offset in partitions.items():
                self._read_offset[tp] = offset if offset else None


class Transport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with :class:`PositionSafeConsumer` and :class:`StallReportingProducer`."""

    Consumer: ClassVar[type[PositionSafeConsumer]] = PositionSafeConsumer
    Producer: ClassVar[type[StallReportingProducer]] = StallReportingProducer


def register() -> None:
    """Make :class:`Transport` Faust's transport for ``clingate-kafka://`` broker URLs."""
    TRANSPORTS.aliases[TRANSPORT_SCHEME] = f"{Transport.__module__}:{Transport.__qualname__}"
