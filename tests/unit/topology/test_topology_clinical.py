"""The clinical agent through the topology driver: its outputs are the pure stream processor's.

The driver runs the deployed per-record code (:class:`~streams.worker.clinical.ClinicalHandler`) on the
three co-partitioned input topics, with the patient table written as changelog groups and read back
the way a recovered worker reads it. Records are processed in production order, so the assessments
and audits topics carry exactly what :func:`processors.clinical.assess.process_event` emits for the
same events, patient by patient.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from schemas.clinical import ClinicalAssessment, Deliverable, SafetyAudit
from schemas.fhir import FhirUpdate
from streams.cli.clinical import app as clinical_cli
from streams.demo.plan import clinical_inputs
from streams.runtime.settings import Settings
from streams.testing.clinical_reference import ClinicalEvent, pure_outputs
from streams.testing.driver import TopologyDriver
from tests.clinical_scenario import (
    AS_OF,
    PATIENT,
    at,
    concur_review,
    expected_assessments,
    fhir_bundle,
    scenario,
)
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_REVIEWS,
    CLINICAL_SAFETY_AUDITS,
    FHIR_UPDATES,
)
from topics.partitioner import partition_for

TOPIC = {FhirUpdate: FHIR_UPDATES, Deliverable: CLINICAL_DELIVERABLES}


def _pipe(driver: TopologyDriver, events: list[ClinicalEvent]) -> None:
    """Each event to its topic, keyed by its patient, in order."""
    for event in events:
        driver.pipe(TOPIC.get(type(event), CLINICAL_REVIEWS), event.patient_id.encode(), event)


def test_a_patients_fhir_updates_and_review_give_the_pure_processors_assessments_and_the_clis(
    tmp_path: Path,
) -> None:
    """Scenario: PT-TEST-010 over nine simulated days (a late older version of a result, a delete, an
    invalid resource), then a CONCUR review.

    The assessments topic carries exactly the pure processor's emissions (only changes: the late
    version emits nothing), keyed by the patient; the last one is RED by Rule C despite the CONCUR and
    equals ``clingate clinical assess`` on the final resources; the invalid resource is one
    ``FhirInvalid`` dead letter naming it, while the update's valid resources are applied.
    """
    updates, final, invalid_id = scenario()
    review = concur_review()
    with TopologyDriver(Settings()) as driver:
        _pipe(driver, [*updates, review])
        records = driver.records(CLINICAL_ASSESSMENTS)
        got = [a.model_dump(mode="json") for a in driver.values(CLINICAL_ASSESSMENTS, ClinicalAssessment)]
        [dead] = driver.dead_letters(FHIR_UPDATES)

    assert got == expected_assessments(updates, review)
    assert len(got) == len(updates) - 1
    assert {r.key for r in records} == {PATIENT.encode()}
    assert at(24).strftime("%Y-%m-%dT%H:%M:%SZ") in [a["as_of"] for a in got]
    assert got[-1]["traffic_light"]["light"] == "RED"
    assert "Rule C: NTI CRITICAL" in got[-1]["traffic_light"]["sources"]
    assert got[-1]["nti"]["supratherapeutic"][0]["value"] == 2.1
    assert dead.headers["exception"] == "FhirInvalid" and invalid_id in dead.headers["message"]
    assert dead.record.key == PATIENT.encode()

    bundle = tmp_path / "final.json"
    bundle.write_text(json.dumps(fhir_bundle(*final.values())), encoding="utf-8")
    args = [
        "assess",
        "--in",
        str(bundle),
        "--as-of",
        AS_OF,
        "--disposition",
        "CONCUR",
        "--automation-bias",
        "LOW",
    ]
    cli = CliRunner().invoke(clinical_cli, args)
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.stdout) == got[-1]


def _deliverables(patients: list[str], when: datetime) -> list[Deliverable]:
    return [
        Deliverable(patient_id=pid, deliverable_id=f"{pid}-plan", event_time=when,
                    text="Care plan: digoxin level reviewed, potassium monitored, no DDI with amiodarone.")
        for pid in patients
    ]  # fmt: skip


def test_the_demos_patients_give_the_pure_processors_assessments_and_audits() -> None:
    """Scenario: the demo's clinical stream: 40 generated patients' FHIR timeline over six simulated
    weeks, the four golden bundles, their reviews, then a deliverable per golden patient.

    Every assessment and every safety audit the agent publishes, in order, is the pure processor's,
    each keyed by its patient on the patient's partition; nothing is dead-lettered; each patient's
    state is on its own partition of the patient table.
    """
    fhir, golden = clinical_inputs(40)
    when = datetime(2026, 3, 29, tzinfo=UTC)
    events: list[ClinicalEvent] = [*fhir, *(u for u, _ in golden), *(r for _, r in golden)]
    events += _deliverables([u.patient_id for u, _ in golden], when)
    settings = Settings()
    with TopologyDriver(settings) as driver:
        _pipe(driver, events)
        assessments = driver.values(CLINICAL_ASSESSMENTS, ClinicalAssessment)
        audits = driver.values(CLINICAL_SAFETY_AUDITS, SafetyAudit)
        outputs = driver.records(CLINICAL_ASSESSMENTS, CLINICAL_SAFETY_AUDITS)
        dead = [d for topic in TOPIC.values() for d in driver.dead_letters(topic)]
        held = {
            pid: driver.patients.get(partition_for(pid.encode(), settings.topic_partitions), pid.encode())
            for pid in {e.patient_id for e in events}
        }

    expected = pure_outputs(events, settings)
    assert assessments == [o for o in expected if isinstance(o, ClinicalAssessment)]
    assert audits == [o for o in expected if isinstance(o, SafetyAudit)] and len(audits) == len(golden)
    assert all(r.partition == partition_for(r.key or b"", settings.topic_partitions) for r in outputs)
    assert dead == []
    assert all(state is not None for state in held.values())


def test_redelivered_clinical_records_publish_nothing_and_change_no_patient() -> None:
    """Scenario: after PT-TEST-010's stream, every third record is delivered again at its offset (a
    crash before the commit): each is at or below its topic's offset marker, so nothing is published
    and the patient table's state is unchanged (no new changelog group either)."""
    updates, _, _ = scenario()
    with TopologyDriver(Settings()) as driver:
        _pipe(driver, [*updates, concur_review()])
        published = len(driver.records(CLINICAL_ASSESSMENTS, CLINICAL_SAFETY_AUDITS))
        changelog = len(driver.patients.changelog.log)
        for record in driver.records(FHIR_UPDATES, CLINICAL_REVIEWS)[::3]:
            driver.redeliver(record)
        assert len(driver.records(CLINICAL_ASSESSMENTS, CLINICAL_SAFETY_AUDITS)) == published
        assert len(driver.patients.changelog.log) == changelog


