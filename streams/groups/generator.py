"""The generator consumer group: narratives -> schema-constrained extraction calls -> candidates.

``clingate generator`` reads ``clingate.dbpm.narratives`` (key patient id) and, per narrative, makes one
NER extraction call, one RE extraction call and one QA call per question template
(:data:`processors.dbpm.extraction.QA_TEMPLATES`), all at once, after deterministic pre-extraction of
patient ids and drug mentions as prompt hints (:mod:`processors.dbpm.extraction`). The answers become
``Candidate`` events on ``clingate.dbpm.candidates``, keyed by patient id with the murmur2 producer
of :func:`streams.runtime.kafka_clients.producer_config` (so a candidate lands on its patient's gate
partition), in a fixed order: NER, RE, then QA in template order. Their event time is this
process's clock when the narrative's calls returned (wall clock, paper Eq. 5); the narrative's date
travels as ``document_ts``.

Failures. A narrative that does not decode goes to ``clingate.dbpm.narratives.dlq`` (stage decode /
validate). A narrative some of whose calls failed (any :class:`~streams.llm.LlmFailed`: timeout, 5xx
after retries, 429, invalid or truncated output, circuit open) publishes the candidates of the calls
that succeeded and is dead-lettered once, stage ``process``, error type ``LlmFailed:<kinds>``, with
every failed call's clinician-safe message and operator detail. Re-driving the dead letter re-extracts
every task; the succeeded ones yield the same candidate ids (content-derived), so consumers dedupe.

Ordering and delivery: :class:`streams.groups.ordered.OrderedLoop` (per-partition input order; outputs
committed in one transaction with the group's progress; the calls of uncommitted records made again
after a crash).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime

from processors.clinical.vocabulary import DrugVocabulary
from processors.dbpm.extraction import QA_TEMPLATES, candidates, extraction_messages, hints_for, qa_payload
from schemas.dbpm import Candidate, Narrative
from schemas.serde import Serde
from streams.groups.llm import (
    MeteredLlm,
    default_serde,
    llm_failure,
    new_metrics,
    require_role,
    run_loop,
)
from streams.groups.metrics import LlmGroupMetrics
from streams.groups.ordered import Handled, OrderedLoop
from streams.llm import CallType, LlmClient, LlmFailed, LlmOk, Role, given_or_built
from streams.llm.schemas import NerExtraction, QaExtraction, ReExtraction
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord, decode_record
from streams.runtime.settings import Settings
from topics.catalog import DBPM_CANDIDATES, DBPM_NARRATIVES

GROUP = "generator"


@dataclass(frozen=True, slots=True)
class Generator:
    """The per-record handler of the generator group.

    Attributes:
        llm: the metered client.
        serde: the process serde.
        vocabulary: the drug dictionary of the hints (:meth:`DrugVocabulary.full` in production).
    """

    llm: MeteredLlm
    serde: Serde
    vocabulary: DrugVocabulary

    def __call__(self, record: SourceRecord) -> Handled | Awaitable[Handled]:
        """Decode a narrative; its extraction runs as a task (a decode failure returns at once)."""
        outcome = decode_record(self.serde, record, Narrative)
        if isinstance(outcome, Rejected):
            return [outcome]
        return self._extract(record, outcome.value)

    async def extract(self, narrative: Narrative) -> tuple[list[Candidate], list[LlmFailed]]:
        """All extraction calls of one narrative, concurrently; candidates in task order, failures."""
        hints = hints_for(narrative.text, self.vocabulary)
        text = narrative.text
        ner = self.llm.call(CallType.NER_EXTRACTION, NerExtraction, extraction_messages("ner", text, hints))
        rel = self.llm.call(CallType.RE_EXTRACTION, ReExtraction, extraction_messages("re", text, hints))
        qas = [
            self.llm.call(
                CallType.QA_EXTRACTION, QaExtraction, extraction_messages("qa", text, hints, question)
            )
            for question, _bucket in QA_TEMPLATES.values()
        ]
        ner_result, re_result, *qa_results = await asyncio.gather(ner, rel, *qas)
        extracted = datetime.now(UTC)
        out: list[Candidate] = []
        failed: list[LlmFailed] = []
        if isinstance(ner_result, LlmOk):
            entities = [e.model_dump() for e in ner_result.value.entities]
            out += candidates(narrative, "ner", entities, extracted)
        else:
            failed.append(ner_result)
        if isinstance(re_result, LlmOk):
            relations = [r.model_dump() for r in re_result.value.relations]
            out += candidates(narrative, "re", relations, extracted)
        else:
            failed.append(re_result)
        for category, result in zip(QA_TEMPLATES, qa_results, strict=True):
            if isinstance(result, LlmFailed):
                failed.append(result)
            elif result.value.status == "ANSWERED" and result.value.answer.strip():
                payload = qa_payload(category, result.value.answer.strip())
                out += candidates(narrative, "qa", [payload], extracted)
        return out, failed

    async def _extract(self, record: SourceRecord, narrative: Narrative) -> Handled:
        found, failed = await self.extract(narrative)
        outputs: list[Output | Rejected] = [
            Output(DBPM_CANDIDATES, c.patient_id.encode(), self.serde.encode(c, topic=DBPM_CANDIDATES))
            for c in found
        ]
        if failed:
            self.llm.metrics.unprocessed.labels(GROUP, "llm_failed").inc()
            outputs.append(llm_failure(record, Narrative.avro_name, failed))
        return outputs


async def run_generator(
    bootstrap: str,
    settings: Settings,
    *,
    stop: asyncio.Event,
    client: LlmClient | None = None,
    metrics: LlmGroupMetrics | None = None,
    vocabulary: DrugVocabulary | None = None,
    max_in_flight: int | None = None,
) -> OrderedLoop:
    """Run one generator group member until ``stop`` is set.

    Args:
        bootstrap: Kafka bootstrap servers.
        settings: the process settings (group id, in-flight bound, LLM servers).
        stop: set it to stop after the current step.
        client: the LLM client (default: built from the settings and closed on exit).
        metrics: where to count (default: a fresh registry).
        vocabulary: the drug dictionary (default: :meth:`DrugVocabulary.full`, ~2 s to load).
        max_in_flight: narratives at once (default ``settings.generator_max_in_flight``).

    Returns:
        The stopped loop (``processed`` counts records).

    Raises:
        RoleDisabledError: no generator server is configured.
    """
    meters = metrics or new_metrics()
    serde = default_serde(settings)
    async with given_or_built(client, settings) as llm_client:
        require_role(llm_client, settings, Role.GENERATOR)
        vocab = vocabulary if vocabulary is not None else DrugVocabulary.full()
        return await run_loop(
            bootstrap, group_id=settings.generator_group_id, topics=[DBPM_NARRATIVES],
            handler=Generator(MeteredLlm(llm_client, meters, GROUP), serde, vocab),
            expected_schema=Narrative.avro_name,
            max_in_flight=max_in_flight or settings.generator_max_in_flight,
            session_timeout_s=settings.consumer_session_timeout_s,
            metrics=meters, group=GROUP, serde=serde, stop=stop,
        )  # fmt: skip
