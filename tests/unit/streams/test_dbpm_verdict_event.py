"""A decoded verdict becomes the engine's event field by field: the very event ``parse_event`` makes
of the model's JSON, so the memory writer and the in-process replay learn the same thing."""

from __future__ import annotations

from itertools import islice

import pytest

from processors.dbpm import BadEvent, parse_event
from schemas.dbpm import Verdict
from streams.testing.dbpm_stream import generate_events
from streams.worker.wire import contract_event


def _verdicts() -> list[Verdict]:
    found = (e for e in generate_events(4000) if e["kind"] == "verdict")
    extra = {"candidate_id": "c-1", "stage": "verifier", "reason": "r", "confidence": 0.25}
    return [
        Verdict.model_validate({**{k: v for k, v in e.items() if k != "kind"}, **(extra if i % 2 else {})})
        for i, e in enumerate(islice(found, 600))
    ]


def test_every_verdict_becomes_the_event_parse_event_makes_of_its_json() -> None:
    verdicts = _verdicts()
    assert {v.task for v in verdicts} == {"ner", "re", "qa"}
    assert any(v.payload.model_dump().get("error_class") for v in verdicts if v.task == "qa")
    for verdict in verdicts:
        expected = parse_event({**verdict.model_dump(mode="json", exclude_none=True), "kind": "verdict"})
        assert contract_event(verdict) == expected


def test_a_verdict_on_a_task_the_gate_does_not_know_is_bad_input_with_parse_events_reason() -> None:
    verdict = Verdict.model_validate({
        "ts": "2026-05-04T10:00:00.250000Z", "task": "summary", "verdict": "success",
        "source": "verifier_mmed", "patient_id": "p", "payload": {"document": "{}"},
    })  # fmt: skip
    with pytest.raises(BadEvent) as direct:
        contract_event(verdict)
    with pytest.raises(BadEvent) as parsed:
        parse_event({**verdict.model_dump(mode="json", exclude_none=True), "kind": "verdict"})
    assert str(direct.value) == str(parsed.value)
