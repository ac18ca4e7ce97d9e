"""The runtime configured with a real schema registry (``CLINGATE_SCHEMA_REGISTRY_URL``).

The registry is Apicurio Registry's Confluent-compatible API (:mod:`streams.testing.registry`): records
are written and read in the Confluent wire format with ids the server assigned, by a client producing
FHIR updates and reviews, by the worker's clinical loop, and by a downstream reader.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from schemas.clinical import ClinicalAssessment
from schemas.wire import make_serde
from streams.replay.kafka import commit_worker_end_offsets, wait_until_consumed
from streams.runtime.kafka_clients import producer_config
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.testing.tail import Tail
from streams.testing.worker import COMPARISON_ENV, WorkerProcess
from streams.worker.clinical import clinical_group
from tests.clinical_scenario import PATIENT, concur_review, expected_assessments, scenario
from topics.admin import ensure_topics
from topics.catalog import CLINICAL_ASSESSMENTS, CLINICAL_REVIEWS, FHIR_UPDATES, build_catalog

pytestmark = pytest.mark.integration


def test_a_worker_with_a_registry_assesses_what_a_registry_client_published(
    kafka_bootstrap: str, schema_registry: str, tmp_path: Path
) -> None:
    """Scenario: PT-TEST-010's FHIR updates and review, encoded against the registry; a worker whose only
    schema setting is the registry's URL. Its assessments, decoded with the registry's schemas, are the
    pure processor's; every record it wrote names a schema id the registry knows."""
    serde = make_serde(schema_registry)
    updates, _, _ = scenario()
    review = concur_review()
    expected = expected_assessments(updates, review)
    app_id = f"clingate-registry-{uuid.uuid4().hex[:8]}"
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(get_settings().topic_partitions))
    # Every loop of the worker starts at the end of its inputs: the session broker holds other tests'
    # records, in the single-object encoding, which a worker configured with a registry dead-letters.
    commit_worker_end_offsets(kafka_bootstrap, app_id)
    env = {**COMPARISON_ENV, "CLINGATE_SCHEMA_REGISTRY_URL": schema_registry}
    worker = WorkerProcess(kafka_bootstrap, app_id, tmp_path / app_id, env, role="memory")
    assessments = Tail(kafka_bootstrap, CLINICAL_ASSESSMENTS)
    producer = Producer(producer_config(kafka_bootstrap))
    try:
        worker.start()
        for update in updates:
            producer.produce(
                FHIR_UPDATES, key=PATIENT.encode(), value=serde.encode(update, topic=FHIR_UPDATES)
            )
        producer.flush(30)
        wait_until_consumed(kafka_bootstrap, clinical_group(app_id), FHIR_UPDATES, timeout_s=120)
        producer.produce(
            CLINICAL_REVIEWS, key=PATIENT.encode(), value=serde.encode(review, topic=CLINICAL_REVIEWS)
        )
        producer.flush(30)
        assessments.until(len(expected), timeout_s=120)
    finally:
        assessments.close()
        worker.stop()

    values = [m.value() for m in assessments.records]
    got = [
        serde.decode(v, ClinicalAssessment, topic=CLINICAL_ASSESSMENTS).model_dump(mode="json")
        for v in values
    ]
    assert got == expected
    client = SchemaRegistryClient.new_client({"url": schema_registry})
    registered = client.get_latest_version(f"{CLINICAL_ASSESSMENTS}-value").schema_id
    assert {(v[0], int.from_bytes(v[1:5], "big")) for v in values} == {(0, registered)}
