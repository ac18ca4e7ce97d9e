"""Summary statistics shared by the benchmarks and the demo's figures; a process's resident memory, and
sizes in MiB as the benchmarks print them."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path


def percentile(values: Iterable[float], q: float, empty: float = 0.0) -> float:
    """The nearest-rank ``q`` quantile of ``values``, ``0 < q <= 1``, in any order.

    It is the smallest value with at least a fraction ``q`` of the values at or below it, so always one
    of the values (never an interpolation): p50 of four values is the second, p99 of a hundred the 99th.

    Args:
        values: the sample (sorted here; an already sorted one costs a linear pass).
        q: the quantile, e.g. 0.5 or 0.99.
        empty: the result for an empty sample.
    """
    ordered = sorted(values)
    if not ordered:
        return empty
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def mib(size: float) -> str:
    """``size`` bytes in MiB, one decimal (``12.3 MiB``)."""
    return f"{size / 2**20:,.1f} MiB"


def resident_bytes(pid: int | str) -> int:
    """The resident set of process ``pid`` (``self``: this one) now: ``VmRSS`` of Linux's
    ``/proc/<pid>/status``.

    Raises:
        OSError: no such process, or no ``/proc``.
    """
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # in kB
    raise OSError(f"/proc/{pid}/status has no VmRSS (a kernel thread, or a process that exited)")
