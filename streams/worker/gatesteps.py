"""The gate's logic on batches of candidates, without Kafka or a clock: the NER-coverage join, the
barrier, what a partition's committed progress already covers, and the progress a batch reaches.

A live QA candidate extracted from a narrative waits in the coverage join
(:class:`processors.dbpm.coverage.CoverageJoin`) until every NER candidate of its narrative is settled
(BLOCKed, or its verdict in the memory) or it waited ``coverage_wait_s``, and is then decided with the
patient's accepted NER categories. The join's state is rebuilt from what the gate reads again: the progress a
batch commits never resumes past the first candidate of a narrative the join still has open, and a
candidate that progress already covers only tells the join what it told it the first time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from processors.dbpm import BLOCK
from processors.dbpm.config import NER, QA
from processors.dbpm.coverage import CoverageJoin, NarrativeKey, Release
from streams.runtime.dlq import Rejected, SourceRecord
from streams.runtime.progress import Progress, advanced
from streams.worker.gate import Barrier, DecidedCandidate, Gate, Pending, is_replayed
from streams.worker.metrics import DbpmMetrics


@dataclass(frozen=True, slots=True)
class GateBatch:
    """What :meth:`GateSteps.decide` made of a batch: its decisions, its dead letters and the partitions
    it read (their positions moved)."""

    decided: list[DecidedCandidate]
    failed: list[Rejected]
    read: set[int]


class GateSteps:
    """The gate's logic on batches of candidates, without Kafka or a clock: the coverage join, the
    barrier, what a partition's committed progress already covers, and the progress a batch reaches.

    The gate loop (:class:`~streams.worker.gateloop.GateLoop`) and the topology test driver
    (:mod:`streams.testing.driver`) both run it; they differ in how they wait at a barrier and in their
    clock (``now``: the loop's monotonic clock, the driver's own), so a decision the driver makes is
    the one production makes on the same records, coverage join included.

    Args:
        gate: the per-candidate work.
        coverage_wait_s: see :attr:`streams.runtime.settings.Settings.dbpm_coverage_wait_s` (0: the
            coverage join is off).
        barrier: how a replayed candidate waits for the view (:data:`Barrier`).
        judged: the candidates whose verdicts the view applied since it was last asked
            (:class:`~streams.worker.gateview.JudgedTracker`).
        metrics: where redeliveries, the join's traffic and decisions are counted.
    """

    def __init__(
        self,
        gate: Gate,
        coverage_wait_s: float,
        barrier: Barrier,
        judged: Callable[[], list[str]],
        metrics: DbpmMetrics,
    ) -> None:
        self.gate = gate
        self.join: CoverageJoin[Pending] | None = CoverageJoin(coverage_wait_s) if coverage_wait_s else None
        self._barrier = barrier
        self._judged = judged
        self._metrics = metrics
        self.progress: dict[int, Progress] = {}
        """Partition -> its last committed progress (the owned partitions)."""
        self.position: dict[int, int] = {}
        """Partition -> the next offset to decide."""

    def pending(self) -> bool:
        """The join holds candidates: a step without input may release some."""
        return self.join is not None and len(self.join) > 0

    def decide(self, records: Sequence[SourceRecord], now: float) -> GateBatch:
        """The decisions of a batch's candidates (QA candidates held by the coverage join yield nothing
        yet, candidates whose progress is committed only rebuild the join), then those of the held
        candidates the join releases at ``now``.

        Raises:
            Abandoned: the barrier gave up because the loop is stopping
                (:class:`~streams.worker.gateloop.GateLoop`).
        """
        decided: list[DecidedCandidate] = []
        failed: list[Rejected] = []
        read: set[int] = set()
        redelivered = 0

        def add(out: DecidedCandidate | Rejected | None) -> None:
            if out is not None:
                (failed if isinstance(out, Rejected) else decided).append(out)

        for record in records:
            read.add(record.partition)
            self.position[record.partition] = record.offset + 1
            done = self.progress.get(record.partition)
            if done is not None and done.done(record.offset):
                redelivered += 1
                self._rebuild(record, now)
            else:
                add(self._take(record, now))
        if redelivered:
            self._metrics.gate_redelivered.inc(redelivered)
        if self.join is not None:
            for candidate_id in self._judged():
                self.join.settle(candidate_id)
            for release in self.join.due(now):
                add(self._judge_released(release))
            self._metrics.coverage_held.set(self.join.held())
        return GateBatch(decided, failed, read)

    def next_progress(self) -> dict[int, Progress]:
        """The progress of every owned partition that moved: resumed no later than the first candidate of
        a narrative the coverage join still has open, its held QA candidates named
        (:func:`~streams.runtime.progress.advanced`)."""
        moved: dict[int, Progress] = {}
        join = self.join
        for partition, position in self.position.items():
            low = None if join is None else join.low_watermark(partition)
            held = () if join is None or low is None else join.held_offsets(partition)
            last = self.progress.get(partition)
            progress = advanced(last, position, low, held)
            if last != progress:
                moved[partition] = progress
        return moved

    def committed(self, progress: Mapping[int, Progress], decided: Sequence[DecidedCandidate]) -> None:
        """A batch's outputs and ``progress`` are committed: take the progress, count the decisions."""
        self.progress.update(progress)
        for (task, decision), count in Counter((out.task, out.decision) for out in decided).items():
            self._metrics.decisions.labels(task, decision).inc(count)
        for pair, count in Counter(out.violated_pair() for out in decided).items():
            if pair is not None:
                self._metrics.ontology_violations.labels(*pair).inc(count)
        self._metrics.selectivity.gates(
            (out.event.task, out.event.patient_id, out.event.payload, out.decision) for out in decided
        )

    def rewound(self, resume: Mapping[int, int]) -> None:
        """A batch was not committed: decide again from ``resume`` (per partition read) and forget the
        join's state (it rebuilds from what is read again)."""
        self.position.update(resume)
        self.drop(list(self.position))

    def drop(self, partitions: Iterable[int]) -> None:
        """Forget what the join holds of ``partitions`` (revoked, or read again)."""
        if self.join is not None:
            self.join.drop(partitions)

    def _judge_released(self, release: Release[Pending]) -> DecidedCandidate | Rejected:
        """A QA candidate the coverage join released: counted by how its coverage was settled, decided."""
        record, candidate = release.record
        self._metrics.coverage_released.labels(release.coverage.value).inc()
        return self.gate.judge(record, candidate, self._barrier, release)

    def _take(self, record: SourceRecord, now: float) -> DecidedCandidate | Rejected | None:
        """One candidate through the coverage join (when it is on) and the gate; None: held."""
        candidate = self.gate.decode(record)
        if isinstance(candidate, Rejected):
            return candidate
        join = self.join
        event = candidate.event
        if join is None or candidate.document_time is None or is_replayed(record):
            return self.gate.judge(record, candidate, self._barrier)
        key = (event.patient_id, candidate.document_time)
        if event.task == QA:
            release = join.qa(key, record.partition, record.offset, (record, candidate), now)
            return None if release is None else self._judge_released(release)
        out = self.gate.judge(record, candidate, self._barrier)
        if event.task != NER or not isinstance(out, DecidedCandidate):
            join.other(key, record.partition, record.offset, now)
            return out
        self._joined_ner(key, record, event.candidate_id, out.decision != BLOCK, now)
        return out

    def _rebuild(self, record: SourceRecord, now: float) -> None:
        """A candidate whose decision is committed, read again: what it told the coverage join, told again
        (an NER candidate decided again on the view to know whether it is pending; QA candidates, whose
        release is committed, and dead letters tell nothing)."""
        join = self.join
        if join is None or is_replayed(record):
            return
        candidate = self.gate.decode(record)
        if isinstance(candidate, Rejected):
            return
        event = candidate.event
        if candidate.document_time is None or event.task == QA:
            return
        key = (event.patient_id, candidate.document_time)
        if event.task != NER:
            join.other(key, record.partition, record.offset, now)
            return
        try:
            let_through = self.gate.decide(candidate).decision != BLOCK
        except Exception:  # dead-lettered when it was first read: it opens the narrative, nothing pending
            join.other(key, record.partition, record.offset, now)
            return
        self._joined_ner(key, record, event.candidate_id, let_through, now)

    def _joined_ner(
        self, key: NarrativeKey, record: SourceRecord, candidate_id: str, let_through: bool, now: float
    ) -> None:
        """Tell the join an NER candidate was decided (pending unless BLOCKed or judged already)."""
        join = self.join
        assert join is not None
        join.ner(key, record.partition, record.offset, candidate_id, let_through, now)
        if let_through and self.gate.was_judged(candidate_id):
            join.settle(candidate_id)  # read again after a restart: its verdict is applied
