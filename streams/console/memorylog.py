"""Where the memory explorer gets what it shows, and how it publishes an operator's pin.

:class:`KafkaMemory` reads, on every page load, with a ``read_committed`` reader of its own from the
beginning of each partition up to the end it has when the page asks:

* for a signature, the partition its key ``task|signature`` has on ``clingate.dbpm.verdicts`` (murmur2,
  :func:`streams.worker.keys.verdict_key`), and the same partition of ``clingate.dbpm.propagations`` and of
  the memory table's changelog (``<CLINGATE_APP_ID>-dbpm-memory-changelog``), which are co-partitioned with
  it: the signature's verdicts, pins and propagated evidence still on the topics (records of that key
  only), and its memory records (blocklist pattern, whitelist entry, pin) as the memory's one writer of
  the signature last committed them (a tombstone deletes one);
* every partition of ``clingate.dbpm.decisions`` (keyed by patient, so a signature's decisions are
  anywhere): the decisions of the signature, or the decision of one candidate (the first, as consumers
  keep the first of a re-delivered one). Only the records that contain the signature's or the candidate
  id's bytes are decoded (:func:`~streams.console.records.read_records`, ``containing``).

The known cost: a page load fetches one partition of three topics and the whole decisions topic (30 days
of decisions), decoding only the few records it looks for; a console for a large deployment would keep
tables of them up to date from the topics instead. Before the workers of ``CLINGATE_APP_ID`` have created
their changelog there is no memory record to read, and the page says the memory holds nothing about the
signature.

:class:`KafkaPinPublisher` asks for a pin: the console's principal may not write
``clingate.dbpm.verdicts`` (it could otherwise write any verdict, a verifier's included), so the pin's
verdict record (:func:`streams.worker.wire.pin_record`), encoded and keyed by
:func:`~streams.worker.keys.verdict_key`, travels in a request (:mod:`streams.console.requests`, the pin's
id as the request's) that the request runtime checks (an operator's pin by the requesting user, keyed for
its signature) and produces with Java's murmur2 partitioner, so it lands on the memory partition of its
signature. A request the page reports as not sent is never delivered later.

A record that cannot be decoded is skipped and counted (``unreadable``; of the decisions, only those the
pre-filter let through).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from processors.dbpm import DBPMEngine
from schemas.console import ConsoleRequest, Role
from schemas.dbpm import GateDecision, Verdict
from schemas.dbpm import Propagation as PropagationRecord
from schemas.serde import Serde
from streams.console.pages import read_in_thread
from streams.console.records import READ_TIMEOUT_S, decoded, read_records
from streams.console.requests import Requests
from streams.requests.check import RequestAction
from streams.runtime.kafka_clients import partitions, read_to_end, reader
from streams.worker.keys import memory_changelog, memory_key, verdict_key
from streams.worker.wire import contract_event
from topics.catalog import DBPM_DECISIONS, DBPM_PROPAGATIONS, DBPM_VERDICTS
from topics.partitioner import partition_for


@dataclass(frozen=True)
class SignatureLog:
    """What the topics hold about one signature now."""

    records: Mapping[bytes, bytes]
    """Its memory records (:mod:`processors.dbpm.memory` keys: ``B``, ``W`` and ``O`` of the signature)."""
    events: tuple[Verdict | PropagationRecord, ...]
    """Its verdicts, pins and propagated evidence, each topic's in topic order."""
    decisions: tuple[GateDecision, ...]
    """The decisions of its candidates, in each partition's order."""
    unreadable: int = 0
    """Records of the signature skipped because they could not be decoded."""


class MemorySource(Protocol):
    """What the memory explorer reads."""

    async def signature(self, task: str, sig: str) -> SignatureLog:
        """What the topics hold about ``sig`` of ``task``.

        Raises:
            Unavailable: a topic could not be read.
        """
        ...

    async def decision(self, candidate_id: str) -> GateDecision | None:
        """The gate's decision of ``candidate_id`` (None: none on the topic).

        Raises:
            Unavailable: the topic could not be read.
        """
        ...


class PinPublisher(Protocol):
    """Where the operator's pins go."""

    async def publish(self, pin: Verdict) -> None:
        """Publish ``pin``; returns once Kafka acknowledged it.

        Raises:
            NotAcknowledged: it was not acknowledged.
        """
        ...


