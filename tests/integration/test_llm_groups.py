"""The generator and verifier consumer groups over the session broker, against the OpenAI test server.

The groups run in the test's event loop (``run_generator`` / ``run_verifier``), each with its own
test server (so the verifier's request count is exact); the DBPM gate and memory run in a real
``clingate worker`` subprocess. Every group starts at the current end of its input topics, so records
other tests left there are not its to process.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from processors.clinical.vocabulary import DrugVocabulary
from schemas.dbpm import Candidate, GateDecision, Narrative, NerPayload, RePayload, Verdict
from schemas.wire import make_serde
from state.ram import RamStore
from streams.bench.llm import run_group_benchmark
from streams.groups.generator import run_generator
from streams.groups.llm import new_metrics
from streams.groups.metrics import LlmGroupMetrics
from streams.groups.ordered import OrderedLoop
from streams.groups.verifier import CONFIDENCE_HEADER, GATE_HEADER, VERDICT_HEADER, run_verifier
from streams.llm import ClientPolicy, Endpoint, LlmClient, Role
from streams.llm.serve.http import ChatRequest, Fault
from streams.llm.serve.testserver import OpenAiTestServer
from streams.local.process import SOURCE_ROOT, ProcessHandle, python_module
from streams.replay.kafka import (
    commit_end_offsets,
    commit_worker_end_offsets,
    read_state,
    wait_until_consumed,
)
from streams.runtime.dlq import header_map
from streams.runtime.kafka_clients import producer_config
from streams.runtime.kafka_config import admin_client, client_config
from streams.runtime.settings import Settings
from streams.testing.metrics import scraped_sum
from streams.testing.worker import WorkerProcess, comparison_engine
from streams.worker.keys import memory_changelog
from streams.worker.memory import memory_group
from streams.worker.wire import contract_event, dispatch_outputs
from tests.integration.test_dbpm_worker import COMPARISON_FLAGS
from tests.llm_answers import FAILING_ENTITY, clinical_responder
from topics.admin import ensure_topics
from topics.catalog import (
    DBPM_DECISIONS,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
    build_catalog,
    dlq_name,
)

pytestmark = pytest.mark.integration

SERDE = make_serde(None)
T0 = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


@contextmanager
def served(**options: Any) -> Iterator[OpenAiTestServer]:
    """An OpenAI test server on its own thread and event loop.

    The groups under test share the test's event loop with blocking Kafka calls (flushes, producer
    start-up); a server on that loop would see its answers delayed by them and the client time out.
    """
    server = OpenAiTestServer(**options)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


class Tail:
    """Reads topics from their current end (a fresh group), polled from the test's event loop."""

    def __init__(self, bootstrap: str, *topics: str) -> None:
        group = f"test-tail-{uuid.uuid4().hex[:8]}"
        commit_end_offsets(bootstrap, group, list(topics))
        config = client_config(bootstrap, **{"group.id": group, "enable.auto.commit": False})
        self._consumer = Consumer(config)
        self._consumer.subscribe(list(topics))
        self.records: dict[str, list[tuple[bytes | None, bytes, dict[str, bytes]]]] = {t: [] for t in topics}

    def poll(self) -> None:
        for message in self._consumer.consume(num_messages=500, timeout=0):
            if message.error() is None:
                headers = {k: v or b"" for k, v in message.headers() or []}
                self.records[message.topic()].append((message.key(), message.value(), headers))

    def values(self, topic: str, model: type) -> list[Any]:
        return [SERDE.decode(value, model, topic=topic) for _, value, _ in self.records[topic]]

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if predicate():
                return
            seen = {topic: [header_map(list(h.items())).get("exception", "") for _k, _v, h in records]
                    for topic, records in self.records.items()}  # fmt: skip
            assert time.monotonic() < deadline, f"condition not reached in time; records seen: {seen}"
            await asyncio.sleep(0.05)

    def close(self) -> None:
        self._consumer.close()


def _publish(bootstrap: str, topic: str, records: list[tuple[str, Any]]) -> None:
    """Publish ``records``; to-verify records as the gate does, after the dispatches of their candidates."""
    producer = Producer(producer_config(bootstrap))
    if topic == DBPM_TO_VERIFY:
        for _, decision in records:
            for out in dispatch_outputs(SERDE, contract_event(decision.candidate)):  # type: ignore[arg-type]
                producer.produce(out.topic, key=out.key, value=out.value)
        assert producer.flush(30) == 0
    for key, value in records:
        producer.produce(topic, key=key.encode(), value=SERDE.encode(value, topic=topic))
    assert producer.flush(30) == 0


