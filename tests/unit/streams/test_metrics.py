"""Worker metrics (:mod:`streams.runtime.metrics` and each area's ``metrics`` module): endpoint helper, lag,
population, lift, clinical, LLM."""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Mapping

import pytest
from prometheus_client import CollectorRegistry

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology, parse_event
from processors.dbpm.events import VerdictEvent
from processors.dbpm.measurement import (
    ChannelPopulation,
    PopulationReport,
    SelectivityCounts,
    VerdictOutcome,
    memory_population,
)
from processors.dbpm.memory import Memory
from schemas.clinical import ClinicalAssessment, TrafficLight
from state import RamStore
from streams.llm.calls import CallType
from streams.llm.metrics import LlmMetrics
from streams.llm.result import FailureKind, LlmFailed, LlmOk
from streams.runtime.metrics import ConsumerLag, LibrdkafkaLag, LoopMetrics, serve
from streams.testing.dbpm_stream import generate_events
from streams.worker import metrics as metrics_module
from streams.worker.metrics import (
    ALL_CATEGORIES,
    POPULATION_READS,
    ClinicalMetrics,
    DbpmMetrics,
    Selectivity,
    red_source,
)


def test_serve_exposes_the_registry_in_prometheus_text_and_close_frees_the_port() -> None:
    registry = CollectorRegistry()
    LlmMetrics(registry).calls.labels("docs", "operational", "ok").inc(3)
    endpoint = serve(registry, 0, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=5) as response:
            body = response.read().decode()
    finally:
        endpoint.close()
    assert 'clingate_llm_calls_total{call_type="operational",group="docs",outcome="ok"} 3.0' in body
    again = serve(registry, endpoint.port, addr="127.0.0.1")  # the port was released
    again.close()


def test_librdkafka_statistics_become_the_lag_of_each_assigned_partition() -> None:
    registry = CollectorRegistry()
    lag = LibrdkafkaLag(registry)
    lag.on_stats(json.dumps({"topics": {"clingate.docs.classifications": {"partitions": {
        "0": {"consumer_lag": 7}, "1": {"consumer_lag": -1}, "-1": {"consumer_lag": 99},
    }}}}))  # fmt: skip

    def sample(partition: str) -> float | None:
        labels = {"topic": "clingate.docs.classifications", "partition": partition}
        return registry.get_sample_value("clingate_consumer_lag", labels)

    assert (sample("0"), sample("1"), sample("-1")) == (7, None, None)
    assert lag.client_config()["statistics.interval.ms"] == 5000


def _verdict(task: str, patient_id: str, payload: dict[str, str], verdict: str) -> VerdictEvent:
    return VerdictEvent("2026-11-26T09:00:00Z", 0.0, task, verdict, "verifier_mmed", patient_id, payload)


def _qa(question: str, category: str = "diagnosis") -> dict[str, str]:
    return {"question": question, "answer": "A", "category": category}


def test_the_live_lift_and_its_interval_are_the_measurement_modules() -> None:
    registry = CollectorRegistry()
    selectivity = Selectivity()
    registry.register(selectivity)
    plan = [("DOWNGRADE", "hard_fail")] * 6 + [("ALLOW", "hard_fail")] * 4
    plan += [("DOWNGRADE", "success")] * 2 + [("ALLOW", "success")] * 8
    expected = SelectivityCounts()
    for i, (decision, verdict) in enumerate(plan):
        selectivity.gates([("qa", f"p{i}", _qa("Q?"), decision)])
        selectivity.verdicts([_verdict("qa", f"p{i}", _qa("Q?"), verdict)])
        outcome = VerdictOutcome.FAIL if verdict == "hard_fail" else VerdictOutcome.PASS
        expected = expected.record("qa", "diagnosis", outcome, decision == "DOWNGRADE")
    lift = expected.cell("qa", "diagnosis").lift()
    for category in ("diagnosis", ALL_CATEGORIES):
        labels = {"task": "qa", "category": category}
        assert registry.get_sample_value("clingate_dbpm_lift", labels) == lift.value
        assert registry.get_sample_value("clingate_dbpm_lift_ci_low", labels) == lift.ci_low
        assert registry.get_sample_value("clingate_dbpm_lift_ci_high", labels) == lift.ci_high
    pairs = {"task": "qa", "category": "diagnosis", "outcome": "FAIL", "tagged": "true"}
    assert registry.get_sample_value("clingate_dbpm_selectivity_pairs_total", pairs) == 6
    assert registry.get_sample_value("clingate_dbpm_selectivity_pending") == 0


def test_a_lift_tagging_only_fail_pairs_is_infinite_and_an_undefined_one_is_absent() -> None:
    registry = CollectorRegistry()
    selectivity = Selectivity()
    registry.register(selectivity)
    for i, (decision, verdict) in enumerate([("DOWNGRADE", "hard_fail"), ("ALLOW", "success")]):
        selectivity.gates([("ner", "p", {"text": f"t{i}", "category": "drug"}, decision)])
        selectivity.verdicts([_verdict("ner", "p", {"text": f"t{i}", "category": "drug"}, verdict)])
    relation = {"head": "a", "tail": "b", "head_type": "x", "tail_type": "y", "relation": "r"}
    selectivity.gates([("re", "p", relation, "ALLOW")])
    assert registry.get_sample_value("clingate_dbpm_lift", {"task": "ner", "category": "drug"}) == math.inf
    assert registry.get_sample_value("clingate_dbpm_lift_ci_low", {"task": "ner", "category": "drug"}) is None
    assert registry.get_sample_value("clingate_dbpm_lift", {"task": "re", "category": ALL_CATEGORIES}) is None
    assert registry.get_sample_value("clingate_dbpm_selectivity_pending") == 1


