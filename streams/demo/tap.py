"""The demo's downstream view: one consumer that watches every stream's inputs and outputs.

``clingate demo`` measures each stream as a downstream consumer sees it: latency is the time from an
input record's production (its Kafka ``CreateTime``, stamped by the producer) to the moment the demo
consumed the output it caused; throughput is outputs per second from the first input produced to the
last output consumed. The :class:`Tap` thread reads every partition of the watched topics from their
end offsets at construction (so only this run's records count), decodes each record, keeps those
whose id belongs to the run, and stamps outputs with the wall clock when it consumed them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message

from schemas.base import AvroModel
from schemas.serde import Serde
from streams.runtime.kafka_clients import assign_at_ends, consume_batch, reader
from streams.worker.tablestore import BOUNDARY_KEY, input_offset_key
from topics.catalog import DBPM_VERDICTS

VERDICTS_OFFSET = input_offset_key(DBPM_VERDICTS)
"""The changelog key of the last verdict offset a memory group applied."""
POLL_S = 0.02
"""Longest wait of one ``consume``: it returns early only with a full batch, so this bounds how late the
demo sees an output, which the DBPM lockstep slice waits for once per patient."""

FETCH_WAIT_MS = 20
"""How long the broker holds the tap's fetch for data (librdkafka ``fetch.wait.max.ms``; with a
``fetch.min.bytes`` no fetch of the demo reaches, every fetch waits this long). The tap watches every
partition of about a dozen topics, and with the default (return on the first byte) it sent ~170
fetches a second in the bulk phase, each reading ~60 partitions: most of the broker's CPU in the
demo (its request metrics, read over JMX). Held for 20 ms, the tap sends at most 50 a second, and
sees an output no later than :data:`POLL_S` already allowed."""


@dataclass
class Flow:
    """One stream as the tap sees it: input production times and output consume times, by id."""

    name: str
    expected: int = 0
    produced: dict[str, float] = field(default_factory=dict)
    consumed: dict[str, float] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list)
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per id, the (partition, offset) of its first output record."""
    latest: dict[str, Any] = field(default_factory=dict)
    """Per id, its last output (what a downstream consumer deduping by id ends with), so a reader
    looks an id up instead of walking :attr:`outputs`."""

    def latencies(self) -> list[float]:
        """Seconds from input produced to output consumed, for every id seen on both sides."""
        return sorted(
            self.consumed[i] - self.produced[i] for i in self.consumed.keys() & self.produced.keys()
        )

    def stats(self) -> dict[str, float]:
        """Outputs, throughput (outputs/s, first produce -> last consume), latency p50/p99 (s)."""
        lat = self.latencies()
        if not lat:
            return {"outputs": float(len(self.outputs)), "rate": 0.0, "p50": 0.0, "p99": 0.0, "span": 0.0}
        span = max(self.consumed.values()) - min(self.produced.values())
        return {
            "outputs": float(len(self.outputs)),
            "rate": len(self.outputs) / span if span > 0 else 0.0,
            "p50": lat[len(lat) // 2],
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "span": span,
        }


@dataclass(frozen=True)
class Route:
    """A watched topic: its model, the flow it feeds, whether it carries inputs, and the id of a record.

    ``ident`` returns None for records of other runs (they are ignored). A topic may feed several
    flows (candidates are the generator's outputs and the gate's inputs); its routes share the model.
    """

    topic: str
    model: type[AvroModel]
    flow: Flow
    is_input: bool
    ident: Callable[[Any], str | None]


class Tap(threading.Thread):
    """Consumes the routes' topics from their current ends until :meth:`stop`.

    * **One consumer, assigned partitions, no group**: the demo must not join the workers' groups, and
      reading from the end offsets taken before any input is produced is what makes "this run's
      records" well defined on a shared broker.
    * **Latency per id**: an output is matched to the input with the same id (DBPM: the candidate id;
      clinical: patient id and event time, one FHIR update per patient and event time; docs: the
      document id). Latency counts the first output of an id; every output is kept (a golden patient's
      FHIR update and review share an event time, and both assessments matter).
    * **Wall clock**: the demo is a client, not a processor; ``CreateTime`` and the consume stamp are
      both this machine's clock, in milliseconds for the former.
    * Records that do not decode (the demo's own dead-letter probes) are skipped.
    * **Memory progress**: given the DBPM memory table's changelog, the tap also follows its groups:
      the last verdict offset a group records (:func:`streams.worker.tablestore.input_offset_key`;
      changelog partition = verdict partition) counts once the group's boundary
      (:data:`streams.worker.tablestore.BOUNDARY_KEY`) is read, so the demo knows when the memory
      agents have applied a verdict.
    """

    def __init__(
        self, bootstrap: str, serde: Serde, routes: list[Route], changelog: str | None = None
    ) -> None:
        super().__init__(name="clingate-demo-tap", daemon=True)
        self._changelog = changelog
        self.applied: dict[int, int] = {}
        """Per partition of ``changelog``, the last verdict offset its complete groups cover."""
        self._covering: dict[int, int] = {}  # per partition, the verdict offset of the group being read
        self._serde = serde
        self._routes: dict[str, list[Route]] = {}
        for route in routes:
            self._routes.setdefault(route.topic, []).append(route)
        self._stopping = threading.Event()
        self.error: BaseException | None = None
        fetch = {"fetch.wait.max.ms": FETCH_WAIT_MS, "fetch.min.bytes": 1 << 24}
        self._consumer = reader(bootstrap, "demo-tap", **{"isolation.level": "read_committed", **fetch})
        assignment = assign_at_ends(self._consumer, [*self._routes, *([changelog] if changelog else [])])
        self._next: dict[tuple[str, int], int] = {(tp.topic, tp.partition): tp.offset for tp in assignment}
        """Per watched partition, the offset after the last record read (written by the tap thread)."""

    def run(self) -> None:
        """Poll until stopped; a failure is kept in :attr:`error` for the main thread."""
        try:
            while not self._stopping.is_set():
                for message in consume_batch(self._consumer, 1000, POLL_S):
                    if message.error() is None:
                        self._take(message)
                        self._next[(message.topic(), message.partition())] = message.offset() + 1
        except BaseException as error:  # reported by the main thread
            self.error = error
        finally:
            self._consumer.close()

    def _take(self, message: Message) -> None:
        if message.topic() == self._changelog:
            partition = message.partition()
            if message.key() == VERDICTS_OFFSET:
                self._covering[partition] = int(message.value())
            elif message.key() == BOUNDARY_KEY and partition in self._covering:
                self.applied[partition] = self._covering.pop(partition)
            return
        routes = self._routes[message.topic()]
        now = time.time()
        try:
            value = self._serde.decode(message.value(), routes[0].model, topic=message.topic())
        except Exception:  # the demo's dead-letter probes (the workers route them)
            return
        for route in routes:
            ident = route.ident(value)
            if ident is None:
                continue
            flow = route.flow
            if route.is_input:
                flow.produced.setdefault(ident, message.timestamp()[1] / 1000)
            else:
                flow.consumed.setdefault(ident, now)
                flow.positions.setdefault(ident, (message.partition(), message.offset()))
                flow.outputs.append(value)
                flow.latest[ident] = value

    def wait_read(self, topic: str, ends: dict[int, int], timeout_s: float) -> None:
        """Block until the tap has read ``topic`` up to ``ends`` (per partition, an end offset).

        What a group committed is published, but the tap may not have read it yet (its fetches are held
        :data:`FETCH_WAIT_MS`): a caller that then looks the outputs up must wait for the tap first.

        Raises:
            TimeoutError: not read within ``timeout_s``, or the tap thread failed.
        """
        deadline = time.monotonic() + timeout_s
        while any(self._next.get((topic, p), 0) < end for p, end in ends.items()):
            if self.error is not None or time.monotonic() > deadline:
                raise TimeoutError(
                    f"the demo's tap did not read {topic} up to {ends} within {timeout_s:.0f} s"
                )
            time.sleep(POLL_S / 4)

    def stop(self) -> None:
        """Stop polling and close the consumer (joins the thread)."""
        self._stopping.set()
        self.join(30)
