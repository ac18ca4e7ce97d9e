"""The clinical agent run by a real ``clingate worker`` against the session broker.

The worker is the same subprocess the DBPM tests start (:class:`~streams.bench.chaos.WorkerProcess`),
with a fresh app id whose group starts at the current end of the clinical input topics.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from processors.clinical.assess import process_event
from processors.clinical.knowledge import default_knowledge
from schemas.clinical import AdversarialReview, ClinicalAssessment
from schemas.fhir import FhirUpdate
from schemas.serde import make_serde
from streams.bench.chaos import REPO, WorkerProcess
from streams.demo.data import CLINICAL
from streams.replay.kafka import commit_end_offsets
from streams.runtime.dlq import header_map
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.tail import Tail
from streams.worker.clinical import INPUTS, fhir_input, gate_flags
from topics.admin import ensure_topics
from topics.catalog import CLINICAL_ASSESSMENTS, CLINICAL_REVIEWS, FHIR_UPDATES, build_catalog, dlq_name

pytestmark = pytest.mark.integration

PATIENT = "PT-TEST-010"
BUNDLE = CLINICAL / f"{PATIENT}.json"
AS_OF = "2026-03-29T00:00:00Z"


def _at(day: int, hour: int = 8) -> datetime:
    return datetime(2026, 3, day, hour, tzinfo=UTC)


def _resources() -> dict[str, dict[str, Any]]:
    bundle = json.loads(BUNDLE.read_text(encoding="utf-8"))
    return {f"{e['resource']['resourceType']}/{e['resource']['id']}": e["resource"] for e in bundle["entry"]}


def _bundle(*resources: dict[str, Any], deletes: tuple[str, ...] = ()) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [{"resource": r} for r in resources]
    entries += [{"request": {"method": "DELETE", "url": url}} for url in deletes]
    return {
        "resourceType": "Bundle",
        "type": "collection" if not deletes else "transaction",
        "entry": entries,
    }


def _scenario() -> tuple[list[FhirUpdate], dict[str, dict[str, Any]], str]:
    """The FHIR updates of the simulated days, the final resource set, and the invalid resource's id.

    Day 20: the patient, the medications and an amiodarone statement deleted later (as one bundle).
    Day 22-24: one laboratory result a day, then the heart rate and the conditions. The digoxin level
    arrives as version 2 (2.1 ng/mL); its older version 1 (0.8 ng/mL) arrives late, at the event time
    of the update before it, and must change nothing (no assessment). Day 26: the amiodarone
    statement is deleted; an Observation with a status outside its required value set goes to the
    DLQ. Day 27: the encounter (symptom text).
    """
    res = _resources()
    amiodarone = copy.deepcopy(res["MedicationStatement/pt-test-010-med-05"])
    amiodarone.update(
        id="pt-test-010-med-99", medicationCodeableConcept={"text": "amiodarone 200 mg po daily"}
    )
    digoxin_v2 = copy.deepcopy(res["Observation/pt010-obs-dig"])
    digoxin_v2["meta"] = {"versionId": "2"}
    digoxin_v1 = copy.deepcopy(res["Observation/pt010-obs-dig"])
    digoxin_v1["valueQuantity"] = {**digoxin_v1["valueQuantity"], "value": 0.8}
    invalid = copy.deepcopy(res["Observation/pt010-obs-hr"])
    invalid.update(id="pt010-obs-invalid", status="not-a-status")
    meds = [r for k, r in res.items() if k.startswith("MedicationStatement/")]
    docs: list[tuple[datetime, dict[str, Any]]] = [
        (_at(20), _bundle(res[f"Patient/{PATIENT}"], *meds, amiodarone)),
        (_at(22), digoxin_v2),
        (_at(22, 9), res["Observation/pt010-obs-k"]),
        (_at(23), res["Observation/pt010-obs-mg"]),
        (_at(23, 9), _bundle(res["Observation/pt010-obs-cr"], res["Observation/pt010-obs-egfr"])),
        (_at(24), _bundle(res["Observation/pt010-obs-hr"], res["Condition/pt010-cond-01"],
                          res["Condition/pt010-cond-02"])),
        (_at(24), digoxin_v1),  # same instant as the day-24 update: nothing changes
        (_at(26), _bundle(deletes=("MedicationStatement/pt-test-010-med-99",))),
        (_at(26, 9), invalid),
        (_at(27), res["Encounter/pt010-enc-01"]),
    ]  # fmt: skip
    updates = [
        FhirUpdate(ts=ts, patient_id=PATIENT, resource_type=doc["resourceType"], resource=json.dumps(doc))
        for ts, doc in docs
    ]
    final = dict(res)
    final["Observation/pt010-obs-dig"] = digoxin_v2
    return updates, final, invalid["id"]


def _review() -> AdversarialReview:
    return AdversarialReview(
        patient_id=PATIENT,
        review_id="review-1",
        event_time=AS_OF,
        disposition="CONCUR",
        automation_bias_risk="LOW",
    )


def _expected(updates: list[FhirUpdate], review: AdversarialReview) -> list[dict[str, Any]]:
    """The assessments the pure stream processor emits for the same events in the same order."""
    knowledge, flags = default_knowledge(), gate_flags(Settings())
    events: list[tuple[Any, datetime]] = [(c, u.ts) for u in updates if (c := fhir_input(u)[0]) is not None]
    state, emitted = None, []
    for event, now in [*events, (review, review.event_time)]:
        state, outputs = process_event(state, event, now, knowledge, flags)
        emitted += [o.model_dump(mode="json") for o in outputs if isinstance(o, ClinicalAssessment)]
    return emitted


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
    updates, final, invalid_id = _scenario()
    review = _review()
    expected = _expected(updates, review)
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
    assert _at(24).strftime("%Y-%m-%dT%H:%M:%SZ") in [a["as_of"] for a in got]
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
    bundle.write_text(json.dumps(_bundle(*final.values())), encoding="utf-8")
    cli = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "streams.cli", "clinical", "assess", "--in", str(bundle),
         "--as-of", AS_OF, "--disposition", "CONCUR", "--automation-bias", "LOW"],
        cwd=REPO, capture_output=True, check=True,
    )  # fmt: skip
    assert json.loads(cli.stdout) == got[-1]
