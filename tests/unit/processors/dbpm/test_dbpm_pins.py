"""Operator pins: a pinned signature's candidates are decided as pinned, with the pin in their provenance,
and nothing the paper's memory learns changes (severity, counts, propagation, clock, snapshot); removing
the pin gives the learnt decision back; a stream with pins replays to the same output every time."""

from __future__ import annotations

import io
import json

import pytest
from dbpm_harness import DAY, T0, Harness, iso, ner, rel

from processors.dbpm import BadEvent, DBPMConfig, PinEvent, parse_event
from processors.dbpm.pins import read_pin_provenance, unpinnable
from processors.dbpm.signatures import signature, signature_payload
from state import RamStore
from streams.replay.engine import replay_stream
from tests.dbpm_streams import pin_line

CONFIG = DBPMConfig().with_flags(maintenance=False)


def pin(task: str, sig: str, action: str, *, at: float = T0, reason: str = "known false positive") -> dict:
    """A pin event of ``sig`` as the console publishes it (verdict-shaped, source ``operator_pin``)."""
    return pin_line(task, sig, action, iso(at), reason)


def _blocked(h: Harness, entity: str = "fever") -> None:
    for i in range(3):
        h.verdict("ner", "hard_fail", ner(entity), at=T0 + i)
    assert h.gate("ner", ner(entity), at=T0 + 10).decision == "BLOCK"


def _raw(store: RamStore) -> list[tuple[bytes, bytes]]:
    """Every record but the pins'."""
    return [(k, v) for k, v in store.transaction().iter_prefix(b"") if not k.startswith(b"O")]


def test_an_allow_pin_overrides_a_learnt_block_names_itself_and_its_removal_gives_the_block_back() -> None:
    h = Harness(CONFIG)
    _blocked(h)
    h.send(pin("ner", "fever", "ALLOW", at=T0 + 20, reason="a fever is not an error=ever"))
    pinned = h.gate("ner", ner(" Fever "), at=T0 + 30)
    assert (pinned.decision, pinned.rule, pinned.multiplier) == ("ALLOW", "operator_pin", 1.0)
    assert pinned.severity == pytest.approx(h.severity("ner", "fever", T0 + 30)) and pinned.support == 3
    assert pinned.sources == (
        "operator_pin", "pin_id=pin-ALLOW", "pinned_by=olga", f"pinned_at={iso(T0 + 20)}",
        "pin_reason=a fever is not an error=ever",
    )  # fmt: skip
    assert read_pin_provenance(pinned.sources) == {
        "pin_id": "pin-ALLOW", "pinned_by": "olga", "pinned_at": iso(T0 + 20),
        "pin_reason": "a fever is not an error=ever",
    }  # fmt: skip
    h.send(pin("ner", "fever", "UNPIN", at=T0 + 40))
    learnt = h.gate("ner", ner("fever"), at=T0 + 50)
    assert (learnt.decision, learnt.rule) == ("BLOCK", "block")
    assert read_pin_provenance(learnt.sources) is None


def test_a_block_pin_blocks_an_unseen_signature_and_beats_the_flag_policy_and_the_relation_gate() -> None:
    h = Harness(CONFIG.with_flags(downgrade_first=True))
    h.send(pin("ner", "aspirin", "BLOCK"))
    blocked = h.gate("ner", ner("Aspirin"))
    assert (blocked.decision, blocked.rule, blocked.severity, blocked.support, blocked.policy) == (
        "BLOCK", "operator_pin", None, 0, (),
    )  # fmt: skip
    assert blocked.multiplier == 0.0
    admitted = h.gate("re", rel())
    assert (admitted.decision, admitted.rule) == ("ALLOW", "ontology_admitted")
    h.send(pin("re", signature("re", rel()), "BLOCK"))
    assert (h.gate("re", rel()).decision, h.gate("re", rel()).rule) == ("BLOCK", "operator_pin")


def test_a_pin_changes_nothing_the_memory_learns() -> None:
    """The same verdicts with and without pins interleaved (propagation on): every record but the pin, the
    snapshot and the severities are the same, and the pin's own record is all a pin writes."""
    config = DBPMConfig().with_flags(cross_task=True)
    stream = [
        {"kind": "verdict", "ts": iso(T0 + i), "task": task, "verdict": "hard_fail",
         "source": "verifier_mmed", "patient_id": "p1", "payload": payload}
        for i, (task, payload) in enumerate([("re", rel(head="warfarin")), ("ner", ner("fever")),
                                             ("re", rel(head="warfarin")), ("ner", ner("warfarin"))])
    ]  # fmt: skip
    plain, pinned = Harness(config), Harness(config)
    for i, event in enumerate(stream):
        plain.send(event)
        pinned.send(pin("ner", "warfarin", "BLOCK" if i % 2 else "ALLOW", at=T0 + i + 0.5))
        pinned.send(event)
    pinned.send(pin("ner", "fever", "BLOCK", at=T0 + 100 * DAY))  # after every verdict: no clock moved
    assert _raw(pinned.store) == _raw(plain.store)
    assert pinned.snapshot() == plain.snapshot()
    pins = [k for k, _ in pinned.store.transaction().iter_prefix(b"O")]
    assert pins == [b"Oner\x00fever", b"Oner\x00warfarin"]


