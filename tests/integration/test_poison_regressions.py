"""Two poison records that once lost good records, sent to a real ``clingate worker`` and docs worker.

* A verdict whose ``clingate-watermark`` header is not a time, in a burst of good verdicts: the memory
  agent raised out of its batch, Faust restarted it and acknowledged the batch unapplied (of 40 good
  verdicts, 15 were learnt). Now the record is a dead letter (``BadWatermark``) and the memory equals
  the in-process engine's on the 40 good verdicts.
* A 2 MB value on a topic that admits 8 MiB: the dead-letter producers kept the client's ~1 MB limit.
  The clinical agent crashed and lost its batch, the gate retried the dead letter forever and decided
  nothing, the docs worker exited on every restart. Now the whole record is on the DLQ and every good
  record around it has its output.

Each case checks the worker is still running and no agent was restarted (``/metrics``).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from processors.clinical.assess import process_event
from processors.clinical.knowledge import default_knowledge
from processors.dbpm import parse_event
from schemas.clinical import ClinicalAssessment
from schemas.common import DeadLetter
from schemas.dbpm import Candidate, GateDecision, Verdict
from schemas.docs import Disposition
from schemas.fhir import FhirUpdate
from schemas.wire import make_serde
from streams.bench.clinical import MEDICATIONS
from streams.replay.kafka import CommitWatcher, commit_worker_end_offsets, read_state
from streams.runtime.dlq import header_map
from streams.runtime.kafka_clients import producer_config
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.metrics import scraped_sum
from streams.testing.tail import Tail
from streams.testing.worker import COMPARISON_ENV, WorkerProcess, comparison_engine, in_process, soak_stream
from streams.worker.clinical import clinical_group, fhir_input
from streams.worker.keys import TICK_HEADER, memory_changelog, verdict_key
from streams.worker.memory import memory_group
from tests.integration.test_docs_worker import _request, _running_worker
from topics.admin import ensure_topics
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    FHIR_UPDATES,
    build_catalog,
    dlq_name,
)

pytestmark = pytest.mark.integration

SERDE = make_serde(None)
TWO_MB = 2 * 1024 * 1024
GOOD = 40


@pytest.fixture(scope="module")
def worker(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One ready ``clingate worker`` (memory, gate, clinical) of a fresh app starting at the inputs' ends."""
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    app_id = f"clingate-poison-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(kafka_bootstrap, app_id)
    started = WorkerProcess(
        kafka_bootstrap, app_id, tmp_path_factory.mktemp("poison") / app_id, COMPARISON_ENV
    )
    started.start()
    yield started
    started.stop()


def _assert_alive(worker: WorkerProcess) -> None:
    assert worker.running, f"the worker exited: see {worker.log}"


def _dead_letter(message: Message) -> tuple[DeadLetter, dict[str, str]]:
    return SERDE.decode(message.value(), DeadLetter, topic=message.topic()), header_map(
        message.headers() or []
    )


def _produce(bootstrap: str, records: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]]) -> None:
    producer = Producer(producer_config(bootstrap, **{"message.max.bytes": 16 * 1024 * 1024}))
    for topic, key, value, headers in records:
        producer.produce(topic, key=key, value=value, headers=headers)
    assert producer.flush(60) == 0


