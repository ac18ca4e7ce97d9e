"""The verdict ledger: a verdict that names its candidate is applied at most once, and only if the
gate decided that candidate.

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

Known candidates. A verdict teaches the memory a pattern that gates every later candidate of its
signature, so one that names a candidate no gate decided (a verifier of another deployment, a
stale replay, a corrupted id) must not be learnt silently. The gate sends, for every candidate it
decides, a dispatch record to each memory partition a verdict of that candidate can update
(:func:`dispatch`); the memory's writer checks a live verdict's candidate against them
(:func:`dispatched`) and dead-letters one it does not know (:mod:`streams.worker.memory`). The
in-process engine applies replay-contract streams as given and never asks.

Scope. The ledger lives in the state the verdict is applied to: in a partitioned runtime the
partition of the verdict's ``task|signature``, so the dedupe record is written in the same
transaction (one changelog group) as the update it guards. A re-issued call that judged
differently such that its verdict updates another signature (a failing QA verdict with an error
class updates the class pattern, a passing one the question's) lands on another partition and is
not recognised there; with greedy decoding a re-issued call normally repeats its answer.

Bounded by time. Each record remembers the event time of its verdict (or, for a dispatch, the
time the caller gives: the Kafka runtime's is when the gate sent it). Expiry runs on a grid
(:data:`EXPIRY_STEP_S`, one hour): the first record whose ``t - horizon`` passes a grid boundary
deletes the records of its kind older than that boundary, so a record lives between the horizon and
the horizon plus one step (default horizon 30 days, the verdict topic's retention: a copy older than
that is no longer in the log to be re-delivered; a verdict that comes more than that after its
candidate was sent is unknown). A duplicate arriving later than that after its original is applied
again. A verdict's time is when it was judged (the verifier's clock), so a re-issued verdict is later
than its original; it is recognised as long as the original's record lives, whatever its own time.

Cost: two point lookups per verdict that names a candidate (its record, the expiry boundary), one
more for its dispatch, two per dispatch, and one walk of an expiry index per step of event time that
deletes what expired (each record once). Why a grid and not a walk per verdict: a range read in the
Kafka runtime merges the batch's staged writes, so a walk per verdict would cost O(batch) each.

Key layout (first byte as in :mod:`processors.dbpm.memory`):

==================================  =========================================================
``V`` candidate id                  a verdict of this candidate was applied: its event time
``E`` order8(time) candidate id     expiry index of ``V`` (empty value)
``Mledger``                         the last expiry boundary of ``V`` applied (grid index)
``K`` candidate id                  the gate decided this candidate: its event time
``G`` order8(time) candidate id     expiry index of ``K`` (empty value)
``Mdispatch``                       the last expiry boundary of ``K`` applied (grid index)
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
_ORDER_SIZE = 8


class _ExpiringIds:
    """Candidate ids, each with an event time, forgotten on the expiry grid (module docstring).

    Args:
        member: key prefix of an id's record (value: its event time).
        expiry: key prefix of the expiry index (``expiry`` order8(time) id, empty value).
        meta: key of the last grid boundary applied.
    """

    def __init__(self, member: bytes, expiry: bytes, meta: bytes) -> None:
        self.member = member
        self.expiry = expiry
        self.meta = meta

    def expire_due(self, kv: KeyValue, now: float, horizon_s: float) -> None:
        """Delete the ids older than the last grid boundary at or before ``now - horizon_s``, when
        that boundary is new."""
        boundary = math.floor((now - horizon_s) / EXPIRY_STEP_S)
        last = kv.get(self.meta)
        if last is None or boundary > _TICK.unpack(last)[0]:
            self.expire_before(kv, boundary * EXPIRY_STEP_S)
            kv.set(self.meta, _TICK.pack(boundary))

    def add(self, kv: KeyValue, candidate_id: str, now: float) -> bool:
        """Record ``candidate_id`` at ``now``; False (nothing written) if it is recorded already."""
        key = self.member + candidate_id.encode()
        if kv.exists(key):
            return False
        kv.set(key, _TIME.pack(now))
        kv.set(self.expiry + order8(now) + candidate_id.encode(), b"")
        return True

    def contains(self, kv: KeyValue, candidate_id: str) -> bool:
        """``candidate_id`` is recorded."""
        return kv.exists(self.member + candidate_id.encode())

    def expire_before(self, kv: KeyValue, cutoff: float) -> None:
        """Delete the ids recorded with a time before ``cutoff``."""
        for key, _ in list(kv.iter_range(self.expiry, self.expiry + order8(cutoff))):
            kv.delete(key)
            kv.delete(self.member + key[len(self.expiry) + _ORDER_SIZE :])


_APPLIED = _ExpiringIds(b"V", b"E", b"Mledger")
_DISPATCHED = _ExpiringIds(b"K", b"G", b"Mdispatch")


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
    _APPLIED.expire_due(kv, now, horizon_s)
    return _APPLIED.add(kv, candidate_id, now)


def dispatch(kv: KeyValue, candidate_id: str, now: float, horizon_s: float) -> None:
    """Record that the gate decided ``candidate_id`` (event time ``now``): a verdict may name it.

    Idempotent (a candidate decided again after a gate restart keeps its first record); dispatches
    that expired by the last grid boundary at or before ``now - horizon_s`` are deleted first.
    """
    _DISPATCHED.expire_due(kv, now, horizon_s)
    _DISPATCHED.add(kv, candidate_id, now)


def dispatched(kv: KeyValue, candidate_id: str) -> bool:
    """The gate decided ``candidate_id`` within the horizon (:func:`dispatch` recorded it here)."""
    return _DISPATCHED.contains(kv, candidate_id)


def dispatch_key(key: bytes) -> bool:
    """``key`` is one of the dispatch registry's records (a member, its expiry index, the boundary):
    state only the memory's writer reads, which a replica that only decides may leave out."""
    return key.startswith((_DISPATCHED.member, _DISPATCHED.expiry)) or key == _DISPATCHED.meta


def seen_key(candidate_id: str) -> bytes:
    """The key of the record that says a verdict of ``candidate_id`` was applied."""
    return _APPLIED.member + candidate_id.encode()


def judged_candidate(key: bytes) -> str | None:
    """The candidate id of a ``V`` record's key (a verdict of it was applied), None for any other key."""
    if not key.startswith(_APPLIED.member):
        return None
    try:
        return key[len(_APPLIED.member) :].decode()
    except UnicodeDecodeError:
        return None
