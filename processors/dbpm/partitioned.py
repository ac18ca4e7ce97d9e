"""Reading a memory that is split over partitions by signature, as if it were one.

The Kafka runtime (issue 4) gives every signature one writer: verdicts are keyed by task and
signature, and the memory agent of a partition runs :class:`~processors.dbpm.engine.DBPMEngine`
unchanged over that partition's own records. Most records then live in exactly one partition (a
pattern, a whitelist entry, a preempted entity, an eviction-index entry, a patient's accepted
category). The aggregates the engine keeps incrementally do not: each partition counts only the
verdicts it applied, so the same key exists in several partitions with partial values.

:func:`merge_values` is the rule that turns the partial values of one key into the value a single
memory would hold, so that gates reading all partitions (the replicated view) decide exactly as the
in-process engine does:

* ``D`` patient counters, ``Q`` QA category counts, ``N`` populations: unsigned 64-bit little-endian
  counters, summed element-wise (the engine only ever adds to them);
* ``Mas_of`` (last event time): the latest; ``Mtick`` (maintenance boundary): the earliest, the one
  every partition has passed;
* every other record: one writer, one value; several values for such a key mean two writers, which
  only cross-task propagation applied inline can cause (its difference from the in-process engine is
  measured, not hidden): the first partition's value is taken.

Maintenance (pruning, caps) runs per partition on the partition's own patterns, so a task's cap
applies per partition. Comparisons with the in-process engine run with maintenance off.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

_U64 = struct.Struct("<Q")
_TIME = struct.Struct("<d")
_TICK = struct.Struct("<q")
_COUNTERS = (b"D", b"Q", b"N")
_AS_OF = b"Mas_of"
_TICK_KEY = b"Mtick"


def _sum_counters(values: Sequence[bytes]) -> bytes:
    width = len(values[0]) // _U64.size
    totals = [0] * width
    for raw in values:
        for i, (count,) in enumerate(_U64.iter_unpack(raw)):
            totals[i] += count
    return b"".join(_U64.pack(t) for t in totals)


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
    if key == _AS_OF:
        return _TIME.pack(max(_TIME.unpack(v)[0] for v in values))
    if key == _TICK_KEY:
        return _TICK.pack(min(_TICK.unpack(v)[0] for v in values))
    return values[0]
