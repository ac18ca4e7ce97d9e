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
  verification dead-lettered or slower than the wait), each with how long it was held. A narrative
  with nothing pending or held is closed at once but remembered until its window (``wait_s`` from its
  first candidate) closes, since its QA candidates may still be on their way (a consume batch can end
  between a narrative's NER and QA candidates): they are released as ``settled``. A narrative still
  waiting closes with its window. State is therefore bounded by the candidates of ``wait_s`` of
  traffic, and what a restarted gate reads again by the narratives still waiting.

Durability (the runtime's side, :mod:`streams.worker.gatesteps`): the join's state is a function of the
candidates topic from the first candidate of each open narrative and of the memory (where verdicts
settle candidates), both durable. :meth:`CoverageJoin.low_watermark` is the offset the runtime may
commit at most: a restarted or rebalanced gate reads every open narrative again from its first
candidate and rebuilds the state, and :meth:`CoverageJoin.held_offsets` tells it which of the
candidates read again still wait for their decision (the others have theirs committed).

Pure: no I/O, no clock (``now`` is passed in), records are opaque values of the caller.
"""

from __future__ import annotations

from collections import deque
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

    Every operation costs what it touches, not the state's size: held candidates time out in the
    order they were held, windows close in the order narratives opened, and each partition's open
    narratives are kept in the order of their first offsets.

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
        self._by_partition: dict[int, dict[NarrativeKey, None]] = {}
        self._ready: dict[NarrativeKey, None] = {}
        self._timeouts: deque[tuple[float, NarrativeKey]] = deque()
        self._windows: deque[tuple[float, NarrativeKey]] = deque()
        self._idle: dict[NarrativeKey, None] = {}
        self._settled: dict[NarrativeKey, float] = {}
        """Narratives closed with nothing pending or held, until their window closes: a QA candidate of
        theirs that comes late is released as ``settled``, and they hold back no commit."""
        self._held = 0

    def ner(
        self, key: NarrativeKey, partition: int, offset: int, candidate_id: str, let_through: bool, now: float
    ) -> None:
        """An NER candidate of narrative ``key`` was decided: pending unless it was BLOCKed."""
        narrative = self._open(key, partition, offset, now)
        if let_through:
            narrative.pending.add(candidate_id)
            self._pending[candidate_id] = key
        self._mark_idle(key, narrative)

    def other(self, key: NarrativeKey, partition: int, offset: int, now: float) -> None:
        """Another candidate of the narrative (not NER, not QA) was decided: it opens the narrative."""
        self._mark_idle(key, self._open(key, partition, offset, now))

    def qa(self, key: NarrativeKey, partition: int, offset: int, record: R, now: float) -> Release[R] | None:
        """A QA candidate arrived: released at once (returned) or held (None)."""
        narrative = self._narratives.get(key)
        if narrative is None:
            return Release(record, Coverage.SETTLED if key in self._settled else Coverage.NO_NER, 0.0)
        if not narrative.pending:
            return Release(record, Coverage.SETTLED, 0.0)
        if not narrative.held:
            self._timeouts.append((now, key))
        narrative.held.append(Held(record, offset, now))
        self._held += 1
        return None

    def awaited(self) -> Iterable[str]:
        """The NER candidate ids still pending."""
        return self._pending.keys()

    def settle(self, candidate_id: str) -> None:
        """The verdict of an NER candidate is in the memory (unknown ids are ignored)."""
        key = self._pending.pop(candidate_id, None)
        narrative = None if key is None else self._narratives.get(key)
        if narrative is not None:
            narrative.pending.discard(candidate_id)
            if not narrative.pending and narrative.held:
                self._ready[key] = None  # type: ignore[index]
            self._mark_idle(key, narrative)  # type: ignore[arg-type]

    def due(self, now: float) -> list[Release[R]]:
        """Release what is due at ``now`` and purge closed narratives (see the module docstring)."""
        released: list[Release[R]] = []
        ready, self._ready = self._ready, {}
        for key in ready:  # releasing may close the narrative, which touches the ready set
            self._release(key, Coverage.SETTLED, now, released)
        while self._timeouts and now - self._timeouts[0][0] >= self.wait_s:
            since, key = self._timeouts.popleft()
            narrative = self._narratives.get(key)
            if narrative is not None and narrative.held and narrative.held[0].since == since:
                self._release(key, Coverage.TIMEOUT, now, released)
        idle, self._idle = self._idle, {}
        for key in idle:
            narrative = self._narratives.get(key)
            if narrative is not None and not narrative.pending and not narrative.held:
                self._close(key)
                self._settled[key] = narrative.opened
        while self._windows and now - self._windows[0][0] >= self.wait_s:
            opened, key = self._windows.popleft()
            narrative = self._narratives.get(key)
            if narrative is not None and narrative.opened == opened and not narrative.held:
                self._close(key)  # one still holding candidates closes when they are released
            elif self._settled.get(key) == opened:
                del self._settled[key]
        return released

    def low_watermark(self, partition: int) -> int | None:
        """The first offset of ``partition`` an open narrative needs read again after a restart."""
        for key in self._by_partition.get(partition, {}):
            return self._narratives[key].first_offset
        return None

    def held_offsets(self, partition: int) -> list[int]:
        """The offsets of the QA candidates of ``partition`` held now (their decisions are to come)."""
        narratives = self._narratives
        return [h.offset for key in self._by_partition.get(partition, {}) for h in narratives[key].held]

    def drop(self, partitions: Iterable[int]) -> None:
        """Forget the narratives of ``partitions`` (revoked, or rewound to be read again)."""
        for partition in list(partitions):
            for key in list(self._by_partition.get(partition, {})):
                self._close(key)

    def __len__(self) -> int:
        """Open narratives."""
        return len(self._narratives)

    def held(self) -> int:
        """QA candidates held now."""
        return self._held

    def _open(self, key: NarrativeKey, partition: int, offset: int, now: float) -> _Narrative[R]:
        narrative = self._narratives.get(key)
        if narrative is None:
            self._settled.pop(key, None)
            narrative = self._narratives[key] = _Narrative(partition, offset, now)
            self._by_partition.setdefault(partition, {})[key] = None
            self._windows.append((now, key))
        return narrative

    def _release(self, key: NarrativeKey, coverage: Coverage, now: float, out: list[Release[R]]) -> None:
        narrative = self._narratives.get(key)
        if narrative is None:
            return
        out += [Release(h.record, coverage, max(now - h.since, 0.0)) for h in narrative.held]
        self._held -= len(narrative.held)
        narrative.held = []
        if now - narrative.opened >= self.wait_s:
            self._close(key)
        else:
            self._mark_idle(key, narrative)

    def _mark_idle(self, key: NarrativeKey, narrative: _Narrative[R]) -> None:
        if not narrative.pending and not narrative.held:
            self._idle[key] = None

    def _close(self, key: NarrativeKey) -> None:
        narrative = self._narratives.pop(key)
        for candidate_id in narrative.pending:
            self._pending.pop(candidate_id, None)
        self._held -= len(narrative.held)
        self._ready.pop(key, None)
        del self._by_partition[narrative.partition][key]
