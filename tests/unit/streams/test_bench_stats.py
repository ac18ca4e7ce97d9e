"""The one percentile of the benchmarks and the demo: nearest rank, always one of the values; and a
process's resident set as the benchmarks read it."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.testing.stats import percentile, resident_bytes


def test_nearest_rank_of_a_known_sample():
    values = [float(v) for v in range(100, 0, -1)]  # 100 .. 1, unsorted on purpose
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([3.0, 1.0, 4.0, 2.0], 0.5) == 2.0
    assert percentile([7.0], 0.99) == 7.0


def test_an_empty_sample_gives_the_given_default():
    assert percentile([], 0.5) == 0.0
    assert math.isnan(percentile([], 0.99, empty=math.nan))


@given(st.lists(st.integers(min_value=-1000, max_value=1000), min_size=1), st.floats(0.01, 1.0))
def test_the_result_is_a_value_with_at_least_a_fraction_q_of_the_sample_at_or_below_it(values, q):
    found = percentile(values, q)
    assert found in values
    at_or_below = sum(1 for v in values if v <= found)
    below = sum(1 for v in values if v < found)
    assert at_or_below >= q * len(values) - 1e-9
    assert below < math.ceil(q * len(values))  # and the smallest such value


def test_a_resident_set_is_read_by_pid_and_a_missing_process_raises():
    held = b"\x01" * (64 << 20)  # every page written: resident
    assert resident_bytes(os.getpid()) > len(held)
    assert resident_bytes("self") > len(held)
    with pytest.raises(OSError):
        resident_bytes(2**31 - 1)
