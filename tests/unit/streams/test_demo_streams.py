"""Broker-free parts of the demo's streams: the FHIR timeline, the latency bookkeeping, and when the
DBPM loop counts a candidate as done."""

from __future__ import annotations

import io
from collections import Counter
from datetime import timedelta
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.progress import Progress

from streams.data.timeline import START, WEEKS, fhir_timeline, week_of
from streams.demo.feed import first_pending, loop_pending
from streams.demo.progress import plain_lines
from streams.demo.results import DeadLettered
from streams.demo.tap import Flow


@settings(max_examples=10, deadline=None)
@given(patients=st.integers(min_value=1, max_value=12), seed=st.integers(min_value=0, max_value=1000))
def test_fhir_timeline_is_in_event_time_order_one_update_per_patient_and_time(patients, seed):
    updates = fhir_timeline(patients, seed)
    assert [u.ts for u in updates] == sorted(u.ts for u in updates)
    assert len({(u.patient_id, u.ts) for u in updates}) == len(updates)
    assert len({u.patient_id for u in updates}) == patients
    assert all(0 <= week_of(u.ts) < WEEKS + 1 for u in updates)


def test_fhir_timeline_is_seeded():
    assert fhir_timeline(5, seed=3) == fhir_timeline(5, seed=3)


def test_fhir_timeline_spreads_changes_over_the_weeks():
    weeks = Counter(week_of(u.ts) for u in fhir_timeline(40))
    assert set(weeks) >= set(range(WEEKS))


def test_week_of_counts_whole_weeks_from_the_start():
    assert week_of(START) == 0
    assert week_of(START + timedelta(days=6, hours=23)) == 0
    assert week_of(START + timedelta(weeks=2)) == 2
    assert week_of(START - timedelta(days=1)) == 0


def test_flow_latency_pairs_outputs_with_their_inputs_and_ignores_unmatched_ones():
    flow = Flow("x", produced={"a": 10.0, "b": 10.5, "c": 11.0}, consumed={"a": 10.2, "b": 11.5, "z": 99.0})
    flow.outputs = ["a", "b", "z"]
    assert flow.latencies() == pytest.approx([0.2, 1.0])
    stats = flow.stats()
    assert stats["p50"] == 1.0 and stats["p99"] == 1.0
    assert stats["span"] == 89.0


def test_flow_without_outputs_reports_zeros():
    assert Flow("x").stats()["rate"] == 0.0


def _loop_flows() -> dict[str, Flow]:
    """Three candidates of patient p1: c1 BLOCKed, c2 ALLOWed and verified at verdicts 0@5, c3 ALLOWed."""
    flows = {name: Flow(name) for name in ("dbpm", "verifier")}
    for cid, decision in (("c1", "BLOCK"), ("c2", "ALLOW"), ("c3", "ALLOW")):
        flows["dbpm"].consumed[cid] = 1.0
        output = SimpleNamespace(candidate_id=cid, decision=decision)
        flows["dbpm"].outputs.append(output)
        flows["dbpm"].latest[cid] = output
    flows["verifier"].positions["c2"] = (0, 5)
    return flows


def test_a_loop_candidate_is_done_once_blocked_or_its_verdict_is_applied_or_dead_lettered():
    flows, dead = _loop_flows(), DeadLettered()
    ids = [("p1", "c1"), ("p1", "c2"), ("p1", "c3"), ("p2", "c4")]
    assert loop_pending(ids, flows, SimpleNamespace(applied={0: 4}), dead) == [
        ("p1", "c2"),
        ("p1", "c3"),
        ("p2", "c4"),
    ]
    assert loop_pending(ids, flows, SimpleNamespace(applied={0: 5}), dead) == [("p1", "c3"), ("p2", "c4")]
    dead.verifications.consumed["c3"] = 2.0  # its verification was dead-lettered: done, with failure
    dead.narratives.consumed["p2"] = 2.0  # its narrative was dead-lettered: c4 never comes
    assert loop_pending(ids, flows, SimpleNamespace(applied={0: 5}), dead) == []
    flows["dbpm"].produced["c4"] = 2.5  # ... but its other calls succeeded and published c4: it counts
    assert loop_pending(ids, flows, SimpleNamespace(applied={0: 5}), dead) == [("p2", "c4")]


def test_a_candidate_the_tap_is_still_taking_in_is_pending():
    flows = _loop_flows()
    flows["dbpm"].consumed["c5"] = 1.0  # consumed, its decision not yet appended
    assert loop_pending([("p1", "c5")], flows, SimpleNamespace(applied={}), DeadLettered()) == [("p1", "c5")]


