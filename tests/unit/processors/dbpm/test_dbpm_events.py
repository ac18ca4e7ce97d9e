"""Contract validation of input events: every violation is a BadEvent that says what is wrong."""

from __future__ import annotations

import pytest

from processors.dbpm import BadEvent, GateEvent, VerdictEvent, format_time, parse_event, parse_time

GATE = {"kind": "gate", "ts": "2026-05-04T10:00:01Z", "task": "qa", "patient_id": "p", "candidate_id": "c",
        "payload": {"question": "Q?", "answer": "A", "category": "diagnosis"}}  # fmt: skip
VERDICT = {"kind": "verdict", "ts": "2026-05-04T10:00:00Z", "task": "ner", "verdict": "hard_fail",
           "source": "verifier_mmed", "patient_id": "p",
           "payload": {"entity": "x", "category": "y"}}  # fmt: skip


def test_valid_events_parse_into_typed_values():
    gate, verdict = parse_event(GATE), parse_event(VERDICT)
    assert isinstance(gate, GateEvent) and gate.candidate_id == "c"
    assert isinstance(verdict, VerdictEvent) and verdict.source == "verifier_mmed"
    assert gate.time - verdict.time == 1.0


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"kind": ["gate"]}, "kind"),
        ({"kind": None}, "missing field 'kind'"),
        ({"task": "summary"}, "unknown task 'summary'"),
        ({"ts": "yesterday"}, "not an ISO 8601"),
        ({"ts": "2026-05-04T10:00:00"}, "no zone"),
        ({"patient_id": 7}, "'patient_id' must be a string"),
        ({"candidate_id": None}, "missing field 'candidate_id'"),
        ({"payload": []}, "payload"),
        ({"payload": {"question": "Q", "answer": "A"}}, "payload.'category'"),
        ({"payload": {**GATE["payload"], "ner_categories": "Diagnosis"}}, "ner_categories"),
        ({"payload": {**GATE["payload"], "difficulty": 1.5}}, "difficulty"),
        ({"payload": {**GATE["payload"], "difficulty": True}}, "difficulty"),
    ],
)
def test_contract_violations_are_bad_events(change, reason):
    with pytest.raises(BadEvent, match=reason):
        parse_event({**GATE, **change})


def test_verdict_needs_a_known_verdict_and_a_source():
    with pytest.raises(BadEvent, match="unknown verdict 'pass'"):
        parse_event({**VERDICT, "verdict": "pass"})
    with pytest.raises(BadEvent, match="missing field 'source'"):
        parse_event({k: v for k, v in VERDICT.items() if k != "source"})


def test_timestamps_round_trip_in_the_contract_format():
    assert format_time(parse_time("2026-05-04T10:00:00Z")) == "2026-05-04T10:00:00Z"
    assert format_time(parse_time("2026-05-04T12:00:00.250+02:00")) == "2026-05-04T10:00:00.250000Z"