def memory_keys(task: str, sig: str) -> tuple[bytes, ...]:
    """The memory records of one signature the explorer shows: its pattern, whitelist entry and pin."""
    name = task.encode() + b"\x00" + sig.encode()
    return (b"B" + name, b"W" + name, b"O" + name)


class KafkaMemory:
    """The DBPM topics and the memory changelog of ``app_id``, read on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde, app_id: str) -> None:
        self._bootstrap = bootstrap
        self._serde = serde
        self._changelog = memory_changelog(app_id)

    async def signature(self, task: str, sig: str) -> SignatureLog:
        """What the topics hold about ``sig`` of ``task`` now (read in a thread: the event loop goes on)."""
        return await read_in_thread("the DBPM topics", self._signature, task, sig)

    async def decision(self, candidate_id: str) -> GateDecision | None:
        """The first decision of ``candidate_id`` now on the topic."""
        decisions, _ = await read_in_thread(
            DBPM_DECISIONS, self._decisions, candidate_id, lambda d: d.candidate_id == candidate_id
        )
        return decisions[0] if decisions else None

    def _signature(self, task: str, sig: str) -> SignatureLog:
        key = memory_key(task, sig)
        wanted = memory_keys(task, sig)
        # From offset 0 of the signature's partitions ("earliest" when retention has deleted it).
        overrides = {"isolation.level": "read_committed", "auto.offset.reset": "earliest"}
        consumer = reader(self._bootstrap, "console-memory", **overrides)
        records: dict[bytes, bytes] = {}
        events: list[Verdict | PropagationRecord] = []
        unreadable = 0
        try:
            partition = partition_for(key, len(partitions(consumer, DBPM_VERDICTS)))
            topics = [DBPM_VERDICTS, DBPM_PROPAGATIONS]
            if self._changelog in consumer.list_topics(timeout=READ_TIMEOUT_S).topics:
                topics.append(self._changelog)
            starts = {topic: {partition: 0} for topic in topics}
            for message in read_to_end(consumer, starts, READ_TIMEOUT_S, named_only=True):
                topic, found, value = message.topic(), message.key(), message.value()
                if topic == self._changelog:
                    if found in wanted:
                        if value is None:
                            records.pop(found, None)
                        else:
                            records[found] = value
                elif found == key and value is not None:
                    model = Verdict if topic == DBPM_VERDICTS else PropagationRecord
                    event = decoded(self._serde, message, model)
                    if event is None:
                        unreadable += 1
                    else:
                        events.append(event)
        finally:
            consumer.close()
        decisions, skipped = self._decisions(sig, lambda d: d.task == task and d.signature == sig)
        return SignatureLog(records, tuple(events), tuple(decisions), unreadable + skipped)

    def _decisions(self, text: str, keep: Callable[[GateDecision], bool]) -> tuple[list[GateDecision], int]:
        """The decisions on the topic that ``keep`` keeps, of those whose record contains ``text`` (the
        candidate id or signature ``keep`` looks for: only those are decoded), and how many of them could
        not be decoded."""
        decisions = read_records(
            self._bootstrap, self._serde, DBPM_DECISIONS, GateDecision, containing=text.encode()
        )
        return [d for d in decisions.values() if keep(d)], decisions.unreadable


class KafkaPinPublisher:
    """An operator's pins, each a request awaited until acknowledged (module docstring)."""

    def __init__(self, requests: Requests, serde: Serde, engine: DBPMEngine) -> None:
        self._requests = requests
        self._serde = serde
        self._engine = engine

    async def publish(self, pin: Verdict) -> None:
        """Ask for ``pin`` keyed for the memory partition of its signature; returns once Kafka
        acknowledged the request (module docstring).

        Raises:
            NotAcknowledged: the request was not acknowledged.
        """
        assert pin.pin is not None  # pin_record() made it
        key = verdict_key(self._engine, contract_event(pin))  # type: ignore[arg-type]
        await self._requests.send(ConsoleRequest(
            request_id=pin.pin.pin_id, event_time=pin.ts, user=pin.pin.operator, role=Role.OPERATOR,
            action=RequestAction.PIN, target=key.decode(), topic=DBPM_VERDICTS, key=key,
            value=self._serde.encode(pin, topic=DBPM_VERDICTS), note=pin.pin.reason,
        ))  # fmt: skip
