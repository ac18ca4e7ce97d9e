"""The verifier consumer group: to-verify -> schema-constrained verdict calls -> verdicts, verified.

``clingate verifier`` reads ``clingate.dbpm.to-verify`` (the gate's ALLOW and DOWNGRADE decisions;
BLOCKed candidates never reach it) and judges each candidate against its narrative with the verdict
schema of its task (``NerVerdict``, ``ReVerdict``, ``QaVerdict``). The answer is turned into a verdict
by code (:mod:`processors.dbpm.verification`: conservative pass, the QA three-vote ensemble with varied
prompts, the memory mapping) and published:

* the memory verdict (``hard_fail`` / ``soft_downgrade`` / ``success``, source ``verifier_mmed``) on
  ``clingate.dbpm.verdicts``, keyed by :func:`streams.worker.keys.verdict_key` with the murmur2 producer, so
  the memory writer owning the signature applies it. Its event time is this process's clock when the
  verdict was decided (wall clock, paper §3.2 and Eq. 5), and it carries the rejection-log fields of
  the paper's Table 7 (stage ``verifier``, reason, confidence). It carries the candidate's
  ``candidate_id``, so a verdict published again (this group is at least once: a crash re-issues the
  calls of uncommitted records; a re-emitted decision is verified again) is recognised by the memory
  and applied once (:mod:`processors.dbpm.ledger`), whatever its time;
* a passing candidate (success or soft_downgrade) on ``clingate.dbpm.verified``, keyed by patient id,
  with headers ``clingate-gate`` (ALLOW / DOWNGRADE), ``clingate-confidence`` (the gate's multiplier,
  0.7 for DOWNGRADE) and ``clingate-verdict`` (PASS, PASS_STRONG, PASS_WEAK), so the downgrade tag
  travels with it (paper §4.2: a downgraded candidate passes, tagged).

Where the narrative comes from (choice). A candidate does not carry its narrative text (the replay
contract's candidate has none, and copying the text into every candidate, decision and to-verify record
would multiply the narrative bytes on three topics by the candidates per narrative). The verifier
instead follows ``clingate.dbpm.narratives`` itself (:class:`NarrativeCache`: every partition from the
beginning, no consumer group, like a Kafka Streams global table) and finds a candidate's narrative by
``(patient_id, document_ts)``: the generator gives every candidate its narrative's date (a candidate
without one, from a replay stream, is looked up by its ``ts``). Memory is bounded
(``CLINGATE_VERIFIER_NARRATIVE_CACHE`` narratives, least recently used evicted). A candidate whose
narrative is not found within ``CLINGATE_VERIFIER_NARRATIVE_WAIT_S`` (evicted, past the topic's
retention, or never published: a candidate injected without a narrative) is dead-lettered with reason
``NarrativeNotFound``. Cost: a restarted verifier re-reads the narrative topic (7 days' retention).

Verification failures are never dropped silently: when the verdict call (or any call of a QA ensemble)
gets no answer (``LlmFailed`` other than invalid / truncated output, which are *ambiguous* answers with
the paper's conservative defaults), the to-verify record is dead-lettered to
``clingate.dbpm.to-verify.dlq``, stage ``process``, error type ``LlmFailed:<kind>``, with the
clinician-safe message and the operator detail; no verdict is invented and the memory learns nothing.
Re-driving the dead letter verifies the candidate again.

Calls saved by BLOCK. The group also reads ``clingate.dbpm.decisions`` and counts each BLOCK in
``clingate_llm_verifier_calls_saved_total{task}``: a BLOCKed candidate is exactly one verdict call
not made (a QA ensemble is never predictable in advance, so one call is the lower bound). Decisions
topic records are committed in order like the to-verify ones, so a group counts each BLOCK once
(at least once across a crash). Verifier calls made are ``clingate_llm_calls_total`` with the
``*_verdict`` call types.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from processors.dbpm import DBPMEngine
from processors.dbpm.events import format_time
from processors.dbpm.verification import (
    AMBIGUOUS,
    ENSEMBLE_VARIANTS,
    Answer,
    Final,
    NeedsEnsemble,
    conservative,
    ensemble,
    is_verified,
    verdict_event,
    verdict_messages,
)
from schemas.common import Stage
from schemas.dbpm import GateAction, GateDecision, Narrative
from schemas.serde import SchemaDecodeError, Serde
from streams.groups.llm import MeteredLlm, default_serde, llm_failure, new_metrics, require_role, run_loop
from streams.groups.metrics import LlmGroupMetrics
from streams.groups.ordered import Handled, OrderedLoop
from streams.llm import CallType, FailureKind, LlmClient, LlmFailed, LlmOk, Role, given_or_built
from streams.llm.schemas import NerVerdict, QaVerdict, ReVerdict
from streams.runtime.core import Output
from streams.runtime.dlq import Rejected, SourceRecord, decode_record
from streams.runtime.kafka_config import client_config
from streams.runtime.settings import Settings
from streams.worker.keys import verdict_key
from streams.worker.wire import contract_event
from topics.catalog import DBPM_DECISIONS, DBPM_NARRATIVES, DBPM_TO_VERIFY, DBPM_VERDICTS, DBPM_VERIFIED

log = logging.getLogger(__name__)

GROUP = "verifier"

_CALLS = {
    "ner": (CallType.NER_VERDICT, NerVerdict),
    "re": (CallType.RE_VERDICT, ReVerdict),
    "qa": (CallType.QA_VERDICT, QaVerdict),
}
_AMBIGUOUS_KINDS = frozenset({FailureKind.INVALID_OUTPUT, FailureKind.TRUNCATED})
"""Failed calls in which the model did answer, just not with a schema verdict (see verification)."""

GATE_HEADER = "clingate-gate"
CONFIDENCE_HEADER = "clingate-confidence"
VERDICT_HEADER = "clingate-verdict"


class NarrativeSource(Protocol):
    """Where the verifier finds a candidate's narrative."""

    async def get(self, patient_id: str, ts: datetime) -> str | None:
        """The narrative text of ``(patient_id, ts)``, or None when it cannot be found."""
        ...


