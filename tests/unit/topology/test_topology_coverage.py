"""The gate's NER-coverage join on the topology driver: the gate loop's steps
(:class:`~streams.worker.gatesteps.GateSteps`) on the driver's clock, as production runs them.

The same scenario runs on a real broker through a SIGKILL in
``tests/integration/test_dbpm_worker.py``; here each step is visible: what is held, what a verdict
settles, what the wait releases."""

from __future__ import annotations

from processors.dbpm import parse_event
from processors.dbpm.config import QA
from schemas.dbpm import Candidate, Coverage, GateDecision
from state.base import Transaction
from streams.runtime.settings import Settings
from streams.testing.driver import TopologyDriver
from streams.testing.worker import COMPARISON_ENV
from streams.worker.keys import verdict_key
from streams.worker.wire import contract_event
from tests.dbpm_streams import coverage_narrative, ner_success
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_VERDICTS

WAIT_S = 300.0
SETTINGS = Settings(**{**COMPARISON_ENV, "CLINGATE_DBPM_COVERAGE_WAIT_S": str(WAIT_S)})  # type: ignore[arg-type]


def _verdict(driver: TopologyDriver, candidate: Candidate) -> None:
    verdict = ner_success(candidate)
    event = parse_event({"kind": "verdict", **verdict.model_dump(mode="json")})
    driver.pipe(DBPM_VERDICTS, verdict_key(driver.engine, event), verdict)


def _decisions(driver: TopologyDriver, patient: str) -> dict[str, list[GateDecision]]:
    found: dict[str, list[GateDecision]] = {}
    for decision in driver.values(DBPM_DECISIONS, GateDecision):
        if decision.patient_id == patient:
            found.setdefault(decision.candidate_id, []).append(decision)
    return found


def test_a_qa_candidate_waits_for_its_narratives_ner_verdicts_and_is_decided_with_their_categories() -> None:
    """Scenario: a narrative's NER and QA candidates arrive live; 12 s later the NER verdicts come.

    The QA candidates are held (no decision, counted held) until the last NER verdict is in the memory;
    then each is decided once, ``coverage`` settled after the 12 s it waited, with the NER category the
    verdicts accepted stamped on it: the decision the engine makes on the candidate so stamped, on the
    memory as it is then."""
    with TopologyDriver(SETTINGS) as driver:
        ner, qa = coverage_narrative("p-held")
        for candidate in (*ner, *qa):
            driver.pipe(DBPM_CANDIDATES, candidate.patient_id.encode(), candidate)
        assert set(_decisions(driver, "p-held")) == {c.candidate_id for c in ner}, "the QA ones are held"
        assert driver.dbpm_metrics.coverage_held._value.get() == len(qa)  # type: ignore[attr-defined]

        driver.advance(12.0)
        _verdict(driver, ner[0])
        assert set(_decisions(driver, "p-held")) == {c.candidate_id for c in ner}, "one NER still pending"
        _verdict(driver, ner[1])
        decided = _decisions(driver, "p-held")
        assert driver.dbpm_metrics.coverage_held._value.get() == 0  # type: ignore[attr-defined]
        for candidate in qa:
            [decision] = decided[candidate.candidate_id]
            assert decision.coverage is Coverage.SETTLED
            assert decision.coverage_wait_s == 12.0
            stamped = decision.candidate
            assert stamped.payload.ner_categories, "the accepted categories are stamped on it"  # type: ignore[union-attr]
            txn = Transaction(driver.memory_view)
            event = contract_event(stamped)
            assert driver.engine.decide(txn, event, event.time).decision == decision.decision.value  # type: ignore[arg-type]
            txn.abort()


def test_a_qa_candidate_whose_ner_verdicts_never_come_is_released_when_its_wait_runs_out() -> None:
    """Scenario: a narrative's NER and QA candidates arrive live and no verdict ever comes.

    Nothing is released before the wait ends; at its end each QA candidate is decided once, ``coverage``
    timeout after the whole wait; a narrative without NER candidates is not held at all (``no_ner``)."""
    with TopologyDriver(SETTINGS) as driver:
        ner, qa = coverage_narrative("p-slow")
        _, alone = coverage_narrative("p-alone")
        for candidate in (*ner, *qa, *alone):
            driver.pipe(DBPM_CANDIDATES, candidate.patient_id.encode(), candidate)
        assert {d.coverage for ds in _decisions(driver, "p-alone").values() for d in ds} == {Coverage.NO_NER}
        driver.advance(WAIT_S - 1)
        assert not any(c.candidate_id in _decisions(driver, "p-slow") for c in qa)
        driver.advance(1.0)
        decided = _decisions(driver, "p-slow")
        for candidate in qa:
            [decision] = decided[candidate.candidate_id]
            assert decision.task == QA
            assert decision.coverage is Coverage.TIMEOUT
            assert decision.coverage_wait_s == WAIT_S