def _settings(bootstrap: str, gen_url: str, ver_url: str, **overrides: Any) -> Settings:
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap, CLINGATE_GENERATOR_URL=gen_url, CLINGATE_VERIFIER_URL=ver_url,
        CLINGATE_LLM_MODEL="clingate-test", CLINGATE_GENERATOR_GROUP_ID=f"test-gen-{run}",
        CLINGATE_VERIFIER_GROUP_ID=f"test-ver-{run}", CLINGATE_VERIFIER_NARRATIVE_WAIT_S=5.0,
        **overrides,
    )  # fmt: skip
    ensure_topics(admin_client(bootstrap), build_catalog(settings.topic_partitions))
    commit_end_offsets(bootstrap, settings.generator_group_id, [DBPM_NARRATIVES])
    commit_end_offsets(bootstrap, settings.verifier_group_id, [DBPM_TO_VERIFY, DBPM_DECISIONS])
    return settings


@asynccontextmanager
async def _groups(
    bootstrap: str, settings: Settings, verifier_client: LlmClient | None = None
) -> AsyncIterator[tuple[LlmGroupMetrics, dict[str, OrderedLoop]]]:
    metrics = new_metrics()
    stop = asyncio.Event()
    loops: dict[str, OrderedLoop] = {}

    async def gen() -> None:
        loops["generator"] = await run_generator(bootstrap, settings, stop=stop, metrics=metrics,
                                                 vocabulary=DrugVocabulary.empty())  # fmt: skip

    async def ver() -> None:
        loops["verifier"] = await run_verifier(bootstrap, settings, stop=stop, metrics=metrics,
                                               client=verifier_client)  # fmt: skip

    tasks = [asyncio.create_task(ver()), asyncio.create_task(gen())]
    try:
        yield metrics, loops
    finally:
        stop.set()
        await asyncio.gather(*tasks)


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    """A ready ``clingate worker`` (gate and memory) of a fresh app, started at the topics' end.

    It commits its input every 0.1 s (default 2.8 s), so a test can wait until its memory holds a
    verdict (``wait_until_consumed``) instead of sleeping.
    """
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(kafka_bootstrap, app_id)
    process = WorkerProcess(kafka_bootstrap, app_id, tmp_path / app_id, {})
    process.start()
    yield process
    process.stop()


def _ours(events: list[Any], run: str) -> list[Any]:
    return [e for e in events if e.patient_id.startswith(run)]


def _narrative(patient: str, minutes: int, text: str) -> Narrative:
    return Narrative(ts=T0 + timedelta(minutes=minutes), patient_id=patient, text=text)


def _decision(
    patient: str, minutes: int, payload: NerPayload | RePayload, decision: str = "ALLOW"
) -> GateDecision:
    task = "ner" if isinstance(payload, NerPayload) else "re"
    candidate = Candidate(ts=T0 + timedelta(minutes=minutes), task=task, patient_id=patient,
                          candidate_id=f"{patient}-{task}", payload=payload)  # fmt: skip
    return GateDecision(
        ts=candidate.ts, task=task, patient_id=patient, candidate_id=candidate.candidate_id,
        decision=decision, rule="test", signature="x",
        confidence_multiplier=0.7 if decision == "DOWNGRADE" else 1.0,
        candidate=candidate,
    )  # fmt: skip