class NarrativeCache:
    """The narratives of ``clingate.dbpm.narratives`` by ``(patient_id, ts)``, bounded, least recently used
    evicted. Fed by :meth:`run` on the caller's event loop (non-blocking polls)."""

    def __init__(self, bootstrap: str, serde: Serde, capacity: int, wait_s: float) -> None:
        """Assign every narrative partition from the beginning (no consumer group, nothing committed).

        Args:
            bootstrap: Kafka bootstrap servers.
            serde: the process serde.
            capacity: narratives kept.
            wait_s: how long :meth:`get` waits for a narrative not yet read.
        """
        self._serde = serde
        self._capacity = capacity
        self._wait_s = wait_s
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": f"clingate-narrative-reader-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }))  # fmt: skip
        metadata = self._consumer.list_topics(DBPM_NARRATIVES, timeout=30)
        partitions = sorted(metadata.topics[DBPM_NARRATIVES].partitions)
        self._consumer.assign([TopicPartition(DBPM_NARRATIVES, p, OFFSET_BEGINNING) for p in partitions])
        self._texts: OrderedDict[tuple[str, datetime], str] = OrderedDict()
        self._arrived = asyncio.Event()

    def _apply(self, record: SourceRecord) -> None:
        outcome = decode_record(self._serde, record, Narrative)
        if isinstance(outcome, Rejected):
            return  # the generator dead-letters it; nothing can be verified against it
        narrative = outcome.value
        key = (narrative.patient_id, narrative.ts)
        self._texts[key] = narrative.text
        self._texts.move_to_end(key)
        while len(self._texts) > self._capacity:
            self._texts.popitem(last=False)

    async def run(self, stop: asyncio.Event) -> None:
        """Read narratives until ``stop`` is set."""
        try:
            while not stop.is_set():
                messages = self._consumer.consume(num_messages=500, timeout=0)
                for message in messages:
                    error = message.error()
                    if error is None:
                        self._apply(SourceRecord.from_message(message))
                    elif error.code() != KafkaError._PARTITION_EOF:
                        log.warning("narrative reader: %s", error)
                if messages:
                    self._arrived.set()
                    self._arrived = asyncio.Event()
                else:
                    await asyncio.sleep(0.02)
        finally:
            self._consumer.close()

    async def get(self, patient_id: str, ts: datetime) -> str | None:
        """The narrative text of ``(patient_id, ts)``, waiting up to ``wait_s`` for it; None if absent."""
        key = (patient_id, ts)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while key not in self._texts:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=remaining)
            except TimeoutError:
                return None
        self._texts.move_to_end(key)
        return self._texts[key]


