"""The clinical agent run by a real ``clingate worker`` against the session broker.

The worker is the same subprocess the DBPM tests start (:class:`~streams.bench.chaos.WorkerProcess`),
with a fresh app id whose group starts at the current end of the clinical input topics.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from schemas.clinical import ClinicalAssessment
from schemas.serde import make_serde
from streams.bench.chaos import REPO, WorkerProcess
from streams.replay.kafka import commit_end_offsets
from streams.runtime.dlq import header_map
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.tail import Tail
from streams.worker.clinical import INPUTS
from tests.clinical_scenario import (
    AS_OF,
    PATIENT,
    at,
    concur_review,
    expected_assessments,
    fhir_bundle,
    scenario,
)
from topics.admin import ensure_topics
from topics.catalog import CLINICAL_ASSESSMENTS, CLINICAL_REVIEWS, FHIR_UPDATES, build_catalog, dlq_name

pytestmark = pytest.mark.integration


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    """One ready worker of a fresh app whose group starts at the end of the clinical input topics."""
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    app_id = f"clingate-test-{uuid.uuid4().hex[:8]}"
    commit_end_offsets(kafka_bootstrap, app_id, list(INPUTS))
    started = WorkerProcess(kafka_bootstrap, app_id, tmp_path / app_id, {})
    started.start()
    yield started
    started.stop()


def test_patient_stream_emits_only_changes_and_ends_red_like_the_cli(
    kafka_bootstrap: str, worker: WorkerProcess, tmp_path: Path
) -> None:
    """Scenario: PT-TEST-010 arrives as FHIR updates over nine simulated days, then a CONCUR review.

    An out-of-order older version of the digoxin level is ignored (no assessment), the deleted
    amiodarone statement leaves the patient's state, and the Observation with an invalid status lands
    on the DLQ with its validation error while the stream goes on. The assessments topic carries
    exactly the changes the pure processor emits for the same events, the last one RED via Rule C
    despite the reviewer's CONCUR, and it equals ``clingate clinical assess`` on the final data.
    """
    updates, final, invalid_id = scenario()
    review = concur_review()
    expected = expected_assessments(updates, review)
    serde = make_serde(None)
    assessments = Tail(kafka_bootstrap, CLINICAL_ASSESSMENTS)
    dead = Tail(kafka_bootstrap, dlq_name(FHIR_UPDATES))
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random", "acks": "all"}
    )
    try:
        for update in updates:
            producer.produce(
                FHIR_UPDATES, key=PATIENT.encode(), value=serde.encode(update, topic=FHIR_UPDATES)
            )
        producer.flush(30)
        # Reviews are another topic: wait for the updates' assessments so the review comes after them.
        assessments.until(len(expected) - 1)
        producer.produce(
            CLINICAL_REVIEWS, key=PATIENT.encode(), value=serde.encode(review, topic=CLINICAL_REVIEWS)
        )
        producer.flush(30)
        got = [
            serde.decode(m.value(), ClinicalAssessment, topic=CLINICAL_ASSESSMENTS).model_dump(mode="json")
            for m in assessments.until(len(expected))
        ]
        [letter] = dead.until(1)
        time.sleep(2.0)  # nothing more may arrive: only changes are emitted
        assessments.until(len(expected))
        assert len(assessments.records) == len(expected)
    finally:
        assessments.close()
        dead.close()

    assert [m.key() for m in assessments.records] == [PATIENT.encode()] * len(expected)
    assert got == expected
    assert at(24).strftime("%Y-%m-%dT%H:%M:%SZ") in [a["as_of"] for a in got]
    assert len(got) == len(updates) - 1  # 10 updates - the late version - the invalid one + the review
    assert len(
        {json.dumps({k: v for k, v in a.items() if k != "as_of"}, sort_keys=True) for a in got}
    ) == len(got)
    final_light = got[-1]["traffic_light"]
    assert final_light["light"] == "RED"
    assert "Rule C: NTI CRITICAL" in final_light["sources"]
    assert final_light["sources"][0] == "Base: CAA CONCUR -> GREEN"
    assert got[-1]["nti"]["supratherapeutic"][0]["value"] == 2.1  # the late version 1 was ignored
    assert not any("amiodarone" in m for m in got[-1]["medications"])

    headers = header_map(letter.headers() or [])
    assert letter.key() == PATIENT.encode()
    assert headers["exception"] == "FhirInvalid" and invalid_id in headers["message"]

    bundle = tmp_path / "final.json"
    bundle.write_text(json.dumps(fhir_bundle(*final.values())), encoding="utf-8")
    cli = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "streams.cli", "clinical", "assess", "--in", str(bundle),
         "--as-of", AS_OF, "--disposition", "CONCUR", "--automation-bias", "LOW"],
        cwd=REPO, capture_output=True, check=True,
    )  # fmt: skip
    assert json.loads(cli.stdout) == got[-1]
