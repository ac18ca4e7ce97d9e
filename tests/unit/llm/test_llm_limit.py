"""Requests in flight to one LLM server adapt to what it answers within the timeout (AIMD)."""

from __future__ import annotations

import asyncio

from streams.llm.limit import AdaptiveLimit


def test_timeouts_halve_the_bound_to_one_and_answers_raise_it_back_to_the_ceiling() -> None:
    limit = AdaptiveLimit(8)
    for _ in range(5):
        limit.timed_out()
    assert limit.limit == 1.0
    answers = 0
    while limit.limit < 8:
        limit.answered()
        answers += 1
    assert limit.limit == 8.0 and 20 <= answers <= 40  # about bound**2 / 2 answers: additive increase


def test_calls_beyond_the_bound_wait_in_the_client_in_arrival_order_and_cancelled_ones_give_way() -> None:
    async def scenario() -> list[int]:
        limit = AdaptiveLimit(4)
        limit.timed_out()
        limit.timed_out()  # one at a time now
        order: list[int] = []
        gates = [asyncio.Event() for _ in range(4)]

        async def call(index: int) -> None:
            async with limit.slot():
                order.append(index)
                assert limit.in_flight <= int(limit.limit)
                await gates[index].wait()

        tasks = [asyncio.create_task(call(i)) for i in range(4)]
        await asyncio.sleep(0.01)
        assert order == [0] and limit.in_flight == 1
        tasks[1].cancel()  # gave up while waiting: never runs, takes no slot
        for index in (0, 2, 3):
            gates[index].set()
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks, return_exceptions=True)
        assert limit.in_flight == 0
        return order

    assert asyncio.run(scenario()) == [0, 2, 3]
