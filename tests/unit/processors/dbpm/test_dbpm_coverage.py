"""The NER-coverage join: QA candidates wait for their narrative's NER candidates, at most the wait."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm.coverage import CoverageJoin, Release
from schemas.dbpm import Coverage

NARRATIVE = ("p1", 1000.0)
OTHER = ("p2", 1000.0)


def test_a_qa_candidate_waits_until_every_ner_candidate_let_through_is_settled() -> None:
    join: CoverageJoin[str] = CoverageJoin(wait_s=30)
    join.ner(NARRATIVE, 0, 10, "n1", let_through=True, now=0)
    join.ner(NARRATIVE, 0, 11, "n2", let_through=False, now=0)  # BLOCKed: settled at once
    join.ner(NARRATIVE, 0, 12, "n3", let_through=True, now=0)
    assert join.qa(NARRATIVE, 0, 13, "q1", now=1) is None
    assert set(join.awaited()) == {"n1", "n3"}
    join.settle("n1")
    assert join.due(now=2) == []
    join.settle("n3")
    join.settle("unknown")  # another gate's candidate: ignored
    assert join.due(now=4) == [Release("q1", Coverage.SETTLED, 3.0)]
    assert join.qa(NARRATIVE, 0, 14, "q2", now=5) == Release("q2", Coverage.SETTLED, 0.0)


def test_the_wait_is_bounded_and_a_narrative_without_ner_is_not_waited_for() -> None:
    join: CoverageJoin[str] = CoverageJoin(wait_s=30)
    join.ner(NARRATIVE, 0, 10, "n1", let_through=True, now=0)
    assert join.qa(NARRATIVE, 0, 11, "q1", now=5) is None
    assert join.due(now=34) == []
    assert join.due(now=35) == [Release("q1", Coverage.TIMEOUT, 30.0)]
    assert join.qa(OTHER, 0, 12, "q2", now=35) == Release("q2", Coverage.NO_NER, 0.0)


def test_other_patients_flow_while_one_narrative_waits() -> None:
    join: CoverageJoin[str] = CoverageJoin(wait_s=30)
    join.ner(NARRATIVE, 0, 10, "n1", let_through=True, now=0)
    assert join.qa(NARRATIVE, 0, 11, "q1", now=0) is None
    join.ner(OTHER, 0, 12, "m1", let_through=False, now=0)
    assert join.qa(OTHER, 0, 13, "q2", now=0) == Release("q2", Coverage.SETTLED, 0.0)


def test_the_commit_stays_at_the_first_candidate_of_a_narrative_only_while_it_waits() -> None:
    join: CoverageJoin[str] = CoverageJoin(wait_s=30)
    join.other(OTHER, 1, 3, now=0)
    join.ner(NARRATIVE, 0, 10, "n1", let_through=True, now=0)
    assert join.qa(NARRATIVE, 0, 11, "q1", now=0) is None
    assert (join.low_watermark(0), join.low_watermark(1), join.low_watermark(2)) == (10, 3, None)
    assert (join.held_offsets(0), join.held_offsets(1), join.held_offsets(2)) == ([11], [], [])
    join.settle("n1")
    assert [r.coverage for r in join.due(now=1)] == [Coverage.SETTLED]
    assert (len(join), join.low_watermark(0), join.low_watermark(1)) == (0, None, None)
    assert join.held_offsets(0) == []
    late = join.qa(NARRATIVE, 0, 12, "q2", now=2)  # its QA candidates may still come
    assert late == Release("q2", Coverage.SETTLED, 0.0)
    join.due(now=30)
    assert join.qa(NARRATIVE, 0, 13, "q3", now=31) == Release("q3", Coverage.NO_NER, 0.0)


def test_a_narrative_settled_after_its_window_releases_its_candidates_and_closes() -> None:
    join: CoverageJoin[str] = CoverageJoin(wait_s=30)
    for index, key in enumerate((NARRATIVE, OTHER)):
        join.ner(key, 0, 10 + index, f"n{index}", let_through=True, now=0)
        assert join.qa(key, 0, 20 + index, f"q{index}", now=25) is None
    join.settle("n0")
    join.settle("n1")
    released = join.due(now=40)  # both settled, both windows closed: released, then closed
    assert sorted(r.record for r in released) == ["q0", "q1"]
    assert {r.coverage for r in released} == {Coverage.SETTLED}
    assert (len(join), join.held(), join.low_watermark(0)) == (0, 0, None)


def test_dropped_partitions_forget_their_narratives_and_held_candidates() -> None:
    join: CoverageJoin[str] = CoverageJoin(wait_s=30)
    join.ner(NARRATIVE, 0, 10, "n1", let_through=True, now=0)
    join.qa(NARRATIVE, 0, 11, "q1", now=0)
    join.drop([0])
    assert (len(join), list(join.awaited()), join.due(now=100)) == (0, [], [])


def test_the_wait_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        CoverageJoin(wait_s=0)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ner", "qa", "settle", "tick"]), st.integers(0, 3)), max_size=60))
def test_every_qa_candidate_is_released_exactly_once_within_the_wait(steps: list[tuple[str, int]]) -> None:
    join: CoverageJoin[int] = CoverageJoin(wait_s=10)
    now, arrived, released = 0.0, {}, []
    for offset, (kind, n) in enumerate(steps, start=1):
        key = (f"p{n % 2}", float(n))
        if kind == "ner":
            join.ner(key, 0, offset, f"n{offset}", let_through=offset % 3 != 0, now=now)
        elif kind == "qa":
            arrived[offset] = now
            if (out := join.qa(key, 0, offset, offset, now)) is not None:
                released.append(out)
        elif kind == "settle":
            for candidate_id in list(join.awaited())[:n]:
                join.settle(candidate_id)
        else:
            now += n * 4
        released += join.due(now)
        assert join.held() == len(arrived) - len(released)
    released += join.due(now + 10)
    assert sorted(r.record for r in released) == sorted(arrived)
    assert all(r.waited_s <= 10 + 12 for r in released)
    assert len(join) == 0 or (join.due(now + 20) == [] and len(join) == 0)
