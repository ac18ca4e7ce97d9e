"""Where a transactional loop stands on an input partition, committed in the transaction of its outputs.

A loop that consumes a partition, produces what each record means and cannot commit its input offsets
in the same Kafka transaction (KIP-447's ``send_offsets_to_transaction`` hangs in librdkafka after a
broker restart, :mod:`streams.worker.tableloop`) writes its position as a record of its own instead:
one :class:`Progress` per input partition it moved, to its group's compacted progress topic
(:class:`ProgressLog`, ``<group>-progress``), in every batch's transaction. A ``read_committed``
reader of the outputs therefore sees a batch's outputs exactly when the progress that covers them is
committed, so a member that takes the partition over (after a SIGKILL, a rebalance or an aborted
batch) starts where the last committed progress resumes and knows which records already have their
outputs out: it reads those again only to rebuild what it keeps in memory, and produces nothing for
them. The group's committed offsets follow the progress (for lag and tools); the progress decides.

Zombies: a member's transactional producer fences an open transaction of an earlier producer with
the same transactional id (the gate keeps its id in the worker's data directory); a SIGKILLed
member's open transaction is otherwise aborted by the coordinator after its timeout
(:data:`~streams.runtime.transactions.TRANSACTION_TIMEOUT_MS`), and ``read_committed`` readers wait
for it meanwhile. A member frozen past its session timeout proves its membership before it commits
(:class:`~streams.runtime.core.FreezeWatch`, as in the memory writer).

The position is more than an offset because a loop may hold records back (the gate's NER-coverage
join holds QA candidates for their narrative): ``resume`` is where reading starts again (the first
record a rebuild needs), ``emitted`` is past the last record read, and ``held`` lists the records in
between whose outputs are still to come. Everything below ``emitted`` and not held is done. A loop
that holds nothing back (the ordered loop of the LLM groups) writes ``resume == emitted``: its
successor reads nothing again.

Encoding (little-endian): ``resume``, ``emitted`` (int64 each), the number of held offsets (uint32),
then the held offsets as zlib-compressed int64 gaps (each from the previous one, the first from
``resume``): held records cluster, so a batch with thousands held stays a few kilobytes.
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams.runtime.core import StateRecord
from streams.runtime.kafka_clients import CATCH_UP, consume_batch, partitions, watermark_offsets
from streams.runtime.kafka_config import admin_client, client_config
from topics.admin import ensure_topics
from topics.catalog import TopicSpec

log = logging.getLogger(__name__)

_HEAD = struct.Struct("<qqI")

Input = tuple[str, int]
"""An input partition: (topic, partition)."""

#: How many offsets back from a partition's end a reader looks for its last progress first: each
#: committed batch writes one progress record and one commit marker there.
TAIL = 64


@dataclass(frozen=True)
class Progress:
    """How far a loop's outputs of one input partition are committed (module docstring)."""

    resume: int
    """The first offset to read again (a record the loop needs to rebuild its in-memory state)."""
    emitted: int
    """One past the last record read: every record below it has its outputs committed, but ``held``."""
    held: frozenset[int] = frozenset()
    """Offsets in ``[resume, emitted)`` whose outputs were not produced yet (held back)."""

    def done(self, offset: int) -> bool:
        """The outputs of the record at ``offset`` are committed: read again, it produces nothing."""
        return offset < self.emitted and offset not in self.held

    def encode(self) -> bytes:
        """The progress record's value."""
        held = sorted(self.held)
        gaps = [b - a for a, b in zip([self.resume, *held], held, strict=False)]
        body = zlib.compress(struct.pack(f"<{len(gaps)}q", *gaps), 1) if gaps else b""
        return _HEAD.pack(self.resume, self.emitted, len(held)) + body

    @classmethod
    def decode(cls, raw: bytes) -> Progress:
        """The progress a record's value holds."""
        resume, emitted, count = _HEAD.unpack_from(raw)
        held: list[int] = []
        if count:
            offset = resume
            for gap in struct.unpack(f"<{count}q", zlib.decompress(raw[_HEAD.size :])):
                offset += gap
                held.append(offset)
        return cls(resume, emitted, frozenset(held))


def advanced(last: Progress | None, position: int, low: int | None, held: Iterable[int]) -> Progress:
    """The progress of a partition read up to ``position`` (the next offset), whose records from ``low``
    on are needed again to rebuild the loop's state (None: none are) and whose records at ``held`` wait
    for their outputs, after ``last`` (None: no progress committed yet).

    While the loop reads again what ``last`` covers (``position`` below its ``emitted``), ``last``'s end
    and those of its held records not read again yet stay in the progress: a successor must not take
    the records between for undone.
    """
    resume = position if low is None else min(position, low)
    pending = set(held)
    emitted = position
    if last is not None and last.emitted > position:
        emitted = last.emitted
        pending.update(offset for offset in last.held if offset >= position)
    return Progress(resume, emitted, frozenset(pending))