def _patient(pid: str, when: datetime) -> FhirUpdate:
    resource = {"resourceType": "Patient", "id": pid, "birthDate": "1950-01-01"}
    return FhirUpdate(ts=when, patient_id=pid, resource_type="Patient", resource=json.dumps(resource))


def test_a_patient_silent_for_the_retention_period_is_deleted_and_returns_as_a_new_patient() -> None:
    """Scenario: retention 30 days. PT-TEST-010's March timeline; a second patient of its partition seen
    on day 15 after it; a third one on day 40, whose record crosses the retention of the first.

    At day 40 PT-TEST-010 (last seen 30+ days before) is deleted: a tombstone on the changelog, one
    expiry counted; the patient of day 15 stays. PT-TEST-010's next update is assessed exactly as the
    pure processor assesses a new patient with only that update.
    """
    updates, _, _ = scenario()
    settings = Settings(CLINGATE_CLINICAL_PATIENT_RETENTION_DAYS=30)
    partitions = settings.topic_partitions
    partition = partition_for(PATIENT.encode(), partitions)
    kept, third = (
        next(f"PT-RET-{n}" for n in range(start, 10_000) if partition_for(f"PT-RET-{n}".encode(), partitions)
             == partition)
        for start in (0, 5_000)
    )  # fmt: skip
    last = max(u.ts for u in updates)
    back = _patient(PATIENT, last + timedelta(days=41))
    with TopologyDriver(settings) as driver:
        _pipe(driver, [*updates, _patient(kept, last + timedelta(days=15))])
        assert driver.patients.get(partition, PATIENT.encode()) is not None
        _pipe(driver, [_patient(third, last + timedelta(days=40))])
        gone = driver.patients.get(partition, PATIENT.encode())
        held = driver.patients.get(partition, kept.encode())
        tombstones = [r for r in driver.patients.changelog.log if r.value is None]
        expired = driver.clinical_metrics.expired._value.get()
        count = driver.clinical_metrics.patients.labels(str(partition))._value.get()
        before = len(driver.values(CLINICAL_ASSESSMENTS, ClinicalAssessment))
        _pipe(driver, [back])
        returned = driver.values(CLINICAL_ASSESSMENTS, ClinicalAssessment)[before:]

    assert gone is None and held is not None
    assert PATIENT.encode() in {r.key for r in tombstones}
    assert (expired, count) == (1, 2)
    assert [a.model_dump(mode="json") for a in returned] == [
        a.model_dump(mode="json") for a in pure_outputs([back], settings) if isinstance(a, ClinicalAssessment)
    ]