def test_llm_faults_are_retried_defaulted_or_dead_lettered_never_dropped(kafka_bootstrap: str) -> None:
    """Scenario: each candidate's verdict call meets a different server fault.

    A 429 and a 500 are retried and then answered; a hang times out (after the retries) and a
    persistent 500 exhausts them: both dead-letter the to-verify record with the failure kind. Invalid
    JSON on an NER verdict is an ambiguous answer, conservatively PASS; a truncated RE verdict is
    PASS_WEAK (soft_downgrade), and the DOWNGRADE tag travels with the verified candidate. A generator
    call that keeps failing dead-letters its narrative; a malformed narrative is dead-lettered too.
    """
    faults: dict[str, list[Fault]] = {
        "rate-limited": [Fault.http(429, retry_after_s=0.01)],
        "flaky": [Fault.http(500)],
        "hanging": [Fault.hang()] * 3,
        "down": [Fault.http(500)] * 3,
        "garbled": [Fault.invalid_json()],
        "cut-off": [Fault.truncated()],
    }

    def verifier_hook(request: ChatRequest) -> Fault | None:
        for marker, queue in faults.items():
            if f"marker {marker}" in request.prompt and queue:
                return queue.pop(0)
        return None

    def generator_hook(request: ChatRequest) -> Fault | None:
        return Fault.http(500) if "marker gen-down" in request.prompt else None

    async def scenario() -> None:
        with served(responder=clinical_responder) as gen_server, \
                served(responder=clinical_responder, hang_s=20.0) as ver_server:  # fmt: skip
            ver_server.fault_hook = verifier_hook
            gen_server.fault_hook = generator_hook
            settings = _settings(kafka_bootstrap, gen_server.base_url, ver_server.base_url,
                                 CLINGATE_LLM_MAX_RETRIES=2)  # fmt: skip
            # A breaker that never opens here: each case must show its own failure kind, not circuit_open.
            policy = ClientPolicy(timeout_s=3.0, max_retries=2, backoff_base_s=0.01, breaker_threshold=1000)
            verifier_client = LlmClient({Role.VERIFIER: Endpoint(ver_server.base_url, "clingate-test")},
                                        policy=policy)  # fmt: skip
            tail = Tail(kafka_bootstrap, DBPM_VERDICTS, DBPM_VERIFIED, dlq_name(DBPM_TO_VERIFY),
                        dlq_name(DBPM_NARRATIVES))  # fmt: skip
            run = uuid.uuid4().hex[:6]
            ner = NerPayload(entity="sepsis", category="Diagnosis")
            rel = RePayload(head="sepsis", head_type="Diagnosis", relation="TREATED_BY", tail="meropenem",
                            tail_type="Medication")  # fmt: skip
            cases = {"rate-limited": ner, "flaky": ner, "hanging": ner, "down": ner, "garbled": ner,
                     "cut-off": rel}  # fmt: skip
            narratives, decisions = [], []
            for i, (marker, payload) in enumerate(cases.items()):
                patient = f"{run}-{marker}"
                narratives.append((patient, _narrative(patient, i, f"Sepsis on meropenem; marker {marker}.")))
                decisions.append(
                    (patient, _decision(patient, i, payload, "DOWNGRADE" if marker == "cut-off" else "ALLOW"))
                )
            generator_victim = f"{run}-gen"
            _publish(kafka_bootstrap, DBPM_NARRATIVES, narratives)
            async with verifier_client, _groups(kafka_bootstrap, settings, verifier_client) as (_m, _loops):
                _publish(
                    kafka_bootstrap,
                    DBPM_NARRATIVES,
                    [(generator_victim, _narrative(generator_victim, 9, "Sepsis; marker gen-down."))],
                )
                producer = Producer(producer_config(kafka_bootstrap))
                producer.produce(DBPM_NARRATIVES, key=b"junk", value=b"not avro")
                producer.flush(30)
                _publish(kafka_bootstrap, DBPM_TO_VERIFY, decisions)

                def settled() -> bool:
                    verdicts = _ours(tail.values(DBPM_VERDICTS, Verdict), run)
                    dead = tail.records[dlq_name(DBPM_TO_VERIFY)]
                    narratives_dead = tail.records[dlq_name(DBPM_NARRATIVES)]
                    return len(verdicts) >= 4 and len(dead) >= 2 and len(narratives_dead) >= 2

                await tail.wait_for(settled, timeout_s=60)
            by_patient = {v.patient_id.removeprefix(f"{run}-"): v.verdict
                          for v in _ours(tail.values(DBPM_VERDICTS, Verdict), run)}  # fmt: skip
            assert by_patient == {
                "rate-limited": "success",
                "flaky": "success",
                "garbled": "success",
                "cut-off": "soft_downgrade",
            }
            dead = {k: header_map(list(h.items()))["exception"]
                    for k, _v, h in tail.records[dlq_name(DBPM_TO_VERIFY)]}  # fmt: skip
            assert dead == {f"{run}-hanging".encode(): "LlmFailed:timeout",
                            f"{run}-down".encode(): "LlmFailed:unavailable"}  # fmt: skip
            narrative_dead = {
                k: header_map(list(h.items()))["exception"]
                for k, _v, h in tail.records[dlq_name(DBPM_NARRATIVES)]
            }
            assert narrative_dead[generator_victim.encode()].startswith("LlmFailed:")
            assert b"junk" in narrative_dead
            verified = {k: h for k, _v, h in tail.records[DBPM_VERIFIED] if k.decode().startswith(run)}
            assert verified[f"{run}-cut-off".encode()][GATE_HEADER] == b"DOWNGRADE"
            assert verified[f"{run}-cut-off".encode()][CONFIDENCE_HEADER] == b"0.7"
            assert verified[f"{run}-cut-off".encode()][VERDICT_HEADER] == b"PASS_WEAK"
            tail.close()

    asyncio.run(scenario())


