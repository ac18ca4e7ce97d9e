"""A real ``clingate worker`` logs JSON without clinical text and counts what it did on ``/metrics``.

Uses the :class:`streams.testing.worker.WorkerProcess` subprocess (JSON logs at INFO) against the session
broker.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from schemas.dbpm import Candidate, NerPayload
from schemas.fhir import FhirUpdate
from schemas.wire import make_serde
from streams.data import CLINICAL
from streams.replay.kafka import commit_worker_end_offsets
from streams.runtime.kafka_clients import assign_at_ends, producer_config, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.worker import WorkerProcess
from topics.admin import ensure_topics
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DOCS_CLASSIFICATIONS,
    FHIR_UPDATES,
    build_catalog,
    dlq_name,
)

pytestmark = pytest.mark.integration

PATIENT = "PT-TEST-010"
CLINICAL_TEXT = "Patient reports crushing chest pain radiating to the left arm"


def _tail(bootstrap: str, topics: list[str]) -> Consumer:
    consumer = reader(bootstrap, "tail")
    assign_at_ends(consumer, topics)
    return consumer


def _read(consumer: Consumer, wanted: dict[str, int], timeout_s: float = 90.0) -> dict[str, int]:
    seen = dict.fromkeys(wanted, 0)
    deadline = time.monotonic() + timeout_s
    while any(seen[t] < n for t, n in wanted.items()):
        assert time.monotonic() < deadline, f"records seen {seen}, wanted {wanted}"
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen[message.topic()] += 1
    return seen


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    """One ready worker of a fresh app logging JSON, its groups starting at the inputs' current end."""
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(kafka_bootstrap, app_id)
    started = WorkerProcess(kafka_bootstrap, app_id, tmp_path / app_id, {"CLINGATE_LOG_FORMAT": "json"})
    started.start()
    yield started
    started.stop()


def test_a_worker_logs_ids_not_clinical_text_and_counts_its_work_on_metrics(
    kafka_bootstrap: str, worker: WorkerProcess
) -> None:
    """Scenario: a FHIR bundle whose invalid Observation quotes clinical text, a candidate whose entity is
    clinical text, and an undecodable candidate reach a worker logging JSON at INFO.

    The patient is assessed RED and the invalid resource is dead-lettered, the good candidate decided and
    the bad one dead-lettered. The worker's log is JSON lines carrying the dead letters' coordinates and
    never the clinical text; ``/metrics`` counts the RED assessment with its rule, both dead letters and
    the decision, and reports the memory population and the consumer lag.
    """
    bundle = json.loads((CLINICAL / f"{PATIENT}.json").read_text(encoding="utf-8"))
    invalid = copy.deepcopy(next(e["resource"] for e in bundle["entry"]
                                 if e["resource"]["resourceType"] == "Observation"))  # fmt: skip
    invalid.update(id="obs-invalid", status=CLINICAL_TEXT, note=[{"text": CLINICAL_TEXT}])
    bundle["entry"].append({"resource": invalid})
    ts = datetime(2026, 3, 29, tzinfo=UTC)
    update = FhirUpdate(ts=ts, patient_id=PATIENT, resource_type="Bundle", resource=json.dumps(bundle))
    candidate = Candidate(ts=ts, task="ner", patient_id=PATIENT, candidate_id="c-1",
                          payload=NerPayload(entity=CLINICAL_TEXT, category="Symptoms"))  # fmt: skip
    serde = make_serde(None)
    outputs = [CLINICAL_ASSESSMENTS, dlq_name(FHIR_UPDATES), DBPM_DECISIONS, dlq_name(DBPM_CANDIDATES)]
    tail = _tail(kafka_bootstrap, outputs)
    producer = Producer(producer_config(kafka_bootstrap))
    try:
        key = PATIENT.encode()
        producer.produce(FHIR_UPDATES, key=key, value=serde.encode(update, topic=FHIR_UPDATES))
        producer.produce(DBPM_CANDIDATES, key=key, value=serde.encode(candidate, topic=DBPM_CANDIDATES))
        producer.produce(DBPM_CANDIDATES, key=key, value=b"not avro: " + CLINICAL_TEXT.encode())
        producer.flush(30)
        _read(tail, dict.fromkeys(outputs, 1))
    finally:
        tail.close()
    expected = [
        'clingate_clinical_assessments_total{light="RED"} 1.0',
        'clingate_clinical_red_sources_total{source="Rule C"} 1.0',
        'clingate_clinical_dead_letters_total{topic="clingate.fhir.updates"} 1.0',
        'clingate_dbpm_dead_letters_total{topic="clingate.dbpm.candidates"} 1.0',
        'clingate_dbpm_decisions_total{decision="ALLOW",task="ner"} 1.0',
        'clingate_dbpm_memory_patterns{table="B",task="ner"} 0.0',
        "# TYPE clingate_consumer_lag gauge",
    ]
    # A dead letter is counted once the worker has its acknowledgement, which may come just after a
    # reader saw the record: scrape until the counts are there.
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}/metrics", timeout=10) as response:
            scraped = response.read().decode()
        missing = [line for line in expected if line not in scraped]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    worker.stop()
    log = worker.log.read_text(encoding="utf-8")

    assert not missing, missing

    assert CLINICAL_TEXT not in log
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert lines and {"ts", "level", "logger", "message"} <= set(lines[0])
    letters = [line for line in lines if line["message"].startswith("dead-lettering")]
    assert {(x["topic"], x["error_type"]) for x in letters} >= {("clingate.fhir.updates", "FhirInvalid")}
    assert {x["topic"] for x in letters} == {"clingate.fhir.updates", "clingate.dbpm.candidates"}
    # One line per batch, not per assessment: the batch's assessments counted by light.
    assert any(x["message"].endswith("assessments (RED 1)") and "partition" in x for x in lines)


def test_the_docs_worker_counts_dispositions_dead_letters_and_its_lag(kafka_bootstrap: str) -> None:
    """Scenario: two classification requests and an undecodable record reach a rules-only docs worker.

    Its registry counts two RULES_ONLY dispositions and one dead letter, no document is left in flight,
    and librdkafka's statistics give the lag of every assigned input partition.
    """
    from tests.integration.test_docs_worker import SERDE, _publish, _request, _running_worker

    requests = [_request("classification_doc2_6_clean", "bundle_doc2_6", f"obs-{uuid.uuid4().hex[:8]}")
                for _ in range(2)]  # fmt: skip
    with _running_worker(kafka_bootstrap) as (worker, _servers):
        registry = worker.metrics.registry

        def decided() -> float:
            return sum(
                s.value
                for family in registry.collect() if family.name == "clingate_docs_dispositions"
                for s in family.samples if s.name.endswith("_total") and s.labels["llm_mode"] == "RULES_ONLY"
            )  # fmt: skip

        def counted() -> bool:
            topic = {"topic": DOCS_CLASSIFICATIONS}
            letters = registry.get_sample_value("clingate_docs_dead_letters_total", topic)
            lag = registry.get_sample_value("clingate_consumer_lag", {**topic, "partition": "0"})
            return decided() == 2 and letters == 1 and lag == 0

        _publish(kafka_bootstrap, DOCS_CLASSIFICATIONS,
                 *((r.doc_id, SERDE.encode(r, topic=DOCS_CLASSIFICATIONS)) for r in requests),
                 ("bad", b"not avro"))  # fmt: skip
        deadline = time.monotonic() + 60
        while not counted():
            assert time.monotonic() < deadline, "the docs worker did not count its records"
            time.sleep(0.2)
        assert registry.get_sample_value("clingate_docs_in_flight") == 0
