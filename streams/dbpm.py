"""The DBPM engine on Kafka: the memory agent and the gate agent (wiring only, no DBPM logic).

Both agents call :class:`processors.dbpm.DBPMEngine` unchanged; this module decodes records, opens
state, calls the engine, emits and stages. The design and the Faust findings behind it are in
``docs/faust-runtime.md``.

Topology::

    clingate.dbpm.verdicts   (key task|signature) --> memory agent (one writer per signature)
                                                          | stages engine writes, one changelog
                                                          v group per batch
                              <app>-dbpm-memory-changelog (GlobalTable, rocksdict, N partitions)
                                                          | every worker follows every partition
                                                          v
    clingate.dbpm.candidates (key patient id)   --> gate agent reads the replicated view
                                                          |--> clingate.dbpm.decisions (every decision)
                                                          '--> clingate.dbpm.to-verify (ALLOW, DOWNGRADE)

Consistency model.

* Ordered: the verdicts of one ``(task, signature)`` (one key, one partition, one writer: the memory
  agent owning that partition, ``concurrency=1``); the records a memory partition writes (one
  changelog partition, applied by readers in order, whole batches at a time:
  :mod:`streams.tablestore`); the candidates of one patient (one key, one partition, one gate agent).
* Ordered by the barrier, for candidates that ask for it (header ``clingate-barrier``; the replay
  publisher sets it): every memory partition publishes a watermark, the event time up to which it
  has applied verdicts (verdict times, and ticks that the publisher writes to idle partitions). Such
  a gate at event time ``t`` waits until every partition's durable watermark is at least ``t``, so
  it sees every verdict published before it; after ``barrier_timeout`` it decides on the view it
  has and says so in the decision's provenance (``barrier_timeout``). Live candidates carry no such
  header and never wait: live verdict partitions have no ticks, so a barrier would cost every gate
  the full timeout.
* May race: a gate and verdicts published *after* its candidate (a gate can see newer memory than
  the in-process engine would). In a live pipeline those verdicts are concurrent with the gate;
  ``replay --via-kafka`` restores the in-process order by publishing the next verdicts only after
  the decisions of the gates before them arrived. Cross-task propagation is applied inline by the
  engine into the *originating* partition (the engine offers no per-target-signature propagation
  events yet), so with propagation on a propagated NER pattern can exist in two partitions and the
  view takes the first: the measured difference from the in-process engine.
* Aggregates (patient counters, QA category counts, populations) are per partition and summed by
  the view (:mod:`processors.dbpm.partitioned`); caps and pruning run per partition.
* Crash (SIGKILL) at any point: the local store never holds what the changelog does not (writes
  are durable only after the changelog acknowledged them), every batch of a partition is one
  changelog group closed by the input offset it covers, and a re-delivered verdict at or below that
  offset is skipped, so memory updates are applied exactly once. A re-delivered candidate (one
  decided before the crash but not yet committed) is decided again on the view as it is *then*:
  byte for byte the same record only if no verdict changed its pattern in between. Consumers dedupe
  by ``candidate_id`` and keep the first. ``replay --via-kafka`` publishes no verdict before the
  candidates before it are committed, so replayed duplicates are identical (chaos soak:
  ``clingate bench chaos``).

Keys. A verdict's key is ``task|signature`` of the record it updates (:func:`verdict_key`); every
producer of ``clingate.dbpm.verdicts`` MUST use it and Java's murmur2 partitioner (librdkafka:
``partitioner=murmur2_random``) so that the memory partition of a signature is the verdict
partition of that signature.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Iterator, Sequence
from heapq import merge
from typing import Any

from faust.types import EventT, TopicT

from processors.dbpm import BLOCK, DBPMEngine, Decision, GateEvent, VerdictEvent, parse_event, parse_time
from processors.dbpm.config import QA, SUCCESS
from processors.dbpm.partitioned import merge_values
from processors.dbpm.signatures import signature
from processors.dbpm.update import effective_verdict
from schemas.common import Stage
from schemas.dbpm import Candidate, GateDecision, Verdict
from schemas.serde import Serde
from state.base import Store, Transaction
from streams.dlq import Decoded, DecodeFailed, SourceRecord, decode_record, send_dead_letter
from streams.kafka_config import client_config
from streams.metrics import DbpmMetrics
from streams.tablestore import ChangelogStore

log = logging.getLogger(__name__)

#: Per-partition memory record: the event time up to which the partition has applied verdicts.
WATERMARK_KEY = b"\xfe\xfewatermark"
#: Header of a watermark tick on ``clingate.dbpm.verdicts`` (value: ISO event time, record value empty).
TICK_HEADER = "clingate-watermark"
#: Name of the memory table (its changelog topic is :func:`memory_changelog`).
MEMORY_TABLE = "dbpm-memory"


def memory_changelog(app_id: str) -> str:
    """The memory table's changelog topic of the workers of ``app_id`` (Faust's naming)."""
    return f"{app_id}-{MEMORY_TABLE}-changelog"


#: Header of a candidate that asks its gate to wait for the memory to reach its event time.
BARRIER_HEADER = "clingate-barrier"
_TIME = struct.Struct("<d")


def verdict_key(engine: DBPMEngine, event: VerdictEvent) -> bytes:
    """The record key of a verdict: ``task|signature`` of the memory record the verdict updates.

    Mirrors :func:`processors.dbpm.update.apply_verdict`'s choice of signature: a failing QA
    verdict with an error class updates the class pattern, everything else the payload's signature.
    """
    verdict = effective_verdict(engine.config, event.task, event.verdict)
    error_class = event.payload.get("error_class") if event.task == QA and verdict != SUCCESS else None
    return f"{event.task}|{signature(event.task, event.payload, error_class)}".encode()  # type: ignore[arg-type]


def producer_config(bootstrap: str, **overrides: object) -> dict[str, object]:
    """librdkafka producer settings for every clingate client that writes DBPM input topics.

    Java's murmur2 partitioner (``murmur2_random``), the one Faust (aiokafka) uses, so that "the
    partition of a key" means the same thing to the client and to the workers: a verdict keyed by
    :func:`verdict_key` lands on the memory partition of its signature, a candidate on its patient's.
    librdkafka's default (``consistent_random``, CRC32) would scatter them. Idempotent, ``acks=all``.

    Args:
        bootstrap: Kafka bootstrap servers.
        **overrides: Further librdkafka settings (batching, queue sizes); dots spelt as in
            librdkafka, passed through a dict (``**{"linger.ms": 20}``).
    """
    return client_config(
        bootstrap, partitioner="murmur2_random", **{"enable.idempotence": True, "acks": "all", **overrides}
    )


def contract_event(model: Candidate | Verdict) -> GateEvent | VerdictEvent:
    """The engine's event for a decoded topic record (the replay contract's JSON object).

    Raises:
        processors.dbpm.BadEvent: the record is valid Avro but not a valid DBPM event.
    """
    obj = model.model_dump(mode="json", exclude_none=True)
    obj["kind"] = "gate" if isinstance(model, Candidate) else "verdict"
    return parse_event(obj)


class PartitionWriter(Store):
    """The engine's store for one memory partition: reads see staged writes, commits are collected.

    A transaction's commit appends its writes to :attr:`writes`; the agent stages them as one
    changelog group when its batch is done.
    """

    def __init__(self, tables: ChangelogStore, partition: int) -> None:
        self._tables = tables
        self._partition = partition
        self.writes: dict[bytes, bytes | None] = {}

    def get(self, key: bytes) -> bytes | None:
        """Latest value of ``key`` in this partition (this batch's commits first)."""
        if key in self.writes:
            return self.writes[key]
        return self._tables.get(self._partition, key)

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """The partition's pairs in ``[start, end)``, this batch's commits merged, ascending."""
        mine = {k: v for k, v in self.writes.items() if k >= start and (end is None or k < end)}
        older = ((k, v) for k, v in self._tables.iter_range(self._partition, start, end) if k not in mine)
        newer = ((k, v) for k, v in sorted(mine.items()) if v is not None)
        return merge(older, newer)  # type: ignore[arg-type]

    def _apply(self, writes: dict[bytes, object]) -> None:
        # The transaction's deletions are its non-bytes sentinel.
        for key, value in writes.items():
            self.writes[key] = value if isinstance(value, bytes) else None


class MergedView(Store):
    """Read-only view of a partitioned memory as one memory (the gates' replicated view).

    Args:
        partitions: returns the partition stores to merge (called on every read, so partitions
            assigned later are seen).
    """

    def __init__(self, partitions: Callable[[], Sequence[Store]]) -> None:
        self._partitions = partitions

    def get(self, key: bytes) -> bytes | None:
        """``key``'s value across partitions (:func:`processors.dbpm.partitioned.merge_values`)."""
        values = [v for v in (db.get(key) for db in self._partitions()) if v is not None]
        return merge_values(key, values) if values else None

    def iter_range(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Merged pairs in ``[start, end)``, ascending, one per key."""
        streams = [db.iter_range(start, end) for db in self._partitions()]
        group: list[bytes] = []
        current: bytes | None = None
        for key, value in merge(*streams, key=lambda kv: kv[0]):
            if key != current:
                if current is not None:
                    yield current, merge_values(current, group)
                current, group = key, []
            group.append(value)
        if current is not None:
            yield current, merge_values(current, group)

    def _apply(self, writes: dict[bytes, object]) -> None:
        # A gate's only writes are bookkeeping (the engine's as-of time); the view is never written.
        return


def _header(event: EventT, name: str) -> bytes | None:
    for key, value in event.message.headers or []:
        if key == name:
            return value
    return None


class DbpmAgents:
    """The two agents' bodies, bound to the engine, the memory table's store and the output topics.

    Args:
        engine: the memory engine (maintenance as configured).
        gate_engine: the same configuration with maintenance off: gates never maintain the view.
        memory: the memory table's :class:`~streams.tablestore.ChangelogStore`.
        partitions: number of memory partitions (= verdict topic partitions).
        serde: the process's serde.
        topics: ``decisions``, ``to_verify`` and the dead-letter topics by source topic name.
        barrier_timeout_s: see :attr:`streams.settings.Settings.dbpm_barrier_timeout_s`.
        metrics: where decisions, latencies and dead letters are counted.
    """

    def __init__(
        self,
        engine: DBPMEngine,
        gate_engine: DBPMEngine,
        memory: ChangelogStore,
        partitions: int,
        serde: Serde,
        topics: dict[str, TopicT],
        barrier_timeout_s: float,
        metrics: DbpmMetrics,
    ) -> None:
        self._engine = engine
        self._gate_engine = gate_engine
        self._memory = memory
        self._partitions = partitions
        self._serde = serde
        self._topics = topics
        self._barrier_timeout_s = barrier_timeout_s
        self._metrics = metrics
        self.view = MergedView(memory.durable_partitions)

    # -- memory agent -----------------------------------------------------------------------

    async def apply_verdicts(self, events: Sequence[EventT]) -> None:
        """Apply one batch of verdict records, partition by partition, as one changelog group each."""
        by_partition: dict[int, list[EventT]] = {}
        for event in events:
            by_partition.setdefault(event.message.partition, []).append(event)
        for partition, batch in by_partition.items():
            await self._apply_partition(partition, batch)

    async def _apply_partition(self, partition: int, batch: list[EventT]) -> None:
        done = self._memory.input_offset(partition)
        writer = PartitionWriter(self._memory, partition)
        watermark = self._watermark(writer.get(WATERMARK_KEY))
        last_offset: int | None = None
        for event in batch:
            offset = event.message.offset
            if done is not None and offset <= done:
                continue  # re-delivered after a crash: already in the memory
            last_offset = offset
            tick = _header(event, TICK_HEADER)
            if tick is not None:
                watermark = max(watermark, parse_time(tick.decode()))
                continue
            decoded = await self._decode(event, Verdict)
            if decoded is None:
                continue
            _, verdict = decoded
            with Transaction(writer) as txn:
                self._engine.process(txn, verdict, verdict.time)
            watermark = max(watermark, verdict.time)
        if last_offset is None:
            return
        writer.writes[WATERMARK_KEY] = _TIME.pack(watermark)
        await asyncio.gather(*self._memory.stage(partition, writer.writes.items(), last_offset))

    @staticmethod
    def _watermark(raw: bytes | None) -> float:
        return float("-inf") if raw is None else _TIME.unpack(raw)[0]

    # -- gate agent -------------------------------------------------------------------------

    async def decide(self, events: Sequence[EventT]) -> None:
        """Decide one batch of candidates; every decision is sent, ALLOW and DOWNGRADE also to verify."""
        loop = asyncio.get_running_loop()
        sends: list[Awaitable[Any]] = []
        for event in events:
            started = loop.time()
            decoded = await self._decode(event, Candidate)
            if decoded is None:
                continue
            candidate, gate = decoded
            waited_out = _header(event, BARRIER_HEADER) is not None and await self._barrier(gate.time)
            if waited_out:
                self._metrics.barrier_timeouts.inc()
            txn = Transaction(self.view)
            _, [decision] = self._gate_engine.process(txn, gate, gate.time)
            txn.abort()
            out = self._decision_record(candidate, decision, waited_out)
            value = self._serde.encode(out, topic=self._topics["decisions"].get_topic_name())
            key = candidate.patient_id.encode()
            sends.append(await self._topics["decisions"].send(key=key, value=value))
            if decision.decision != BLOCK:
                sends.append(await self._topics["to_verify"].send(key=key, value=value))
            self._metrics.decisions.labels(gate.task, decision.decision).inc()
            self._metrics.gate_latency.observe(loop.time() - started)
        # Acknowledged before the batch's offsets can be committed: Faust's flush before a commit
        # gives up after 0.1 s without progress (see ChangelogStore.stage), and a SIGKILL then lost
        # decisions whose candidates were committed (found by the chaos soak).
        await asyncio.gather(*sends)

    @staticmethod
    def _decision_record(candidate: Candidate, decision: Decision, waited_out: bool) -> GateDecision:
        provenance = (*decision.sources, *decision.policy, *(("barrier_timeout",) if waited_out else ()))
        return GateDecision(
            ts=candidate.ts,
            task=candidate.task,
            patient_id=candidate.patient_id,
            candidate_id=candidate.candidate_id,
            decision=decision.decision,
            rule=decision.rule,
            signature=decision.signature,
            severity=decision.severity,
            confidence_multiplier=decision.multiplier,
            provenance=provenance,
            candidate=candidate,
        )

    def min_watermark(self) -> float:
        """The event time every memory partition has durably applied (``-inf`` if one has none)."""
        return min(
            self._watermark(self._memory.durable_get(p, WATERMARK_KEY)) for p in range(self._partitions)
        )

    async def _barrier(self, ts: float) -> bool:
        """Wait until every memory partition reached ``ts``; True if the wait timed out instead."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._barrier_timeout_s
        while self.min_watermark() < ts:
            if loop.time() >= deadline:
                return True
            await asyncio.sleep(0.001)
        return False

    # -- shared -----------------------------------------------------------------------------

    async def _decode(
        self, event: EventT, expected: type[Candidate] | type[Verdict]
    ) -> tuple[Any, Any] | None:
        """``(model, engine event)`` of a record, or None after dead-lettering a bad one."""
        record = SourceRecord.from_event(event)
        result = decode_record(self._serde, record, expected)
        if isinstance(result, Decoded):
            try:
                return result.value, contract_event(result.value)
            except ValueError as exc:  # BadEvent: valid Avro, not a DBPM event
                result = DecodeFailed(record, Stage.VALIDATE, type(exc).__name__, str(exc), None,
                                      expected.avro_name)
        await self._dead_letter(result)
        return None

    async def _dead_letter(self, failed: DecodeFailed) -> None:
        log.warning("dead-lettering %s[%d]@%d: %s", failed.record.topic, failed.record.partition,
                    failed.record.offset, failed.reason)
        await send_dead_letter(self._topics, self._serde, failed)
        self._metrics.dead_letters.labels(failed.record.topic).inc()