def test_verifier_group_benchmark_stays_under_the_littles_law_bound(kafka_bootstrap: str) -> None:
    """Scenario: the tiny CI run of `clingate bench llm --groups` against the session broker.

    Every point completes through the broker and its verdict rate never beats N/L. A window of
    ``calls`` verdicts measured between two completions can hold up to N calls that started before
    it, so on a tiny window the bound is ``N/L * (1 + N/calls)`` (plus 10% for timer noise).
    """
    points = run_group_benchmark(kafka_bootstrap, (1, 4), (0.05,), quick=True)
    assert [(p.concurrency, p.latency_s) for p in points] == [(1, 0.05), (4, 0.05)]
    for point in points:
        assert point.calls >= 1
        assert 0 < point.ratio <= 1.1 * (1 + point.concurrency / point.calls)


def test_candidates_in_flight_when_a_verifier_stops_are_verified_by_the_next_member(
    kafka_bootstrap: str,
) -> None:
    """Scenario: a verifier member stops while its calls are in flight (nothing of them committed).

    The next member of the same group resumes from the committed offsets and verifies them again:
    every candidate gets its verdict, none is lost or dead-lettered.
    """

    async def scenario() -> None:
        with served(responder=clinical_responder, latency_s=1.0) as ver_server:
            settings = _settings(kafka_bootstrap, ver_server.base_url, ver_server.base_url)
            tail = Tail(kafka_bootstrap, DBPM_VERDICTS, dlq_name(DBPM_TO_VERIFY))
            run = uuid.uuid4().hex[:6]
            ner = NerPayload(entity="sepsis", category="Diagnosis")
            patients = [f"{run}-p{i}" for i in range(12)]
            _publish(
                kafka_bootstrap,
                DBPM_NARRATIVES,
                [(p, _narrative(p, i, "Sepsis on meropenem.")) for i, p in enumerate(patients)],
            )
            decisions = [(p, _decision(p, i, ner)) for i, p in enumerate(patients)]
            _publish(kafka_bootstrap, DBPM_TO_VERIFY, decisions)
            stop = asyncio.Event()
            first = asyncio.create_task(run_verifier(kafka_bootstrap, settings, stop=stop))
            await tail.wait_for(lambda: ver_server.in_flight > 0)
            stop.set()
            await first
            async with _groups(kafka_bootstrap, settings):
                await tail.wait_for(lambda: {v.patient_id for v in tail.values(DBPM_VERDICTS, Verdict)}
                                    >= set(patients))  # fmt: skip
            assert tail.records[dlq_name(DBPM_TO_VERIFY)] == []
            tail.close()

    asyncio.run(scenario())


def _verifier_process(bootstrap: str, settings: Settings, log: Path, max_in_flight: int) -> ProcessHandle:
    """A ``clingate verifier`` subprocess of ``settings``' group (the only way to SIGKILL a member).

    Its group session times out after the broker's minimum, 6 s: a SIGKILLed member's partitions move
    then (librdkafka's default, 45 s, was most of the test's time).
    """
    env = {
        **os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "CLINGATE_VERIFIER_URL": settings.verifier_url or "",
        "CLINGATE_LLM_MODEL": "clingate-test", "CLINGATE_VERIFIER_GROUP_ID": settings.verifier_group_id,
        "CLINGATE_VERIFIER_NARRATIVE_WAIT_S": "5", "CLINGATE_CONSUMER_SESSION_TIMEOUT_S": "6",
    }  # fmt: skip
    argv = python_module(
        "streams.cli", "verifier", "--metrics-port", "0", "--max-in-flight", str(max_in_flight)
    )
    return ProcessHandle("verifier", argv, env=env, cwd=SOURCE_ROOT, log=log).start(append=True)