@dataclass(frozen=True, slots=True)
class Verifier:
    """The per-record handler of the verifier group.

    Attributes:
        llm: the metered client.
        serde: the process serde.
        engine: a DBPM engine with the workers' configuration (for :func:`verdict_key`).
        narratives: where narratives are looked up.
    """

    llm: MeteredLlm
    serde: Serde
    engine: DBPMEngine
    narratives: NarrativeSource

    def __call__(self, record: SourceRecord) -> Handled | Awaitable[Handled]:
        """Decode a decision; count a BLOCK (decisions topic) or verify (to-verify topic) as a task."""
        if record.topic == DBPM_DECISIONS:
            self._count_saved(record)
            return []
        outcome = decode_record(self.serde, record, GateDecision)
        if isinstance(outcome, Rejected):
            return [outcome]
        return self._verify(record, outcome.value)

    def _count_saved(self, record: SourceRecord) -> None:
        """Count a decisions-topic record that decodes to a BLOCK as a verifier call saved.

        Only counted: a decision that does not decode is the gate's to fix, and the same record's
        to-verify copy (if any) is dead-lettered there. Every decision passes through here, so the
        model is built only where the Avro datum says BLOCK: a decision of any other kind counts
        nothing, whether its model would accept it or not.
        """
        if record.value is None:
            return
        try:
            datum = self.serde.read_datum(record.value, GateDecision, topic=record.topic)
        except SchemaDecodeError:
            return
        if datum["decision"] != GateAction.BLOCK.value:
            return
        outcome = decode_record(self.serde, record, GateDecision)
        if not isinstance(outcome, Rejected) and outcome.value.decision is GateAction.BLOCK:
            self.llm.metrics.calls_saved.labels(outcome.value.task).inc()

    async def judge(self, decision: GateDecision, narrative: str) -> Final | list[LlmFailed]:
        """Judge one candidate: the first call, the conservative rule, the QA ensemble if needed.

        Returns:
            The verdict, or the failed calls when a call got no answer.
        """
        candidate = decision.candidate
        first = await self._ask(candidate.task, verdict_messages(candidate, narrative))
        if isinstance(first, LlmFailed):
            return [first]
        decided = conservative(candidate.task, first)
        if isinstance(decided, NeedsEnsemble):
            votes = await asyncio.gather(*(
                self._ask(candidate.task, verdict_messages(candidate, narrative, variant))
                for variant in ENSEMBLE_VARIANTS
            ))  # fmt: skip
            failed = [vote for vote in votes if isinstance(vote, LlmFailed)]
            if failed:
                return failed
            decided = ensemble([vote for vote in votes if isinstance(vote, Answer)])
        return decided

    async def _ask(self, task: str, messages: list[dict[str, str]]) -> Answer | LlmFailed:
        call_type, model = _CALLS[task]
        result = await self.llm.call(call_type, model, messages)  # type: ignore[arg-type]
        if isinstance(result, LlmOk):
            return Answer(result.value.verdict, getattr(result.value, "error_class", None))
        if result.kind in _AMBIGUOUS_KINDS:
            return Answer(AMBIGUOUS)
        return result

    async def _verify(self, record: SourceRecord, decision: GateDecision) -> Handled:
        candidate = decision.candidate
        if candidate.task not in _CALLS:
            return [Rejected(record, Stage.VALIDATE, "UngatedTask",
                                 f"task {candidate.task!r} has no verifier (ner, re, qa)", None,
                                 GateDecision.avro_name)]  # fmt: skip
        document_ts = candidate.document_ts or candidate.ts
        narrative = await self.narratives.get(candidate.patient_id, document_ts)
        if narrative is None:
            self.llm.metrics.unprocessed.labels(GROUP, "narrative_not_found").inc()
            when = format_time(document_ts.timestamp())
            reason = f"no narrative of patient {candidate.patient_id} at {when} on {DBPM_NARRATIVES}"
            return [Rejected(record, Stage.PROCESS, "NarrativeNotFound", reason, None,
                                 GateDecision.avro_name)]  # fmt: skip
        judged = await self.judge(decision, narrative)
        if isinstance(judged, list):
            self.llm.metrics.unprocessed.labels(GROUP, "verification_failed").inc()
            return [llm_failure(record, GateDecision.avro_name, judged)]
        verdict = verdict_event(candidate, judged, datetime.now(UTC))
        defaulted = "true" if judged.defaulted else "false"
        self.llm.metrics.verdicts.labels(candidate.task, verdict.verdict.value, defaulted).inc()
        outputs: list[Output | Rejected] = [Output(
            DBPM_VERDICTS, verdict_key(self.engine, contract_event(verdict)),  # type: ignore[arg-type]
            self.serde.encode(verdict, topic=DBPM_VERDICTS),
        )]  # fmt: skip
        if is_verified(verdict.verdict):
            headers = (
                (GATE_HEADER, decision.decision.value.encode()),
                (CONFIDENCE_HEADER, f"{decision.confidence_multiplier:g}".encode()),
                (VERDICT_HEADER, judged.verdict.encode()),
            )
            outputs.append(Output(DBPM_VERIFIED, candidate.patient_id.encode(),
                                  self.serde.encode(candidate, topic=DBPM_VERIFIED), headers))  # fmt: skip
        return outputs


