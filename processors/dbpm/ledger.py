"""The verdict ledger: a verdict that names its candidate is applied at most once.

Why in the engine. The verifier and generator groups are at-least-once: after a crash
they re-issue their in-flight calls, so the verdict topic may hold the same candidate's verdict
twice, at different offsets. Applied twice, Algorithm 1 doubles the count and raises the severity
again. Deduplicating in the engine, not in the Kafka adapter, keeps "same input, same decision"
across runtimes: replaying the recorded verdict topic in process gives the memory the workers hold.

Identity. A verdict's identity is its ``candidate_id`` (the verifier copies the candidate's; the
generator derives it deterministically from the narrative, task and payload, so a re-published
candidate has the same id). Verdicts without one (replay-contract streams may omit it, the shared
replay example does) are applied as before and leave no trace here. The first verdict of a
candidate wins; a later one with the same id, whatever its label, is ignored.

Scope. The ledger lives in the state the verdict is applied to: in a partitioned runtime the
partition of the verdict's ``task|signature``, so the dedupe record is written in the same
transaction (one changelog group) as the update it guards. A re-issued call that judged
differently such that its verdict updates another signature (a failing QA verdict with an error
class updates the class pattern, a passing one the question's) lands on another partition and is
not recognised there; with greedy decoding a re-issued call normally repeats its answer.

Bounded by event time. Each record remembers the event time of its verdict. Expiry runs on a
grid of event time (:data:`EXPIRY_STEP_S`, one hour): the first verdict whose ``t -
verdict_dedupe_horizon_s`` passes a grid boundary deletes the records older than that boundary, so
a record lives between the horizon and the horizon plus one step (default horizon 30 days, the
verdict topic's retention: a copy older than that is no longer in the log to be re-delivered). A
duplicate arriving later than that after its original is applied again. A verdict's time is when it
was judged (the verifier's clock), so a re-issued verdict is later than its original; it is recognised
as long as the original's record lives, whatever its own time.

Cost: two point lookups per verdict that names a candidate (its record, the expiry boundary), and
one walk of the expiry index per step of event time that deletes what expired (each record once).
Why a grid and not a walk per verdict: a range read in the Kafka runtime merges the batch's staged
writes, so a walk per verdict would cost O(batch) each.

Key layout (first byte as in :mod:`processors.dbpm.memory`):

==================================  =========================================================
``V`` candidate id                  a verdict of this candidate was applied: its event time
``E`` order8(time) candidate id     expiry index of ``V`` (empty value)
``Mledger``                         the last expiry boundary applied (grid index)
==================================  =========================================================
"""

from __future__ import annotations

import math
import struct

from processors.dbpm.memory import KeyValue, order8

#: Spacing of the expiry grid in seconds of event time.
EXPIRY_STEP_S = 3600.0

_TIME = struct.Struct("<d")
_TICK = struct.Struct("<q")
_META = b"Mledger"
_ORDER_SIZE = 8
_SEEN = b"V"
_EXPIRY = b"E"


def admit(kv: KeyValue, candidate_id: str, now: float, horizon_s: float) -> bool:
    """Record the verdict of ``candidate_id`` at event time ``now`` unless one was recorded before.

    Records that expired by the last grid boundary at or before ``now - horizon_s`` are deleted
    first, when that boundary is new.

    Args:
        kv: the state the verdict is applied to (an open transaction).
        candidate_id: the verdict's candidate.
        now: the verdict's event time.
        horizon_s: how long, in event time, a record is kept.

    Returns:
        True if the verdict is new and MUST be applied; False if it is a duplicate (nothing written
        but expiry).
    """
    boundary = math.floor((now - horizon_s) / EXPIRY_STEP_S)
    last = kv.get(_META)
    if last is None or boundary > _TICK.unpack(last)[0]:
        expire_before(kv, boundary * EXPIRY_STEP_S)
        kv.set(_META, _TICK.pack(boundary))
    seen = seen_key(candidate_id)
    if kv.exists(seen):
        return False
    kv.set(seen, _TIME.pack(now))
    kv.set(_EXPIRY + order8(now) + candidate_id.encode(), b"")
    return True


def seen_key(candidate_id: str) -> bytes:
    """The key of the record that says a verdict of ``candidate_id`` was applied."""
    return _SEEN + candidate_id.encode()


def judged_candidate(key: bytes) -> str | None:
    """The candidate id of a ``V`` record's key (a verdict of it was applied), None for any other key."""
    if not key.startswith(_SEEN):
        return None
    try:
        return key[len(_SEEN) :].decode()
    except UnicodeDecodeError:
        return None


def expire_before(kv: KeyValue, cutoff: float) -> int:
    """Delete the records of verdicts with event time before ``cutoff``; returns how many."""
    removed = 0
    for key, _ in list(kv.iter_range(_EXPIRY, _EXPIRY + order8(cutoff))):
        kv.delete(key)
        kv.delete(_SEEN + key[1 + _ORDER_SIZE :])
        removed += 1
    return removed