def test_a_stream_with_pins_replays_to_the_same_output_every_time() -> None:
    events = [
        *({"kind": "verdict", "ts": iso(T0 + i), "task": "ner", "verdict": "hard_fail",
           "source": "verifier_mmed", "patient_id": "p1", "payload": ner("fever")} for i in range(3)),
        {"kind": "gate", "ts": iso(T0 + 4), "task": "ner", "patient_id": "p1", "candidate_id": "c1",
         "payload": ner("fever")},
        pin("ner", "fever", "ALLOW", at=T0 + 5),
        {"kind": "gate", "ts": iso(T0 + 6), "task": "ner", "patient_id": "p1", "candidate_id": "c2",
         "payload": ner("fever")},
        pin("ner", "fever", "UNPIN", at=T0 + 7),
        {"kind": "gate", "ts": iso(T0 + 8), "task": "ner", "patient_id": "p1", "candidate_id": "c3",
         "payload": ner("fever")},
    ]  # fmt: skip
    lines = [json.dumps(e) for e in events]
    outputs = []
    for _ in range(2):
        decisions, dead = io.StringIO(), io.StringIO()
        stats = replay_stream(lines, decisions, dead, RamStore(), Harness(CONFIG).engine, provenance=True)
        assert (stats.events, stats.decisions, stats.bad_lines) == (8, 3, 0)
        outputs.append(decisions.getvalue())
    assert outputs[0] == outputs[1]
    rules = [(d["decision"], d["rule"]) for d in map(json.loads, outputs[0].splitlines())]
    assert rules == [("BLOCK", "block"), ("ALLOW", "operator_pin"), ("BLOCK", "block")]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"pin": None}, "needs field 'pin'"),
        ({"verdict": "success"}, "carries verdict 'hard_fail'"),
        ({"source": "verifier_mmed"}, "must have source 'operator_pin'"),
        ({"pin": {"action": "BLOCK", "operator": "o", "reason": " ", "pin_id": "x"}}, "must not be blank"),
        ({"pin": {"action": "MAYBE", "operator": "o", "reason": "r", "pin_id": "x"}}, "unknown pin"),
        ({"pin": {"action": "BLOCK", "reason": "r", "pin_id": "x"}}, "missing field pin.'operator'"),
    ],
)
def test_a_bad_pin_is_bad_input_that_says_why(change: dict, reason: str) -> None:
    with pytest.raises(BadEvent, match=reason):
        parse_event({**pin("ner", "fever", "BLOCK"), **change})


def test_a_pin_event_names_the_signature_of_its_payload() -> None:
    event = parse_event(pin("re", "treatment | treats|diagnosis", "ALLOW"))
    assert isinstance(event, PinEvent)
    assert (event.signature, event.action, event.operator) == ("TREATMENT|TREATS|DIAGNOSIS", "ALLOW", "olga")


@pytest.mark.parametrize(
    ("task", "typed", "normalised"),
    [("ner", " Fever ", "fever"), ("re", "a|b|c", "A|B|C"), ("qa", "What Dose? ", "what dose?")],
)
def test_a_typed_signature_is_normalised_through_its_payload(task: str, typed: str, normalised: str) -> None:
    assert signature(task, signature_payload(task, typed)) == normalised


@pytest.mark.parametrize(("task", "typed"), [("ner", "  "), ("re", "A|B"), ("re", "A||C")])
def test_a_signature_that_names_nothing_is_refused(task: str, typed: str) -> None:
    with pytest.raises(ValueError, match="signature"):
        signature_payload(task, typed)


def test_only_a_qa_error_class_signature_is_unpinnable_since_no_candidate_is_gated_under_it() -> None:
    class_sig = signature("qa", {"question": "q", "category": "Medication"}, "Dose_Error")
    assert class_sig == "qa::medication|dose_error"
    assert "decide nothing" in (unpinnable("qa", class_sig) or "")
    candidate = {"question": "What dose?", "answer": "", "category": "medication"}
    assert signature("qa", candidate) != class_sig
    assert [unpinnable(task, sig) for task, sig in (("qa", "what dose?"), ("ner", "qa::x|y"))] == [None, None]