async def run_verifier(
    bootstrap: str,
    settings: Settings,
    *,
    stop: asyncio.Event,
    client: LlmClient | None = None,
    metrics: LlmGroupMetrics | None = None,
    max_in_flight: int | None = None,
) -> OrderedLoop:
    """Run one verifier group member until ``stop`` is set.

    Args:
        bootstrap: Kafka bootstrap servers.
        settings: the process settings (group id, in-flight bound, cache, LLM servers, DBPM flags).
        stop: set it to stop after the current step.
        client: the LLM client (default: built from the settings and closed on exit).
        metrics: where to count (default: a fresh registry).
        max_in_flight: candidates at once (default ``settings.verifier_max_in_flight``).

    Returns:
        The stopped loop (``processed`` counts records of both input topics).

    Raises:
        RoleDisabledError: no verifier server is configured.
    """
    from streams.worker.engine import dbpm_engine

    meters = metrics or new_metrics()
    serde = default_serde(settings)
    async with given_or_built(client, settings) as llm_client:
        require_role(llm_client, settings, Role.VERIFIER)
        narratives = NarrativeCache(bootstrap, serde, settings.verifier_narrative_cache,
                                    settings.verifier_narrative_wait_s)  # fmt: skip
        reader_stop = asyncio.Event()
        reader = asyncio.create_task(narratives.run(reader_stop))
        engine = dbpm_engine(settings)
        try:
            return await run_loop(
                bootstrap, group_id=settings.verifier_group_id, topics=[DBPM_TO_VERIFY, DBPM_DECISIONS],
                handler=Verifier(MeteredLlm(llm_client, meters, GROUP), serde, engine, narratives),
                expected_schema=GateDecision.avro_name,
                max_in_flight=max_in_flight or settings.verifier_max_in_flight,
                session_timeout_s=settings.consumer_session_timeout_s,
                metrics=meters, group=GROUP, serde=serde, stop=stop,
            )  # fmt: skip
        finally:
            reader_stop.set()
            await reader
