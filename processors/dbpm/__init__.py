"""DBPM, Dynamic Bidirectional Pattern Memory (arXiv 2607.00870), as a pure, deterministic engine.

Public API (stable; the Kafka runtime, the replay command and the measurement tools use only this)::

    from processors.dbpm import DBPMConfig, DBPMEngine, Flags, load_ontology, parse_event
    from state import RamStore            # or state.rocksdb.RocksDBStore(path)

    engine = DBPMEngine(DBPMConfig(), load_ontology())
    store = RamStore()
    with store.transaction() as txn:         # commits atomically on exit
        event = parse_event(json_object)     # raises BadEvent on contract violations
        txn, decisions = engine.process(txn, event, event.time)
    engine.snapshot(store.transaction())     # the replay contract's state document

* :class:`DBPMEngine` ``.process(state, event, now) -> (state, [GateRuling])``: ``state`` is any
  key-value object with get / exists / set / delete / iter_prefix (a :class:`state.base.Transaction`);
  ``now`` MUST be the event time (seconds since the epoch); a gate event yields one :class:`GateRuling`
  (``decision`` ALLOW | DOWNGRADE | BLOCK, ``rule``, ``severity``, ``support``, ``multiplier``,
  ``sources``, ``policy``; ``to_json(provenance)`` gives the contract's decision line).
* :class:`DBPMConfig` (frozen; ``with_flags(**changes)``) and :class:`Flags`: every constant of the
  paper with its citation, and the ablation flags of Table 12.
* :func:`parse_event` / :class:`VerdictEvent` / :class:`GateEvent` / :class:`BadEvent`: the replay
  contract's events; :class:`PinEvent`, an operator's pin (``engine.pin(state, event)``,
  :mod:`.pins`); :func:`parse_time` / :func:`format_time` for its timestamps.
* :func:`load_ontology` / :class:`Ontology`: Eq. 6 (``violates``), the RE gate's admitted check
  (``admits``); :func:`processors.dbpm.ontology.filter_verdict` is the Filter's rule-based verdict on a
  live candidate.
* Gate outcome constants :data:`ALLOW`, :data:`DOWNGRADE`, :data:`BLOCK`.
* Partitioned runtimes: ``engine.learn(state, verdict, now) -> (state, [Propagation] | None)``
  applies a verdict to its own signature's records and returns the cross-task evidence (§4.4) as
  :class:`Propagation` events keyed by their target (None: a duplicate of its candidate's verdict,
  not applied, :mod:`.ledger`); ``engine.propagate(state, propagation)``
  applies one at the target's writer. ``process`` does both inline.

Modules: ``config`` (parameters, flags), ``signatures`` (§3.1), ``events`` (contract), ``ontology``
(§4.7), ``memory`` (store layout, lazy decay, eviction index), ``update`` (Algorithm 1, §4.4),
``gates`` (Eq. 4, §4.7, §4.8), ``pins`` (operator pins), ``maintenance`` (§4.6), ``ledger`` (one
verdict per candidate), ``engine`` (facade). Each module docstring records the choices made where the
paper is silent.
"""

from processors.dbpm.config import DBPMConfig, Flags, TaskParams
from processors.dbpm.engine import DBPMEngine
from processors.dbpm.events import (
    BadEvent,
    Event,
    GateEvent,
    PinEvent,
    VerdictEvent,
    format_time,
    parse_event,
    parse_time,
)
from processors.dbpm.gates import ALLOW, BLOCK, DOWNGRADE, GateRuling
from processors.dbpm.ontology import Ontology, load_ontology
from processors.dbpm.update import Propagation

__all__ = [
    "ALLOW",
    "BLOCK",
    "DOWNGRADE",
    "BadEvent",
    "DBPMConfig",
    "DBPMEngine",
    "Event",
    "Flags",
    "GateEvent",
    "GateRuling",
    "Ontology",
    "PinEvent",
    "Propagation",
    "TaskParams",
    "VerdictEvent",
    "format_time",
    "load_ontology",
    "parse_event",
    "parse_time",
]
