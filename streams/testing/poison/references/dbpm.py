"""The DBPM family: good verdicts, propagations and candidates with the watermark ticks, the gate's
decisions and to-verify records for them and the memory they leave, computed by the in-process engine
and gate (propagation and maintenance off, as the workers run in the suite).
"""

from __future__ import annotations

import random

from schemas.dbpm import Candidate, GateAction, NerPayload, Verdict, VerdictLabel
from schemas.dbpm import Propagation as PropagationRecord
from schemas.serde import Serde
from state.ram import RamStore
from streams.runtime.dlq import fits
from streams.testing.dbpm_stream import StreamShape, generate_events
from streams.testing.poison.records import LARGE, NEAR_LIMIT, Expected, Record, Scale
from streams.testing.poison.references.common import Family, filler, json_ts, noise, too_large
from streams.testing.worker import comparison_engine
from streams.worker.gate import Gate
from streams.worker.keys import BARRIER_HEADER, TICK_HEADER, propagation_key, verdict_key
from streams.worker.wire import candidate_of, contract_event, propagation_event
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_PROPAGATIONS, DBPM_TO_VERIFY, DBPM_VERDICTS


def dbpm_family(
    tag: str, scale: Scale, rng: random.Random, serde: Serde, partitions: int
) -> tuple[Family, dict[str, object]]:
    """The good verdicts, propagations and candidates (``scale.large`` of each with a :data:`LARGE`
    entity or signature), the watermark ticks, the decisions they produce and the memory they leave
    (propagation and maintenance off, as the workers run here); and candidates whose decision cannot fit
    the decisions topic."""
    good = scale.good
    shape = StreamShape(
        seed=rng.randrange(1 << 30),
        ner_per_patient=(2, 5),
        re_per_patient=(2, 5),
        qa_per_patient=(1, 3),
        ner_fail_rate=0.3,
        re_fail_rate=0.4,
        qa_fail_rate_covered=0.3,
        qa_fail_rate_uncovered=0.3,
    )
    verdicts: list[Verdict] = []
    candidates: list[Candidate] = []
    for event in generate_events(100 * good, shape):
        body = {k: v for k, v in event.items() if k != "kind"}
        body["patient_id"] = f"{tag}-g-{body['patient_id']}"
        if event["kind"] == "verdict" and len(verdicts) < good:
            verdicts.append(Verdict.model_validate(body))
        elif event["kind"] == "gate" and len(candidates) < good:
            candidates.append(
                Candidate.model_validate({**body, "candidate_id": f"{tag}-g-{body['candidate_id']}"})
            )
        if len(verdicts) >= good and len(candidates) >= good:
            break
    ts = verdicts[-1].ts
    for j in range(scale.large):
        entity = NerPayload(entity=filler(LARGE, rng), category="Diagnosis")
        verdicts.append(
            Verdict(
                ts=ts,
                task="ner",
                verdict=VerdictLabel.HARD_FAIL,
                source="verifier_mmed",
                patient_id=f"{tag}-g-large-{j}",
                payload=entity,
            )
        )
        candidates.append(
            Candidate(
                ts=candidates[-1].ts,
                task="ner",
                patient_id=f"{tag}-g-large-{j}",
                candidate_id=f"{tag}-g-large-{j}",
                payload=entity,
            )
        )
    for j in range(scale.large):  # a decision holds its candidate and its signature: twice the entity
        huge = NerPayload(entity=filler(NEAR_LIMIT - 1024, rng), category="Diagnosis")
        candidates.append(
            Candidate(
                ts=candidates[-1].ts,
                task="ner",
                patient_id=f"{tag}-g-huge-{j}",
                candidate_id=f"{tag}-g-huge-{j}",
                payload=huge,
            )
        )
    engine = comparison_engine()
    store = RamStore()
    family = Family({DBPM_VERDICTS: [], DBPM_PROPAGATIONS: [], DBPM_CANDIDATES: []})
    keys = []
    for i, verdict in enumerate(verdicts):
        event = contract_event(verdict)
        keys.append(key := verdict_key(engine, event))  # type: ignore[arg-type]
        family.feeds[DBPM_VERDICTS].append(
            Record(
                DBPM_VERDICTS,
                key,
                serde.encode(verdict, topic=DBPM_VERDICTS),
                noise(rng, DBPM_VERDICTS),
                ident=f"verdict-{i}",
            )
        )
        with store.transaction() as txn:
            engine.process(txn, event, event.time)
    for i in range(good + scale.large):
        # Evidence for the verdicts' own signatures (the large ones last); identities increase per origin
        # partition (1000+, which no memory partition of this run is).
        task, signature = keys[i if i >= good else i % good].decode().split("|", 1)
        record = PropagationRecord(
            ts=verdicts[-1].ts,
            task=task,
            signature=signature,
            weight=0.5,
            source="cross_task_re",
            origin_task="re",
            origin_signature="TREATMENT|TREATS|DIAGNOSIS",
            patient_id=f"{tag}-g-evidence",
            origin_partition=1000 + i % 3,
            origin_offset=i,
            origin_index=0,
        )
        event = propagation_event(record)
        family.feeds[DBPM_PROPAGATIONS].append(
            Record(
                DBPM_PROPAGATIONS,
                propagation_key(event),
                serde.encode(record, topic=DBPM_PROPAGATIONS),
                noise(rng, DBPM_PROPAGATIONS),
                ident=f"propagation-{i}",
            )
        )
        with store.transaction() as txn:
            engine.propagate(txn, event)  # propagation off: applies nothing, here and in the workers
    gate = Gate(engine, serde, store)
    for candidate in candidates:
        out = gate.decide(candidate_of(candidate), replayed=True)
        # Every good candidate asks for the barrier (the package docstring); the header's value is ignored.
        headers = ((BARRIER_HEADER, rng.randbytes(rng.randint(0, 8))), *noise(rng, DBPM_CANDIDATES))
        record = Record(
            DBPM_CANDIDATES,
            out.key,
            serde.encode(candidate, topic=DBPM_CANDIDATES),
            headers,
            ident=candidate.candidate_id,
        )
        if not fits(DBPM_DECISIONS, out.key, out.value):
            family.feeds[DBPM_CANDIDATES].append(too_large(record, "OutputTooLarge"))
            continue
        family.feeds[DBPM_CANDIDATES].append(record)
        outputs = (DBPM_DECISIONS,) if out.decision == GateAction.BLOCK else (DBPM_DECISIONS, DBPM_TO_VERIFY)
        family.expected += [
            Expected(topic, out.key, out.value, (), DBPM_CANDIDATES, candidate.candidate_id)
            for topic in outputs
        ]
    family.feeds[DBPM_VERDICTS] += ticks(json_ts(max(c.ts for c in candidates)), partitions)
    txn = store.transaction()
    try:
        memory = engine.snapshot(txn)
    finally:
        txn.abort()
    return family, memory


def ticks(at: str, partitions: int) -> list[Record]:
    """A watermark tick at event time ``at`` (ISO) on every verdict partition."""
    return [
        Record(
            DBPM_VERDICTS,
            None,
            b"",
            ((TICK_HEADER, at.encode()),),
            ident=f"tick-{p}",
            control=True,
            partition=p,
        )
        for p in range(partitions)
    ]
