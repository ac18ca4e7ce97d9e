"""The classification arbiter's stream processor (``clingate arbiter worker``) on a real broker.

The worker runs in-process on its own event-loop thread, exactly as ``clingate arbiter worker`` runs it,
against the catalog's docs topics. Every document id carries a per-test suffix, so tests sharing the
session broker (and its catalog topics) only ever read their own records.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from typer.testing import CliRunner

from processors.docs.v3 import load_trap_rules
from schemas.common import DeadLetter
from schemas.docs import (
    ArbiterDecision,
    ClassificationOutput,
    ClassificationRequest,
    Disposition,
    DocumentBundle,
    DocumentType,
    GroundTruth,
    GroundTruthSource,
    ReviewPacket,
    ReviewStatus,
)
from schemas.serde import SingleObjectSerde
from streams.cli.arbiter import app as docs_cli
from streams.data import DOCS
from streams.groups.arbiter import DocsWorker, run_worker
from streams.groups.arbiter_calls import client_call
from streams.llm import Endpoint, LlmClient, Role
from streams.llm.serve.testserver import DEFAULT_MODEL, OpenAiTestServer
from streams.replay.kafka import commit_end_offsets
from streams.runtime.dlq import header_map
from streams.runtime.kafka_clients import producer_config
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.testing.console import request_runtime
from topics.admin import ensure_topics
from topics.catalog import (
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
    build_catalog,
    dlq_name,
)

pytestmark = pytest.mark.integration

SERDE = SingleObjectSerde()
TS = datetime(2025, 2, 18, 14, 30, tzinfo=UTC)


def _request(classification: str, bundle: str, doc_id: str) -> ClassificationRequest:
    doc = DocumentBundle.model_validate_json((DOCS / f"{bundle}.json").read_bytes())
    output = ClassificationOutput.model_validate_json((DOCS / f"{classification}.json").read_bytes())
    return ClassificationRequest(
        doc_id=doc_id, ts=TS, classification=output, bundle=doc.model_copy(update={"doc_id": doc_id})
    )


@contextmanager
def _running_worker(
    bootstrap: str, llm_latency_s: float | None = None, group_id: str | None = None
) -> Iterator[tuple[DocsWorker, list]]:
    """A docs worker in its own consumer group on an event-loop thread, stopped cleanly on exit.

    A new group (``group_id`` None) starts at the end of the input topics. With ``llm_latency_s`` the
    worker's LLM calls go through the project's client to an in-process test server answering after
    that latency (yielded second, for its counters); else it is rules-only.
    """
    settings = get_settings()
    catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
    ensure_topics(admin_client(bootstrap), catalog)
    if group_id is None:  # a fresh group reads only this test's records, not the session's earlier ones
        group_id = f"docs-test-{uuid.uuid4().hex}"
        commit_end_offsets(bootstrap, group_id, [DOCS_CLASSIFICATIONS, DOCS_REVIEWS])
    ready: list[DocsWorker] = []
    servers: list[OpenAiTestServer] = []
    holder: dict[str, object] = {}

    async def run() -> None:
        stop = asyncio.Event()
        holder["loop"], holder["stop"] = asyncio.get_running_loop(), stop
        call = None
        if llm_latency_s is not None:
            server = OpenAiTestServer(latency_s=llm_latency_s)
            servers.append(server)
            client = LlmClient({Role.DEFAULT: Endpoint(await server.start(), DEFAULT_MODEL)})
            call = client_call(client)
        try:
            await run_worker(
                bootstrap, SERDE, load_trap_rules(), call, max_in_flight=8, stop=stop, on_ready=ready.append,
                group_id=group_id, session_timeout_s=get_settings().consumer_session_timeout_s,
            )  # fmt: skip
        finally:
            if servers:
                await client.aclose()
                await servers[0].stop()

    thread = threading.Thread(target=lambda: asyncio.run(run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not ready and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready, "docs worker did not start"
    try:
        yield ready[0], servers
    finally:
        loop, stop = holder["loop"], holder["stop"]
        assert isinstance(loop, asyncio.AbstractEventLoop) and isinstance(stop, asyncio.Event)
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        assert not thread.is_alive()


@pytest.fixture
def docs_worker(kafka_bootstrap: str) -> Iterator[DocsWorker]:
    """A rules-only docs worker."""
    with _running_worker(kafka_bootstrap) as (worker, _servers):
        yield worker


def _publish(bootstrap: str, topic: str, *records: tuple[str, bytes]) -> None:
    producer = Producer(producer_config(bootstrap))
    for key, value in records:
        producer.produce(topic, key=key.encode("utf-8"), value=value)
    assert producer.flush(30) == 0


def _collect(
    bootstrap: str, topics: list[str], wanted: Callable[[dict[str, list]], bool], timeout_s: float = 60.0
) -> dict[str, list]:
    """Read ``topics`` from the beginning into {topic: [(key, value, headers)]} until ``wanted``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})  # fmt: skip
    partitions = [
        TopicPartition(topic, p, OFFSET_BEGINNING)
        for topic in topics
        for p in consumer.list_topics(topic, timeout=30).topics[topic].partitions
    ]
    consumer.assign(partitions)
    seen: dict[str, list] = {topic: [] for topic in topics}
    deadline = time.monotonic() + timeout_s
    try:
        while not wanted(seen) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            seen[message.topic()].append(
                ((message.key() or b"").decode(), message.value(), message.headers() or [])
            )
    finally:
        consumer.close()
    return seen