def test_verdicts_repeated_by_a_killed_verifier_and_a_re_emitting_gate_teach_the_memory_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Scenario: the verifier group's input repeats and a member is killed; the memory learns once.

    Every other to-verify record is published twice (an upstream producer that re-sends), so those
    candidates are verified twice and their verdicts published twice, at later offsets. A verifier
    member is SIGKILLed with calls in flight and a new member re-issues them (the verdicts of the
    killed member's open transaction are never read). Afterwards every candidate has a verdict, the
    memory in the worker's changelog equals the in-process engine's on the verdicts' unique set
    (first verdict per candidate id), and the worker counted every other verdict record in
    ``clingate_dbpm_verdicts_duplicate_total``.
    """
    app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
    worker = WorkerProcess(kafka_bootstrap, app_id, tmp_path / "worker", COMPARISON_FLAGS)
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    commit_worker_end_offsets(kafka_bootstrap, app_id)
    worker.start()
    engine = comparison_engine()

    async def scenario() -> list[Verdict]:
        with served(responder=clinical_responder, latency_s=0.5) as ver_server:
            settings = _settings(kafka_bootstrap, ver_server.base_url, ver_server.base_url)
            tail = Tail(kafka_bootstrap, DBPM_VERDICTS)
            run = uuid.uuid4().hex[:6]
            patients = [f"{run}-p{i}" for i in range(24)]
            entities = [FAILING_ENTITY, "sepsis", "pneumonia"]
            _publish(
                kafka_bootstrap,
                DBPM_NARRATIVES,
                [(p, _narrative(p, i, f"Suspected {entities[i % 3]}.")) for i, p in enumerate(patients)],
            )
            decisions = [(p, _decision(p, i, NerPayload(entity=entities[i % 3], category="Diagnosis")))
                         for i, p in enumerate(patients)]  # fmt: skip
            _publish(kafka_bootstrap, DBPM_TO_VERIFY, decisions + decisions[::2])
            first = _verifier_process(kafka_bootstrap, settings, tmp_path / "verifier.log", max_in_flight=4)
            try:
                await tail.wait_for(lambda: len(_ours(tail.values(DBPM_VERDICTS, Verdict), run)) >= 8)
            finally:
                first.kill()
            second = _verifier_process(kafka_bootstrap, settings, tmp_path / "verifier.log", max_in_flight=4)
            try:
                wanted = {f"{p}-ner" for p in patients}

                def all_judged() -> bool:
                    return {v.candidate_id for v in _ours(tail.values(DBPM_VERDICTS, Verdict), run)} >= wanted

                await tail.wait_for(all_judged, timeout_s=120)
                await asyncio.to_thread(wait_until_consumed, kafka_bootstrap, settings.verifier_group_id,
                                        DBPM_TO_VERIFY, 60)  # fmt: skip
            finally:
                second.stop(grace_s=60)
            tail.poll()
            verdicts = _ours(tail.values(DBPM_VERDICTS, Verdict), run)
            tail.close()
            return verdicts

    try:
        verdicts = asyncio.run(scenario())
        wait_until_consumed(kafka_bootstrap, memory_group(app_id), DBPM_VERDICTS, 60)
        firsts: dict[str | None, Verdict] = {}
        for verdict in verdicts:  # a candidate's verdicts share a key: the first applied is the first read
            firsts.setdefault(verdict.candidate_id, verdict)
        unique = list(firsts.values())
        store = RamStore()
        for verdict in unique:
            event = contract_event(verdict)
            with store.transaction() as txn:
                engine.process(txn, event, event.time)
        last = max(v.ts for v in unique).timestamp()  # a duplicate, judged later, moves no clock
        expected = engine.snapshot(store.transaction())
        got = read_state(kafka_bootstrap, memory_changelog(app_id), engine, last)
        duplicates = scraped_sum(worker.web_port, "clingate_dbpm_verdicts_duplicate_total")
    finally:
        worker.stop()

    print(f"verdict records {len(verdicts)}, candidates {len(unique)}")
    assert len(unique) == 24 and len(verdicts) >= 24 + 12
    assert got == expected
    assert duplicates == len(verdicts) - len(unique)
