"""Where the agent's patient tools read patients: the clinical worker's table, or FHIR bundles.

* :class:`ChangelogPatients`: the clinical worker's patient table as its changelog holds it
  (``<app id>-clinical-patients-changelog`` of ``CLINGATE_APP_ID``; a table value is the patient's
  :class:`~processors.clinical.assess.ClinicalStreamState`). It follows the changelog with a
  ``read_committed`` consumer of its own (every partition assigned, from the start) and catches up to the
  end before each tool call that reads it, so the agent sees every patient the worker had committed when
  the call was made (a transaction still open is waited for at most :data:`REFRESH_S`). Keys outside
  the patient-id space (the worker's offset markers and retention index, prefixed ``\xfe\xfe``) are
  skipped; a tombstone removes the patient.
* :class:`BundlePatients`: FHIR R4 documents (a Bundle or one resource per file), parsed and applied by
  the clinical gates' own functions, for ``clingate agent ask --patient-bundle``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

from processors.clinical.assess import ClinicalStreamState
from processors.clinical.fhir_input import parse_document
from processors.clinical.records import PatientState
from processors.clinical.state import PatientUpdate, reduce_update
from streams.runtime.kafka_clients import partitions, reader

RESERVED_PREFIX = b"\xfe\xfe"
"""Table keys of the worker's own bookkeeping, outside the UTF-8 patient-id space."""

ASSIGN_WAIT_S = 2.0
"""How long a catch-up waits for the changelog topic to exist (a deployment starts the agent and the
workers together; until the workers create it, there is no patient)."""

REFRESH_S = 5.0
"""Longest one catch-up waits (a ``read_committed`` reader stops at an open transaction until it ends)."""


class BundlePatients:
    """Patients from FHIR documents, applied at ``as_of`` (module docstring)."""

    def __init__(self, documents: Sequence[Any], as_of: datetime) -> None:
        states: dict[str, PatientState] = {}
        for document in documents:
            for patient, changes in sorted(parse_document(document).changes.items()):
                update = PatientUpdate(patient_id=patient, changes=tuple(changes))
                states[patient], _ = reduce_update(states.get(patient), update, as_of)
        self._states = states

    @classmethod
    def from_files(cls, paths: Sequence[Path], as_of: datetime) -> BundlePatients:
        """The patients of the JSON files at ``paths``.

        Raises:
            OSError: a file cannot be read.
            ValueError: a file is not JSON.
        """
        return cls([json.loads(p.read_text(encoding="utf-8")) for p in paths], as_of)

    def refresh(self) -> None:
        """Nothing to catch up with: the documents were applied at construction."""

    def states(self) -> Iterable[PatientState]:
        return list(self._states.values())

    def state(self, patient_id: str) -> PatientState | None:
        return self._states.get(patient_id)


class ChangelogPatients:
    """The clinical worker's patient table, followed from its changelog (module docstring)."""

    POLL_S = 0.2

    def __init__(self, bootstrap: str, changelog: str) -> None:
        # A short fetch wait: a caught-up partition ends with a commit marker, which the position passes
        # only with the next fetch.
        self._consumer = reader(
            bootstrap, "agent-patients", **{"isolation.level": "read_committed", "fetch.wait.max.ms": 20}
        )
        self._topic = changelog
        self._assigned: list[TopicPartition] = []
        self._states: dict[str, PatientState] = {}
        self._caught_up: dict[int, int] = {}
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Consume the changelog up to its current end (blocking; call it off the event loop); nothing to
        do when no partition's end moved since the last catch-up."""
        with self._lock:
            if not self._assigned and not self._assign():
                return
            marks = {
                tp.partition: self._consumer.get_watermark_offsets(tp, timeout=10) for tp in self._assigned
            }
            # A partition with no record left (compaction deleted its tombstones) has nothing to wait for.
            ends = {p: end for p, (first, end) in marks.items() if end > first}
            if ends == self._caught_up:
                return
            deadline = time.monotonic() + REFRESH_S
            while any(self._position(p) < end for p, end in ends.items()) and time.monotonic() < deadline:
                for message in self._consumer.consume(500, self.POLL_S):
                    if message.error() is None:
                        self._apply(message.key(), message.value())
            if all(self._position(p) >= end for p, end in ends.items()):
                self._caught_up = ends

    def _assign(self) -> bool:
        """Assign every partition of the changelog from its start; False while the workers have not
        created it yet (no patient to read: the agent answers that none is known)."""
        try:
            numbers = partitions(self._consumer, self._topic, timeout_s=ASSIGN_WAIT_S)
        except KafkaException:
            return False
        self._assigned = [TopicPartition(self._topic, p, OFFSET_BEGINNING) for p in numbers]
        self._consumer.assign(self._assigned)
        return True

    def _position(self, partition: int) -> int:
        [position] = self._consumer.position([TopicPartition(self._topic, partition)])
        return max(position.offset, 0)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None or key.startswith(RESERVED_PREFIX):
            return
        patient = key.decode("utf-8", "replace")
        if value is None:
            self._states.pop(patient, None)
            return
        self._states[patient] = ClinicalStreamState.model_validate_json(value).patient

    def states(self) -> Iterable[PatientState]:
        with self._lock:
            return list(self._states.values())

    def state(self, patient_id: str) -> PatientState | None:
        with self._lock:
            return self._states.get(patient_id)

    def close(self) -> None:
        self._consumer.close()
