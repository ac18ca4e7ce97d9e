"""The partitioner computes what Java's clients (and librdkafka's ``murmur2_random``) compute."""

from __future__ import annotations

import pytest

from topics.partitioner import murmur2, partition_for

JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}
"""``org.apache.kafka.common.utils.Utils.murmur2`` of each key (Kafka's ``UtilsTest.testMurmur2``)."""


@pytest.mark.parametrize("key", JAVA_MURMUR2)
def test_murmur2_is_javas(key: bytes) -> None:
    assert murmur2(key) == JAVA_MURMUR2[key] & 0xFFFFFFFF


@pytest.mark.parametrize("key", JAVA_MURMUR2)
@pytest.mark.parametrize("partitions", [1, 6, 7, 12])
def test_a_key_lands_on_the_partition_javas_default_partitioner_gives_it(key: bytes, partitions: int) -> None:
    """``Utils.toPositive(Utils.murmur2(key)) % partitions``, from the Java client's own hash values."""
    assert partition_for(key, partitions) == (JAVA_MURMUR2[key] & 0x7FFFFFFF) % partitions
