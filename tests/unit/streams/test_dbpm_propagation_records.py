"""Propagation events on the wire: their key finds the target's verdict partition, their value is exact.

No broker: the properties the memory writer relies on when it sends evidence to
``clingate.dbpm.propagations`` (:mod:`streams.worker.memory`).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, Propagation, VerdictEvent, load_ontology, parse_event
from processors.dbpm.events import format_time
from schemas.dbpm import Propagation as PropagationRecord
from schemas.wire import make_serde
from state import RamStore
from streams.runtime.dlq import SourceRecord
from streams.worker.keys import propagation_key, verdict_key
from streams.worker.wire import Evidence, decode_propagation, propagation_datum
from topics.catalog import DBPM_PROPAGATIONS

ENGINE = DBPMEngine(DBPMConfig().with_flags(maintenance=False), load_ontology())
SERDE = make_serde(None)
_entities = st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=40)
_times = st.integers(0, 4_000_000_000 * 10**6).map(lambda us: us / 1e6)


def _verdict(task: str, verdict: str, payload: dict[str, str], at: float) -> VerdictEvent:
    event = parse_event({"kind": "verdict", "ts": format_time(at), "task": task, "verdict": verdict,
                         "source": "verifier_mmed", "patient_id": "p1", "payload": payload})  # fmt: skip
    assert isinstance(event, VerdictEvent)
    return event


@settings(max_examples=150, deadline=None)
@given(head=_entities, tail=_entities, verdict=st.sampled_from(["hard_fail", "soft_downgrade", "success"]))
def test_a_propagation_is_keyed_like_the_verdicts_of_its_target(head: str, tail: str, verdict: str) -> None:
    relation = {"head": head, "head_type": "Treatment", "relation": "TREATS", "tail": tail,
                "tail_type": "Diagnosis"}  # fmt: skip
    _, propagations = ENGINE.learn(RamStore().transaction(), _verdict("re", "hard_fail", relation, 0.0), 0.0)
    targets = {
        verdict_key(ENGINE, _verdict("ner", verdict, {"entity": e, "category": "x"}, 0.0))
        for e in (head, tail)
    }
    assert {propagation_key(p) for p in propagations} <= targets


@settings(max_examples=150, deadline=None)
@given(
    signature=_entities,
    time=_times,
    weight=st.floats(0.0, 1.0),
    origin=st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1)),
)
def test_a_propagation_survives_the_wire_exactly(
    signature: str, time: float, weight: float, origin: tuple[int, int, int]
) -> None:
    propagation = Propagation("ner", signature, weight, "cross_task_re", time, "re", "a|b|c", "p1")
    datum = propagation_datum(propagation, *origin)
    value = SERDE.write_datum(datum, PropagationRecord, topic=DBPM_PROPAGATIONS)
    record = SourceRecord(DBPM_PROPAGATIONS, 0, 0, None, propagation_key(propagation), value)
    assert decode_propagation(SERDE, record) == Evidence(propagation, *origin)