def test_memory_gauges_report_the_live_population_of_the_view() -> None:
    config = DBPMConfig()
    engine = DBPMEngine(config, load_ontology())
    store = RamStore()
    with store.transaction() as txn:
        for obj in generate_events(3_000):
            event = parse_event(obj)
            txn, _ = engine.process(txn, event, event.time)
    registry = CollectorRegistry()
    DbpmMetrics(registry).watch(store, config)
    registry.register(ConsumerLag(lambda: [("clingate.dbpm.verdicts", 0, 5)]))
    report = memory_population(Memory(store.transaction(), config), {})
    sample = registry.get_sample_value
    for c in report.channels:
        task = {"task": c.task}
        assert sample("clingate_dbpm_memory_patterns", {**task, "table": "B"}) == c.patterns
        assert sample("clingate_dbpm_memory_patterns", {**task, "table": "W"}) == c.whitelist
        assert sample("clingate_dbpm_memory_block_patterns", task) == c.block_eligible
        assert sample("clingate_dbpm_memory_downgrade_patterns", task) == c.downgrade_band
    assert sum(c.block_eligible for c in report.channels) > 0
    assert sample("clingate_consumer_lag", {"topic": "clingate.dbpm.verdicts", "partition": "0"}) == 5
    memory = Memory(store.transaction(), config)
    assert sample("clingate_dbpm_memory_held", {"table": "T"}) == memory.held(b"T") > 0
    assert sample("clingate_dbpm_memory_held", {"table": "P"}) == memory.held(b"P")
    assert sample("clingate_dbpm_memory_expired_total", {"table": "W"}) == memory.expired(b"W")


@pytest.mark.parametrize("refused", [1, POPULATION_READS])
def test_a_population_read_while_the_view_was_written_is_read_again_and_never_fails_the_scrape(
    monkeypatch: pytest.MonkeyPatch, refused: int
) -> None:
    """The first ``refused`` reads of a scrape count a pattern in a zone and not in the total (a read
    racing the gate's writes to its view): the population is read again; once every read was refused,
    its gauges are left out of that scrape and every other metric is still served."""
    config = DBPMConfig()
    calls: list[int] = []

    def racing(memory: Memory, fail_events: Mapping[str, int]) -> PopulationReport:
        calls.append(1)
        if len(calls) <= refused:
            ChannelPopulation("re", patterns=0, block_eligible=1)  # the counts the real read refused
        return memory_population(memory, fail_events)

    monkeypatch.setattr(metrics_module, "memory_population", racing)
    registry = CollectorRegistry()
    DbpmMetrics(registry).watch(RamStore(), config)
    LoopMetrics(registry)
    scraped = {family.name for family in registry.collect()}
    assert len(calls) == min(refused + 1, POPULATION_READS)
    assert ("clingate_dbpm_memory_patterns" in scraped) == (refused < POPULATION_READS)
    assert "clingate_store_cache_bytes" in scraped


def test_a_channel_that_consumed_fail_verdicts_but_blocks_nothing_is_inert() -> None:
    registry = CollectorRegistry()
    metrics = DbpmMetrics(registry)
    metrics.watch(RamStore(), DBPMConfig())
    metrics.verdicts_applied([_verdict("re", "p1", {"head": "a"}, "hard_fail")])
    assert registry.get_sample_value("clingate_dbpm_memory_channel_inert", {"task": "re"}) == 1
    assert registry.get_sample_value("clingate_dbpm_memory_channel_inert", {"task": "ner"}) == 0
    labels = {"task": "re", "verdict": "hard_fail", "source": "verifier_mmed"}
    assert registry.get_sample_value("clingate_dbpm_verdicts_total", labels) == 1


def test_red_lights_are_counted_by_their_rules_never_by_their_text() -> None:
    registry = CollectorRegistry()
    metrics = ClinicalMetrics(registry)
    light = TrafficLight(
        light="RED", shadow="RED",
        sources=["Base: deterministic inputs only -> GREEN", "Rule C: NTI CRITICAL", "Rule C: digoxin"],
    )  # fmt: skip
    metrics.assessed(ClinicalAssessment.model_construct(patient_id="p1", traffic_light=light))
    metrics.assessed(ClinicalAssessment.model_construct(
        patient_id="p2", traffic_light=TrafficLight(light="GREEN", shadow="GREEN", sources=["Rule C: x"])
    ))  # fmt: skip
    assert registry.get_sample_value("clingate_clinical_assessments_total", {"light": "RED"}) == 1
    assert registry.get_sample_value("clingate_clinical_assessments_total", {"light": "GREEN"}) == 1
    assert registry.get_sample_value("clingate_clinical_red_sources_total", {"source": "Rule C"}) == 1
    assert red_source("Base: deterministic inputs only -> GREEN") == "Base"


def test_llm_answers_are_counted_by_outcome_with_their_retries() -> None:
    registry = CollectorRegistry()
    metrics = LlmMetrics(registry)
    metrics.observe("docs", LlmOk(None, CallType.OPERATIONAL, "http://s/v1", "m", attempts=3, latency_s=0.2))
    failed = LlmFailed(FailureKind.TIMEOUT, "m", "d", CallType.OPERATIONAL, "http://s/v1", 4, 9.0)
    metrics.observe("docs", failed)
    docs = {"group": "docs", "call_type": "operational"}
    calls = "clingate_llm_calls_total"
    assert registry.get_sample_value(calls, {**docs, "outcome": "ok"}) == 1
    assert registry.get_sample_value(calls, {**docs, "outcome": "timeout"}) == 1
    assert registry.get_sample_value("clingate_llm_retries_total", docs) == 5
    assert registry.get_sample_value("clingate_llm_call_seconds_count", docs) == 2
