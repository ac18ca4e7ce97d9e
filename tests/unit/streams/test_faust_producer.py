"""The worker's producer says what a stalled flush waits for, and otherwise flushes as Faust does."""

from __future__ import annotations

import asyncio
import logging

import faust
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.worker import faust_producer
from streams.worker.faust_consumer import TRANSPORT_SCHEME, register
from streams.worker.faust_producer import StallReportingProducer, describe


def test_describe_names_the_batches_an_aiokafka_producer_holds() -> None:
    async def held() -> tuple[str, str]:
        producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")
        try:
            empty = describe(producer)
            accumulator = producer._message_accumulator
            await accumulator.add_message(TopicPartition("decisions", 3), b"k", b"v", timeout=1)
            return empty, describe(producer)
        finally:
            await producer.stop()

    empty, one = asyncio.run(held())
    assert empty.startswith("0 batch(es) queued (none), 0 in flight")
    assert one.startswith("1 batch(es) queued (decisions[3]×1)")
    assert "sender task not started" in one and "metadata update idle" in one
    assert describe(None) == "the producer has not started"


def test_a_stalled_flush_is_reported_while_it_waits_and_returns_when_it_completes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    register()
    app = faust.App("flush-report", broker=f"{TRANSPORT_SCHEME}://127.0.0.1:1", autodiscover=False)
    assert isinstance(app.producer, StallReportingProducer)
    monkeypatch.setattr(faust_producer, "FLUSH_REPORT_S", 0.05)

    async def run() -> None:
        delivered = asyncio.Event()

        async def slow_flush(self: faust_aiokafka.Producer) -> None:
            await delivered.wait()

        monkeypatch.setattr(faust_aiokafka.Producer, "flush", slow_flush)
        flushing = asyncio.ensure_future(app.producer.flush())
        await asyncio.sleep(0.18)
        assert not flushing.done()
        delivered.set()
        await asyncio.wait_for(flushing, 1.0)

    with caplog.at_level(logging.WARNING, logger=faust_producer.__name__):
        asyncio.run(run())
    reports = [r.getMessage() for r in caplog.records if r.name == faust_producer.__name__]
    assert len(reports) >= 2
    assert reports[0].startswith("producer flush still waiting after 0 s: the producer has not started")
