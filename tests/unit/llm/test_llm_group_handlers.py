"""The generator and verifier handlers on records, against the in-process test server (no broker)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from processors.clinical.vocabulary import DrugVocabulary
from processors.dbpm import DBPMEngine
from processors.dbpm.config import DBPMConfig
from processors.dbpm.ontology import load_ontology
from schemas.dbpm import Candidate, GateDecision, Narrative, QaPayload, Verdict
from schemas.serde import model_datum
from schemas.wire import make_serde
from streams.groups.generator import Generator
from streams.groups.llm import MeteredLlm
from streams.groups.metrics import LlmGroupMetrics
from streams.groups.verifier import Verifier
from streams.llm import ClientPolicy, Endpoint, LlmClient, Role
from streams.llm.serve.http import ChatRequest, Fault
from streams.llm.serve.testserver import DEFAULT_MODEL, OpenAiTestServer
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord
from topics.catalog import DBPM_DECISIONS, DBPM_NARRATIVES, DBPM_TO_VERIFY, DBPM_VERDICTS, DBPM_VERIFIED

SERDE = make_serde(None)
TS = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
NARRATIVE = "Patient abc-123 on Lanoxin; admitted with sepsis and treated with meropenem."
POLICY = ClientPolicy(timeout_s=2.0, max_retries=0)


class Narratives:
    """A fixed narrative source."""

    def __init__(self, texts: dict[tuple[str, datetime], str]) -> None:
        self.texts = texts

    async def get(self, patient_id: str, ts: datetime) -> str | None:
        return self.texts.get((patient_id, ts))


def _record(topic: str, key: str, value: Any) -> SourceRecord:
    return SourceRecord(topic, 0, 7, 0, key.encode(), SERDE.encode(value, topic=topic))


def _qa_decision(decision: str = "ALLOW") -> GateDecision:
    payload = QaPayload(question="What treatment?", answer="meropenem", category="treatment")
    candidate = Candidate(ts=TS, task="qa", patient_id="p1", candidate_id="c1", payload=payload)
    return GateDecision(ts=TS, task="qa", patient_id="p1", candidate_id="c1", decision=decision, rule="r",
                        signature="s", confidence_multiplier=1.0, candidate=candidate)  # fmt: skip


async def _run(handler: Any, record: SourceRecord) -> list[Output | Rejected]:
    outcome = handler(record)
    return list(await outcome if asyncio.iscoroutine(outcome) else outcome)


def _client(server: OpenAiTestServer, role: Role) -> LlmClient:
    return LlmClient({role: Endpoint(server.base_url, DEFAULT_MODEL)}, policy=POLICY)


def _verifier(client: LlmClient, metrics: LlmGroupMetrics, texts: dict) -> Verifier:
    engine = DBPMEngine(DBPMConfig(), load_ontology())
    return Verifier(MeteredLlm(client, metrics, "verifier"), SERDE, engine, Narratives(texts))


def test_an_ambiguous_qa_verdict_is_decided_by_three_differently_prompted_votes() -> None:
    """Scenario: the first QA verdict is garbled; two of three ensemble votes say FAIL (contradicted)."""

    def responder(request: ChatRequest) -> Any:
        system = request.messages[0]["content"]
        if "sceptical" in system or "audit" in system:
            return {"verdict": "FAIL", "error_class": "contradicted"}
        return {"verdict": "PASS"}

    async def scenario() -> None:
        async with OpenAiTestServer(responder=responder) as server:
            server.fault_hook = lambda r: Fault.schema_invalid() if "You verify" in r.prompt else None
            async with _client(server, Role.VERIFIER) as client:
                metrics = LlmGroupMetrics(CollectorRegistry())
                verifier = _verifier(client, metrics, {("p1", TS): NARRATIVE})
                outputs = await _run(verifier, _record(DBPM_TO_VERIFY, "p1", _qa_decision()))
            prompts = [tuple(m["content"] for m in body["messages"]) for body in server.requests]
            assert len(prompts) == 4 and len(set(prompts)) == 4
            assert {body["temperature"] for body in server.requests} == {0.0}
        [verdict_out] = outputs
        assert isinstance(verdict_out, Output) and verdict_out.topic == DBPM_VERDICTS
        verdict = SERDE.decode(verdict_out.value, Verdict, topic=DBPM_VERDICTS)
        assert verdict.verdict == "hard_fail" and verdict.source == "verifier_mmed"
        assert isinstance(verdict.payload, QaPayload) and verdict.payload.error_class == "contradicted"
        assert verdict_out.key.startswith(b"qa|")
        labels = {"task": "qa", "verdict": "hard_fail", "defaulted": "true"}
        assert metrics.registry.get_sample_value("clingate_llm_verdicts_total", labels) == 1.0

    asyncio.run(scenario())


def test_a_passing_candidate_is_published_verified_after_its_verdict() -> None:
    async def scenario() -> None:
        server = OpenAiTestServer(responder=lambda r: {"verdict": "PASS"})
        async with server, _client(server, Role.VERIFIER) as client:
            verifier = _verifier(client, LlmGroupMetrics(CollectorRegistry()), {("p1", TS): NARRATIVE})
            outputs = await _run(verifier, _record(DBPM_TO_VERIFY, "p1", _qa_decision()))
        assert [o.topic for o in outputs if isinstance(o, Output)] == [DBPM_VERDICTS, DBPM_VERIFIED]

    asyncio.run(scenario())


def test_a_candidate_without_its_narrative_is_dead_lettered_without_a_call() -> None:
    async def scenario() -> None:
        async with OpenAiTestServer() as server:
            async with _client(server, Role.VERIFIER) as client:
                verifier = _verifier(client, LlmGroupMetrics(CollectorRegistry()), {})
                [dead] = await _run(verifier, _record(DBPM_TO_VERIFY, "p1", _qa_decision()))
            assert server.requests == []
        assert isinstance(dead, Rejected) and dead.error_type == "NarrativeNotFound"

    asyncio.run(scenario())


def test_block_decisions_are_counted_as_saved_verifier_calls_and_produce_nothing() -> None:
    async def scenario() -> None:
        async with OpenAiTestServer() as server:
            async with _client(server, Role.VERIFIER) as client:
                metrics = LlmGroupMetrics(CollectorRegistry())
                verifier = _verifier(client, metrics, {})
                assert await _run(verifier, _record(DBPM_DECISIONS, "p1", _qa_decision("BLOCK"))) == []
                assert await _run(verifier, _record(DBPM_DECISIONS, "p1", _qa_decision("ALLOW"))) == []
                # A BLOCK whose model rejects it (a NER payload on a QA decision) and bytes that are no
                # decision at all count nothing, as the model path counts them.
                rejected = model_datum(_qa_decision("BLOCK"), None)
                ner = {"entity": "x", "category": "y"}
                rejected["candidate"]["payload"] = ("clingate.dbpm.NerPayload", ner)
                value = SERDE.write_datum(rejected, GateDecision, topic=DBPM_DECISIONS)
                for raw in (value, b"not avro", None):
                    record = SourceRecord(DBPM_DECISIONS, 0, 8, 0, b"p1", raw)
                    assert await _run(verifier, record) == []
            assert server.requests == []
        saved = metrics.registry.get_sample_value("clingate_llm_verifier_calls_saved_total", {"task": "qa"})
        assert saved == 1.0

    asyncio.run(scenario())


def test_generator_hints_reach_the_prompts_and_a_failed_call_dead_letters_the_narrative() -> None:
    """Scenario: every extraction answers except the QA question about risk factors (HTTP 400)."""

    def responder(request: ChatRequest) -> Any:
        fields = set(request.schema["properties"])
        if "entities" in fields:
            return {"entities": [{"entity": "sepsis", "category": "Diagnosis"}]}
        if "relations" in fields:
            return {"relations": [{"head": "meropenem", "head_type": "Medication", "relation": "TREATS",
                                   "tail": "sepsis", "tail_type": "Diagnosis"}]}  # fmt: skip
        return {"status": "ANSWERED", "answer": "meropenem"}

    async def scenario() -> None:
        async with OpenAiTestServer(responder=responder) as server:
            server.fault_hook = lambda r: Fault.http(400) if "risk factors" in r.prompt else None
            async with _client(server, Role.GENERATOR) as client:
                metrics = LlmGroupMetrics(CollectorRegistry())
                vocabulary = DrugVocabulary(synonyms={"lanoxin": ("digoxin",)})
                generator = Generator(MeteredLlm(client, metrics, "generator"), SERDE, vocabulary)
                narrative = Narrative(ts=TS, patient_id="p1", text=NARRATIVE)
                outputs = await _run(generator, _record(DBPM_NARRATIVES, "p1", narrative))
            user_turns = [body["messages"][1]["content"] for body in server.requests]
            assert all("abc-123" in turn and "digoxin" in turn for turn in user_turns)
            assert len(server.requests) == 13
        *found, dead = outputs
        tasks = [SERDE.decode(o.value, Candidate, topic=o.topic).task for o in found if isinstance(o, Output)]
        assert tasks == ["ner", "re"] + ["qa"] * 10
        assert isinstance(dead, Rejected) and dead.error_type == "LlmFailed:rejected"
        assert "could not process this request" in dead.reason

    asyncio.run(scenario())


def test_an_undecodable_narrative_is_dead_lettered_at_once() -> None:
    generator = Generator(None, SERDE, DrugVocabulary.empty())  # type: ignore[arg-type]
    [dead] = generator(SourceRecord(DBPM_NARRATIVES, 0, 1, 0, b"k", b"not avro"))  # type: ignore[misc]
    assert isinstance(dead, Rejected)
