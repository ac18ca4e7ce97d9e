"""The replay publisher's lockstep, resumed anywhere: what it commits, waits for and pauses at.

:func:`streams.replay.kafka._publish` is driven with recording stand-ins for the broker side (the
publisher's transactions, the decisions, the gate's commits) over generated runs, resumed after any
number of committed records and with any pause points, and compared with the order the module
docstring states, written out plainly here: the candidates an earlier publication committed are waited
for before anything new goes out; each run of gate events is committed and its decisions are waited
for before the next verdicts go out; a pause point commits what was produced and runs the hook.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.replay import kafka as replay
from streams.replay.kafka import Pauses, Publication, ReplayRecord, ReplayRun
from topics.catalog import DBPM_CANDIDATES, DBPM_VERDICTS


def _runs(shape: Sequence[tuple[str, int]]) -> list[ReplayRun]:
    """Runs alternating as generated: ``("verdict", n)`` or ``("gate", n)`` (a tick, then n candidates)."""
    runs, serial = [], 0
    for kind, n in shape:
        if kind == "verdict":
            records = [ReplayRecord(DBPM_VERDICTS, b"v", b"%d" % (serial + i)) for i in range(n)]
            runs.append(ReplayRun(records, []))
        else:
            ids = [f"c{serial + i}" for i in range(n)]
            tick = ReplayRecord(DBPM_VERDICTS, None, b"", (), 0)
            candidates = [ReplayRecord(DBPM_CANDIDATES, b"p", c.encode()) for c in ids]
            runs.append(ReplayRun([tick, *candidates], ids))
        serial += n
    return runs


def _expected(runs: list[ReplayRun], published: int, points: Sequence[int], segment_max: int) -> list[Any]:
    """The module docstring's order, plainly: the log a publication resumed after ``published`` makes."""
    log: list[Any] = []
    records = [(record, run) for run in runs for record in run.records]
    before = [r.value.decode() for r, _ in records[:published] if r.topic == DBPM_CANDIDATES]
    todo = sorted(n for n in points if n > len(before))
    if before:
        log.append(("settle", before))
    segment: list[bytes] = []
    index, produced = 0, len(before)

    def commit() -> None:
        if segment:
            log.append(("commit", list(segment), index))
            segment.clear()

    for run in runs:
        for record in run.records:
            index += 1
            if index <= published:
                continue
            segment.append(record.value)
            if record.topic == DBPM_CANDIDATES:
                produced += 1
                if todo and todo[0] == produced:
                    commit()
                    while todo and todo[0] == produced:
                        log.append(("pause", todo.pop(0)))
            if len(segment) >= segment_max:
                commit()
        if run.candidate_ids and index > published:
            commit()
            log.append(("settle", list(run.candidate_ids)))
    commit()
    return log


class _Recorder:
    """The broker side of a publication, recording what the publisher asks of it."""

    def __init__(self) -> None:
        self.log: list[Any] = []

    def commit(self, segment: Sequence[ReplayRecord], progress: Publication) -> None:
        self.log.append(("commit", [r.value for r in segment], progress.published))

    def wait_for(self, candidate_ids: Sequence[str], timeout_s: float) -> None:
        self.log.append(("settle", list(candidate_ids)))

    def wait(self, topic: str, timeout_s: float) -> None:
        assert topic == DBPM_CANDIDATES


shapes = st.lists(st.tuples(st.sampled_from(["verdict", "gate"]), st.integers(1, 4)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(shape=shapes, data=st.data(), segment_max=st.integers(1, 6))
def test_a_publication_resumed_anywhere_commits_waits_and_pauses_in_the_streams_order(
    shape: list[tuple[str, int]], data: st.DataObject, segment_max: int
) -> None:
    runs = _runs(shape)
    total = sum(len(run.records) for run in runs)
    candidates = sum(len(run.candidate_ids) for run in runs)
    published = data.draw(st.integers(0, total), label="published")
    points = data.draw(st.lists(st.integers(1, candidates), max_size=3) if candidates else st.just([]))
    recorder = _Recorder()
    pauses = Pauses(points, lambda n: recorder.log.append(("pause", n)), candidates)
    original, replay.SEGMENT_MAX = replay.SEGMENT_MAX, segment_max
    try:
        resumed, _, order = replay._publish(
            iter(runs), Publication(published, {}), recorder, recorder, recorder, pauses, 1.0,  # type: ignore[arg-type]
        )  # fmt: skip
    finally:
        replay.SEGMENT_MAX = original
    assert resumed == published
    assert order == [c for run in runs for c in run.candidate_ids]
    assert recorder.log == _expected(runs, published, points, segment_max)
