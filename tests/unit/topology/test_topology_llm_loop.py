"""The whole DBPM loop through the topology driver: narratives -> generator -> gate -> verifier -> memory.

The generator and verifier handlers (:class:`~streams.groups.generator.Generator`,
:class:`~streams.groups.verifier.Verifier`) call the production LLM client against the in-process test
server, here answering as the demo's script does (the synthetic stream's planned candidates and
verdicts, :mod:`streams.demo.llm`) or with one hallucinated entity the verifier fails; the gate and the
memory writer run as everywhere on the driver. Each piped
narrative is processed to the end (its candidates decided, verified and learnt) before the next, the
order of the demo's lockstep slice, so the demo's own check holds without a broker: decisions and
memory equal the in-process engine's on the loop's events (:func:`streams.demo.plan.loop_reference`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from prometheus_client import Counter

from processors.dbpm.config import RULE_BASED
from processors.dbpm.ontology import FILTER_ID_SUFFIX
from schemas.dbpm import Candidate, GateAction, GateDecision, Narrative, NerPayload, Verdict
from streams.demo.llm import LoopPlan, loop_plan, script_responder
from streams.demo.plan import demo_stream, engine_run, last_time, loop_reference
from streams.groups.metrics import LlmGroupMetrics
from streams.llm import ClientPolicy, Endpoint, LlmClient, Role
from streams.llm.serve.testserver import DEFAULT_MODEL, OpenAiTestServer, Responder
from streams.runtime.settings import Settings
from streams.testing.driver import TopologyDriver
from tests.llm_answers import FAILING_ENTITY, clinical_responder, verdict_requests
from tests.unit.topology.bad_records import KINDS, Piped, applies
from topics.catalog import (
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
)

SETTINGS = Settings(CLINGATE_DBPM_MAINTENANCE=False, CLINGATE_DBPM_CROSS_TASK=False)
"""The configuration in which the loop's memory equals the in-process engine's event for event: with
cross-task propagation on, a propagation reaches its target one hop later than inline, after verdicts
the engine applies after it (a Filter verdict, published as its candidate is decided, propagates to an
entity before the entity's own verdict inline, after it on the loop); the topology tests of the memory
prove propagation with the hop."""


@contextmanager
def llm_groups(
    settings: Settings, responder: Responder
) -> Iterator[tuple[TopologyDriver, LlmGroupMetrics, OpenAiTestServer]]:
    """A driver with the LLM groups, their client on a test server answering with ``responder``."""
    with TopologyDriver(settings) as driver:
        server = OpenAiTestServer(models=[DEFAULT_MODEL], responder=responder)
        base = driver.run(server.start())
        roles = {role: Endpoint(base, DEFAULT_MODEL) for role in (Role.GENERATOR, Role.VERIFIER)}
        client = LlmClient(roles, policy=ClientPolicy(timeout_s=10.0, max_retries=0))
        try:
            yield driver, driver.add_llm_groups(client), server
        finally:
            driver.run(client.aclose())
            driver.run(server.stop())


@contextmanager
def llm_loop(loop: LoopPlan) -> Iterator[tuple[TopologyDriver, LlmGroupMetrics]]:
    """The LLM groups on a test server answering ``loop``'s script (the demo's)."""
    with llm_groups(SETTINGS, script_responder(loop.answers)) as (driver, metrics, _server):
        yield driver, metrics


def _total(counter: Counter) -> float:
    return sum(s.value for m in counter.collect() for s in m.samples if s.name.endswith("_total"))


def test_the_loop_decides_and_learns_like_the_in_process_engine_and_bad_records_are_dead_lettered() -> None:
    """Scenario: the narratives of four synthetic patients and, after the second, a bad record of every
    kind that applies on both LLM groups' input topics (random bytes, truncated, flipped header, another
    schema, tombstone, 2 MB).

    The generator emits exactly the planned candidates; every candidate is decided, every one let
    through is verified into one verdict, every BLOCK counts as a verifier call saved; decisions and the
    memory (read from its changelog) are the in-process engine's on the loop's events; each bad record
    is one dead letter, whole, on its topic's DLQ.
    """
    loop = loop_plan(demo_stream(4))
    rng = random.Random(11)
    bad: list[Piped] = []
    with llm_loop(loop) as (driver, metrics):
        for index, narrative in enumerate(loop.narratives):
            driver.pipe(DBPM_NARRATIVES, narrative.patient_id.encode(), narrative)
            if index == 1:
                good = [
                    Piped(r.topic, r.key, r.value)
                    for r in driver.records(DBPM_NARRATIVES, DBPM_TO_VERIFY)[:2]
                ]
                bad = [
                    KINDS[kind](sample, [other.value or b""], rng)
                    for sample, other in (good, good[::-1])
                    for kind in KINDS
                    if applies(kind, sample.topic)
                ]
                for record in bad:
                    driver.pipe(record.topic, record.key, record.value, record.headers)
        candidates = driver.values(DBPM_CANDIDATES, Candidate)
        decided = {d.candidate_id: d for d in driver.values(DBPM_DECISIONS, GateDecision)}
        decisions = {cid: d.decision.value for cid, d in decided.items()}
        verdicts = {v.candidate_id: v for v in driver.values(DBPM_VERDICTS, Verdict)}
        emitted = {n.patient_id: [c for c in candidates if c.patient_id == n.patient_id]
                   for n in loop.narratives}  # fmt: skip
        # As decided: a QA candidate with the NER categories the coverage join stamped on it.
        stamped = {
            patient: [decided[c.candidate_id].candidate for c in found] for patient, found in emitted.items()
        }
        events = loop_reference(loop, stamped, verdicts)
        state = driver.memory_state(last_time(events))
        dead = [d.letter for topic in (DBPM_NARRATIVES, DBPM_TO_VERIFY) for d in driver.dead_letters(topic)]
        engine = driver.engine

    def planned(candidate: Candidate) -> Candidate:
        return candidate.model_copy(update={"ts": candidate.document_ts})

    assert {patient: [planned(c) for c in found] for patient, found in emitted.items()} == loop.candidates
    reference = engine_run(engine, events, 0)
    assert decisions == reference.decisions
    assert state == reference.state
    blocked = sum(d == GateAction.BLOCK.value for d in decisions.values())
    filtered = {c for c, v in verdicts.items() if v.source == RULE_BASED}
    assert filtered and all(c.endswith(FILTER_ID_SUFFIX) for c in filtered)
    assert set(verdicts) - filtered == {c for c, d in decisions.items() if d != GateAction.BLOCK.value}
    assert _total(metrics.calls_saved) == blocked
    assert {r.topic for r in bad} == {DBPM_NARRATIVES, DBPM_TO_VERIFY} and len(bad) == 12
    assert [(d.topic, d.key, d.value) for d in dead] == [(r.topic, r.key, r.value) for r in bad]


def test_a_candidate_without_its_narrative_is_dead_lettered_by_the_verifier() -> None:
    """Scenario: a to-verify record whose candidate names a narrative date nothing was published at.

    The verifier finds no narrative and dead-letters it (``NarrativeNotFound``, stage ``process``)
    without a call; no verdict is invented.
    """
    loop = loop_plan(demo_stream(1))
    with llm_loop(loop) as (driver, metrics):
        driver.pipe(DBPM_NARRATIVES, loop.narratives[0].patient_id.encode(), loop.narratives[0])
        decision = driver.values(DBPM_TO_VERIFY, GateDecision)[0]
        later = decision.ts + timedelta(days=1)
        orphan = decision.model_copy(update={"candidate": decision.candidate.model_copy(
            update={"document_ts": later})})  # fmt: skip
        verdicts, calls = len(driver.records(DBPM_VERDICTS)), _total(metrics.llm.calls)
        driver.pipe(DBPM_TO_VERIFY, decision.patient_id.encode(), orphan)
        [letter] = driver.dead_letters(DBPM_TO_VERIFY)
        assert (len(driver.records(DBPM_VERDICTS)), _total(metrics.llm.calls)) == (verdicts, calls)
    assert (letter.headers["exception"], letter.headers["stage"]) == ("NarrativeNotFound", "process")


def test_verifier_fails_teach_the_memory_until_the_gate_blocks_without_a_verifier_call() -> None:
    """Scenario: narratives of different patients all yield the same hallucinated entity, which the
    verifier fails (the worker's default settings).

    Narratives in -> generator candidates -> gate decisions -> verifier FAIL verdicts -> memory. After
    enough corroborating FAILs (more than one: the memory's minimum support) the gate BLOCKs the next
    identical candidate, which never reaches the verifier: the server answered one verdict call per
    earlier narrative and none after, and the BLOCK is counted as a saved call.
    """
    with llm_groups(Settings(), clinical_responder) as (driver, metrics, server):
        blocked_at = None
        for i in range(10):
            text = f"Patient p{i} was admitted; the team suspected {FAILING_ENTITY}."
            narrative = Narrative(ts=datetime(2026, 5, 4, 10, i, tzinfo=UTC), patient_id=f"p{i}", text=text)
            driver.pipe(DBPM_NARRATIVES, narrative.patient_id.encode(), narrative)
            [decision] = [d for d in driver.values(DBPM_DECISIONS, GateDecision) if d.patient_id == f"p{i}"]
            if decision.decision is GateAction.BLOCK:
                blocked_at = i
                break
        verdicts = driver.values(DBPM_VERDICTS, Verdict)
        verified = driver.records(DBPM_VERIFIED)
        calls = verdict_requests(server)
    saved = metrics.registry.get_sample_value("clingate_llm_verifier_calls_saved_total", {"task": "ner"})
    made = metrics.registry.get_sample_value(
        "clingate_llm_calls_total", {"group": "verifier", "call_type": "ner_verdict", "outcome": "ok"}
    )

    assert blocked_at is not None and blocked_at >= 2, "min support: no single FAIL blocks"
    assert calls == made == len(verdicts) == blocked_at
    assert saved == 1.0
    assert {(v.verdict, v.source) for v in verdicts} == {("hard_fail", "verifier_mmed")}
    assert {v.payload for v in verdicts} == {NerPayload(entity=FAILING_ENTITY, category="Diagnosis")}
    assert verified == []