def _values(seen: dict[str, list], topic: str, key: str, model: type) -> list:
    return [SERDE.decode(value, model, topic=topic) for k, value, _ in seen[topic] if k == key]


def test_trap_cases_bad_record_and_review_flow_through_the_docs_worker(
    kafka_bootstrap: str, docs_worker: DocsWorker, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """Scenario: the seed's trap cases are published to clingate.docs.classifications with a bad record.

    The Quest CBC classified as Genomic PRIMARY escalates to the SME with a pending review packet; the
    share-sum example is auto-fixed and accepted on its retry; the undecodable record lands on the
    classifications DLQ with its coordinates, and the worker carries on. An SME then corrects the
    Quest document to OTHER with ``clingate arbiter review`` (after ``clingate arbiter reviews`` listed it as
    pending), a request the request runtime (``clingate worker --role requests``) carries out: ground
    truth SME_CORRECTED is published and the packet's latest value on the compacted packet topic is
    reviewed.
    """
    run = uuid.uuid4().hex[:8]
    quest, share_sum, bad = f"quest-{run}", f"share-sum-{run}", f"bad-{run}"
    quest_request = _request("classification_quest_genomic", "bundle_quest_cbc", quest)
    share_sum_request = _request("classification_doc2_6_share_sum", "bundle_doc2_6", share_sum)
    _publish(
        kafka_bootstrap, DOCS_CLASSIFICATIONS, (quest, SERDE.encode(quest_request)),
        (bad, b"\x13\x37 not a classification"), (share_sum, SERDE.encode(share_sum_request)),
    )  # fmt: skip

    def decided(seen: dict[str, list]) -> bool:
        keys = {k for k, _, _ in seen[DOCS_DISPOSITIONS]}
        dead = {k for k, _, _ in seen[dlq_name(DOCS_CLASSIFICATIONS)]}
        packets = {k for k, _, _ in seen[DOCS_REVIEW_PACKETS]}
        return {quest, share_sum} <= keys and bad in dead and quest in packets

    topics = [DOCS_DISPOSITIONS, DOCS_REVIEW_PACKETS, dlq_name(DOCS_CLASSIFICATIONS)]
    seen = _collect(kafka_bootstrap, topics, decided)
    assert decided(seen), {t: [k for k, _, _ in v] for t, v in seen.items()}

    [quest_disposition] = _values(seen, DOCS_DISPOSITIONS, quest, Disposition)
    assert quest_disposition.decision is ArbiterDecision.ESCALATE_TO_SME
    assert any(i.agent == "V3" and i.severity == "BLOCKER" for i in quest_disposition.issues)
    [packet] = _values(seen, DOCS_REVIEW_PACKETS, quest, ReviewPacket)
    assert packet.review_status is ReviewStatus.PENDING

    [accepted] = _values(seen, DOCS_DISPOSITIONS, share_sum, Disposition)
    assert (accepted.decision, len(accepted.attempts)) == (ArbiterDecision.AUTO_ACCEPT, 2)
    assert accepted.attempts[0].decision is ArbiterDecision.AUTO_RETRY
    shares = [c.segment_share for c in accepted.final_classification.segments[0].classifications]
    assert shares == [0.472, 0.283, 0.094, 0.075, 0.075]
    assert _values(seen, DOCS_REVIEW_PACKETS, share_sum, ReviewPacket) == []

    [(_, dead_value, dead_headers)] = [r for r in seen[dlq_name(DOCS_CLASSIFICATIONS)] if r[0] == bad]
    letter = SERDE.decode(dead_value, DeadLetter)
    assert (letter.topic, letter.value) == (DOCS_CLASSIFICATIONS, b"\x13\x37 not a classification")
    assert header_map(dead_headers)["topic"] == DOCS_CLASSIFICATIONS

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    get_settings.cache_clear()

    def reviewed(seen: dict[str, list]) -> bool:
        return (
            any(k == quest for k, _, _ in seen[DOCS_GROUND_TRUTH])
            and len([k for k, _, _ in seen[DOCS_REVIEW_PACKETS] if k == quest]) >= 2
        )

    with request_runtime(kafka_bootstrap, f"clingate-docs-it-{run}", tmp_path / "requests"):
        try:
            listed = CliRunner().invoke(docs_cli, ["reviews"])
            assert listed.exit_code == 0, listed.output
            assert quest in listed.stdout and share_sum not in listed.stdout
            recorded = CliRunner().invoke(docs_cli, [
                "review", quest, "--reviewer", "sme-1", "--decision", "CORRECTS", "--corrected-type", "OTHER",
                "--notes", "routine CBC, not genomic",
            ])  # fmt: skip
        finally:
            get_settings.cache_clear()
        assert recorded.exit_code == 0, recorded.output
        assert "Routine lab vendor detected" in recorded.stdout  # the packet was rendered before deciding
        assert "the request runtime" in recorded.stderr
        seen = _collect(kafka_bootstrap, [DOCS_GROUND_TRUTH, DOCS_REVIEW_PACKETS], reviewed)
    assert reviewed(seen)
    [truth] = _values(seen, DOCS_GROUND_TRUTH, quest, GroundTruth)
    assert truth.ground_truth_source is GroundTruthSource.SME_CORRECTED
    assert truth.ground_truth_classification.dominant_type_overall is DocumentType.OTHER
    assert truth.primary_dominant_type is DocumentType.GENOMIC_REPORT
    latest = _values(seen, DOCS_REVIEW_PACKETS, quest, ReviewPacket)[-1]
    assert latest.review_status is ReviewStatus.REVIEWED
    assert docs_worker.packets.packets[quest].review_status is ReviewStatus.REVIEWED
    assert json.loads(json.dumps(truth.model_dump(mode="json")))["doc_id"] == quest


def test_llm_calls_of_different_documents_overlap_in_the_worker(kafka_bootstrap: str):
    """Scenario: six clean documents arrive while the LLM answers each call after 0.5 s.

    Each document needs three LLM calls (V2, V3, V4, requested together). The worker decides several
    documents at once, so the server sees more calls in flight than one document makes, and each
    disposition counts its three calls.
    """
    run = uuid.uuid4().hex[:8]
    ids = [f"clean-{run}-{n}" for n in range(6)]
    requests = [_request("classification_doc2_6_clean", "bundle_doc2_6", doc_id) for doc_id in ids]
    with _running_worker(kafka_bootstrap, llm_latency_s=0.5) as (_worker, servers):
        _publish(kafka_bootstrap, DOCS_CLASSIFICATIONS, *((r.doc_id, SERDE.encode(r)) for r in requests))
        seen = _collect(
            kafka_bootstrap, [DOCS_DISPOSITIONS],
            lambda seen: set(ids) <= {k for k, _, _ in seen[DOCS_DISPOSITIONS]},
        )  # fmt: skip
        peak = servers[0].peak_in_flight
    dispositions = [_values(seen, DOCS_DISPOSITIONS, doc_id, Disposition)[0] for doc_id in ids]
    assert {(d.decision, d.llm_mode, d.llm_calls) for d in dispositions} == {
        (ArbiterDecision.AUTO_ACCEPT, "LLM", 3)
    }
    assert peak > 3, f"LLM calls did not overlap across documents (peak {peak})"


def test_documents_in_flight_when_a_worker_stops_are_decided_by_the_next_one(kafka_bootstrap: str):
    """Scenario: a worker stops while four documents wait on a slow LLM; a new worker of the group resumes.

    The stopped worker published nothing for them and committed none of their offsets (outputs and
    commits follow completion, in input order), so the next worker of the same consumer group
    decides each of the four exactly once: nothing is lost and nothing is skipped.
    """
    run = uuid.uuid4().hex[:8]
    group = f"docs-resume-{run}"
    settings = get_settings()
    catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
    ensure_topics(admin_client(kafka_bootstrap), catalog)
    commit_end_offsets(kafka_bootstrap, group, [DOCS_CLASSIFICATIONS])  # other tests' documents are not ours
    ids = {f"resume-{run}-{n}" for n in range(4)}
    requests = [_request("classification_doc2_6_clean", "bundle_doc2_6", doc_id) for doc_id in sorted(ids)]
    with _running_worker(kafka_bootstrap, llm_latency_s=30.0, group_id=group) as (_first, servers):
        _publish(kafka_bootstrap, DOCS_CLASSIFICATIONS, *((r.doc_id, SERDE.encode(r)) for r in requests))
        deadline = time.monotonic() + 30
        while servers[0].in_flight < 4 * 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert servers[0].in_flight == 4 * 3
    with _running_worker(kafka_bootstrap, llm_latency_s=0.0, group_id=group):

        def all_decided(got: dict[str, list]) -> bool:
            return ids <= {key for key, _, _ in got[DOCS_DISPOSITIONS]}

        _collect(kafka_bootstrap, [DOCS_DISPOSITIONS], all_decided)
        time.sleep(1.0)  # a duplicate would arrive right behind
        seen = _collect(kafka_bootstrap, [DOCS_DISPOSITIONS], lambda seen: False, timeout_s=3.0)
    decided = sorted(k for k, _, _ in seen[DOCS_DISPOSITIONS] if k in ids)
    assert decided == sorted(ids)
