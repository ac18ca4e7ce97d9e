"""``clingate agent worker`` on the session broker: a clinician's question in, the answer, a trace record per
decision and the proposal out; a worker SIGKILLed mid-turn is resumed from the trace by the next one;
``clingate agent replay`` reproduces the turn from the topics; a bad request is a dead letter.

Real parts: the broker, a ``clingate worker`` (its clinical loop holds the patient the agent reads), the
local OpenAI-compatible server in its own process answering from a script (each call 0.4 s, so the kill
lands mid-turn; a call asked again after the restart gets the answer it got before, as greedy decoding
would), and the agent worker as the command line runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition

from schemas.agent import AgentProposal, AgentRequest, AgentResponse, AgentTrace
from schemas.common import DeadLetter
from schemas.fhir import FhirUpdate
from schemas.wire import make_serde
from streams.agent.worker import conversation_records
from streams.data import CLINICAL
from streams.local.process import SOURCE_ROOT, ProcessHandle, eventually, python_module
from streams.replay.kafka import commit_end_offsets, commit_worker_end_offsets, wait_until_consumed
from streams.runtime.kafka_clients import end_offsets, producer_config, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.agent_session import prescription_script
from streams.testing.llm_server import ServerProcess
from streams.testing.worker import WorkerProcess
from streams.worker.clinical import clinical_group
from topics.admin import ensure_topics
from topics.catalog import (
    AGENT_PROPOSALS,
    AGENT_REQUESTS,
    AGENT_RESPONSES,
    AGENT_TRACES,
    FHIR_UPDATES,
    build_catalog,
    dlq_name,
)

QUESTION, SCRIPT = prescription_script(
    "PT-TEST-010", "A draft warfarin prescription was proposed; the clinical gates mark the patient RED."
)


def _records(bootstrap: str, topic: str, model: Any, conversation: str) -> list[Any]:
    consumer = reader(bootstrap, "agent-test", **{"isolation.level": "read_committed"})
    try:
        return conversation_records(consumer, make_serde(None), topic, model, conversation, None)
    finally:
        consumer.close()


def test_the_agent_worker_answers_resumes_a_killed_turn_and_replays_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    serde = make_serde(None)
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    app = f"clingate-agent-it-{uuid.uuid4().hex[:8]}"
    group = f"{app}-agent"
    commit_worker_end_offsets(kafka_bootstrap, app)
    commit_end_offsets(kafka_bootstrap, group, [AGENT_REQUESTS])
    clinical = WorkerProcess(kafka_bootstrap, app, tmp_path / "worker", {}, role="memory")
    clinical.start()
    producer = Producer(producer_config(kafka_bootstrap))
    bundle = (CLINICAL / "PT-TEST-010.json").read_text("utf-8")
    update = FhirUpdate(ts=time.time(), patient_id="PT-TEST-010", resource_type="Bundle", resource=bundle)
    producer.produce(FHIR_UPDATES, key=b"PT-TEST-010", value=serde.encode(update, topic=FHIR_UPDATES))
    producer.flush(30)
    wait_until_consumed(kafka_bootstrap, clinical_group(app), FHIR_UPDATES, 120.0)

    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    server = ServerProcess.start("test", args=["--agent-script", str(script), "--latency-ms", "400"])
    env = {
        **os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "CLINGATE_APP_ID": app,
        "CLINGATE_AGENT_GROUP_ID": group, "CLINGATE_LLM_URL": server.base_url,
        "CLINGATE_LLM_MODEL": server.model, "CLINGATE_CONSUMER_SESSION_TIMEOUT_S": "6",
    }  # fmt: skip
    argv = python_module("streams.cli", "agent", "worker", "--metrics-port", "0")

    def agent(name: str) -> ProcessHandle:
        return ProcessHandle(name, argv, env=env, cwd=SOURCE_ROOT, log=tmp_path / f"{name}.log").start()

    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    request = AgentRequest(
        conversation_id=conversation, request_id="r-1", event_time=time.time(), query=QUESTION
    )
    empty = AgentRequest(conversation_id=conversation, request_id="r-2", event_time=time.time(), query="  ")
    first = agent("agent-1")
    try:
        for item in (request, empty):
            producer.produce(
                AGENT_REQUESTS, key=conversation.encode(), value=serde.encode(item, topic=AGENT_REQUESTS)
            )
        producer.flush(30)
        eventually(
            "three decisions traced",
            lambda: len(_records(kafka_bootstrap, AGENT_TRACES, AgentTrace, conversation)) >= 3,
        )
        first.kill()
        traced_before = len(_records(kafka_bootstrap, AGENT_TRACES, AgentTrace, conversation))
        second = agent("agent-2")
        try:
            [response] = eventually(
                "a response", lambda: _records(kafka_bootstrap, AGENT_RESPONSES, AgentResponse, conversation)
            )
        finally:
            second.stop(grace_s=30)
        traces = _records(kafka_bootstrap, AGENT_TRACES, AgentTrace, conversation)
        proposals = _records(kafka_bootstrap, AGENT_PROPOSALS, AgentProposal, "PT-TEST-010")
        replayed = subprocess.run(
            [sys.executable, "-m", "streams.cli", "agent", "replay", "--conversation", conversation,
             "--request", "r-1", "--json"],
            cwd=SOURCE_ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        first.kill()
        server.stop()
        clinical.stop()

    assert response.answer == SCRIPT[QUESTION][-1]
    assert response.path == ["INPUT_ASSEMBLY", "INTENT_CLASSIFY", "TOOL_SELECT", "TOOL_EXECUTE",
                             "RESULT_CLASSIFY", "DETERMINISTIC_ROUTER", "SYNTHESIZE"]  # fmt: skip
    assert response.llm_calls == 5 and [c.tool for c in response.tool_calls] == ["prescribe_medication"]
    assert 3 <= traced_before < len(traces), (
        "the killed worker left part of the turn, the next one finished it"
    )
    assert [t.step for t in traces] == list(range(len(traces))), "each decision traced once, in order"
    assert {p.proposal_id for p in proposals if p.conversation_id == conversation} == set(response.proposals)
    gates = json.loads(next(p for p in proposals if p.conversation_id == conversation).gates or "{}")
    assert gates["after"]["traffic_light"] == "RED"
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert json.loads(replayed.stdout)["reproduced"] is True
    letters = [
        serde.decode(r, DeadLetter, topic=dlq_name(AGENT_REQUESTS)) for r in _dead_letters(kafka_bootstrap)
    ]
    assert any(
        d.error_type == "InvalidRequest" and "empty" in d.error
        for d in letters
        if conversation.encode() in (d.key or b"")
    )


def _dead_letters(bootstrap: str) -> list[bytes]:
    consumer = reader(bootstrap, "agent-test-dlq")
    try:
        topic = dlq_name(AGENT_REQUESTS)
        ends = end_offsets(consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[bytes] = []
        seen = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + 30
        while any(seen[p] < e for p, e in ends.items()) and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.2):
                if message.error() is None:
                    seen[message.partition()] = message.offset() + 1
                    out.append(message.value())
        return out
    finally:
        consumer.close()
