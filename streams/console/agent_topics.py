"""Where the clinician's agent page reads a turn: the agent's topics.

A question is asked as every record of the console's people is (:mod:`streams.console.requests`): the
request runtime publishes its :class:`~schemas.agent.AgentRequest` on ``clingate.agent.requests``, keyed by
its conversation id with Java's partitioner (as every producer of the agent's requests: the worker finds a
conversation's records by :func:`~topics.partitioner.partition_for`). :class:`KafkaAgent` reads a turn as
``clingate agent replay`` does (:func:`streams.agent.worker.conversation_records`): the request, the
response and the trace records of the conversation's partition of each topic, ``read_committed``, from a
time a little before the question was asked (:data:`CLOCK_SKEW_S`: the worker's clock may be behind the
console's) up to the end each partition has now; and, once the response names proposals, the proposals
topic (keyed by patient, so every partition) from that time on.

A record of another turn that cannot be decoded is skipped; the turn's own records are the agent worker's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, TypeVar

from aiohttp import web
from confluent_kafka import Consumer, TopicPartition

from schemas.agent import AgentProposal, AgentRequest, AgentResponse, AgentTrace
from schemas.base import AvroModel
from schemas.serde import Serde
from streams.agent.worker import conversation_records
from streams.console.pages import read_in_thread
from streams.console.records import READ_TIMEOUT_S, decoded
from streams.runtime.kafka_clients import partitions, read_to_end, reader
from topics.catalog import AGENT_PROPOSALS, AGENT_REQUESTS, AGENT_RESPONSES, AGENT_TRACES

M = TypeVar("M", bound=AvroModel)

CLOCK_SKEW_S = 300.0
"""How far before a question's time its turn's records are looked for."""


@dataclass(frozen=True)
class Turn:
    """A question and what the agent made of it so far."""

    request: AgentRequest
    response: AgentResponse | None
    """None while the agent has not answered."""
    traces: tuple[AgentTrace, ...]
    """Each decision once, in step order."""
    proposals: tuple[AgentProposal, ...]


class AgentDesk(Protocol):
    """Where the agent page reads."""

    async def turn(self, conversation_id: str, request_id: str, asked: datetime) -> Turn | None:
        """The turn of the request asked at ``asked`` (None: no such request on the topic).

        Raises:
            Unavailable: a topic could not be read.
        """
        ...

    async def requests(self, request_ids: Collection[str], since: datetime) -> dict[str, AgentRequest]:
        """The requests of ``request_ids`` published from ``since`` on, by request id.

        Raises:
            Unavailable: the topic could not be read.
        """
        ...


class KafkaAgent:
    """The agent's topics (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._bootstrap = bootstrap
        self._serde = serde

    async def turn(self, conversation_id: str, request_id: str, asked: datetime) -> Turn | None:
        return await read_in_thread("the agent's topics", self._turn, conversation_id, request_id, asked)

    async def requests(self, request_ids: Collection[str], since: datetime) -> dict[str, AgentRequest]:
        return await read_in_thread(AGENT_REQUESTS, self._requests, frozenset(request_ids), since)

    def _consumer(self) -> Consumer:
        return reader(self._bootstrap, "console-agent", **{"isolation.level": "read_committed"})

    def _turn(self, conversation_id: str, request_id: str, asked: datetime) -> Turn | None:
        since_ms = _since_ms(asked)
        consumer = self._consumer()
        try:

            def of_turn(topic: str, model: type[M]) -> list[M]:
                found = conversation_records(consumer, self._serde, topic, model, conversation_id, since_ms)
                return [r for r in found if r.request_id == request_id]  # type: ignore[attr-defined]

            requests = of_turn(AGENT_REQUESTS, AgentRequest)
            if not requests:
                return None
            responses = of_turn(AGENT_RESPONSES, AgentResponse)
            # Each step once, its first record (a resumed turn's decisions are not traced again).
            traces = {t.step: t for t in reversed(of_turn(AGENT_TRACES, AgentTrace))}
            response = responses[0] if responses else None
            proposals = (
                [p for p in self._since(consumer, AGENT_PROPOSALS, AgentProposal, since_ms)
                 if p.request_id == request_id and p.proposal_id in response.proposals]
                if response is not None and response.proposals else []
            )  # fmt: skip
        finally:
            consumer.close()
        ordered = tuple(traces[step] for step in sorted(traces))
        return Turn(requests[0], response, ordered, tuple({p.proposal_id: p for p in proposals}.values()))

    def _requests(self, request_ids: frozenset[str], since: datetime) -> dict[str, AgentRequest]:
        if not request_ids:
            return {}
        consumer = self._consumer()
        try:
            found = self._since(consumer, AGENT_REQUESTS, AgentRequest, _since_ms(since))
        finally:
            consumer.close()
        return {r.request_id: r for r in found if r.request_id in request_ids}

    def _since(self, consumer: Consumer, topic: str, model: type[M], since_ms: int) -> list[M]:
        """The records of every partition of ``topic`` from ``since_ms`` on that decode as ``model``."""
        wanted = [TopicPartition(topic, p, since_ms) for p in partitions(consumer, topic, READ_TIMEOUT_S)]
        starts = {tp.partition: tp.offset for tp in consumer.offsets_for_times(wanted, timeout=READ_TIMEOUT_S)
                  if tp.offset >= 0}  # fmt: skip
        found = []
        for message in read_to_end(consumer, {topic: starts}, READ_TIMEOUT_S, named_only=True):
            if message.value() is not None and (record := decoded(self._serde, message, model)) is not None:
                found.append(record)
        return found


def _since_ms(asked: datetime) -> int:
    return max(0, int((asked.timestamp() - CLOCK_SKEW_S) * 1000))


AGENT = web.AppKey("agent", AgentDesk)
"""Where the application reads the agent's turns."""
