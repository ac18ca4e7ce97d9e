"""The pure parts of the chaos and restart benchmarks, and the soak's pauses on a broker-less feed.

The soak's disruptions happen at their points by construction: the replay publisher stops at each
point until the disruption is done. The feed tests here run :func:`replay_via_kafka` against an
in-memory producer and instantly deciding "workers", the fastest feed there can be, and check that
every disruption still happens, exactly at its point.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streams.replay.kafka as kafka_replay
from schemas.dbpm import Candidate
from schemas.wire import make_serde
from streams.bench.chaos import ChaosMonkey, TooFewCandidates, disruption_points
from streams.bench.restart import restore_figures
from streams.replay.kafka import Pauses, ReplayRecord, replay_via_kafka
from streams.runtime.logs import TextFormatter
from streams.testing.dbpm_stream import generate_events
from streams.testing.worker import WorkerProcess, comparison_engine, soak_stream
from topics.catalog import DBPM_CANDIDATES


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


def _logged(at: str, message: str) -> str:
    """One line as the worker's text log writes it (``at``: the local time it shows)."""
    created = datetime.strptime(at, "%Y-%m-%d %H:%M:%S.%f").astimezone().timestamp()
    record = logging.makeLogRecord({
        "name": "streams.worker.tableloop", "levelno": logging.INFO, "levelname": "INFO", "msg": message,
        "created": created, "msecs": created % 1 * 1000,
    })  # fmt: skip
    return TextFormatter().format(record)


_LOG = "\n".join([
    _logged("2026-11-22 04:45:48.212", "app-dbpm-memory-changelog restored: partitions [0, 1, 2], "
                                       "6810 changelog records in 0.420 s"),
    _logged("2026-11-22 04:45:49.000", "an unrelated line with 5 changelog records in 9.0 s"),
    _logged("2026-11-22 04:45:49.100", "app-clinical-patients-changelog restored: partitions [0], "
                                       "7 changelog records in 0.010 s"),
    _logged("2026-11-22 04:45:50.712", "app-dbpm-memory-changelog restored: partitions [3], "
                                       "90 changelog records in 0.080 s"),
])  # fmt: skip


def test_restore_figures_sum_the_memory_writers_restore_lines() -> None:
    assert restore_figures(_LOG) == (6810 + 90, 0.5)


def test_restore_figures_of_a_log_without_a_restore_are_nothing_read_in_nan_seconds() -> None:
    records, seconds = restore_figures(_logged("2026-11-22 04:45:48.212", "clingate worker ready"))
    assert records == 0 and seconds != seconds


class _Feed:
    """A publisher without a broker: counts candidates produced and committed (``acknowledged``)."""

    def __init__(self) -> None:
        self.produced = 0
        self.acknowledged = 0

    def produce(self, topic: str, **_: object) -> None:
        self.produced += topic == DBPM_CANDIDATES

    def flush(self, *_: object) -> int:
        self.acknowledged = self.produced
        return 0


@settings(max_examples=40)
@given(candidates=st.integers(1, 60), data=st.data())
def test_pauses_run_the_hook_once_per_point_with_exactly_the_points_candidates_acknowledged(
    candidates: int, data: st.DataObject
) -> None:
    points = data.draw(st.lists(st.integers(1, candidates), max_size=6))
    feed = _Feed()
    calls: list[tuple[int, int, int]] = []
    pauses = Pauses(points, lambda n: calls.append((n, feed.produced, feed.acknowledged)), candidates)

    for _ in range(candidates):
        feed.produce(DBPM_CANDIDATES)
        pauses.reached(feed.produced, feed.flush)
    pauses.finish()

    assert calls == [(n, n, n) for n in sorted(points)]
    assert pauses.paused == sorted(points)
    assert pauses.pending == []


@pytest.mark.parametrize("point", [0, 11, -1])
def test_pauses_refuse_a_point_the_publication_never_reaches(point: int) -> None:
    with pytest.raises(ValueError, match=r"outside 1\.\.10"):
        Pauses([3, point], lambda n: None, candidates=10)


def test_pauses_refuse_points_without_a_hook() -> None:
    with pytest.raises(ValueError, match="need a hook"):
        Pauses([3], None, candidates=10)


def test_pauses_report_a_publication_that_stopped_before_a_point() -> None:
    pauses = Pauses([2, 5], lambda n: None, candidates=10)
    for n in range(1, 4):
        pauses.reached(n, lambda: None)
    with pytest.raises(RuntimeError, match=r"before the pause points \[5\]"):
        pauses.finish()


def test_pauses_of_a_resumed_publication_skip_the_points_its_earlier_run_passed() -> None:
    calls: list[int] = []
    pauses = Pauses([2, 5, 5], calls.append, candidates=10)
    pauses.passed(3)
    for n in range(4, 11):
        pauses.reached(n, lambda: None)
    pauses.finish()
    assert calls == [5, 5]


