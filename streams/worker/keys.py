"""The names, record keys and headers of the DBPM topology on Kafka, and the memory's own records.

Keys. A verdict's key is ``task|signature`` of the record it updates (:func:`verdict_key`); every
producer of ``clingate.dbpm.verdicts`` MUST use it and Java's murmur2 partitioner (librdkafka:
``partitioner=murmur2_random``) so that the memory partition of a signature is the verdict
partition of that signature. A propagation's key is ``task|signature`` of its target
(:func:`propagation_key`), and a dispatch's each ``task|signature`` a verdict of its candidate may
update (:func:`dispatch_keys`), sent with murmur2 too (every clingate producer:
:func:`~streams.runtime.kafka_clients.producer_config`). A new consumer group of memory writers MUST
start the memory inputs (:data:`MEMORY_INPUTS`) at the same place, e.g. at their ends on a shared
broker: evidence from another application's verdicts would otherwise be applied (workers with
cross-task OFF apply no evidence at all).

Headers. A watermark tick (:data:`TICK_HEADER`, :data:`TICK_RUN_HEADER`) moves a memory partition's
clock; a candidate with :data:`BARRIER_HEADER` waits for the memory (:func:`barrier_reached`); a
verdict with :data:`REPLAYED_HEADER` is applied as given. The memory's per-partition bookkeeping
records are :data:`WATERMARK_KEY`, :data:`CONFIG_KEY`, :data:`TICK_RUN_KEY` and
:func:`applied_from_key`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from processors.dbpm import DBPMEngine, GateEvent, PinEvent, Propagation, VerdictEvent
from processors.dbpm.config import QA, SUCCESS
from processors.dbpm.signatures import signature
from processors.dbpm.update import effective_verdict
from schemas.dbpm import QaErrorClass
from state.base import Store
from streams.worker.tablestore import table_changelog
from topics.catalog import DBPM_DISPATCHES, DBPM_PROPAGATIONS, DBPM_VERDICTS

#: Per-partition memory record: the event time up to which the partition has applied verdicts.
WATERMARK_KEY = b"\xfe\xfewatermark"
#: Per-partition memory record: the fingerprint of the configuration of the writer of its last group
#: (:meth:`processors.dbpm.DBPMConfig.fingerprint`), which the gates compare with their own.
CONFIG_KEY = b"\xfe\xfeconfig"
#: Header of a watermark tick on ``clingate.dbpm.verdicts`` (value: ISO event time, record value empty).
TICK_HEADER = "clingate-watermark"
#: Header of a watermark tick naming the replay run it precedes (value: :func:`run_token`).
TICK_RUN_HEADER = "clingate-watermark-run"
#: Per-partition memory record: the :data:`TICK_RUN_HEADER` of the last tick the partition applied.
TICK_RUN_KEY = b"\xfe\xfetick-run"
#: Name of the memory table (its changelog topic is :func:`memory_changelog`).
MEMORY_TABLE = "dbpm-memory"


def memory_changelog(app_id: str) -> str:
    """The memory table's changelog topic of the workers of ``app_id``."""
    return table_changelog(app_id, MEMORY_TABLE)


#: Header of a candidate that asks its gate to wait for the memory (value: the :func:`run_token` of the
#: replay run it belongs to; any other value: wait until the memory reached the candidate's event time).
BARRIER_HEADER = "clingate-barrier"


_RUN_DIGITS = 12


def run_token(replay: str, run: int) -> bytes:
    """The token of run ``run`` of replay ``replay`` (no ``:`` in it): tokens of one replay sort as
    their runs do."""
    return f"{replay}:{run:0{_RUN_DIGITS}d}".encode()


