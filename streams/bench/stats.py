"""Summary statistics shared by the benchmarks and the demo's figures."""

from __future__ import annotations

import math
from collections.abc import Iterable


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
