"""DBPM streams the worker tests and the topology tests share: verdicts that name candidates, repeated,
operator pins, and a narrative for the NER-coverage join."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from schemas.dbpm import Candidate, PinAction, Verdict
from streams.worker.wire import pin_record


def with_candidate_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream with every other verdict naming a candidate of its own (as the verifier's verdicts do).

    The other verdicts keep the example's form, without a candidate id (rule sources, other verifiers).
    """
    out, verdicts = [], 0
    for i, event in enumerate(events):
        if event["kind"] == "verdict":
            verdicts += 1
            if verdicts % 2 == 0:
                event = {**event, "candidate_id": f"v-{i}"}
        out.append(event)
    return out


def with_copies(events: list[dict[str, Any]], every: int) -> tuple[list[dict[str, Any]], int]:
    """Every ``every``-th verdict that names a candidate published again after the next gate event.

    A re-issued verifier call publishes such a copy. Returns the stream and the number of copies.
    """
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    verdicts = copies = 0
    for event in events:
        out.append(event)
        if event["kind"] == "verdict" and event.get("candidate_id"):
            verdicts += 1
            if verdicts % every == 0:
                pending.append(dict(event))
        elif event["kind"] == "gate" and pending:
            out += pending
            copies += len(pending)
            pending = []
    return out + pending, copies + len(pending)


def pin_line(
    task: str, sig: str, action: str, ts: str, reason: str = "known false positive"
) -> dict[str, Any]:
    """An operator ``olga``'s pin of ``sig`` as a replay-stream line: the record the console publishes on
    the verdict topic (:func:`streams.worker.wire.pin_record`), with ``kind``."""
    record = pin_record(
        task, sig, PinAction(action), "olga", reason, f"pin-{action}", datetime.fromisoformat(ts)
    )
    return {"kind": "verdict", **record.model_dump(mode="json", exclude_none=True)}


def coverage_narrative(patient: str) -> tuple[list[Candidate], list[Candidate]]:
    """One narrative's live candidates for the NER-coverage join: two NER diagnoses and two QA
    candidates of the mapped category ``diagnosis`` that ask for them (one document date)."""
    base = {"ts": "2026-11-26T09:00:00Z", "document_ts": "2026-11-20T00:00:00Z", "patient_id": patient}
    ner = [
        Candidate.model_validate({**base, "task": "ner", "candidate_id": f"{patient}-ner-{i}",
                                  "payload": {"entity": entity, "category": "Diagnosis"}})
        for i, entity in enumerate(("pneumonia", "sepsis"))
    ]  # fmt: skip
    qa = [
        Candidate.model_validate({**base, "task": "qa", "candidate_id": f"{patient}-qa-{i}",
                                  "payload": {"question": "What is the diagnosis?", "answer": answer,
                                              "category": "diagnosis"}})
        for i, answer in enumerate(("pneumonia", "sepsis"))
    ]  # fmt: skip
    return ner, qa


def ner_success(candidate: Candidate) -> Verdict:
    """The verifier's success verdict on NER ``candidate``, five seconds after the narrative."""
    return Verdict.model_validate({
        **candidate.model_dump(mode="json", exclude={"document_ts", "task"}), "task": "ner",
        "ts": "2026-11-26T09:00:05Z", "verdict": "success", "source": "verifier_mmed",
    })  # fmt: skip
