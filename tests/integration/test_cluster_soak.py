"""The deployment's shape under failure: three brokers, workers scaled 1 → 3 → 1, a leader killed, a roll.

Scenario: a three-node KRaft cluster (:class:`streams.local.cluster.LocalCluster`, in containers of
clingate's Kafka image through testcontainers where Docker runs, else native; every
catalog topic with three replicas and ``min.insync.replicas`` 2) runs the chaos soak of
:mod:`streams.bench.chaos` (the DBPM loop replayed in lockstep through ``clingate worker``
processes, comparison configuration), and four disruptions happen at seeded points of the
publication, in this order: the app scales from one worker to three; the leader of the busiest
candidates partition is SIGKILLed and restarted; every broker is stopped and started in turn, each
once the cluster is fully in sync again; the app scales back to one worker. One patient's FHIR
updates arrive with the first and the third disruption, half each.

End conditions: every candidate has exactly one decision record as a ``read_committed`` reader reads
the decisions topic; decisions and memory equal the in-process engine's; every assessment the pure
clinical processor emits for the updates is published (the clinical agent is at least once: a repeat
is byte-identical). The longest time a candidate waited for its decision is printed.

`make test` runs it on 8,000 events (about 100 s); `make soak` on 80,000 (marker ``slow``).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from schemas.clinical import ClinicalAssessment
from schemas.dbpm import Candidate, GateDecision
from schemas.wire import make_serde
from streams.bench.chaos import Disruption, Recovery, run_soak
from streams.local.cluster import LocalCluster
from streams.local.images import kafka_image
from streams.runtime.kafka_clients import producer_config, read_to_end, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.clinical_reference import pure_outputs
from streams.testing.tail import Tail, topic_ends
from streams.testing.worker import COMPARISON_ENV, WorkerProcess
from tests.clinical_scenario import PATIENT, scenario
from topics.admin import ensure_topics
from topics.catalog import CLINICAL_ASSESSMENTS, DBPM_CANDIDATES, DBPM_DECISIONS, FHIR_UPDATES, build_catalog

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        shutil.which("java") is None and kafka_image(Settings()) is None,
        reason="the brokers need java or clingate's Kafka image",
    ),
]


def _in_sync(bootstrap: str, timeout_s: float = 120.0) -> float:
    """Wait until every partition of the cluster has all its replicas in sync; the seconds it took."""
    started = time.monotonic()
    while True:
        topics = admin_client(bootstrap).list_topics(timeout=10).topics.values()
        lagging = [
            f"{t.topic}[{p.id}]"
            for t in topics
            for p in t.partitions.values()
            if len(p.isrs) < len(p.replicas)
        ]
        if not lagging:
            return time.monotonic() - started
        assert time.monotonic() - started < timeout_s, f"out of sync after {timeout_s:.0f} s: {lagging[:5]}"
        time.sleep(0.5)


def _busiest_leader(bootstrap: str) -> tuple[int, int]:
    """(partition, leader) of the candidates partition holding the most records."""
    ends = topic_ends(bootstrap, DBPM_CANDIDATES)
    partition = max(ends, key=lambda p: ends[p])
    metadata = admin_client(bootstrap).list_topics(DBPM_CANDIDATES, timeout=10).topics[DBPM_CANDIDATES]
    return partition, metadata.partitions[partition].leader


def _steps(cluster: LocalCluster, bootstrap: str, feed: Callable[[int], None]) -> Disruption:
    """The soak's four disruptions, one per call, in the module docstring's order; ``feed(half)``
    publishes one half of the FHIR updates (0, then 1)."""

    def scale(workers: list[WorkerProcess], count: int) -> str:
        first = workers[0]
        while len(workers) < count:
            added = WorkerProcess(
                bootstrap,
                first.app_id,
                first.datadir.with_name(f"{first.app_id}-{len(workers)}"),
                COMPARISON_ENV,
            )
            workers.append(added)
            added.start()
        for extra in workers[count:]:
            extra.stop()
        return f"scaled to {count} worker(s)"

    def scale_up(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, None]:
        feed(0)
        return scale(workers, 3), None

    def kill_leader(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
        partition, leader = _busiest_leader(bootstrap)
        assert cluster.node(leader).kill()

        def restart() -> str:
            cluster.start()
            return f"node {leader} restarted, in sync after {_in_sync(bootstrap):.1f} s"

        return f"node {leader}, leader of {DBPM_CANDIDATES}[{partition}], SIGKILLed", restart

    def roll(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery]:
        feed(1)
        first, *others = cluster.node_ids
        cluster.node(first).stop()

        def rest() -> str:
            done = []
            for node_id in (first, *others):
                if node_id != first:
                    cluster.node(node_id).stop()
                cluster.start()
                done.append(f"node {node_id} in sync after {_in_sync(bootstrap):.1f} s")
            return "; ".join(done)

        return f"rolling restart: node {first} stopped", rest

    def scale_down(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, None]:
        return scale(workers, 1), None

    steps = iter([scale_up, kill_leader, roll, scale_down])

    def disrupt(workers: list[WorkerProcess], rng: random.Random) -> tuple[str, Recovery | None]:
        return next(steps)(workers, rng)

    return disrupt


def _longest_wait(bootstrap: str, starts: dict[str, dict[int, int]], tag: str) -> tuple[float, str]:
    """The longest time from a candidate's publication to its decision's (record timestamps), and whose."""
    serde = make_serde(None)
    published: dict[str, int] = {}
    decided: dict[str, int] = {}
    client = reader(bootstrap, "soak-waits", **{"isolation.level": "read_committed"})
    try:
        for message in read_to_end(client, starts):
            if message.topic() == DBPM_CANDIDATES:
                candidate = serde.decode(message.value(), Candidate, topic=DBPM_CANDIDATES)
                if candidate.candidate_id.startswith(tag):
                    published[candidate.candidate_id] = message.timestamp()[1]
            else:
                decision = serde.decode(message.value(), GateDecision, topic=DBPM_DECISIONS)
                decided.setdefault(decision.candidate_id, message.timestamp()[1])
    finally:
        client.close()
    waits = {c: (decided[c] - t) / 1000 for c, t in published.items() if c in decided}
    worst = max(waits, key=lambda c: waits[c])
    return waits[worst], worst


@pytest.mark.parametrize(
    "events", [pytest.param(8_000, id="short"), pytest.param(80_000, id="long", marks=pytest.mark.slow)]
)
def test_the_dbpm_loop_and_fhir_updates_ride_out_scaling_a_leader_kill_and_a_rolling_restart(
    events: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings()
    image = kafka_image(settings)
    cluster = LocalCluster(tmp_path / "cluster", 3, home=settings.home, image=image)
    print(f"cluster: {'testcontainers, ' + image if image else 'native'}")
    bootstrap = cluster.start()
    try:
        monkeypatch.setenv("CLINGATE_TOPIC_REPLICATION", "3")  # the workers' internal topics too
        ensure_topics(admin_client(bootstrap), build_catalog(Settings().topic_partitions, 3))
        updates, _, _ = scenario()
        expected = [o.model_dump(mode="json") for o in pure_outputs(updates, Settings())
                    if isinstance(o, ClinicalAssessment)]  # fmt: skip
        starts = {topic: topic_ends(bootstrap, topic) for topic in (DBPM_CANDIDATES, DBPM_DECISIONS)}
        assessments = Tail(bootstrap, CLINICAL_ASSESSMENTS)
        serde = make_serde(None)
        producer = Producer(producer_config(bootstrap))
        halves = (updates[: len(updates) // 2], updates[len(updates) // 2 :])

        def feed(half: int) -> None:
            for update in halves[half]:
                producer.produce(
                    FHIR_UPDATES, key=PATIENT.encode(), value=serde.encode(update, topic=FHIR_UPDATES)
                )
            assert producer.flush(60) == 0

        report = run_soak(
            bootstrap, tmp_path / "workers", events=events, disruptions=4, epoch=1000, seed=13,
            disrupt=_steps(cluster, bootstrap, feed), timeout_s=600.0,
        )  # fmt: skip
        print(report.render())
        assert len(report.disruptions) == 4, "a disruption did not happen"
        assert report.audit.missing == []
        assert report.audit.duplicates == 0, "a read_committed consumer read a decision twice"
        assert report.audit.conflicting == []
        assert report.decisions_equal and report.state_equal
        # No supervisor restarts a worker: the first rode out the leader's death and the roll (every
        # group and transaction coordinator moved at least once); those scaled down stopped cleanly.
        assert 0 not in report.exited, f"the first worker stopped on its own: {report.exited}"
        assert all(status == 0 for status in report.exited.values()), f"exit statuses: {report.exited}"
        wait, whose = _longest_wait(bootstrap, starts, "chaos13-")
        print(f"longest wait for a decision: {wait:.1f} s ({whose})")
        distinct: list[bytes] = []
        deadline = time.monotonic() + 120
        while len(distinct) < len(expected):
            assert time.monotonic() < deadline, f"{len(distinct)} of {len(expected)} assessments"
            assessments.until(len(assessments.records) + 1, timeout_s=120)
            distinct = list(dict.fromkeys(m.value() for m in assessments.records))
        got = [serde.decode(v, ClinicalAssessment, topic=CLINICAL_ASSESSMENTS).model_dump(mode="json")
               for v in distinct]  # fmt: skip
        assert got == expected
        print(f"assessments: {len(assessments.records)} records, {len(expected)} distinct (at least once)")
    finally:
        cluster.stop()
