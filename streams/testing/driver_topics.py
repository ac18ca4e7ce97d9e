"""The topology driver's in-memory topics (:mod:`streams.testing.driver`), and the readers over them.

A :class:`Topic` holds partitions of records with offsets from 0 and refuses a record its broker would
refuse (:class:`RecordTooLargeError`); a :class:`ChangelogTable` is a worker's table written only through
its changelog topic and applied as every reader of the changelog applies it; :class:`TopicPackets` and
:class:`TopicNarratives` are what the docs worker and the verifier read from their topics, over the
driver's; :class:`DeadLetterRecord` is a dead letter read back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from schemas.common import DeadLetter
from schemas.dbpm import Narrative
from schemas.serde import Serde
from state.base import Store
from state.ram import RamStore
from streams.groups.arbiter import Packets
from streams.runtime.dlq import Rejected, SourceRecord, decode_record, record_limit, record_size
from streams.worker.tablestore import ChangelogFollower
from topics.partitioner import partition_for


class RecordTooLargeError(ValueError):
    """A record larger than its topic's ``max.message.bytes``: the broker would refuse it."""


class Topic:
    """One in-memory topic: partitions of records with offsets from 0, and the order they arrived in.

    Args:
        name: the topic's name.
        partitions: its partition count.
        max_bytes: its ``max.message.bytes`` (a record's key, value and headers must fit within
            :func:`~streams.runtime.dlq.record_limit` of it, as the producers count them).
    """

    def __init__(self, name: str, partitions: int, max_bytes: int) -> None:
        self.name = name
        self.partitions: list[list[SourceRecord]] = [[] for _ in range(partitions)]
        self.log: list[SourceRecord] = []
        """Every record, in the order it was appended (each partition's records in offset order)."""
        self._max_bytes = max_bytes

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp_ms: int | None = 0,
        partition: int | None = None,
    ) -> SourceRecord:
        """Append one record at the end of its partition (the key's, unless ``partition`` is given).

        Raises:
            ValueError: neither a key nor a partition, or a partition the topic does not have.
            RecordTooLargeError: the record exceeds the topic's ``max.message.bytes``.
        """
        if partition is None:
            if key is not None:
                partition = partition_for(key, len(self.partitions))
            elif len(self.partitions) == 1:
                partition = 0
            else:
                raise ValueError(f"{self.name}: a record without a key needs an explicit partition")
        if not 0 <= partition < len(self.partitions):
            raise ValueError(f"{self.name} has no partition {partition}")
        size = record_size(key, value, headers)
        if size > (limit := record_limit(self._max_bytes)):
            raise RecordTooLargeError(f"{self.name}: a record of {size} bytes; the topic admits {limit}")
        records = self.partitions[partition]
        record = SourceRecord(self.name, partition, len(records), timestamp_ms, key, value, tuple(headers))
        records.append(record)
        self.log.append(record)
        return record


class ChangelogTable:
    """A table of the workers' kind in memory: one store per partition, written only through its changelog.

    :meth:`stage` appends a handler's group to the changelog topic, closed by its boundary, and applies
    it as every reader of the changelog does (:class:`~streams.worker.tablestore.ChangelogFollower`,
    whole groups). The broker acknowledges at once here, so the writer's staged writes and the durable
    state are the same: what the handler reads is what a recovered worker would read.

    Args:
        changelog: the table's changelog topic (one partition per table partition).
    """

    def __init__(
        self, changelog: Topic, observe: Callable[[int, bytes, bytes | None], None] | None = None
    ) -> None:
        self.changelog = changelog
        self._followers = [ChangelogFollower(RamStore()) for _ in changelog.partitions]
        self._observe = observe

    def get(self, partition: int, key: bytes) -> bytes | None:
        """The value of ``key`` in ``partition``, or None."""
        return self._followers[partition].store.get(key)

    def iter_range(self, partition: int, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` of ``partition`` in ``[start, end)``, ascending."""
        return self._followers[partition].store.iter_range(start, end)

    def stage(self, partition: int, group: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write one group of ``partition`` (closed by its boundary) to the changelog and apply it."""
        follower = self._followers[partition]
        for key, value in group:
            record = self.changelog.append(key, value, partition=partition)
            follower.add(key, value, record.offset)
            if self._observe is not None:
                self._observe(partition, key, value)

    def stores(self) -> list[Store]:
        """Every partition's store, in partition order."""
        return [follower.store for follower in self._followers]


class TopicPackets(Packets):
    """The review packets the docs worker reads, from the driver's compacted packet topic.

    Args:
        serde: the driver's serde.
        topic: the driver's ``clingate.docs.review-packets``.
    """

    def __init__(self, serde: Serde, topic: Topic) -> None:
        super().__init__(serde)
        self._topic = topic
        self._read = 0

    def catch_up(self) -> None:
        """Apply the packet records appended since the last catch-up."""
        for record in self._topic.log[self._read :]:
            self.apply(record)
        self._read = len(self._topic.log)


class TopicNarratives:
    """The verifier's narrative source, over the driver's narratives topic (what its cache follows).

    A candidate is produced after its narrative, so everything the verifier could wait for is in the
    topic already; a narrative not found is missing for good, and the verifier dead-letters the
    candidate (``NarrativeNotFound``) as it does after its wait.

    Args:
        serde: the driver's serde.
        topic: the driver's ``clingate.dbpm.narratives``.
    """

    def __init__(self, serde: Serde, topic: Topic) -> None:
        self._serde = serde
        self._topic = topic
        self._read = 0
        self._texts: dict[tuple[str, datetime], str] = {}

    async def get(self, patient_id: str, ts: datetime) -> str | None:
        """The text of the narrative of ``(patient_id, ts)``, or None."""
        for record in self._topic.log[self._read :]:
            outcome = decode_record(self._serde, record, Narrative)
            if not isinstance(outcome, Rejected):  # the generator dead-letters it
                self._texts[(outcome.value.patient_id, outcome.value.ts)] = outcome.value.text
        self._read = len(self._topic.log)
        return self._texts.get((patient_id, ts))


@dataclass(frozen=True)
class DeadLetterRecord:
    """A record of a dead-letter topic, read back."""

    letter: DeadLetter
    """The decoded dead letter (original bytes, reason, stage, coordinates)."""
    headers: dict[str, str]
    """Its KIP-1034-style headers, without the prefix (:func:`streams.runtime.dlq.header_map`)."""
    record: SourceRecord
    """The dead-letter record itself."""
