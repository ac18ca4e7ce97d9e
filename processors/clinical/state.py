"""The patient-state reducer: latest version of each resource, out-of-order safe, deletes honoured.

``reduce_update(state, update, now) -> (new_state, outcomes)`` is what the patient-keyed stream calls for
every FHIR change; it is pure (the state is immutable and replaced, never mutated).

Version order (decided here, where the issue says "by id and meta.versionId / lastUpdated"):

1. both versions carry an integer ``versionId`` -> compare them;
2. otherwise both carry ``lastUpdated`` -> compare the instants;
3. otherwise the log order decides (the later arrival wins): with no version information there is no
   better witness of order than the partition log.

An incoming version that is not newer than the stored one (or than the tombstone of a deletion) is
ignored, so a late, older version never overwrites a newer one and never resurrects a deleted
resource; an equal version is a duplicate (replay) and is ignored too. A delete without a version stamp
is stamped with ``now`` (the event time) so that only versions updated after the deletion can
re-create the resource. Deleting ``Patient/<id>`` drops the patient's whole state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from processors.clinical.records import FhirChange, PatientState, ResourceDelete, ResourceUpsert, VersionStamp
from processors.clinical.sanitise import parse_instant

Action = Literal["applied", "ignored_older", "ignored_duplicate", "deleted", "patient_deleted"]


class ChangeOutcome(BaseModel):
    """What the reducer did with one change (for metrics and the audit trail)."""

    model_config = ConfigDict(frozen=True)

    key: str
    action: Action


def _order(new: VersionStamp, old: VersionStamp) -> int | None:
    """-1 / 0 / 1 when ``new`` is older / same / newer than ``old``; None when they are incomparable."""
    if new.version_id and old.version_id and new.version_id.isdigit() and old.version_id.isdigit():
        a, b = int(new.version_id), int(old.version_id)
        return (a > b) - (a < b)
    if new.last_updated and old.last_updated:
        x, y = parse_instant(new.last_updated), parse_instant(old.last_updated)
        return (x > y) - (x < y)
    return None


class PatientUpdate(BaseModel):
    """The changes carried by one ``clingate.fhir.updates`` event, parsed and validated at the edge."""

    model_config = ConfigDict(frozen=True)

    patient_id: str
    changes: tuple[FhirChange, ...]


def reduce_update(
    state: PatientState | None, update: PatientUpdate, now: datetime
) -> tuple[PatientState, list[ChangeOutcome]]:
    """Apply every change of one update to a patient's state, in order.

    Args:
        state: the current state, ``None`` for a patient never seen.
        update: the validated changes of one event.
        now: event time of the update (stamps deletes that carry no version).

    Returns:
        The new state (the same object when nothing changed) and one outcome per change.
    """
    current = state or PatientState(patient_id=update.patient_id)
    outcomes: list[ChangeOutcome] = []
    for change in update.changes:
        current, outcome = _apply(current, change, now)
        outcomes.append(outcome)
    return current, outcomes


def _apply(current: PatientState, change: FhirChange, now: datetime) -> tuple[PatientState, ChangeOutcome]:
    patient_id = current.patient_id
    if isinstance(change, ResourceUpsert):
        record = change.record
        key = f"{record.resource_type}/{record.id}"
        existing = current.resources.get(key)
        witness = existing.stamp if existing is not None else current.tombstones.get(key)
        if witness is not None:
            order = _order(record.stamp, witness)
            if order is not None and order < 0:
                return current, ChangeOutcome(key=key, action="ignored_older")
            if order == 0 or (existing is not None and existing == record):
                return current, ChangeOutcome(key=key, action="ignored_duplicate")
        resources = {**current.resources, key: record}
        tombstones = {k: v for k, v in current.tombstones.items() if k != key}
        return current.model_copy(update={"resources": resources, "tombstones": tombstones}), ChangeOutcome(
            key=key, action="applied"
        )
    assert isinstance(change, ResourceDelete)
    key = f"{change.resource_type}/{change.id}"
    if change.resource_type == "Patient" and change.id == patient_id:
        return PatientState(patient_id=patient_id), ChangeOutcome(key=key, action="patient_deleted")
    stamp = change.stamp
    if not (stamp.version_id or stamp.last_updated):
        stamp = VersionStamp(last_updated=now.isoformat())
    existing = current.resources.get(key)
    if existing is not None:
        order = _order(stamp, existing.stamp)
        if order is not None and order < 0:
            return current, ChangeOutcome(key=key, action="ignored_older")
    resources = {k: v for k, v in current.resources.items() if k != key}
    tombstones = {**current.tombstones, key: stamp}
    return current.model_copy(update={"resources": resources, "tombstones": tombstones}), ChangeOutcome(
        key=key, action="deleted"
    )