def _key(topic: str, partition: int) -> bytes:
    return f"{topic}:{partition}".encode()


def progress_topic(group: str) -> str:
    """The progress topic of the loops of consumer group ``group``."""
    return f"{group}-progress"


class ProgressLog:
    """The progress topic of one consumer group's loops: read when partitions are assigned, written in
    every batch's transaction.

    The record of input ``(topic, partition)`` is keyed ``topic:partition`` and lives on partition
    ``partition`` modulo the progress topic's partitions, so a member reads only the progress
    partitions of its inputs.

    The topic is created when it is missing (compacted, kept forever) with the partitions and the
    replication of the loop's first input topic.

    Args:
        bootstrap: Kafka bootstrap servers.
        group: the loops' consumer group (names the topic and the transactions in the log).
        inputs: the loops' input topics.
    """

    def __init__(self, bootstrap: str, group: str, inputs: Sequence[str]) -> None:
        self.group = group
        self.topic = progress_topic(group)
        self._reader = Consumer(client_config(bootstrap, **{
            "group.id": f"{group}-progress-reader",  # required by librdkafka; never joined (assign)
            "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed",
            **CATCH_UP,
        }))  # fmt: skip
        count = len(partitions(self._reader, inputs[0]))  # waits out an input created a moment ago
        model = self._reader.list_topics(inputs[0], timeout=30).topics[inputs[0]]
        spec = TopicSpec(
            self.topic, "input topic:partition", "streams.runtime.progress.Progress",
            partitions=count, replication=len(model.partitions[0].replicas),
            cleanup_policy="compact", retention_ms=-1,
        )  # fmt: skip
        ensure_topics(admin_client(bootstrap), [spec])
        self._partitions = len(partitions(self._reader, self.topic))

    def record(self, topic: str, partition: int, progress: Progress) -> StateRecord:
        """The progress record of input ``topic``'s ``partition``."""
        return StateRecord(
            self.topic, partition % self._partitions, _key(topic, partition), progress.encode()
        )

    def read(self, inputs: Iterable[Input], timeout_s: float = 60.0) -> dict[Input, Progress]:
        """The last committed progress of each input ``(topic, partition)`` (those with none are left out).

        Reads each progress partition from :data:`TAIL` offsets before its end, and from its start only
        if the tail lacked one of the inputs it holds (many aborted batches, or a compaction that left
        little).

        Raises:
            TimeoutError: a partition was not read to its end within ``timeout_s`` (e.g. no leader).
        """
        deadline = time.monotonic() + timeout_s
        inputs = list(inputs)
        wanted: dict[int, set[bytes]] = {}
        for topic, partition in inputs:
            wanted.setdefault(partition % self._partitions, set()).add(_key(topic, partition))
        lows: dict[int, int] = {}
        starts: dict[int, int] = {}
        for partition in wanted:
            low, high = watermark_offsets(self._reader, self.topic, partition, timeout_s)
            lows[partition], starts[partition] = low, max(low, high - TAIL)
        found: dict[bytes, bytes] = {}
        while starts:
            self._reader.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
            reading = set(starts)
            while reading:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.topic} {sorted(reading)} not read within {timeout_s:.0f} s")
                for message in consume_batch(self._reader, 1000, 0.5):
                    error = message.error()
                    if error is None:
                        if message.key() in wanted[message.partition()]:
                            found[message.key()] = message.value()
                    elif error.code() == KafkaError._PARTITION_EOF:
                        reading.discard(message.partition())
            self._reader.unassign()
            starts = {
                p: lows[p] for p, start in starts.items() if start > lows[p] and not wanted[p] <= found.keys()
            }
        return {
            (topic, partition): Progress.decode(raw)
            for topic, partition in inputs
            if (raw := found.get(_key(topic, partition))) is not None
        }

    def assigned(self, assigned: list[TopicPartition]) -> dict[Input, Progress]:
        """The last committed progress of the partitions a rebalance gave the loop (a partition without
        one, of a new group or one that never committed a batch, starts at the group's offset).

        A progress topic the cluster cannot serve now (an outage, a leader election) is read again until
        it can: the partitions cannot start anywhere else."""
        while True:
            try:
                return self.read((tp.topic, tp.partition) for tp in assigned)
            except (TimeoutError, KafkaException) as exc:
                log.warning("%s not read (%s); read again", self.topic, exc)

    def close(self) -> None:
        """Close the reader."""
        self._reader.close()
