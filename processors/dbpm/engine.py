"""The DBPM engine facade: ``process(state, event, now) -> (state, outputs)``.

The engine is a pure function of its configuration, the ontology passed in, the state it is given
and the event: it reads no clock (``now`` is the event time), does no I/O and keeps nothing between
calls; all memory lives in the key-value state (a :class:`state.base.Transaction`), so an in-process
replay and a Kafka runtime run the same code on the same records.

Per event: (1) with maintenance ON, run the event-time maintenance of :mod:`.maintenance`; (2)
record the event time (``as_of``); (3) a verdict is applied to the memory (:mod:`.update`), a gate
event is decided (:mod:`.gates`) and its :class:`~processors.dbpm.gates.GateRuling` returned.
With the master switch (``Flags.disabled``) every gate ALLOWs and nothing is read or written.

Cross-task propagation (§4.4) is an explicit output. :meth:`DBPMEngine.learn` applies a verdict to
its own signature's records and returns the :class:`~processors.dbpm.update.Propagation` events
(target task and signature, weight, event time, provenance); :meth:`DBPMEngine.propagate` applies one
at the writer of its target, where the guards that read the target's state are evaluated.
:meth:`DBPMEngine.process` does both in one transaction, the propagations right after their verdict
in the order produced: the inline Algorithm 1, byte for byte. A partitioned runtime calls
``learn`` on the origin's partition and ``propagate`` on the target's, so each signature has one
writer.

A verdict that names its candidate (``candidate_id``) is applied at most once per state: a later
verdict of the same candidate within ``verdict_dedupe_horizon_s`` of event time is a duplicate from
an at-least-once producer and changes nothing, not even the clock (:mod:`.ledger`). Verdicts without
one are applied as given. :meth:`DBPMEngine.dispatch` records a candidate a gate decided, and
:meth:`DBPMEngine.knows` answers whether a verdict's candidate is one (the partitioned runtime's check
of live verdicts, :mod:`.ledger`).

An operator's pin (:class:`~processors.dbpm.events.PinEvent`, :mod:`.pins`) is applied by
:meth:`DBPMEngine.pin` (in :meth:`process` too) to its signature's pin record alone: no maintenance, no
clock, no learning. :meth:`DBPMEngine.decide` asks for a pin before any gate.

In a replay every verdict is applied as given, also after a BLOCK; in a live pipeline a BLOCKed
candidate never reaches the verifier and so produces no verdict.
"""

from __future__ import annotations

from typing import TypeVar

from processors.dbpm.config import QA, RE, DBPMConfig
from processors.dbpm.events import Event, GateEvent, PinEvent, VerdictEvent, format_time
from processors.dbpm.gates import ALLOW, GateRuling, gate_ner, gate_qa, gate_relation
from processors.dbpm.ledger import admit, dispatch, dispatched
from processors.dbpm.maintenance import advance_clock
from processors.dbpm.memory import KeyValue, Memory, half_lives
from processors.dbpm.ontology import Ontology
from processors.dbpm.pins import apply_pin, gate_pinned
from processors.dbpm.signatures import signature
from processors.dbpm.update import Propagation, apply_propagation, apply_verdict

S = TypeVar("S", bound=KeyValue)


