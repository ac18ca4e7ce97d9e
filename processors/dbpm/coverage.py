"""The NER-coverage join: a narrative's QA candidates wait until its NER candidates are settled.

Why (paper §4.8, Eq. 9). The QA gate ALLOWs a candidate in a mapped category only when the patient's
accepted NER categories contain the category's bucket. A generator publishes a narrative's NER, RE and
QA candidates together; decided at once, a QA candidate sees none of its own narrative's NER verdicts
(they come back from the verifier seconds later), so on a first-seen patient nearly every mapped QA
candidate is DOWNGRADEd: no selectivity, the paper's own negative result for a source without
coverage. The join holds each QA candidate until every NER candidate of its narrative is settled,
then the gate stamps the patient's accepted categories on it and decides.

The join is keyed by narrative (patient id and document date, so co-partitioned by patient with the
candidates) and windowed by a bounded wait:

* an NER candidate the gate BLOCKed is settled at once; one it let through is *pending* until its
  verdict is in the memory (:meth:`CoverageJoin.settle`) or the narrative's window closes;
* a QA candidate of a narrative with pending NER candidates is held; one whose narrative has none
  pending is released at once (``settled``), one whose narrative the join has not seen is released
  at once as ``no_ner`` (the narrative produced no NER candidate: nothing to wait for);
* :meth:`CoverageJoin.due` releases the held candidates of a narrative whose last pending NER candidate
  settled (``settled``) or whose oldest held candidate waited ``wait_s`` (``timeout``: an NER
  verification dead-lettered or slower than the wait), each with how long it was held, and purges
  narratives with nothing held once their window (``wait_s`` from their first candidate) closed. A
  settled narrative stays open for its window because its QA candidates may still be on their way
  (a consume batch can end between a narrative's NER and QA candidates). State is therefore bounded by
  the candidates of ``wait_s`` of traffic, and so is what a restarted gate reads again.

Durability (the runtime's side, :mod:`streams.worker.gate`): the join's state is a function of the
candidates topic from the first candidate of each open narrative and of the memory (where verdicts
settle candidates), both durable. :meth:`CoverageJoin.low_watermark` is the offset the runtime may
commit at most: a restarted or rebalanced gate reads every open narrative again from its first
candidate and rebuilds the state; the candidates it decides again are decided at least once, as every
gate decision is.

Pure: no I/O, no clock (``now`` is passed in), records are opaque values of the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from schemas.dbpm import Coverage

R = TypeVar("R")

NarrativeKey = tuple[str, float]
"""(patient id, document date in seconds since the epoch): one narrative."""


@dataclass(frozen=True, slots=True)
class Held(Generic[R]):
    """A QA candidate waiting for its narrative's NER candidates."""

    record: R
    offset: int
    since: float


@dataclass(frozen=True, slots=True)
class Release(Generic[R]):
    """A QA candidate to decide now, how its coverage was settled and how long it was held."""

    record: R
    coverage: Coverage
    waited_s: float


@dataclass(slots=True)
class _Narrative(Generic[R]):
    partition: int
    first_offset: int
    opened: float
    pending: set[str] = field(default_factory=set)
    held: list[Held[R]] = field(default_factory=list)


class CoverageJoin(Generic[R]):
    """The join's state for the candidate partitions one gate owns.

    Args:
        wait_s: the bounded wait: longest a QA candidate is held, and how long a narrative's window
            stays open for QA candidates after its first candidate.
    """

    def __init__(self, wait_s: float) -> None:
        if wait_s <= 0:
            raise ValueError("the coverage join's wait must be positive (turn the join off instead)")
        self.wait_s = wait_s
        self._narratives: dict[NarrativeKey, _Narrative[R]] = {}
        self._pending: dict[str, NarrativeKey] = {}

    def ner(
        self, key: NarrativeKey, partition: int, offset: int, candidate_id: str, let_through: bool, now: float
    ) -> None:
        """An NER candidate of narrative ``key`` was decided: pending unless it was BLOCKed."""
        narrative = self._open(key, partition, offset, now)
        if let_through:
            narrative.pending.add(candidate_id)
            self._pending[candidate_id] = key

    def other(self, key: NarrativeKey, partition: int, offset: int, now: float) -> None:
        """Another candidate of the narrative (not NER, not QA) was decided: it opens the narrative."""
        self._open(key, partition, offset, now)

    def qa(self, key: NarrativeKey, partition: int, offset: int, record: R, now: float) -> Release[R] | None:
        """A QA candidate arrived: released at once (returned) or held (None)."""
        narrative = self._narratives.get(key)
        if narrative is None:
            return Release(record, Coverage.NO_NER, 0.0)
        if not narrative.pending:
            return Release(record, Coverage.SETTLED, 0.0)
        narrative.held.append(Held(record, offset, now))
        return None

    def awaited(self) -> Iterable[str]:
        """The NER candidate ids still pending."""
        return self._pending.keys()

    def settle(self, candidate_id: str) -> None:
        """The verdict of an NER candidate is in the memory (unknown ids are ignored)."""
        key = self._pending.pop(candidate_id, None)
        if key is not None and (narrative := self._narratives.get(key)) is not None:
            narrative.pending.discard(candidate_id)

    def due(self, now: float) -> list[Release[R]]:
        """Release what is due at ``now`` and purge closed narratives (see the module docstring)."""
        released: list[Release[R]] = []
        for key, narrative in list(self._narratives.items()):
            held = narrative.held
            if held and (not narrative.pending or now - held[0].since >= self.wait_s):
                coverage = Coverage.TIMEOUT if narrative.pending else Coverage.SETTLED
                released += [Release(h.record, coverage, max(now - h.since, 0.0)) for h in held]
                narrative.held = []
            if not narrative.held and now - narrative.opened >= self.wait_s:
                self._close(key)
        return released

    def low_watermark(self, partition: int) -> int | None:
        """The first offset of ``partition`` an open narrative needs read again after a restart."""
        return min(
            (n.first_offset for n in self._narratives.values() if n.partition == partition), default=None
        )

    def drop(self, partitions: Iterable[int]) -> None:
        """Forget the narratives of ``partitions`` (revoked, or rewound to be read again)."""
        lost = set(partitions)
        for key, narrative in list(self._narratives.items()):
            if narrative.partition in lost:
                self._close(key)

    def __len__(self) -> int:
        """Open narratives."""
        return len(self._narratives)

    def held(self) -> int:
        """QA candidates held now."""
        return sum(len(n.held) for n in self._narratives.values())

    def _open(self, key: NarrativeKey, partition: int, offset: int, now: float) -> _Narrative[R]:
        narrative = self._narratives.get(key)
        if narrative is None:
            narrative = self._narratives[key] = _Narrative(partition, offset, now)
        return narrative

    def _close(self, key: NarrativeKey) -> None:
        narrative = self._narratives.pop(key)
        for candidate_id in narrative.pending:
            self._pending.pop(candidate_id, None)
