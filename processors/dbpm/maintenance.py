"""Deterministic maintenance driven by event time (paper §4.6): pruning, caps, κ decay.

The paper prunes and caps "at each save", so its memory depends on how often it saves. Here
maintenance happens at the boundaries of a fixed grid of event time (``maintenance_interval_s``):
before applying the first event at or after a boundary, the engine runs maintenance *as of that
boundary*. Skipping several boundaries (a quiet period) gives the same result as running at each:
without new events severities only fall, so the latest boundary prunes a superset of what the earlier
ones would have, and the eviction order is time-invariant (see :mod:`processors.dbpm.memory`).
The memory is therefore a function of the event stream alone.

At a boundary b, for every task:

1. **Prune**: every pattern whose effective severity at b is below 0.01 is deleted.
2. **Cap**: while the task holds more than C_t patterns, the one with the lowest effective severity
   (ties: lowest signature) is evicted. Caps are policy, not a memory limit: ``cap=None`` disables.

Both happen in one walk up the eviction index from its low-water mark: entries are removed while
they are below the floor or the task is over its cap, stale index entries met on the way are
deleted, and the walk stops at the first entry kept above the floor, which becomes the new mark. The
cost is the number of entries removed, not the memory size; a task under its cap whose mark is above
the floor's key is not walked at all (no entry can be below it).

The cross-task hit counter κ decays by one per boundary crossed since it was last raised; that is
evaluated lazily on read (:meth:`Memory.kappa`), which is the same as decrementing every κ at every
boundary, without touching every pattern. Whitelist entries, the preemption set and per-patient
counters are not pruned: the paper gives them no decay (direct confirmation and categorical
preemption are meant to persist). They are bounded by inactivity instead, at the same boundaries
(:mod:`.retention`).
"""

from __future__ import annotations

import math

from processors.dbpm.memory import Memory, order_key
from processors.dbpm.retention import expire

# Tolerance on the index key when looking for prunable patterns: the key is exact to ~1e-12, the
# floor test itself is made on the exactly decayed severity.
_KEY_SLACK = 1e-9


def maintain(mem: Memory, now: float) -> int:
    """Run the maintenance due at event time ``now`` (at most once per boundary) and record it.

    Args:
        mem: the memory.
        now: an event time no earlier than the last event applied.

    Returns:
        The number of records removed (patterns pruned or evicted, records past their retention).
    """
    as_of, last = mem.clock()
    tick, removed = run_due(mem, now, last)
    if tick != last:
        mem.set_clock(as_of, tick)
    return removed


def advance_clock(mem: Memory, now: float) -> None:
    """The engine's per-event bookkeeping: due maintenance (when enabled), then ``as_of`` moves to ``now``.

    One read and at most one write of the clock record per event.
    """
    as_of, last = mem.clock()
    tick = run_due(mem, now, last)[0] if mem.config.flags.maintenance else last
    latest = now if as_of is None or now > as_of else as_of
    if latest != as_of or tick != last:
        mem.set_clock(latest, tick)


def run_due(mem: Memory, now: float, last: int | None) -> tuple[int, int]:
    """Run the boundary maintenance due at ``now`` given the last boundary applied, without recording it.

    Args:
        mem: the memory.
        now: the event time of the event about to be applied.
        last: index of the last boundary applied (None: never).

    Returns:
        The index of the latest boundary at or before ``now`` and the number of records removed
        (patterns pruned or evicted, records past their retention).
    """
    interval = mem.config.maintenance_interval_s
    tick = math.floor(now / interval)
    if last is not None and tick <= last:
        return last, 0
    boundary = tick * interval
    removed = sum(_maintain_task(mem, task, boundary) for task in mem.config.tasks)
    return tick, removed + expire(mem, boundary, None if last is None else last * interval)


def _maintain_task(mem: Memory, task: str, boundary: float) -> int:
    """Prune, cap and drop stale index entries of one task in a single walk up the eviction index."""
    floor = mem.config.prune_floor
    cap = mem.config.cap(task)
    excess = mem.population("B", task) - cap if cap is not None else 0
    # log2(eff(b)) = key - b / h: entries with key below log2(floor) + b / h are below the floor.
    limit = order_key(floor, boundary, mem.half_life_s(task), slack=_KEY_SLACK)
    low = mem.low_water(task)
    if excess <= 0 and low is not None and low >= limit:
        return 0  # every entry is at or above the mark, hence none below the limit: nothing to remove
    stale: list[bytes] = []
    doomed = []
    first_kept = last_removed = None
    for key, order, sig, pattern in mem.index_walk(task):
        below = order < limit
        if pattern is None:
            if below or len(doomed) < excess:
                stale.append(key)
                last_removed = order
                continue
        elif (below and mem.severity(task, pattern, boundary) < floor) or len(doomed) < excess:
            doomed.append((sig, pattern))
            last_removed = order
            continue
        if first_kept is None:
            first_kept = order  # every entry left is at or above the first one kept
        if not below:
            break
    for key in stale:
        mem.kv.delete(key)
    for sig, pattern in doomed:
        mem.delete_pattern(task, sig, pattern)
    low = first_kept if first_kept is not None else last_removed
    if low is not None:
        mem.set_low_water(task, low)
    return len(doomed)
