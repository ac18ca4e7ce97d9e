"""Which partition a keyed record goes to: Java's default partitioner, in Python.

Every clingate producer partitions with librdkafka's ``murmur2_random``
(``streams.runtime.kafka_clients.producer_config``), the partitioner of Java's clients:
``toPositive(murmur2(key)) % partitions``. Code that must know where a key lands without producing it
(the topology test driver, the restart benchmark seeding a memory) uses :func:`partition_for`, which
computes the same.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit MurmurHash2 of ``data`` with Kafka's seed, as an unsigned integer."""
    length = len(data)
    h = _SEED ^ length
    body = length - length % 4
    for i in range(0, body, 4):
        k = (int.from_bytes(data[i : i + 4], "little") * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = data[body:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def partition_for(key: bytes, partitions: int) -> int:
    """The partition of a record keyed ``key`` on a topic of ``partitions`` partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