def test_a_verdict_with_a_malformed_watermark_header_is_dead_lettered_and_its_burst_learnt(
    kafka_bootstrap: str, worker: WorkerProcess
) -> None:
    """40 good verdicts and, among them, one whose ``clingate-watermark`` header is garbage, in one burst:
    the 40 are learnt (memory = in-process engine on them), the bad one is one dead letter."""
    engine = comparison_engine()
    verdicts = [e for e in soak_stream(400, 400, uuid.uuid4().hex[:8]) if e["kind"] == "verdict"][: GOOD + 1]
    good, bad = verdicts[:GOOD], verdicts[GOOD]

    def record(obj: dict[str, Any], headers: list[tuple[str, bytes]]) -> tuple[str, bytes, bytes, list]:
        value = SERDE.encode(Verdict.model_validate({k: v for k, v in obj.items() if k != "kind"}),
                             topic=DBPM_VERDICTS)  # fmt: skip
        return DBPM_VERDICTS, verdict_key(engine, parse_event(obj)), value, headers  # type: ignore[arg-type]

    burst = [record(v, []) for v in good]
    burst.insert(GOOD // 3, record(bad, [(TICK_HEADER, b"\xffnot a time")]))
    dead = Tail(kafka_bootstrap, dlq_name(DBPM_VERDICTS))
    try:
        _produce(kafka_bootstrap, burst)
        with CommitWatcher(kafka_bootstrap, memory_group(worker.app_id)) as watcher:
            watcher.wait(DBPM_VERDICTS, 90)
        [letter] = dead.until(1)
        time.sleep(1.0)  # a second dead letter would be a re-delivery
        assert len(dead.until(1)) == 1
    finally:
        dead.close()

    dead_letter, headers = _dead_letter(letter)
    assert headers["exception"] == "BadWatermark" and TICK_HEADER in dead_letter.error
    assert dead_letter.value == burst[GOOD // 3][2]
    last = max(parse_event(v).time for v in good)
    _, expected = in_process(engine, good)
    assert read_state(kafka_bootstrap, memory_changelog(worker.app_id), engine, last) == expected
    assert scraped_sum(worker.web_port, "clingate_dbpm_verdicts_total") == GOOD
    _assert_alive(worker)


def _oversized(rng: random.Random) -> bytes:
    return rng.randbytes(TWO_MB)


def test_a_2mb_fhir_update_is_dead_lettered_whole_and_every_good_update_assessed(
    kafka_bootstrap: str, worker: WorkerProcess
) -> None:
    """40 good FHIR updates of 8 patients with a 2 MB undecodable value among them: the assessments are
    the pure processor's, the 2 MB record is on the DLQ byte for byte."""
    rng = random.Random(7)
    run = uuid.uuid4().hex[:8]
    now = datetime(2026, 4, 1, 8, tzinfo=UTC)
    updates: list[FhirUpdate] = []
    for index in range(8):
        pid = f"poison-{run}-{index}"
        resources: list[dict[str, Any]] = [{"resourceType": "Patient", "id": pid, "birthDate": "1941-03-12"}]
        resources += [
            {"resourceType": "MedicationStatement", "id": f"{pid}-m{j}", "status": "active",
             "subject": {"reference": f"Patient/{pid}"}, "medicationCodeableConcept": {"text": text}}
            for j, text in enumerate(rng.sample(MEDICATIONS, 4))
        ]  # fmt: skip
        updates += [
            FhirUpdate(ts=now, patient_id=pid, resource_type=r["resourceType"], resource=json.dumps(r))
            for r in resources
        ]
    assert len(updates) == GOOD
    knowledge, expected = default_knowledge(), 0
    states: dict[str, Any] = {}
    for update in updates:
        change, _ = fhir_input(update)
        assert change is not None
        states[update.patient_id], outputs = process_event(
            states.get(update.patient_id), change, now, knowledge
        )
        expected += sum(isinstance(o, ClinicalAssessment) for o in outputs)
    records = [
        (FHIR_UPDATES, u.patient_id.encode(), SERDE.encode(u, topic=FHIR_UPDATES), []) for u in updates
    ]
    poison = _oversized(rng)
    records.insert(GOOD // 2, (FHIR_UPDATES, updates[GOOD // 2].patient_id.encode(), poison, []))
    assessments, dead = (
        Tail(kafka_bootstrap, CLINICAL_ASSESSMENTS),
        Tail(kafka_bootstrap, dlq_name(FHIR_UPDATES)),
    )
    try:
        _produce(kafka_bootstrap, records)
        [letter] = dead.until(1)
        got = assessments.until(expected)
        with CommitWatcher(kafka_bootstrap, clinical_group(worker.app_id)) as watcher:
            watcher.wait(FHIR_UPDATES, 90)
        time.sleep(1.0)  # nothing more may arrive
        assert len(assessments.until(expected)) == expected and len(dead.until(1)) == 1
    finally:
        assessments.close()
        dead.close()
    assert {m.key().decode() for m in got} == {u.patient_id for u in updates}
    dead_letter, headers = _dead_letter(letter)
    assert dead_letter.value == poison and not dead_letter.truncations and headers["stage"] == "decode"
    _assert_alive(worker)


def test_a_2mb_candidate_is_dead_lettered_and_the_gate_decides_every_good_one(
    kafka_bootstrap: str, worker: WorkerProcess
) -> None:
    """40 good candidates with a 2 MB undecodable value among them: 40 decisions, one dead letter."""
    rng = random.Random(11)
    gates = [e for e in soak_stream(400, 400, uuid.uuid4().hex[:8]) if e["kind"] == "gate"][:GOOD]
    candidates = [Candidate.model_validate({k: v for k, v in g.items() if k != "kind"}) for g in gates]
    records = [(DBPM_CANDIDATES, c.patient_id.encode(), SERDE.encode(c, topic=DBPM_CANDIDATES), [])
               for c in candidates]  # fmt: skip
    poison = _oversized(rng)
    records.insert(GOOD // 2, (DBPM_CANDIDATES, candidates[0].patient_id.encode(), poison, []))
    decisions, dead = Tail(kafka_bootstrap, DBPM_DECISIONS), Tail(kafka_bootstrap, dlq_name(DBPM_CANDIDATES))
    try:
        _produce(kafka_bootstrap, records)
        [letter] = dead.until(1)
        wanted = {c.candidate_id for c in candidates}
        deadline = time.monotonic() + 90
        while wanted - (decided := _decided(decisions)):
            assert time.monotonic() < deadline, f"{len(wanted - decided)} of {GOOD} candidates undecided"
            decisions.until(len(decisions.records) + 1, timeout_s=deadline - time.monotonic())
    finally:
        decisions.close()
        dead.close()
    dead_letter, _ = _dead_letter(letter)
    assert dead_letter.value == poison
    _assert_alive(worker)


def _decided(tail: Tail) -> set[str]:
    return {SERDE.decode(m.value(), GateDecision, topic=DBPM_DECISIONS).candidate_id for m in tail.records}


def test_a_2mb_classification_is_dead_lettered_and_the_docs_worker_keeps_deciding(
    kafka_bootstrap: str,
) -> None:
    """Good classifications around a 2 MB undecodable one: each good document gets its disposition, the
    bad record is one dead letter, and the worker is still running after it."""
    run = uuid.uuid4().hex[:8]
    ids = [f"poison-{run}-{i}" for i in range(6)]
    requests = [_request("classification_doc2_6_clean", "bundle_doc2_6", doc_id) for doc_id in ids]
    records = [(DOCS_CLASSIFICATIONS, r.doc_id.encode(), SERDE.encode(r, topic=DOCS_CLASSIFICATIONS), [])
               for r in requests]  # fmt: skip
    poison = _oversized(random.Random(13))
    records.insert(3, (DOCS_CLASSIFICATIONS, f"poison-{run}-bad".encode(), poison, []))
    with _running_worker(kafka_bootstrap) as (docs_worker, _servers):
        dispositions = Tail(kafka_bootstrap, DOCS_DISPOSITIONS)
        dead = Tail(kafka_bootstrap, dlq_name(DOCS_CLASSIFICATIONS))
        try:
            _produce(kafka_bootstrap, records)
            [letter] = dead.until(1)
            ids = {r.doc_id for r in requests}
            deadline = time.monotonic() + 60
            while ids - {SERDE.decode(m.value(), Disposition, topic=DOCS_DISPOSITIONS).doc_id
                         for m in dispositions.records}:  # fmt: skip
                dispositions.until(len(dispositions.records) + 1, timeout_s=deadline - time.monotonic())
        finally:
            dispositions.close()
            dead.close()
        assert docs_worker.metrics.dead_letters.labels(DOCS_CLASSIFICATIONS)._value.get() == 1
    dead_letter, _ = _dead_letter(letter)
    assert dead_letter.value == poison
