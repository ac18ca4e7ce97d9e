"""Bad records through the topology driver: each lands in its topic's DLQ once, the rest flows unchanged.

A fixed good stream touches every topic the driver's runtimes consume (candidates, verdicts,
propagations, the three clinical inputs, classifications, reviews); bad records are mixed into it:
random bytes, a good record truncated, a good record with a bit of its schema header flipped, another
topic's record, a tombstone, a good record under a wrong key (where the runtime checks keys), a
verdict with a garbage ``clingate-watermark`` header, a 2 MB value. Every bad record goes whole, with
its key and headers, to ``<topic>.dlq`` exactly once, with its coordinates, a stage and a reason, and
is counted by its runtime; the good records' outputs (every output topic, byte for byte and in order)
and the memory are those of the good stream alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.dbpm import parse_event
from schemas.base import AvroModel
from schemas.clinical import Deliverable
from schemas.dbpm import Candidate, Verdict
from schemas.wire import make_serde
from streams.demo.plan import verify_example
from streams.runtime.dlq import SourceRecord
from streams.runtime.settings import Settings
from streams.testing.dbpm_stream import generate_events
from streams.testing.driver import TopologyDriver
from streams.worker.engine import dbpm_engine
from streams.worker.keys import verdict_key
from tests.clinical_scenario import concur_review, scenario
from tests.unit.topology.bad_records import KINDS, Piped, applies
from tests.unit.topology.test_topology_arbiter import _review
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_REVIEWS,
    CLINICAL_SAFETY_AUDITS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_PROPAGATIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
    FHIR_UPDATES,
)

SETTINGS = Settings(CLINGATE_DBPM_MAINTENANCE=False)
"""Cross-task propagation on (the default), so good verdicts send evidence through the propagations topic."""
CONSUMED = (DBPM_CANDIDATES, DBPM_VERDICTS, DBPM_PROPAGATIONS, FHIR_UPDATES, CLINICAL_REVIEWS,
            CLINICAL_DELIVERABLES, DOCS_CLASSIFICATIONS, DOCS_REVIEWS)  # fmt: skip
"""Every topic a runtime of the driver consumes."""
OUTPUTS = (DBPM_DECISIONS, DBPM_TO_VERIFY, CLINICAL_ASSESSMENTS, CLINICAL_SAFETY_AUDITS, DOCS_DISPOSITIONS,
           DOCS_REVIEW_PACKETS, DOCS_GROUND_TRUTH)  # fmt: skip
"""The topics the good records' outputs go to (propagations carry their origin offset, so they are
compared through the memory they build)."""


def _model(obj: dict[str, Any], model: type[AvroModel]) -> AvroModel:
    return model.model_validate({k: v for k, v in obj.items() if k != "kind"})


@cache
def good_stream() -> tuple[Piped, ...]:
    """The good records: DBPM events (a failed relation among them, so evidence propagates), a patient's
    first FHIR updates, a review and a deliverable, two classifications and a review of the escalated one."""
    serde, engine = make_serde(None), dbpm_engine(SETTINGS)
    relation = {"kind": "verdict", "ts": "2026-05-04T00:00:00Z", "task": "re", "verdict": "hard_fail",
                "source": "verifier_mmed", "patient_id": "p-x", "payload": {
                    "head": "metformin", "head_type": "Treatment", "relation": "TREATS", "tail": "pneumonia",
                    "tail_type": "Diagnosis"}}  # fmt: skip
    piped: list[Piped] = []
    for obj in [relation, *generate_events(30)]:
        if obj["kind"] == "gate":
            candidate = _model(obj, Candidate)
            piped.append(Piped(DBPM_CANDIDATES, obj["patient_id"].encode(), serde.encode(candidate)))
        else:
            key = verdict_key(engine, parse_event(obj))  # type: ignore[arg-type]
            piped.append(Piped(DBPM_VERDICTS, key, serde.encode(_model(obj, Verdict))))
    updates, _, _ = scenario()
    review = concur_review()
    deliverable = {"patient_id": review.patient_id, "deliverable_id": "d1", "event_time": review.event_time,
                   "text": "Care plan reviewed."}  # fmt: skip
    clinical = [(FHIR_UPDATES, u) for u in updates[:4]]
    clinical += [(CLINICAL_REVIEWS, review), (CLINICAL_DELIVERABLES, Deliverable.model_validate(deliverable))]
    piped += [Piped(topic, m.patient_id.encode(), serde.encode(m)) for topic, m in clinical]  # type: ignore[attr-defined]
    requests = [verify_example(case)[0] for case in ("quest", "clean")]
    piped += [Piped(DOCS_CLASSIFICATIONS, r.doc_id.encode(), serde.encode(r)) for r in requests]
    packet = verify_example("quest")[1].packet
    piped.append(Piped(DOCS_REVIEWS, packet.doc_id.encode(), serde.encode(_review(packet, 1))))
    return tuple(piped)


@dataclass(frozen=True)
class Run:
    """What a driver made of a stream."""

    outputs: dict[str, list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]]]
    memory: dict[str, object]
    stored: list[SourceRecord]
    """The piped records as stored (coordinates), in pipe order."""
    dead: dict[str, list[Any]]
    counted: dict[str, float]


def _counted(driver: TopologyDriver) -> dict[str, float]:
    """Dead letters each runtime counted, by source topic."""
    counters = [driver.dbpm_metrics.dead_letters, driver.clinical_metrics.dead_letters,
                driver.docs_metrics.dead_letters]  # fmt: skip
    counted: dict[str, float] = {}
    for counter in counters:
        for metric in counter.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    topic = sample.labels["topic"]
                    counted[topic] = counted.get(topic, 0) + sample.value
    return counted


def run(stream: list[Piped]) -> Run:
    """Pipe ``stream`` through a fresh driver."""
    with TopologyDriver(SETTINGS) as driver:
        stored = [driver.pipe(p.topic, p.key, p.value, p.headers) for p in stream]
        outputs = {t: [(r.partition, r.key, r.value, r.headers) for r in driver.records(t)] for t in OUTPUTS}
        dead = {t: driver.dead_letters(t) for t in CONSUMED}
        return Run(outputs, driver.memory_state(), stored, dead, _counted(driver))


@cache
def baseline() -> Run:
    """The good stream alone."""
    return run(list(good_stream()))


@cache
def samples() -> dict[str, Piped]:
    """A good record of every consumed topic (the propagation: one the good stream's memory sent)."""
    with TopologyDriver(SETTINGS) as driver:
        for p in good_stream():
            driver.pipe(p.topic, p.key, p.value, p.headers)
        [propagation, *_] = driver.records(DBPM_PROPAGATIONS)
    found = {p.topic: p for p in reversed(good_stream())}
    found[DBPM_PROPAGATIONS] = Piped(DBPM_PROPAGATIONS, propagation.key, propagation.value)
    return found


def bad_record(kind: str, topic: str, rng: random.Random) -> Piped:
    """A bad record of ``kind`` on ``topic``, made from the topic's sample and the other topics'."""
    others = [samples()[t].value or b"" for t in CONSUMED if t != topic]
    return KINDS[kind](samples()[topic], others, rng)


@st.composite
def bad_records(draw: st.DrawFn) -> Piped:
    """A bad record of any applicable kind on any consumed topic."""
    topic = draw(st.sampled_from(CONSUMED))
    kind = draw(st.sampled_from([k for k in KINDS if applies(k, topic)]))
    return bad_record(kind, topic, random.Random(draw(st.integers(0, 2**32))))


def assert_dead_lettered_alone(bad: list[tuple[int, Piped]]) -> None:
    """Mix ``bad`` (position in the good stream, record) into the good stream; check the module's claims."""
    stream = list(good_stream())
    for position, record in sorted(bad, key=lambda pb: pb[0], reverse=True):
        stream.insert(position, record)
    bad_ids = {id(r) for _, r in bad}
    got = run(stream)
    base = baseline()

    assert got.outputs == base.outputs
    assert got.memory == base.memory
    for topic in CONSUMED:
        mine = [
            (p, s) for p, s in zip(stream, got.stored, strict=True) if p.topic == topic and id(p) in bad_ids
        ]
        letters = got.dead[topic]
        assert [(d.letter.partition, d.letter.offset) for d in letters] == [
            (s.partition, s.offset) for _, s in mine
        ]
        for (piped, _), dead in zip(mine, letters, strict=True):
            assert (dead.letter.topic, dead.letter.key, dead.letter.value) == (topic, piped.key, piped.value)
            assert [(h.key, h.value) for h in dead.letter.headers] == list(piped.headers)
            assert (
                dead.letter.error
                and dead.headers["exception"]
                and dead.letter.stage.value in {"decode", "validate"}
            )
            assert dead.record.key == piped.key
        assert got.counted.get(topic, 0) == len(mine)


def test_the_good_stream_alone_has_outputs_everywhere_and_no_dead_letter() -> None:
    """The baseline the properties compare with touches every output topic and dead-letters nothing."""
    base = baseline()
    assert all(base.outputs[t] for t in OUTPUTS), {t: len(v) for t, v in base.outputs.items()}
    assert all(not letters for letters in base.dead.values())
    assert {p.topic for p in good_stream()} | {DBPM_PROPAGATIONS} == set(CONSUMED)


def test_every_kind_of_bad_record_on_every_consumed_topic_is_dead_lettered_once() -> None:
    """Scenario: one bad record of every applicable kind on every consumed topic, spread over the good
    stream (a 2 MB value included on each topic)."""
    rng = random.Random(5)
    draws = [(kind, topic) for topic in CONSUMED for kind in KINDS if applies(kind, topic)]
    bad = [(rng.randrange(len(good_stream()) + 1), bad_record(kind, topic, rng)) for kind, topic in draws]
    assert_dead_lettered_alone(bad)


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(st.integers(0, 60), bad_records()), min_size=1, max_size=4))
def test_any_bad_records_anywhere_are_dead_lettered_once_and_change_no_good_output(
    bad: list[tuple[int, Piped]],
) -> None:
    """Property: any bad records at any positions of the good stream."""
    assert_dead_lettered_alone([(min(p, len(good_stream())), r) for p, r in bad])
