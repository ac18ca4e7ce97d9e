"""The pure parts of the chaos and restart benchmarks: the soak's stream and the recovery-log reader."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.bench.chaos import soak_stream
from streams.bench.dbpm import generate_events
from streams.bench.restart import records_read, recovery_seconds


@settings(max_examples=15, deadline=None)
@given(n_events=st.integers(0, 300), epoch=st.integers(1, 120))
def test_soak_stream_keeps_verdicts_and_puts_each_epochs_candidates_first(n_events: int, epoch: int) -> None:
    original = list(generate_events(n_events))
    stream = soak_stream(n_events, epoch, "t")

    assert [e for e in stream if e["kind"] == "verdict"] == [e for e in original if e["kind"] == "verdict"]
    assert sorted(e["candidate_id"] for e in stream if e["kind"] == "gate") == sorted(
        f"t-{e['candidate_id']}" for e in original if e["kind"] == "gate"
    )
    assert [e["ts"] for e in stream] == sorted(e["ts"] for e in stream)
    for start in range(0, n_events, epoch):
        kinds = [e["kind"] for e in stream[start : start + epoch]]
        assert kinds == sorted(kinds, key=lambda k: k != "gate")


_LOG = """\
[2026-11-22 04:45:48,212] [1] [INFO] [^---Recovery]: Highwater for active changelog partitions:
+Highwater - Active-------------------------------------+-----------+-----------+
| topic                                                 | partition | highwater |
+-------------------------------------------------------+-----------+-----------+
| app-clinical-patients-changelog                       | 0         | 40        |
| app-dbpm-memory-changelog                             | 0         | 6277      |
| 〃                                                    | 1         | 6532      |
| 〃                                                    | 2         | -1        |
+-------------------------------------------------------+-----------+-----------+
[2026-11-22 04:45:48,286] [1] [INFO] [^---Recovery]: active offsets at start of reading:
+Reading Starts At - Active-----------------------------+-----------+--------+
| topic                                                 | partition | offset |
+-------------------------------------------------------+-----------+--------+
| app-clinical-patients-changelog                       | 0         | -1     |
| app-dbpm-memory-changelog                             | 0         | 6000   |
| 〃                                                    | 1         | -1     |
| 〃                                                    | 2         | -1     |
+-------------------------------------------------------+-----------+--------+
[2026-11-22 04:45:50,712] [1] [INFO] [^---Recovery]: Worker ready
"""


def test_records_read_sums_highwater_minus_start_of_one_changelog() -> None:
    assert records_read(_LOG, "app-dbpm-memory-changelog") == 277 + 6533 + 0


def test_recovery_seconds_spans_first_recovery_table_to_worker_ready() -> None:
    assert recovery_seconds(_LOG) == 2.5
