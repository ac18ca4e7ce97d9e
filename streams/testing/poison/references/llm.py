"""The LLM groups' family: good narratives and to-verify records (with the dispatches of their
candidates), and the outputs the generator's and the verifier's record handlers give them against the
same deterministic test server (:func:`llm_reference`).
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from processors.dbpm.extraction import QA_TEMPLATES
from schemas.base import AvroModel
from schemas.dbpm import (
    Candidate,
    GateAction,
    GateDecision,
    Narrative,
    NerPayload,
    QaPayload,
    RePayload,
    Verdict,
)
from schemas.serde import Serde
from streams.runtime.core import Output
from streams.runtime.dlq import SourceRecord
from streams.runtime.settings import Settings
from streams.testing.poison.records import Expected, Record
from streams.testing.poison.references.common import CONDITIONS, DRUGS, FINDINGS, Family, noise
from streams.worker.engine import dbpm_engine
from streams.worker.wire import contract_event, dispatch_outputs
from topics.catalog import (
    DBPM_CANDIDATES,
    DBPM_DISPATCHES,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
)


def llm_family(
    tag: str, count: int, rng: random.Random, serde: Serde
) -> tuple[Family, list[Narrative], list[GateDecision]]:
    """The good narratives and to-verify records (each of the latter names a narrative's patient and event
    time, where the verifier finds the text) with the dispatches of the latter's candidates; their outputs
    come from :func:`llm_reference`."""
    start = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    narratives = []
    for i in range(count):
        condition, drug, finding = rng.choice(CONDITIONS), rng.choice(DRUGS), rng.choice(FINDINGS)
        text = (
            f"Patient admitted with {finding} and {condition}. Started on {drug}; follow-up showed "
            f"{rng.choice(FINDINGS)}. Discharged home on day {rng.randint(2, 9)}."
        )
        narratives.append(Narrative(ts=start + timedelta(minutes=i), patient_id=f"{tag}-n{i:05d}", text=text))
    decisions = []
    for i in range(count):
        narrative = narratives[i]
        task = ("ner", "re", "qa")[i % 3]
        payload: NerPayload | RePayload | QaPayload
        if task == "ner":
            payload = NerPayload(entity=rng.choice(CONDITIONS + FINDINGS), category="Diagnosis")
        elif task == "re":
            payload = RePayload(
                head=rng.choice(DRUGS),
                head_type="Treatment",
                relation="TREATS",
                tail=rng.choice(CONDITIONS),
                tail_type="Diagnosis",
            )
        else:
            category = rng.choice(("diagnosis", "treatment", "symptoms"))
            payload = QaPayload(
                question=QA_TEMPLATES[category][0], answer=rng.choice(CONDITIONS + DRUGS), category=category
            )
        candidate = Candidate(
            ts=narrative.ts,
            task=task,
            patient_id=narrative.patient_id,
            candidate_id=f"{tag}-tv-{i:05d}",
            payload=payload,
        )
        downgrade = i % 4 == 3
        decisions.append(
            GateDecision(
                ts=candidate.ts,
                task=task,
                patient_id=candidate.patient_id,
                candidate_id=candidate.candidate_id,
                decision=GateAction.DOWNGRADE if downgrade else GateAction.ALLOW,
                rule="poison-suite",
                signature="poison",
                confidence_multiplier=0.7 if downgrade else 1.0,
                candidate=candidate,
            )
        )
    family = Family(
        {
            DBPM_NARRATIVES: [
                Record(
                    DBPM_NARRATIVES,
                    n.patient_id.encode(),
                    serde.encode(n, topic=DBPM_NARRATIVES),
                    noise(rng, DBPM_NARRATIVES),
                    ident=n.patient_id,
                )
                for n in narratives
            ],
            DBPM_TO_VERIFY: [
                Record(
                    DBPM_TO_VERIFY,
                    d.patient_id.encode(),
                    serde.encode(d, topic=DBPM_TO_VERIFY),
                    noise(rng, DBPM_TO_VERIFY),
                    ident=d.candidate_id,
                )
                for d in decisions
            ],
            # What the gate sends before its to-verify records: the memory learns the verifier's verdicts
            # of these candidates only.
            DBPM_DISPATCHES: [
                Record(
                    DBPM_DISPATCHES,
                    out.key,
                    out.value,
                    noise(rng, DBPM_DISPATCHES),
                    ident=f"{d.candidate_id}@{j}",
                )
                for d in decisions
                for j, out in enumerate(dispatch_outputs(serde, contract_event(d.candidate)))  # type: ignore[arg-type]
            ],
        }
    )
    return family, narratives, decisions


async def llm_reference(
    settings: Settings, serde: Serde, narratives: Sequence[Narrative], decisions: Sequence[GateDecision]
) -> list[Expected]:
    """The generator's candidates and the verifier's verdicts and verified candidates for the good
    narratives and to-verify records: their record handlers, run here against the same test server.

    Raises:
        RuntimeError: an LLM call failed here (the server is deterministic: the comparison would be moot).
    """
    from processors.clinical.vocabulary import DrugVocabulary
    from streams.groups.generator import Generator
    from streams.groups.llm import MeteredLlm, new_metrics
    from streams.groups.verifier import Verifier
    from streams.llm import LlmClient

    texts = {(n.patient_id, n.ts): n.text for n in narratives}

    class Known:
        """The verifier's narrative source: the good narratives."""

        async def get(self, patient_id: str, ts: datetime) -> str | None:
            return texts.get((patient_id, ts))

    engine = dbpm_engine(settings)
    async with LlmClient.from_settings(settings) as client:
        generator = Generator(MeteredLlm(client, new_metrics(), "generator"), serde, DrugVocabulary.full())
        verifier = Verifier(MeteredLlm(client, new_metrics(), "verifier"), serde, engine, Known())

        async def handled(handler: Callable[[SourceRecord], Any], topic: str, model: AvroModel) -> list[Any]:
            outcome = handler(SourceRecord(topic, 0, 0, None, b"", serde.encode(model, topic=topic)))
            return list(await outcome if inspect.isawaitable(outcome) else outcome)

        made = await asyncio.gather(
            *(handled(generator, DBPM_NARRATIVES, n) for n in narratives),
            *(handled(verifier, DBPM_TO_VERIFY, d) for d in decisions),
        )
    sources = [DBPM_NARRATIVES] * len(narratives) + [DBPM_TO_VERIFY] * len(decisions)
    models: dict[str, type[Candidate] | type[Verdict]] = {
        DBPM_CANDIDATES: Candidate,
        DBPM_VERDICTS: Verdict,
        DBPM_VERIFIED: Candidate,
    }
    expected: list[Expected] = []
    for source, outputs in zip(sources, made, strict=True):
        for out in outputs:
            if not isinstance(out, Output):
                raise RuntimeError(f"the reference's LLM work failed: {out.error_type}: {out.reason}")
            model = serde.decode(out.value, models[out.topic], topic=out.topic)
            expected.append(
                Expected(out.topic, out.key, out.value, tuple(out.headers), source, model.candidate_id or "")
            )
    return expected
