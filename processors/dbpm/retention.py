"""Retention: the memory's records that the paper never removes are bounded by inactivity.

Why. The paper prunes and caps only the blocklist (§4.6). Its whitelist has no decay ("direct
confirmation ... persists"), nor have the NER-to-RE preemption set and the per-patient counters of
Eq. 8 and Eq. 9, so in a deployment that runs for years each grows with every signature, entity and
patient ever seen: at the paper's held-out scale the NER whitelist already held 96,708 signatures
against 2,991 blocklist patterns (§6).
clingate keeps the paper's semantics while a record is in use and removes what stopped being used:

* a whitelist entry not confirmed again for ``whitelist_retention_s`` (365 days) is deleted; the
  signature is then unknown, and its next success whitelists it again at the initial confidence
  (0.90), which is what a signature first seen gets. A year without one confirmation means the
  generator stopped producing it; keeping it would only hold storage.
* an entity not preempted again for ``preempt_retention_s`` (365 days) leaves the preemption set;
* a patient's counters and accepted NER categories (``D``, ``C``) in a memory partition are deleted
  ``patient_retention_s`` (90 days) after a verdict last wrote them there. A patient returning after
  that starts from no history, as a new patient does: Eq. 8 and Eq. 9 are statements about the
  patient's current documents.

How. Each such record has a retention index entry ordered by its last-seen event time (``X``, moved
by the writes of :class:`~processors.dbpm.memory.Memory` when the time changes, so the index holds one
entry per record). Expiry is part of maintenance, at the maintenance boundaries that cross a step of
:data:`RETENTION_STEP_S` (one hour) of event time: at step boundary ``s`` every record last seen
before ``s - retention`` is deleted, walking the index from its start. The walk costs the records
removed plus the deletion markers an ordered store such as RocksDB keeps for moved entries until it
compacts them, once an hour rather than at every five-second boundary. Like pruning, expiry depends only
on the event stream (a boundary always runs before the first event at or after it), runs per memory
partition on that partition's records (a patient's share in one partition may expire while another
partition's is in use), and is off when maintenance is off (the comparison configuration).
Populations and expiry counts are the memory's incremental ``N`` counters, exported as metrics by the
runtime.
"""

from __future__ import annotations

import math

from processors.dbpm.memory import KIND_PATIENT, KIND_PREEMPTED, KIND_WHITE, Memory

#: Spacing of the retention grid in seconds of event time.
RETENTION_STEP_S = 3600.0


def expire(mem: Memory, boundary: float, previous: float | None) -> int:
    """Delete every whitelist entry, preempted entity and patient past its retention, when the
    maintenance boundary ``boundary`` is the first at or after a retention step.

    Args:
        mem: the memory.
        boundary: the maintenance boundary (event time) being applied.
        previous: the maintenance boundary applied before it (None: none).

    Returns:
        The number of records deleted (a patient counts once).
    """
    step = math.floor(boundary / RETENTION_STEP_S)
    if previous is not None and step <= math.floor(previous / RETENTION_STEP_S):
        return 0
    cfg = mem.config
    at = step * RETENTION_STEP_S
    removed = 0
    for kind, retention_s in (
        (KIND_WHITE, cfg.whitelist_retention_s),
        (KIND_PREEMPTED, cfg.preempt_retention_s),
        (KIND_PATIENT, cfg.patient_retention_s),
    ):
        for name in mem.last_seen_before(kind, at - retention_s):
            mem.expire(kind, name)
            removed += 1
    return removed