class DBPMEngine:
    """Dynamic Bidirectional Pattern Memory over a key-value state.

    Args:
        config: parameters and flags (defaults: the paper's deployed configuration).
        ontology: the relation ontology (see :func:`processors.dbpm.ontology.load_ontology`).
    """

    __slots__ = ("_half_lives", "config", "ontology")

    def __init__(self, config: DBPMConfig, ontology: Ontology) -> None:
        self.config = config
        self.ontology = ontology
        self._half_lives = half_lives(config)

    def process(self, state: S, event: Event, now: float) -> tuple[S, list[GateRuling]]:
        """Apply one event at event time ``now`` and return the state and the decisions it produced.

        Args:
            state: the key-value state (e.g. an open transaction); it is written in place and returned.
            event: a verdict (no output) or a gate event (one decision).
            now: the event time in seconds since the epoch (callers pass ``event.time``).

        Returns:
            ``(state, [])`` for a verdict or a pin, ``(state, [decision])`` for a gate event.
        """
        if isinstance(event, GateEvent):
            self.advance(state, now)
            return state, [self.decide(state, event, now)]
        if isinstance(event, PinEvent):
            return self.pin(state, event), []
        if self.config.flags.disabled:
            return state, []
        _, propagations = self.learn(state, event, now)
        mem = Memory(state, self.config, self._half_lives)
        for propagation in propagations or ():
            apply_propagation(mem, propagation)
        return state, []

    def decide(self, state: KeyValue, event: GateEvent, now: float) -> GateRuling:
        """Decide a gate event on ``state`` as it is, at event time ``now``, writing nothing.

        What a gate on a replica of the memory does (:mod:`streams.worker.gate`): the memory's writers
        run the maintenance and keep the clock, a gate only reads. :meth:`process` is this after the
        per-event bookkeeping.
        """
        if self.config.flags.disabled:
            sig = signature(event.task, event.payload)
            return GateRuling(event.candidate_id, ALLOW, "disabled", event.task, sig, None, 0, 1.0)
        mem = Memory(state, self.config, self._half_lives)
        pinned = gate_pinned(mem, event, now)
        if pinned is not None:
            return pinned
        if event.task == RE:
            return gate_relation(mem, self.ontology, event, now)
        if event.task == QA:
            return gate_qa(mem, event, now)
        return gate_ner(mem, event, now)

    def learn(self, state: S, event: VerdictEvent, now: float) -> tuple[S, list[Propagation] | None]:
        """Apply a verdict to the records of its own signature; return its cross-task evidence.

        Args:
            state: the key-value state of the verdict's signature (its partition).
            event: the verdict.
            now: the event time (callers pass ``event.time``).

        Returns:
            ``(state, propagations)``: the caller MUST have every propagation applied, in order, by
            the writer of its target signature (:meth:`propagate`). ``propagations`` is None when
            the verdict is a duplicate of its candidate's (:mod:`.ledger`): nothing was applied.
        """
        if self.config.flags.disabled:
            return state, []
        if event.candidate_id is not None and not admit(
            state, event.candidate_id, now, self.config.verdict_dedupe_horizon_s
        ):
            return state, None
        return state, apply_verdict(self._memory(state, now), event, now)

    def pin(self, state: S, event: PinEvent) -> S:
        """Apply an operator's pin (or its removal) to its signature's pin record, and nothing else
        (:mod:`.pins`); with the master switch nothing is written."""
        if not self.config.flags.disabled:
            apply_pin(Memory(state, self.config, self._half_lives), event)
        return state

    def dispatch(self, state: S, candidate_id: str, now: float) -> S:
        """Record that a gate decided ``candidate_id`` at event time ``now``, so that a verdict
        naming it is known (:meth:`knows`) for ``verdict_dedupe_horizon_s`` of event time.

        Bookkeeping of the ledger only: the memory's clock, patterns and decisions are untouched.
        """
        dispatch(state, candidate_id, now, self.config.verdict_dedupe_horizon_s)
        return state

    def knows(self, state: KeyValue, candidate_id: str) -> bool:
        """A gate decided ``candidate_id`` and :meth:`dispatch` recorded it in ``state``."""
        return dispatched(state, candidate_id)

    def advance(self, state: S, now: float) -> S:
        """Move the memory's clock to event time ``now`` with no event: the per-event bookkeeping alone
        (the maintenance due by ``now``, when enabled, and ``as_of``).

        What a watermark tick does at the memory's writer: time passes with no verdict, so the caps and
        the pruning that a verdict at ``now`` would have run first are run. Maintenance as of a boundary
        does not depend on when it runs (:mod:`.maintenance`), so a tick changes no later decision or
        state that the next event would not have changed.
        """
        if not self.config.flags.disabled:
            self._memory(state, now)
        return state

    def propagate(self, state: S, propagation: Propagation) -> tuple[S, bool]:
        """Apply one propagation event at the writer of its target signature, at its event time.

        Args:
            state: the key-value state holding the target signature (its partition).
            propagation: the event, from :meth:`learn`.

        Returns:
            ``(state, applied)``: ``applied`` is False when a guard of §4.4 stopped it, and always
            with cross-task OFF (an engine so configured produces no such event and applies none
            that reaches it, e.g. from an earlier run on the same topic); nothing is written then.
        """
        if self.config.flags.disabled or not self.config.flags.cross_task:
            return state, False
        return state, apply_propagation(self._memory(state, propagation.time), propagation)

    def _memory(self, state: KeyValue, now: float) -> Memory:
        """The memory over ``state`` with the per-event bookkeeping done (maintenance, ``as_of``)."""
        mem = Memory(state, self.config, self._half_lives)
        advance_clock(mem, now)
        return mem

    def snapshot(self, state: KeyValue) -> dict[str, object]:
        """The memory in the replay contract's state format, severities effective at ``as_of``.

        Lists are sorted by signature (code-point order); ``as_of`` is the latest event time applied
        (``None`` for an empty memory). ``cross_task_hits`` is κ effective at ``as_of``.
        """
        mem = Memory(state, self.config, self._half_lives)
        as_of = mem.clock()[0]
        at = as_of if as_of is not None else 0.0
        blocklist: dict[str, list[dict[str, object]]] = {}
        whitelist: dict[str, list[dict[str, object]]] = {}
        for task in self.config.tasks:
            blocklist[task] = [
                {
                    "signature": sig,
                    "severity": mem.severity(task, pattern, at),
                    "count": pattern.count,
                    "cross_task_hits": mem.kappa(pattern, at),
                }
                for sig, pattern in mem.patterns(task)
            ]
            whitelist[task] = [
                {"signature": sig, "confidence": entry.confidence, "count": entry.count}
                for sig, entry in mem.whites(task)
            ]
        return {
            "blocklist": blocklist,
            "whitelist": whitelist,
            "preempted_entities": list(mem.preempted()),
            "as_of": format_time(as_of) if as_of is not None else None,
        }