@pytest.mark.parametrize("candidates", [20, 57, 1000])
def test_disruption_points_are_the_soaks_seeded_draw(candidates: int) -> None:
    points = disruption_points(candidates, 3, random.Random(11))

    assert points == sorted(random.Random(11).sample(range(candidates // 20, candidates * 9 // 10), 3))
    assert len(set(points)) == 3
    assert all(1 <= n < candidates for n in points)


def test_disruption_points_refuse_more_disruptions_than_the_stream_has_room_for() -> None:
    assert disruption_points(10, 0, random.Random(1)) == []
    with pytest.raises(TooFewCandidates, match="3 disruptions"):
        disruption_points(4, 3, random.Random(1))


class _InstantWorkers:
    """Replaces the replay's Kafka clients: every candidate is decided the moment it is committed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.feed = _Feed()
        self.values: list[bytes] = []
        serde = make_serde(None)
        workers = self

        class Publisher:
            def __init__(self, *_: object) -> None:
                pass

            def last(self, timeout_s: float) -> None:
                return None

            def commit(self, records: Sequence[ReplayRecord], progress: object) -> None:
                for record in records:
                    workers.feed.produce(record.topic)
                    if record.topic == DBPM_CANDIDATES:
                        workers.values.append(record.value)
                workers.feed.flush()

        class Collector:
            def __init__(self, *_: object) -> None:
                self.seen: dict[str, dict[str, Any]] = {}
                self.start: dict[int, int] = {}

            def wait_for(self, candidate_ids: Any, timeout_s: float) -> None:
                for value in workers.values[: workers.feed.acknowledged]:
                    c = serde.decode(value, Candidate, topic=DBPM_CANDIDATES)
                    self.seen[c.candidate_id] = {
                        "candidate_id": c.candidate_id, "decision": "ALLOW", "rule": "r", "signature": "s",
                        "severity": None, "multiplier": 1.0, "sources": [],
                    }  # fmt: skip
                assert set(candidate_ids) <= self.seen.keys()

            def close(self) -> None:
                pass

        class Commits:
            def __init__(self, *_: object) -> None:
                pass

            def __enter__(self) -> Commits:
                return self

            def __exit__(self, *_: object) -> None:
                pass

            def partitions(self, topic: str, timeout_s: float) -> list[int]:
                return [0, 1, 2]

            def wait(self, topic: str, timeout_s: float) -> None:
                pass

            def close(self) -> None:
                pass

        monkeypatch.setattr(kafka_replay, "Publisher", Publisher)
        monkeypatch.setattr(kafka_replay, "_DecisionCollector", Collector)
        monkeypatch.setattr(kafka_replay, "CommitWatcher", Commits)
        monkeypatch.setattr(kafka_replay, "read_state", lambda *_: {})

    def replay(self, events: Sequence[dict[str, Any]], **kwargs: Any) -> kafka_replay.KafkaReplayResult:
        return replay_via_kafka(
            "nowhere:9092", events, comparison_engine(), make_serde(None), "app", **kwargs
        )


def test_an_instant_feed_disrupts_at_every_point_and_no_further_candidate_goes_out_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fastest feed (no broker, decisions at once) still stops at each point until it is disrupted."""
    workers = _InstantWorkers(monkeypatch)
    stream = soak_stream(300, 100, "t")
    candidates = sum(e["kind"] == "gate" for e in stream)
    rng = random.Random(11)
    points = disruption_points(candidates, 4, rng)
    at_disruption: list[tuple[int, int]] = []

    def disrupt(procs: list[WorkerProcess], rng: random.Random) -> tuple[str, None]:
        at_disruption.append((workers.feed.produced, workers.feed.acknowledged))
        return "recorded", None

    monkey = ChaosMonkey([], points, disrupt, rng, log=lambda line: None, max_delay_s=0.0)
    monkey.start()
    result = workers.replay(stream, pause_at=points, on_pause=monkey)

    assert [e.candidates_published for e in monkey.events] == points
    assert at_disruption == [(n, n) for n in points]
    assert len(result.decisions) == candidates


def test_a_feed_that_does_not_pause_at_the_next_point_is_refused() -> None:
    monkey = ChaosMonkey([], [5, 9], lambda procs, rng: ("x", None), random.Random(1), lambda line: None, 0.0)
    monkey(5)
    with pytest.raises(RuntimeError, match="next disruption point is 9"):
        monkey(10)
    monkey(9)
    with pytest.raises(RuntimeError, match="next disruption point is None"):
        monkey(12)


def test_replay_refuses_a_pause_point_beyond_the_streams_candidates_before_publishing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workers = _InstantWorkers(monkeypatch)
    stream = soak_stream(40, 20, "t")
    candidates = sum(e["kind"] == "gate" for e in stream)
    with pytest.raises(ValueError, match="outside"):
        workers.replay(stream, pause_at=[candidates + 1], on_pause=lambda n: None)
    assert workers.feed.produced == 0


def test_each_recovery_runs_beside_the_feed_and_ends_before_the_next_disruption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(5)
    stream = soak_stream(400, 400, "recover")
    workers = _InstantWorkers(monkeypatch)
    points = disruption_points(sum(e["kind"] == "gate" for e in stream), 3, rng)
    steps: list[str] = []

    def disrupt(procs: list[WorkerProcess], rng: random.Random) -> tuple[str, Callable[[], str]]:
        steps.append("disrupt")

        def recover() -> str:
            steps.append("recover")
            return "back"

        return "broken", recover

    monkey = ChaosMonkey([], points, disrupt, rng, log=lambda line: None, max_delay_s=0.0)
    monkey.start()
    workers.replay(stream, pause_at=points, on_pause=monkey)
    monkey.finish()
    assert steps == ["disrupt", "recover"] * 3


def test_a_failed_recovery_is_raised_in_the_publishers_thread() -> None:
    def disrupt(procs: list[WorkerProcess], rng: random.Random) -> tuple[str, Callable[[], str]]:
        def recover() -> str:
            raise RuntimeError("the worker did not come back")

        return "broken", recover

    monkey = ChaosMonkey([], [1], disrupt, random.Random(1), lambda line: None, 0.0)
    monkey.start()
    monkey(1)
    with pytest.raises(RuntimeError, match="did not come back"):
        monkey.finish()
