"""Reading a memory that is split over partitions by signature, as if it were one.

The Kafka runtime gives every signature one writer: verdicts are keyed by task and
signature, and the memory writer of a partition runs :class:`~processors.dbpm.engine.DBPMEngine`
unchanged over that partition's own records. Most records then live in exactly one partition (a
pattern, a whitelist entry, a preempted entity, an eviction-index entry, a patient's accepted
category). The aggregates the engine keeps incrementally do not: each partition counts only the
verdicts it applied, so the same key exists in several partitions with partial values.

:func:`merge_values` is the rule that turns the partial values of one key into the value a single
memory would hold, so that gates reading all partitions (the replicated view) decide exactly as the
in-process engine does:

* ``D`` patient counters, ``Q`` QA category counts, ``N`` populations and expiry counts: unsigned
  64-bit little-endian counters, summed element-wise (a patient's ``D`` share leaves a partition
  whole, with its ``T`` record, when it expires there: :mod:`.retention`);
* ``Mclock`` (latest event time, last maintenance boundary): the latest time and the earliest
  boundary, the one every partition has passed;
* ``L`` eviction-index low-water marks (a bound below every live index key): the lowest;
* ``T`` a patient's last write in a partition: per partition, the first value (the gate never reads
  it; retention reads its own partition's);
* every other record: one writer, one value. Cross-task propagation keeps it so: the engine returns
  it as events (:meth:`~processors.dbpm.engine.DBPMEngine.learn`) that the runtime delivers to the
  partition of the *target* signature. Runtime bookkeeping outside the engine's key space (keys
  starting ``\xfe``) may exist per partition; the engine never reads it through a view, and the
  first partition's value is taken.

Maintenance (pruning, caps) runs per partition on the partition's own patterns, so a task's cap
applies per partition. Comparisons with the in-process engine run with maintenance off.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

from processors.dbpm.memory import _CLOCK, _META_CLOCK

_U64 = struct.Struct("<Q")
_COUNTERS = (b"D", b"Q", b"N")
_LOW_WATER = b"L"


def _sum_counters(values: Sequence[bytes]) -> bytes:
    width = len(values[0]) // _U64.size
    totals = [0] * width
    for raw in values:
        for i, (count,) in enumerate(_U64.iter_unpack(raw)):
            totals[i] += count
    return b"".join(_U64.pack(t) for t in totals)


def _merge_clocks(values: Sequence[bytes]) -> bytes:
    clocks = [_CLOCK.unpack(v) for v in values]
    times = [t for t, _ in clocks if not math.isnan(t)]
    return _CLOCK.pack(max(times) if times else math.nan, min(tick for _, tick in clocks))


def merge_values(key: bytes, values: Sequence[bytes]) -> bytes:
    """The value of ``key`` in the whole memory, from its values in the partitions that hold it.

    Args:
        key: a memory record key (layout of :mod:`processors.dbpm.memory`).
        values: the key's value in each partition that holds it, in partition order (non-empty).
    """
    if len(values) == 1:
        return values[0]
    if key.startswith(_COUNTERS):
        return _sum_counters(values)
    if key == _META_CLOCK:
        return _merge_clocks(values)
    if key.startswith(_LOW_WATER):
        return min(values)
    return values[0]
