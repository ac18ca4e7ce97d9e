"""The clinical patient table's retention: the state of a patient not seen for a while is deleted.

A patient's state is deleted once no record of the patient (update, review, deliverable) arrived for
``CLINGATE_CLINICAL_PATIENT_RETENTION_DAYS`` (365) days of event time; the changelog then holds its
tombstone, and compaction removes the key. Deleting ``Patient/<id>`` only empties the resources (the
reducer), so without this every patient ever seen would cost a record for good. A returning patient
is assessed as a new one, on what is published from then on. Expiry runs before the first record at
or after each hour of event time a partition reaches, on that partition, walking an index ordered by
last-seen time, so it costs the patients removed and depends on the stream alone (not on batching or
the wall clock).
"""

from __future__ import annotations

import math
import struct

from streams.worker.metrics import ClinicalMetrics
from streams.worker.tablestore import StagedPartition

#: Table key prefix of a patient's last-seen event time (value: 8-byte big-endian milliseconds).
LAST_SEEN_PREFIX = b"\xfe\xfelast-seen|"
#: Table key prefix of the retention index: ``prefix + last-seen ms (8 bytes, big-endian) + patient id``.
SEEN_INDEX_PREFIX = b"\xfe\xfeseen|"
#: Table key of the partition's retention clock: the latest event time it applied (8-byte ms).
CLOCK_KEY = b"\xfe\xfeclock"
#: Table key of the number of patients the partition holds (decimal).
PATIENTS_KEY = b"\xfe\xfepatients"
#: Spacing of the retention sweeps, in milliseconds of event time.
RETENTION_STEP_MS = 3_600_000
_MS = struct.Struct(">Q")


class PatientRetention:
    """Deletes the state of patients with no record for ``retention_ms`` of event time (module docstring).

    Kept in the patient table itself, so it is restored and replicated with the states: per patient its
    last-seen time and an index entry ordered by it; per partition its clock and its patient count.
    """

    def __init__(self, retention_ms: int, metrics: ClinicalMetrics) -> None:
        self._retention_ms = retention_ms
        self._metrics = metrics

    def advance(self, table: StagedPartition, now_ms: int) -> list[bytes]:
        """Move the partition's clock to ``now_ms``; at a new hour of event time, expire every patient last
        seen before that hour minus the retention. Returns the keys of the patients deleted."""
        raw = table.get(CLOCK_KEY)
        clock = None if raw is None else _MS.unpack(raw)[0]
        if clock is not None and now_ms <= clock:
            return []
        table.put(CLOCK_KEY, _MS.pack(now_ms))
        step = math.floor(now_ms / RETENTION_STEP_MS)
        if clock is not None and step <= math.floor(clock / RETENTION_STEP_MS):
            return []
        cutoff = step * RETENTION_STEP_MS - self._retention_ms
        if cutoff <= 0:
            return []
        expired = table.keys(SEEN_INDEX_PREFIX, SEEN_INDEX_PREFIX + _MS.pack(cutoff))
        patients = [entry[len(SEEN_INDEX_PREFIX) + _MS.size :] for entry in expired]
        for entry, patient in zip(expired, patients, strict=True):
            for key in (entry, LAST_SEEN_PREFIX + patient, patient):
                table.put(key, None)
        if expired:
            self._count(table, -len(expired))
            self._metrics.expired.inc(len(expired))
        return patients

    def seen(self, table: StagedPartition, patient: bytes, now_ms: int, new: bool) -> None:
        """Record that ``patient`` (whose state the table holds; ``new``: from this record on) was seen at
        ``now_ms`` (a record older than the last one leaves the time as it was)."""
        last = table.get(LAST_SEEN_PREFIX + patient)
        if last is not None:
            previous = _MS.unpack(last)[0]
            if now_ms <= previous:
                return
            table.put(SEEN_INDEX_PREFIX + last + patient, None)
        table.put(LAST_SEEN_PREFIX + patient, _MS.pack(now_ms))
        table.put(SEEN_INDEX_PREFIX + _MS.pack(now_ms) + patient, b"")
        if new:
            self._count(table, 1)

    def _count(self, table: StagedPartition, delta: int) -> None:
        count = int(table.get(PATIENTS_KEY) or b"0") + delta
        table.put(PATIENTS_KEY, str(count).encode())
        self._metrics.patients.labels(str(table.partition)).set(count)
