"""``clingate agent worker``: the clinician's agent as a consumer group.

    clingate.agent.requests --agent group--> clingate.agent.responses (the answer, or a question back)
                                            clingate.agent.traces    (a record per node decision)
                                            clingate.agent.proposals (the write tools' draft resources)

A member runs :class:`~streams.groups.ordered.OrderedLoop` over the requests (group
``CLINGATE_AGENT_GROUP_ID``, up to ``CLINGATE_AGENT_MAX_IN_FLIGHT`` conversations at once, responses in
request order per partition). Each request is one turn (:func:`streams.agent.runner.run_turn`):

* **Trace and proposals as they happen.** Each decision's trace record, and a write tool's proposal before
  the decision that took it, are produced and acknowledged at once by an idempotent producer of their
  own; the response is published with the group's progress in the loop's transaction. So a member
  killed mid-turn leaves the decisions it made on the trace topic, and the partition's next owner
  resumes the turn at the last recorded decision: it reads the request's trace records (the
  conversation's partition of the trace topic, from the request's timestamp), replays their events
  through the graph without calling anything, and makes only the calls that are left. A proposal made
  again after a restart has the same id (request id and step) and the same content.
* **Bad requests** (not the schema, a key that is not the conversation id, an empty query) go to
  ``clingate.agent.requests.dlq`` with the reason; a turn that raises (a bug) is dead-lettered by the
  loop, stage ``process``.
* **Tools** read the clinical worker's patient table of ``CLINGATE_APP_ID`` from its changelog, the
  packaged drug data and the literature services of the settings (:mod:`streams.agent.tools`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
from confluent_kafka import Consumer, Producer, TopicPartition

from processors.agent.drugs import default_drug_data, drug_dictionary
from processors.agent.proposals import Proposal
from processors.agent.state import AgentConfig, default_config
from processors.clinical.knowledge import default_knowledge
from schemas.agent import AgentProposal, AgentRequest, AgentTrace
from schemas.base import AvroModel
from schemas.common import Stage
from schemas.serde import Serde
from streams.agent.metrics import AgentMetrics
from streams.agent.patients import ChangelogPatients
from streams.agent.runner import path_kind, run_turn
from streams.agent.tools import ToolBox, TurnContext
from streams.groups.llm import default_serde, new_metrics, run_loop
from streams.groups.metrics import LlmGroupMetrics
from streams.groups.ordered import Handled, OrderedLoop
from streams.llm import LlmClient, given_or_built
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord, decode_record
from streams.runtime.kafka_clients import partitions, producer_config, read_to_end, reader
from streams.runtime.settings import Settings
from streams.worker.clinical import gate_flags, patients_changelog
from topics.catalog import AGENT_PROPOSALS, AGENT_REQUESTS, AGENT_RESPONSES, AGENT_TRACES
from topics.partitioner import partition_for

log = logging.getLogger(__name__)

GROUP = "agent"


M = TypeVar("M", bound=AvroModel)


def conversation_records(
    consumer: Consumer, serde: Serde, topic: str, model: type[M], conversation_id: str, since_ms: int | None
) -> list[M]:
    """The records of ``conversation_id`` on ``topic`` (keyed by conversation), from ``since_ms`` on (None:
    from the start), read up to the partition's current end with ``consumer`` (assigned here)."""
    key = conversation_id.encode()
    partition = partition_for(key, len(partitions(consumer, topic)))
    since = TopicPartition(topic, partition, max(0, since_ms or 0))
    [found] = consumer.offsets_for_times([since], timeout=10)
    if found.offset < 0:
        return []
    return [
        serde.decode(message.value(), model, topic=topic)
        for message in read_to_end(consumer, {topic: {partition: found.offset}}, 30, named_only=True)
        if message.key() == key
    ]


class TraceLog:
    """The trace topic: publish a record at once; read a request's records back (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._producer = Producer(producer_config(bootstrap))
        self._reader = reader(bootstrap, "agent-traces", **{"isolation.level": "read_committed"})
        self._serde = serde
        self._lock = threading.Lock()

    async def publish(self, trace: AgentTrace) -> None:
        """Produce ``trace`` and wait for its acknowledgement."""
        value = self._serde.encode(trace, topic=AGENT_TRACES)
        await self._send(AGENT_TRACES, trace.conversation_id.encode(), value)

    async def propose(self, proposal: AgentProposal) -> None:
        """Produce ``proposal`` and wait for its acknowledgement."""
        value = self._serde.encode(proposal, topic=AGENT_PROPOSALS)
        await self._send(AGENT_PROPOSALS, proposal.patient_id.encode(), value)

    async def _send(self, topic: str, key: bytes, value: bytes) -> None:
        self._producer.produce(topic, key=key, value=value)
        remaining = await asyncio.to_thread(self._producer.flush, 30)
        if remaining:
            raise RuntimeError(f"{topic}: a record was not acknowledged within 30 s")

    async def read(self, request: AgentRequest, since_ms: int | None) -> list[AgentTrace]:
        """The trace records of ``request`` published from ``since_ms`` on (None: from the start)."""
        return await asyncio.to_thread(self._read, request, since_ms)

    def _read(self, request: AgentRequest, since_ms: int | None) -> list[AgentTrace]:
        with self._lock:
            found = conversation_records(
                self._reader, self._serde, AGENT_TRACES, AgentTrace, request.conversation_id, since_ms
            )
        return [t for t in found if t.request_id == request.request_id]

    def close(self) -> None:
        self._producer.flush(30)
        self._reader.close()


def agent_proposal(proposal: Proposal, turn: TurnContext) -> AgentProposal:
    """The proposal record of a write tool's proposal."""
    return AgentProposal(
        proposal_id=proposal.proposal_id,
        patient_id=proposal.patient_id,
        conversation_id=turn.conversation_id,
        request_id=turn.request_id,
        event_time=turn.as_of,
        tool=proposal.tool,
        resource_type=proposal.resource_type,
        resource=json.dumps(proposal.resource, sort_keys=True),
        gates=None if proposal.gates is None else json.dumps(proposal.gates, sort_keys=True),
    )


