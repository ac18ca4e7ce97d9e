"""Deterministic maintenance driven by event time (paper §4.6): pruning, caps, κ decay.

The paper prunes and caps "at each save", so its memory depends on how often it saves. Here
maintenance happens at the boundaries of a fixed grid of event time (``maintenance_interval_s``):
before applying the first event at or after a boundary, the engine runs maintenance *as of that
boundary*. Skipping several boundaries (a quiet period) gives the same result as running at each:
without new events severities only fall, so the latest boundary prunes a superset of what the earlier
ones would have, and the eviction order is time-invariant (see :mod:`processors.dbpm.memory`).
The memory is therefore a function of the event stream alone.

At a boundary b, for every task:

1. **Prune**: every pattern whose effective severity at b is below 0.01 is deleted. The eviction
   index is walked from the lowest key up and the walk stops at the first pattern at or above the
   floor, so the cost is the number of pruned patterns, not the memory size.
2. **Cap**: while the task holds more than C_t patterns, the one with the lowest effective severity
   (ties: lowest signature) is evicted. Caps are policy, not a memory limit: ``cap=None`` disables.

The cross-task hit counter κ decays by one per boundary crossed since it was last raised; that is
evaluated lazily on read (:meth:`Memory.kappa`), which is the same as decrementing every κ at every
boundary, without touching every pattern. Whitelist entries, the preemption set and per-patient
counters are not pruned: the paper gives them no decay (direct confirmation and categorical
preemption are meant to persist); their size is bounded by the vocabulary and the patient count.
"""

from __future__ import annotations

import math

from processors.dbpm.memory import Memory

# Tolerance on the index key when looking for prunable patterns: the key is exact to ~1e-12, the
# floor test itself is made on the exactly decayed severity.
_KEY_SLACK = 1e-9


def maintain(mem: Memory, now: float) -> int:
    """Run the maintenance of every grid boundary passed since the last run (at most once).

    Args:
        mem: the memory.
        now: the event time of the event about to be applied.

    Returns:
        The number of patterns removed (pruned or evicted).
    """
    interval = mem.config.maintenance_interval_s
    tick = math.floor(now / interval)
    last = mem.tick()
    if last is not None and tick <= last:
        return 0
    mem.set_tick(tick)
    boundary = tick * interval
    return sum(_prune(mem, task, boundary) + _cap(mem, task) for task in mem.config.tasks)


def _prune(mem: Memory, task: str, boundary: float) -> int:
    floor = mem.config.prune_floor
    # log2(eff(b)) = key - b / h: patterns with key below log2(floor) + b / h are below the floor.
    limit = math.log2(floor) + boundary / mem.half_life_s(task) + _KEY_SLACK
    doomed = []
    for sig, pattern in mem.lowest(task):
        if math.log2(max(pattern.severity, 1e-300)) + pattern.ref_time / mem.half_life_s(task) >= limit:
            break
        if mem.severity(task, pattern, boundary) < floor:
            doomed.append((sig, pattern))
    for sig, pattern in doomed:
        mem.delete_pattern(task, sig, pattern)
    return len(doomed)


def _cap(mem: Memory, task: str) -> int:
    cap = mem.config.tasks[task].cap
    if cap is None:
        return 0
    excess = mem.population("B", task) - cap
    if excess <= 0:
        return 0
    doomed = []
    for item in mem.lowest(task):
        doomed.append(item)
        if len(doomed) == excess:
            break
    for sig, pattern in doomed:
        mem.delete_pattern(task, sig, pattern)
    return len(doomed)