def barrier_reached(partitions: Sequence[Store], ts: float, run: bytes) -> bool:
    """Whether a candidate at event time ``ts`` with barrier value ``run`` may be decided on
    ``partitions`` (every memory partition of a view).

    With a run token, every partition must have applied the tick of that run of its replay or a
    later one: the replay publishes a run's ticks after every verdict that precedes the run, so
    each partition has then applied exactly those verdicts, ties within one event-time second
    included (a watermark reached by an earlier verdict of the same second says nothing of the
    verdicts after it). With any other value (none, or not a token), every partition's watermark must
    have reached ``ts``.
    """
    replay, colon, number = run.rpartition(b":")
    if not (colon and len(number) == _RUN_DIGITS and number.isdigit()):
        return min_watermark(partitions) >= ts
    replay += colon
    for store in partitions:
        applied = store.get(TICK_RUN_KEY)
        if applied is None or not applied.startswith(replay) or applied < run:
            return False
    return True


_TIME = struct.Struct("<d")


def encode_watermark(at: float) -> bytes:
    """The value of a partition's :data:`WATERMARK_KEY` record at event time ``at``."""
    return _TIME.pack(at)


def decode_watermark(raw: bytes | None) -> float:
    """The event time of a partition's :data:`WATERMARK_KEY` record (``-inf``: none yet)."""
    return float("-inf") if raw is None else _TIME.unpack(raw)[0]


def min_watermark(partitions: Sequence[Store]) -> float:
    """The event time every memory partition has applied (``-inf`` if one has none): the barrier's level."""
    return min(decode_watermark(store.get(WATERMARK_KEY)) for store in partitions)


#: Header of a verdict that ``clingate replay --via-kafka`` published: a replay stream's verdicts are
#: applied as given (replay contract), so its candidate is not looked up among the dispatches.
REPLAYED_HEADER = "clingate-replayed"

#: The topics the memory writer consumes, co-partitioned: partition p of each feeds memory partition p.
MEMORY_INPUTS = (DBPM_VERDICTS, DBPM_PROPAGATIONS, DBPM_DISPATCHES)
#: Per-partition memory records (suffix: origin partition, 2 bytes big-endian): the identity
#: ``(origin offset, index)`` of the last propagation applied from that origin partition.
APPLIED_FROM_PREFIX = b"\xfe\xfepropagated-from\x00"
_ORIGIN_PARTITION = struct.Struct(">H")


def applied_from_key(origin_partition: int) -> bytes:
    """The key of a memory partition's record of the last propagation applied from ``origin_partition``."""
    return APPLIED_FROM_PREFIX + _ORIGIN_PARTITION.pack(origin_partition)


def memory_key(task: str, sig: str) -> bytes:
    """The record key of everything a memory partition reads about one record: ``task|signature``
    (verdicts, propagations and dispatches of it share the key, so murmur2 sends them to one partition)."""
    return f"{task}|{sig}".encode()


def verdict_key(engine: DBPMEngine, event: VerdictEvent | PinEvent) -> bytes:
    """The record key of a verdict: ``task|signature`` of the memory record the verdict updates (a
    pin's: of the signature it pins).

    Mirrors :func:`processors.dbpm.update.apply_verdict`'s choice of signature: a failing QA
    verdict with an error class updates the class pattern, everything else the payload's signature.
    """
    if isinstance(event, PinEvent):
        return memory_key(event.task, event.signature)
    verdict = effective_verdict(engine.config, event.task, event.verdict)
    error_class = event.payload.get("error_class") if event.task == QA and verdict != SUCCESS else None
    return memory_key(event.task, signature(event.task, event.payload, error_class))  # type: ignore[arg-type]


def dispatch_keys(event: GateEvent) -> list[bytes]:
    """The keys of every verdict of a candidate the memory could learn, one per memory record it may
    update (:func:`verdict_key`): the candidate's signature, and for a QA candidate also the class
    pattern of each error class a failing verdict may carry."""
    keys = [memory_key(event.task, signature(event.task, event.payload))]
    if event.task == QA:
        keys += [memory_key(QA, signature(QA, event.payload, str(cls))) for cls in QaErrorClass]
    return list(dict.fromkeys(keys))


def propagation_key(propagation: Propagation) -> bytes:
    """The record key of a propagation: ``task|signature`` of its *target*, as a verdict of that record.

    With the verdicts' partition count and murmur2, the target's memory partition consumes it.
    """
    return memory_key(propagation.task, propagation.signature)
