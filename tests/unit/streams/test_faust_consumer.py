"""The rule of :class:`streams.worker.faust_consumer.PositionSafeConsumer`: a fetched record is handed over or
its partition is moved back to it.

The broker side of the bug (a survivor that stalled after a rebalance) is exercised by the takeover
scenario of ``tests/integration/test_chaos.py``; these tests pin the consumer's own decisions on a
batch, with the fetch and the position change replaced by recorders (no broker is contacted: the
app's consumer is only constructed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import faust
import pytest
from faust.types import TP

from streams.worker.faust_consumer import TRANSPORT_SCHEME, PositionSafeConsumer, register

A, B = TP("clingate.dbpm.verdicts", 0), TP("clingate.dbpm.verdicts", 1)


@dataclass
class _Record:
    offset: int


class _Harness:
    """One consumer whose next batch, active partitions and seeks are set and recorded by the test."""

    def __init__(self, batch: dict[TP, list[int]], active: set[TP]) -> None:
        register()
        app = faust.App("clingate-unit", broker=f"{TRANSPORT_SCHEME}://127.0.0.1:9", autodiscover=False)
        consumer = app.consumer
        assert isinstance(consumer, PositionSafeConsumer)
        self.consumer = consumer
        self.seeks: list[tuple[TP, int]] = []
        self.on_hand_over: Any = None

        async def fetch(timeout: float) -> tuple[dict[TP, list[_Record]], set[TP]]:
            return {tp: [_Record(o) for o in offsets] for tp, offsets in batch.items()}, active

        async def seek(tp: TP, offset: int) -> None:
            self.seeks.append((tp, offset))

        consumer._wait_next_records = fetch  # type: ignore[method-assign]
        consumer._seek = seek  # type: ignore[method-assign]
        consumer.assignment = lambda: {A, B}  # type: ignore[method-assign]
        consumer.highwater = lambda tp: 1000  # type: ignore[method-assign]
        consumer._to_message = lambda tp, record: (tp, record.offset)  # type: ignore[method-assign]

    async def hand_over(self) -> list[tuple[TP, int]]:
        handed: list[tuple[TP, int]] = []
        async for _, message in self.consumer.getmany(timeout=1.0):
            handed.append(message)
            if self.on_hand_over is not None:
                self.on_hand_over(message)
        return handed


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_records_of_a_partition_not_active_are_rewound_to_never_dropped(
    loop: asyncio.AbstractEventLoop,
) -> None:
    harness = _Harness({A: [5, 6], B: [10, 11]}, active={A})
    handed = loop.run_until_complete(harness.hand_over())
    assert handed == [(A, 5), (A, 6)]
    assert harness.seeks == [(B, 10)]
    assert harness.consumer._read_offset[B] == 10  # not dropped as "already read" when it comes again


def test_a_flow_stop_mid_batch_rewinds_each_partition_to_its_first_record_kept_back(
    loop: asyncio.AbstractEventLoop,
) -> None:
    harness = _Harness({A: [5, 6, 7], B: [10, 11, 12]}, active={A, B})

    def stop_after_first_of_each(message: tuple[TP, int]) -> None:
        if message == (B, 10):
            harness.consumer.stop_flow()

    harness.on_hand_over = stop_after_first_of_each
    handed = loop.run_until_complete(harness.hand_over())
    assert handed == [(A, 5), (B, 10)]  # round robin: one of each, then the flow stopped
    assert sorted(harness.seeks) == [(A, 6), (B, 11)]


def test_a_seek_waits_until_the_batch_in_hand_over_is_done(loop: asyncio.AbstractEventLoop) -> None:
    harness = _Harness({A: [5, 6]}, active={A})
    events: list[str] = []

    async def scenario() -> None:
        stream = harness.consumer.getmany(timeout=1.0)
        first = await stream.__anext__()
        events.append(f"handed {first[1][1]}")
        seek = asyncio.ensure_future(harness.consumer.seek(A, 0))
        await asyncio.sleep(0.01)
        events.append(f"seek done: {seek.done()}")
        async for _, message in stream:
            events.append(f"handed {message[1]}")
        await seek
        events.append("seek done: True")

    loop.run_until_complete(scenario())
    assert events == ["handed 5", "seek done: False", "handed 6", "seek done: True"]
    assert harness.seeks == [(A, 0)]