@dataclass
class AgentHandler:
    """The per-record handler of the agent group (module docstring)."""

    client: LlmClient
    tools: ToolBox
    traces: TraceLog
    config: AgentConfig
    serde: Serde
    metrics: AgentMetrics
    llm_metrics: LlmGroupMetrics

    def __call__(self, record: SourceRecord) -> Handled | Awaitable[Handled]:
        outcome = decode_record(self.serde, record, AgentRequest)
        if isinstance(outcome, Rejected):
            return [outcome]
        request = outcome.value
        problem = _invalid(record, request)
        if problem is not None:
            failed = Rejected(record, Stage.VALIDATE, "InvalidRequest", problem, None, AgentRequest.avro_name)
            return [failed]
        return self._answer(record, request)

    async def _answer(self, record: SourceRecord, request: AgentRequest) -> Handled:
        resume = await self.traces.read(request, record.timestamp_ms)
        started = time.perf_counter()
        result = await run_turn(
            request, client=self.client, tools=self.tools, config=self.config, resume=resume,
            on_trace=self.traces.publish,
            on_call=lambda r: self.llm_metrics.llm.observe(GROUP, r),
        )  # fmt: skip
        state = result.state
        outcome = "clarification" if result.respond.clarification else "answer"
        tools = [(e.tool, e.outcome) for e in state.executed]
        elapsed = time.perf_counter() - started
        self.metrics.turned(path_kind(state), outcome, state.llm_calls, elapsed, tools, resumed=bool(resume))
        response = result.response(request)
        key = request.conversation_id.encode()
        return [Output(AGENT_RESPONSES, key, self.serde.encode(response, topic=AGENT_RESPONSES))]


def _invalid(record: SourceRecord, request: AgentRequest) -> str | None:
    """Why a decoded request cannot be answered (None: it can)."""
    if record.key != request.conversation_id.encode():
        return f"record key {record.key!r} is not the conversation_id {request.conversation_id!r}"
    if not request.query.strip():
        return "the query is empty"
    return None


async def run_agent(
    bootstrap: str,
    settings: Settings,
    *,
    stop: asyncio.Event,
    client: LlmClient | None = None,
    metrics: LlmGroupMetrics | None = None,
    max_in_flight: int | None = None,
) -> OrderedLoop:
    """Run one agent group member until ``stop`` is set; returns the stopped loop.

    Args:
        bootstrap: Kafka bootstrap servers.
        settings: the process settings (group, in-flight bound, LLM servers, services, ``CLINGATE_APP_ID``).
        stop: set it to stop after the current step.
        client: the LLM client (default: built from the settings and closed on exit).
        metrics: where to count (default: a fresh registry); the agent's own metrics go on its registry.
        max_in_flight: conversations at once (default ``settings.agent_max_in_flight``).
    """
    meters = metrics or new_metrics()
    agent_metrics = AgentMetrics(meters.registry)
    serde = default_serde(settings)
    knowledge, drug_data = default_knowledge(), default_drug_data()
    patients = ChangelogPatients(bootstrap, patients_changelog(settings.app_id))
    traces = TraceLog(bootstrap, serde)

    async def sink(proposal: Proposal, turn: TurnContext) -> None:
        await traces.propose(agent_proposal(proposal, turn))

    try:
        async with given_or_built(client, settings) as llm_client, aiohttp.ClientSession() as http:
            tools = ToolBox(
                patients_source=patients, knowledge=knowledge, flags=gate_flags(settings),
                drug_data=drug_data, client=llm_client, http=http, pubmed_url=settings.pubmed_url,
                clinicaltrials_url=settings.clinicaltrials_url, sink=sink,
            )  # fmt: skip
            handler = AgentHandler(
                llm_client, tools, traces, default_config(drug_dictionary()), serde, agent_metrics, meters
            )
            return await run_loop(
                bootstrap, group_id=settings.agent_group_id, topics=[AGENT_REQUESTS], handler=handler,
                expected_schema=AgentRequest.avro_name,
                max_in_flight=max_in_flight or settings.agent_max_in_flight,
                session_timeout_s=settings.consumer_session_timeout_s,
                metrics=meters, group=GROUP, serde=serde, stop=stop,
            )  # fmt: skip
    finally:
        traces.close()
        patients.close()
