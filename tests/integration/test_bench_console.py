"""``clingate bench console``'s short version on the session broker: each read finds the same records
both ways (the bench raises otherwise), what it looked for is found, and its topics are deleted. Its
times are printed by the command, never asserted."""

from __future__ import annotations

import pytest

from streams.bench.console import bench_console
from streams.runtime.kafka_config import admin_client

pytestmark = pytest.mark.integration


def test_the_console_bench_compares_each_read_both_ways_and_leaves_no_topic(kafka_bootstrap: str) -> None:
    compared = bench_console(kafka_bootstrap, decision_count=300, signatures=30, packet_count=6, repeat=1)
    assert [(c.name, c.found) for c in compared] == [
        ("decision of one candidate", 1), ("decisions of one signature", 10), ("review queue catch-up", 6),
        ("page read of a followed topic", 300),
    ]  # fmt: skip
    assert all(min(c.seconds) > 0 for c in compared)
    topics = admin_client(kafka_bootstrap).list_topics(timeout=30).topics
    assert not [t for t in topics if t.startswith("clingate-bench-")]
