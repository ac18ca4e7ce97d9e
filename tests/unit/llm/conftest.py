"""Harness for LLM client tests: an in-process OpenAI-compatible server on a free loopback port."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from streams.llm import ClientPolicy, Endpoint, LlmClient, Role
from streams.llm.serve.testserver import DEFAULT_MODEL, OpenAiTestServer

Scenario = Callable[[OpenAiTestServer, LlmClient], Awaitable[Any]]

# Fast policy: tests never wait for real backoff (sleeps are recorded, not slept).
FAST = ClientPolicy(timeout_s=2.0, max_retries=3, backoff_base_s=0.5, backoff_max_s=8.0)


class Harness:
    """Runs a scenario against a fresh server and client; records the backoff sleeps."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def run(
        self,
        scenario: Scenario,
        *,
        policy: ClientPolicy = FAST,
        roles: tuple[Role, ...] = tuple(Role),
        seed: int = 7,
        clock: Callable[[], float] | None = None,
        **server_kwargs: Any,
    ) -> Any:
        async def main() -> Any:
            async with OpenAiTestServer(**server_kwargs) as server:
                endpoints = {role: Endpoint(server.base_url, DEFAULT_MODEL) for role in roles}
                extra = {"clock": clock} if clock is not None else {}
                async with LlmClient(
                    endpoints, policy=policy, rng=random.Random(seed), sleep=self._sleep, **extra
                ) as client:
                    return await scenario(server, client)

        return asyncio.run(main())


@pytest.fixture
def harness() -> Harness:
    """A fresh harness per test."""
    return Harness()
