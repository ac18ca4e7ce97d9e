"""The gate's per-candidate work (:class:`streams.worker.gate.Gate`) without a broker.

The gate loop is at least once: a re-delivered candidate is decided again and its decision MUST be the
same bytes, so that consumers can dedupe by ``candidate_id``. Records that are not candidates MUST come
back as failures for the dead-letter route, never as exceptions.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import DBPMConfig, DBPMEngine, GateEvent, load_ontology, parse_event
from schemas.common import Stage
from schemas.dbpm import Candidate, GateDecision, NerPayload, Verdict, VerdictLabel
from schemas.serde import SingleObjectSerde
from state.base import Transaction
from state.ram import RamStore
from streams.runtime.dlq import Rejected, SourceRecord
from streams.worker.gate import Gate
from topics.catalog import DBPM_CANDIDATES

SERDE = SingleObjectSerde()
ENGINE = DBPMEngine(DBPMConfig().with_flags(cross_task=False, maintenance=False), load_ontology())
TS = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)


def _record(value: bytes | None, offset: int = 0) -> SourceRecord:
    return SourceRecord(DBPM_CANDIDATES, 0, offset, None, b"p-1", value)


def _candidate(entity: str, n: int) -> Candidate:
    return Candidate(ts=TS, task="ner", patient_id="p-1", candidate_id=f"c-{n}",
                     payload=NerPayload(entity=entity, category="Symptoms"))  # fmt: skip


def _memory_with_failures(entity: str, count: int) -> RamStore:
    store = RamStore()
    with store.transaction() as txn:
        for i in range(count):
            verdict = Verdict(ts=TS, task="ner", verdict=VerdictLabel.HARD_FAIL, source="rule",
                              patient_id=f"p-{i}", candidate_id=f"v-{i}",
                              payload=NerPayload(entity=entity, category="Symptoms"))  # fmt: skip
            obj = {**verdict.model_dump(mode="json", exclude_none=True), "kind": "verdict"}
            event = parse_event(obj)
            ENGINE.process(txn, event, event.time)
    return store


@settings(max_examples=25, deadline=None)
@given(
    entity=st.sampled_from(["fever", "cough", "headache", "aspirin"]),
    failures=st.integers(min_value=0, max_value=6),
)
def test_a_redelivered_candidate_gets_the_same_decision_bytes(entity: str, failures: int) -> None:
    gate = Gate(ENGINE, SERDE, _memory_with_failures(entity, failures))
    value = SERDE.encode(_candidate(entity, 1))

    outcomes = []
    for offset in (0, 0, 7):  # first delivery, re-delivery, a later copy
        decoded = gate.decode(_record(value, offset))
        assert not isinstance(decoded, Rejected)
        outcomes.append(gate.decide(decoded))

    assert len({(o.key, o.value, o.decision) for o in outcomes}) == 1


def test_the_gate_decides_as_the_engine_does_on_the_same_memory() -> None:
    store = _memory_with_failures("fever", 5)
    gate = Gate(ENGINE, SERDE, store)
    candidate = _candidate("fever", 2)

    decoded = gate.decode(_record(SERDE.encode(candidate)))
    assert not isinstance(decoded, Rejected)
    outcome = gate.decide(decoded)

    event = parse_event({**candidate.model_dump(mode="json"), "kind": "gate"})
    assert isinstance(event, GateEvent)
    _, [expected] = ENGINE.process(Transaction(store), event, event.time)
    decision = SERDE.decode(outcome.value, GateDecision)
    assert (decision.decision, decision.rule) == (expected.decision, expected.rule)
    assert decision.candidate == candidate
    assert outcome.key == b"p-1"


def test_records_that_are_not_candidates_come_back_as_failures_for_the_dead_letter_topic() -> None:
    gate = Gate(ENGINE, SERDE, RamStore())

    garbage = gate.decode(_record(b"not avro"))
    tombstone = gate.decode(_record(None))

    assert isinstance(garbage, Rejected) and garbage.stage is Stage.DECODE
    assert isinstance(tombstone, Rejected) and tombstone.error_type == "TombstoneError"
