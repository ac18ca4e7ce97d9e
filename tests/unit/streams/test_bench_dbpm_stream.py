"""Specification tests for the synthetic DBPM stream (streams/testing/dbpm_stream.py)."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.dbpm import load_ontology, parse_event
from schemas.dbpm import QaErrorClass
from streams.testing.dbpm_stream import StreamShape, generate_events, stream_lines, write_stream

TASKS = {"ner", "re", "qa"}
VERDICTS = {"hard_fail", "soft_downgrade", "success"}
SOURCES = {"verifier_mmed", "rule_based"}
PAYLOAD_FIELDS = {
    "ner": {"entity", "category"},
    "re": {"head", "head_type", "relation", "tail", "tail_type"},
    "qa": {"question", "answer", "category"},
}


@pytest.fixture(scope="module")
def stream() -> list[dict]:
    return list(generate_events(60_000))


def test_every_event_follows_the_replay_contract(stream: list[dict]) -> None:
    candidate_ids = set()
    for event in stream:
        parse_event(event)  # the engine's contract validation accepts it
        assert event["kind"] in {"gate", "verdict"}
        assert event["task"] in TASKS
        assert event["ts"].endswith("Z")
        assert event["patient_id"].startswith("p-")
        required = PAYLOAD_FIELDS[event["task"]]
        assert required <= set(event["payload"])
        if event["kind"] == "gate":
            assert event["candidate_id"] not in candidate_ids
            candidate_ids.add(event["candidate_id"])
            extra = set(event["payload"]) - required
            assert extra <= ({"ner_categories", "difficulty"} if event["task"] == "qa" else set())
        else:
            assert event["verdict"] in VERDICTS
            assert event["source"] in SOURCES
            extra = set(event["payload"]) - required
            if extra:
                assert event["task"] == "qa" and event["verdict"] == "hard_fail" and extra == {"error_class"}
                assert event["payload"]["error_class"] in {c.value for c in QaErrorClass}


def test_each_gate_event_is_followed_by_its_verdict(stream: list[dict]) -> None:
    for gate, verdict in zip(stream[0::2], stream[1::2], strict=False):
        assert gate["kind"] == "gate" and verdict["kind"] == "verdict"
        assert (gate["task"], gate["patient_id"]) == (verdict["task"], verdict["patient_id"])
        for field in PAYLOAD_FIELDS[gate["task"]]:
            assert gate["payload"][field] == verdict["payload"][field]


def test_event_time_never_decreases_and_advances_one_patient_per_arrival_slot(stream: list[dict]) -> None:
    stamps = [e["ts"] for e in stream]
    assert all(a <= b for a, b in pairwise(stamps))
    assert stamps[0] == "2026-05-04T00:00:00Z"
    # 500 patients a day: patient k starts k * 172.8 s after the stream start
    first_of_patient_100 = next(e["ts"] for e in stream if e["patient_id"] == "p-000100")
    assert first_of_patient_100 == "2026-05-04T04:48:00Z"


def test_candidates_per_patient_follow_the_paper(stream: list[dict]) -> None:
    patients = {e["patient_id"] for e in stream}
    complete = len(patients) - 1  # the last patient is cut by the event count
    gates = Counter(
        e["task"] for e in stream if e["kind"] == "gate" and e["patient_id"] != stream[-1]["patient_id"]
    )
    assert gates["ner"] / complete == pytest.approx(27, abs=1.0)
    assert gates["re"] / complete == pytest.approx(29, abs=1.0)
    assert gates["qa"] / complete == pytest.approx(6, abs=0.5)


def test_relation_rejections_are_about_16_percent_and_diffuse(stream: list[dict]) -> None:
    relations = [e for e in stream if e["kind"] == "verdict" and e["task"] == "re"]
    rejected = [
        e["payload"] for e in relations if e["verdict"] == "hard_fail" and e["source"] == "verifier_mmed"
    ]
    assert len(rejected) / len(relations) == pytest.approx(0.16, abs=0.015)
    signatures = Counter(
        f"{p['head_type'].strip().upper()}|{p['relation'].strip().upper()}|{p['tail_type'].strip().upper()}"
        for p in rejected
    )
    assert len(signatures) > 0.8 * len(rejected)
    assert signatures.most_common(1)[0][1] <= 10


def test_ontology_violations_concentrate_on_six_type_triples(stream: list[dict]) -> None:
    events = [
        e for e in stream if e["kind"] == "verdict" and e["task"] == "re" and e["source"] == "rule_based"
    ]
    assert events and {e["verdict"] for e in events} == {"hard_fail"}
    violations = [e["payload"] for e in events]
    triples = Counter((p["head_type"], p["relation"], p["tail_type"]) for p in violations)
    assert len(triples) == 6
    assert triples.most_common(1)[0][0] == ("Tests", "ASSOCIATED_WITH", "Diagnosis")


def test_entity_rejections_concentrate_on_few_strings(stream: list[dict]) -> None:
    rejected = Counter(
        e["payload"]["entity"]
        for e in stream
        if e["kind"] == "verdict" and e["task"] == "ner" and e["verdict"] == "hard_fail"
    )
    assert len(rejected) <= 10
    assert rejected.most_common(1)[0][1] > 0.25 * sum(rejected.values())


def test_about_11_percent_of_qa_pairs_fail_more_often_without_ner_coverage(stream: list[dict]) -> None:
    pairs = list(zip(stream[0::2], stream[1::2], strict=False))
    qa = [(g, v) for g, v in pairs if g["task"] == "qa"]
    fails = [v["verdict"] == "hard_fail" for _, v in qa]
    assert sum(fails) / len(fails) == pytest.approx(0.11, abs=0.02)

    def fail_rate(covered: bool) -> float:
        outcomes = [
            v["verdict"] == "hard_fail"
            for g, v in qa
            if (g["payload"]["category"] in {c.lower() for c in g["payload"]["ner_categories"]}) == covered
        ]
        return sum(outcomes) / len(outcomes)

    assert fail_rate(covered=False) > 2 * fail_rate(covered=True)


def test_the_same_seed_gives_the_same_stream_and_a_shorter_stream_is_a_prefix() -> None:
    assert list(stream_lines(3_000)) == list(stream_lines(3_000))
    assert list(stream_lines(1_001)) == list(stream_lines(3_000))[:1_001]
    assert list(stream_lines(500, StreamShape(seed=1))) != list(stream_lines(500))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 400), seed=st.integers(0, 2**16))
def test_exactly_the_requested_number_of_events_is_generated(n: int, seed: int) -> None:
    assert sum(1 for _ in generate_events(n, StreamShape(seed=seed))) == n


def test_fast_arrivals_compress_patients_without_overlap() -> None:
    events = list(generate_events(5_000, StreamShape(patients_per_day=20_000)))
    assert all(a["ts"] <= b["ts"] for a, b in pairwise(events))


def test_write_stream_writes_one_json_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    assert write_stream(path, 250) == 250
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 250
    assert [json.loads(line) for line in lines] == list(generate_events(250))


def test_rule_based_verdicts_are_true_ontology_violations_and_accepted_relations_are_admitted(
    stream: list[dict],
) -> None:
    ontology = load_ontology()
    for event in stream:
        if event["kind"] != "verdict" or event["task"] != "re":
            continue
        triple = (event["payload"]["head_type"], event["payload"]["relation"], event["payload"]["tail_type"])
        if event["source"] == "rule_based":
            assert ontology.violates(*triple), triple
        if event["verdict"] == "success":
            assert ontology.admits(*triple), triple
