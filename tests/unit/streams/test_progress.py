"""A transactional loop's progress record: what a successor reads to send nothing twice."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.runtime.progress import Progress, advanced, progress_topic


@given(
    resume=st.integers(0, 2**40),
    span=st.integers(0, 10_000),
    held=st.lists(st.integers(0, 10_000), max_size=300),
)
def test_a_progress_record_decodes_to_what_was_encoded(resume: int, span: int, held: list[int]) -> None:
    progress = Progress(resume, resume + span, frozenset(resume + h for h in held if h < span))
    assert Progress.decode(progress.encode()) == progress


def test_only_records_read_and_not_held_are_done() -> None:
    progress = Progress(resume=10, emitted=20, held=frozenset({12, 15}))
    done = [offset for offset in range(8, 23) if progress.done(offset)]
    assert done == [8, 9, 10, 11, 13, 14, 16, 17, 18, 19]


def test_thousands_of_held_candidates_stay_a_small_record() -> None:
    held = frozenset(range(1_000, 21_000, 3))  # 6,667 QA candidates among NER and RE ones
    progress = Progress(resume=1_000, emitted=21_000, held=held)
    assert len(progress.encode()) < 2_000
    assert Progress.decode(progress.encode()) == progress


def test_a_groups_progress_topic_is_named_after_it() -> None:
    assert progress_topic("ward-7-gate") == "ward-7-gate-progress"


def test_progress_resumes_at_the_first_record_still_needed_and_names_the_held_ones() -> None:
    assert advanced(None, 100, None, ()) == Progress(100, 100)
    assert advanced(None, 100, 40, [45, 90]) == Progress(40, 100, frozenset({45, 90}))
    last = Progress(40, 100, frozenset({45, 90}))
    assert advanced(last, 130, 90, [90]) == Progress(90, 130, frozenset({90}))


def test_reading_again_what_the_last_progress_covers_keeps_its_end_and_its_held_records() -> None:
    """A successor read 40..69 of what its predecessor covered up to 100: records 70..99 stay done, but
    for 90, still held (not read again yet); 45, read again, is held again by the join."""
    last = Progress(40, 100, frozenset({45, 90}))
    progress = advanced(last, 70, 40, [45])
    assert progress == Progress(40, 100, frozenset({45, 90}))
    assert [o for o in range(70, 100) if not progress.done(o)] == [90]
    assert advanced(last, 70, 60, []) == Progress(60, 100, frozenset({90}))