def test_the_tap_counts_dead_lettered_verifications_and_narratives_of_the_run_only():
    from rich.console import Console

    from schemas.common import DeadLetter, Stage
    from schemas.dbpm import GateAction, GateDecision
    from schemas.wire import make_serde
    from streams.demo.plan import build_plan
    from streams.demo.streams import FLOWS, routes
    from topics.catalog import DBPM_NARRATIVES, DBPM_TO_VERIFY, dlq_name

    serde = make_serde(None)
    plan = build_plan(2, 1, 0, 1, Console(quiet=True))
    flows = {name: Flow(name) for name in FLOWS}
    dead = DeadLettered()
    routes = {r.topic: r for r in routes(plan, flows, dead, serde) if r.topic.endswith(".dlq")}
    narrative = plan.loop.narratives[0]
    candidate = plan.loop.candidates[narrative.patient_id][0]
    decision = GateDecision(ts=candidate.ts, task=candidate.task, patient_id=candidate.patient_id,
                            candidate_id=candidate.candidate_id, decision=GateAction.ALLOW, rule="no_match",
                            signature="S", confidence_multiplier=1.0, candidate=candidate)  # fmt: skip

    def letter(topic: str, value: bytes) -> DeadLetter:
        return DeadLetter(ts=candidate.ts, topic=topic, partition=0, offset=1, stage=Stage.PROCESS,
                          error_type="LlmFailed:timeout", error="timeout", value=value)  # fmt: skip

    to_verify, narratives = routes[dlq_name(DBPM_TO_VERIFY)], routes[dlq_name(DBPM_NARRATIVES)]
    assert to_verify.flow is dead.verifications and narratives.flow is dead.narratives
    encoded = serde.encode(decision, topic=DBPM_TO_VERIFY)
    assert to_verify.ident(letter(DBPM_TO_VERIFY, encoded)) == candidate.candidate_id
    assert narratives.ident(letter(DBPM_NARRATIVES, serde.encode(narrative, topic=DBPM_NARRATIVES))) == (
        narrative.patient_id
    )
    other = narrative.model_copy(update={"patient_id": "p-other-run"})
    assert narratives.ident(letter(DBPM_NARRATIVES, serde.encode(other, topic=DBPM_NARRATIVES))) is None
    assert to_verify.ident(letter(DBPM_TO_VERIFY, b"not avro")) is None


def test_progress_bars_reach_their_totals_when_llm_work_is_dead_lettered():
    """Every bar ends full: a dead-lettered verification is done for the verifier bar, and the planned
    candidates of a dead-lettered narrative, which never come, are done for the generator and gate bars;
    each bar counts its dead letters as the report does."""
    from rich.console import Console

    from streams.demo.plan import build_plan
    from streams.demo.progress import loop_progress

    plan = build_plan(2, 1, 0, 1, Console(quiet=True))
    first, second = (n.patient_id for n in plan.loop.narratives)
    flows = {name: Flow(name) for name in ("generator", "dbpm", "verifier")}
    dead = DeadLettered()
    came = plan.loop.candidates[first]
    for index, c in enumerate(came):
        flows["generator"].outputs.append(c)
        flows["dbpm"].produced[c.candidate_id] = flows["dbpm"].consumed[c.candidate_id] = 1.0
        decision = "BLOCK" if index == 0 else "ALLOW"
        flows["dbpm"].latest[c.candidate_id] = SimpleNamespace(candidate_id=c.candidate_id, decision=decision)
        if decision == "ALLOW":
            flows["verifier"].produced[c.candidate_id] = 1.0  # on to-verify
        if index == 1:
            dead.verifications.consumed[c.candidate_id] = 2.0
        elif index > 1:
            flows["verifier"].consumed[c.candidate_id] = 2.0
    before = loop_progress(plan, flows, dead)
    assert before["generator"].done < before["generator"].total  # the second narrative is still awaited
    dead.narratives.consumed[second] = 3.0
    bars = loop_progress(plan, flows, dead)
    assert all(bar.done == bar.total for bar in bars.values()), bars
    assert bars["verifier"].total == len(came) - 1 and bars["verifier"].dead_lettered == 1
    assert bars["generator"].dead_lettered == bars["dbpm"].dead_lettered == 1


def test_first_pending_skips_the_done_prefix_and_agrees_with_loop_pending():
    flows, dead = _loop_flows(), DeadLettered()
    tap = SimpleNamespace(applied={0: 5})
    ids = [("p1", "c1"), ("p1", "c2"), ("p1", "c3"), ("p2", "c4")]
    index = first_pending(ids, flows, tap, dead)
    assert ids[index:][:1] == loop_pending(ids, flows, tap, dead)[:1] == [("p1", "c3")]
    dead.verifications.consumed["c3"] = 2.0
    dead.narratives.consumed["p2"] = 2.0
    assert first_pending(ids, flows, tap, dead) == len(ids)


def test_a_service_that_exited_fails_the_run_at_once_with_its_log(tmp_path):
    """A worker that died (killed, crashed) is reported on the next progress tick, not after the
    streams' timeout: the outputs it owed would never come."""
    import time

    from streams.demo.errors import DemoError
    from streams.demo.services import ServiceProcess

    service = ServiceProcess("test service", [], {}, "127.0.0.1:9", tmp_path / "svc.log", (), module="this")
    with service:
        deadline = time.monotonic() + 30
        while service.running and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(DemoError, match=r"the test service exited \(code 0\)"):
            service.check_running()


def test_plain_progress_lines_say_where_each_stream_stands() -> None:
    """Where the output is not a terminal the bars cannot redraw: each stream's count goes out as a line."""
    progress = Progress(console=Console(file=io.StringIO(), force_terminal=False))
    known = progress.add_task("assessments (clingate.clinical.assessments)", total=1_200)
    progress.add_task("candidates (clingate.dbpm.candidates)", total=None)
    progress.update(known, completed=35)
    assert plain_lines(progress) == [
        "assessments (clingate.clinical.assessments): 35/1,200",
        "candidates (clingate.dbpm.candidates): 0/?",
    ]
