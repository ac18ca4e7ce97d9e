"""Verdicts of candidates no gate decided cost the memory one question about its dispatches' end per
partition and batch, however many there are: a thousand of them among good verdicts are dead-lettered
in the batch that reads them, and the good ones are learnt."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from schemas.dbpm import Candidate, Verdict
from schemas.serde import SingleObjectSerde
from streams.runtime.dlq import SourceRecord
from streams.runtime.settings import Settings
from streams.testing.driver_topics import ChangelogTable, Topic
from streams.worker.engine import dbpm_engine
from streams.worker.keys import verdict_key
from streams.worker.memory import MemoryHandler
from streams.worker.metrics import DbpmMetrics
from streams.worker.tablestore import apply_batch, input_offset_key
from streams.worker.wire import contract_event, dispatch_outputs
from topics.catalog import DBPM_DISPATCHES, DBPM_VERDICTS

SERDE = SingleObjectSerde()
ENGINE = dbpm_engine(Settings(CLINGATE_TOPIC_PARTITIONS=1, CLINGATE_DBPM_MAINTENANCE=False))
PAYLOAD = {"entity": "fever", "category": "Symptoms"}
BASE = {"ts": "2026-11-26T09:00:00Z", "task": "ner", "patient_id": "p-1", "payload": PAYLOAD}


def _verdict(candidate_id: str, offset: int) -> SourceRecord:
    verdict = Verdict.model_validate(
        {**BASE, "candidate_id": candidate_id, "verdict": "hard_fail", "source": "verifier_mmed"}
    )
    key = verdict_key(ENGINE, contract_event(verdict))  # type: ignore[arg-type]
    return SourceRecord(DBPM_VERDICTS, 0, offset, None, key, SERDE.encode(verdict))


def test_a_thousand_unknown_candidates_cost_one_question_and_the_good_verdicts_are_learnt() -> None:
    handler = MemoryHandler(ENGINE, SERDE, DbpmMetrics(CollectorRegistry()))
    asked: list[int] = []

    def dispatches_read(partition: int) -> bool:
        asked.append(partition)
        return True

    handler.dispatches_read = dispatches_read
    known = [f"known-{i}" for i in range(50)]
    candidates = [Candidate.model_validate({**BASE, "candidate_id": name}) for name in known]
    dispatches = [
        SourceRecord(DBPM_DISPATCHES, 0, offset, None, out.key, out.value)
        for offset, candidate in enumerate(candidates)
        for out in dispatch_outputs(SERDE, contract_event(candidate))  # type: ignore[arg-type]
    ]
    names = [known[i // 20] if i % 20 == 0 else f"stranger-{i}" for i in range(1000)]
    verdicts = [_verdict(name, offset) for offset, name in enumerate(names)]
    table = ChangelogTable(Topic("memory-changelog", 1, 1 << 20))
    batch = apply_batch(handler, table, 0, [*dispatches, *verdicts])
    assert asked == [0], "one question for the partition, not one per unknown candidate"
    assert batch.reread is None
    assert len(batch.dead_letters) == 950
    assert {letter.error_type for letter in batch.dead_letters} == {"UnknownCandidate"}
    assert batch.group is not None
    assert dict(batch.group)[input_offset_key(DBPM_VERDICTS)] == str(verdicts[-1].offset).encode()
    learnt = handler._metrics.verdicts.labels("ner", "hard_fail", "verifier_mmed")._value.get()  # type: ignore[attr-defined]
    assert learnt == 50


def test_a_partition_whose_dispatches_are_not_read_to_their_end_defers_and_asks_again_next_batch() -> None:
    handler = MemoryHandler(ENGINE, SERDE, DbpmMetrics(CollectorRegistry()))
    answers = iter([False, True])
    asked: list[int] = []

    def dispatches_read(partition: int) -> bool:
        asked.append(partition)
        return next(answers)

    handler.dispatches_read = dispatches_read
    table = ChangelogTable(Topic("memory-changelog", 1, 1 << 20))
    verdicts = [_verdict(f"stranger-{i}", i) for i in range(3)]
    first = apply_batch(handler, table, 0, verdicts)
    assert first.reread == (DBPM_VERDICTS, 0) and not first.dead_letters and first.group is None
    second = apply_batch(handler, table, 0, verdicts)
    assert second.reread is None and len(second.dead_letters) == 3
    assert asked == [0, 0]
