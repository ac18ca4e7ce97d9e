"""The DBPM engine facade: ``process(state, event, now) -> (state, outputs)``.

The engine is a pure function of its configuration, the ontology passed in, the state it is given
and the event: it reads no clock (``now`` is the event time), does no I/O and keeps nothing between
calls; all memory lives in the key-value state (a :class:`state.base.Transaction`), so an in-process
replay and a Kafka runtime run the same code on the same records.

Per event: (1) with maintenance ON, run the event-time maintenance of :mod:`.maintenance`; (2)
record the event time (``as_of``); (3) a verdict is applied to the memory (:mod:`.update`), a gate
event is decided (:mod:`.gates`) and its :class:`~processors.dbpm.gates.Decision` returned.
With the master switch (``Flags.disabled``) every gate ALLOWs and nothing is read or written.

In a replay every verdict is applied as given, also after a BLOCK; in a live pipeline a BLOCKed
candidate never reaches the verifier and so produces no verdict.
"""

from __future__ import annotations

from typing import TypeVar

from processors.dbpm.config import QA, RE, DBPMConfig
from processors.dbpm.events import Event, GateEvent, format_time
from processors.dbpm.gates import ALLOW, Decision, gate_ner, gate_qa, gate_relation
from processors.dbpm.maintenance import run_due
from processors.dbpm.memory import KeyValue, Memory, half_lives
from processors.dbpm.ontology import Ontology
from processors.dbpm.signatures import signature
from processors.dbpm.update import apply_verdict

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

    def process(self, state: S, event: Event, now: float) -> tuple[S, list[Decision]]:
        """Apply one event at event time ``now`` and return the state and the decisions it produced.

        Args:
            state: the key-value state (e.g. an open transaction); it is written in place and returned.
            event: a verdict (no output) or a gate event (one decision).
            now: the event time in seconds since the epoch (callers pass ``event.time``).

        Returns:
            ``(state, [])`` for a verdict, ``(state, [decision])`` for a gate event.
        """
        cfg = self.config
        if cfg.flags.disabled:
            if isinstance(event, GateEvent):
                sig = signature(event.task, event.payload)
                return state, [Decision(event.candidate_id, ALLOW, "disabled", event.task, sig, None, 0, 1.0)]
            return state, []
        mem = Memory(state, cfg, self._half_lives)
        as_of, tick = mem.clock()
        new_tick = run_due(mem, now, tick)[0] if cfg.flags.maintenance else tick
        if as_of is None or now > as_of or new_tick != tick:
            mem.set_clock(now if as_of is None or now > as_of else as_of, new_tick)
        if not isinstance(event, GateEvent):
            apply_verdict(mem, event, now)
            return state, []
        if event.task == RE:
            decision = gate_relation(mem, self.ontology, event, now)
        elif event.task == QA:
            decision = gate_qa(mem, event, now)
        else:
            decision = gate_ner(mem, event, now)
        return state, [decision]

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
