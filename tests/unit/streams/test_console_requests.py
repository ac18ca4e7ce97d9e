"""What the request runtime writes for a console request, or why it refuses it (:func:`check`, without
Kafka): a re-drive produces the dead letter's own key, value and headers to its source partition with the
re-drive headers, only for an operator, a whole dead letter that is still the record at its source
coordinates, a value of the source topic's schema, once; a pin is an operator's pin verdict by the
requesting user, keyed for its signature; an SME's review, a clinician's question and a pharmacist's query
decision or evidence review are their own records, of their role, keyed as their topic keys them, built
by the same function the console and ``clingate arbiter review`` use; nothing else is written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from processors.dbpm.config import OPERATOR_PIN
from schemas.agent import AgentRequest
from schemas.base import AvroModel
from schemas.clinical import (
    EvidenceReview,
    EvidenceVerdict,
    QueryDecision,
    QueryVerdict,
    ReviewedPacket,
)
from schemas.common import DeadLetter, Header, Truncation
from schemas.console import ConsoleRequest
from schemas.dbpm import PinAction, Verdict
from schemas.docs import DocumentType, Review, ReviewDecision
from schemas.wire import make_serde
from streams.requests.check import (
    REDRIVE_PREFIX,
    Carried,
    Evidence,
    Original,
    Refused,
    RequestAction,
    check,
    coordinates,
    marks,
    publication_request,
    touchpoint_target,
)
from streams.testing.schema_samples import samples
from streams.worker.keys import memory_key
from streams.worker.wire import pin_record
from topics.catalog import (
    AGENT_REQUESTS,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_QUERY_DECISIONS,
    CONSOLE_REQUESTS,
    DBPM_VERDICTS,
    DOCS_REVIEWS,
    FHIR_UPDATES,
    dlq_name,
)

SERDE = make_serde(None)
AT = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
DLQ = dlq_name(FHIR_UPDATES)
TARGET = f"{DLQ}[0]@7"
VALID = SERDE.encode(next(s for s in samples() if type(s).__name__ == "FhirUpdate"), topic=FHIR_UPDATES)


def letter(value: bytes | None = VALID, **update: Any) -> DeadLetter:
    """A dead letter of the FHIR update at ``clingate.fhir.updates[2]@101``."""
    fields: dict[str, Any] = {
        "ts": AT, "topic": FHIR_UPDATES, "partition": 2, "offset": 101, "stage": "process",
        "error_type": "KeyError", "error": "'x'", "key": b"PT-1", "value": value,
        "headers": (Header(key="traceparent", value=b"t"), Header(key=REDRIVE_PREFIX + "by", value=b"old")),
    }  # fmt: skip
    return DeadLetter.model_validate(fields | update)


def redrive(**update: Any) -> ConsoleRequest:
    fields: dict[str, Any] = {
        "request_id": "a-1", "event_time": AT, "user": "op", "role": "operator", "action": "redrive",
        "target": TARGET, "topic": FHIR_UPDATES, "note": "fixed",
    }  # fmt: skip
    return ConsoleRequest.model_validate(fields | update)


def seen(dead: DeadLetter | None = None, **update: Any) -> Evidence:
    """The evidence of ``dead`` (default :func:`letter`) whose source still holds its original."""
    dead = letter() if dead is None else dead
    fields: dict[str, Any] = {"letter": dead, "original": Original(dead.key, dead.value)}
    return Evidence(**(fields | update))


def test_a_redrive_produces_the_dead_letter_to_its_source_partition_with_the_redrive_headers() -> None:
    carried = check(redrive(), seen(), SERDE)
    assert isinstance(carried, Carried)
    assert (carried.topic, carried.partition, carried.key, carried.value) == (FHIR_UPDATES, 2, b"PT-1", VALID)
    assert [k for k, _ in carried.headers] == ["traceparent"] + [
        REDRIVE_PREFIX + name for name in ("dead-letter", "by", "at", "action-id")
    ], "an earlier re-drive's headers replaced"
    headers = dict(carried.headers)
    assert headers[REDRIVE_PREFIX + "dead-letter"] == TARGET.encode()
    assert headers[REDRIVE_PREFIX + "by"] == b"op"
    assert headers[REDRIVE_PREFIX + "action-id"] == b"a-1"
    assert headers[REDRIVE_PREFIX + "at"] == AT.isoformat().encode()


@pytest.mark.parametrize(
    ("request_", "evidence", "says"),
    [
        (redrive(role="clinician"), seen(), "may not redrive"),
        (redrive(action="delete"), seen(), "unknown action"),
        (redrive(target="clingate.fhir.updates[0]@7"), seen(), "names no record of a dead-letter topic"),
        (redrive(target="nonsense"), seen(), "names no record of a dead-letter topic"),
        (redrive(topic=DBPM_VERDICTS), seen(), "not of clingate.dbpm.verdicts"),
        (redrive(target=f"{dlq_name(CONSOLE_REQUESTS)}[0]@1", topic=CONSOLE_REQUESTS), seen(),
         "a request is not re-driven"),
        (redrive(), Evidence(), "no dead letter at"),
        (redrive(), Evidence(unreadable="bad magic"), "bad magic"),
        (redrive(), seen(letter(topic=DBPM_VERDICTS)), "names clingate.dbpm.verdicts"),
        (redrive(), seen(letter(truncations=(Truncation(field="value", size=9, sha256="ab" * 32),))),
         "not whole"),
        (redrive(), seen(letter(value=None)), "no value"),
        (redrive(), seen(original=None), "no longer holds the original"),
        (redrive(), seen(original=Original(b"PT-1", b"forged")), "not a copy of the record"),
        (redrive(), seen(letter(value=b"{not avro}")), "not a clingate.fhir.FhirUpdate"),
        (redrive(), seen(done=True), "carried out already"),
    ],
)  # fmt: skip
def test_a_redrive_is_refused_unless_everything_holds(
    request_: ConsoleRequest, evidence: Evidence, says: str
) -> None:
    refused = check(request_, evidence, SERDE)
    assert isinstance(refused, Refused) and says in refused.reason


def _pin(user: str = "op", pin_id: str = "a-2", **fields: Any) -> ConsoleRequest:
    verdict = pin_record("ner", "fever", PinAction.BLOCK, user, "false positive", pin_id, AT)
    key = memory_key("ner", "fever")
    base: dict[str, Any] = {
        "request_id": "a-2", "event_time": AT, "user": "op", "role": "operator", "action": "pin",
        "target": key.decode(), "topic": DBPM_VERDICTS, "key": key,
        "value": SERDE.encode(verdict, topic=DBPM_VERDICTS), "note": "false positive",
    }  # fmt: skip
    return ConsoleRequest.model_validate(base | fields)


def test_a_pin_is_produced_keyed_for_its_signature() -> None:
    carried = check(_pin(), Evidence(), SERDE)
    assert isinstance(carried, Carried)
    assert (carried.topic, carried.partition, carried.key) == (DBPM_VERDICTS, None, b"ner|fever")
    verdict = SERDE.decode(carried.value, Verdict, topic=DBPM_VERDICTS)
    assert verdict.source == OPERATOR_PIN and verdict.pin is not None and verdict.pin.operator == "op"


def _forged_verdict() -> bytes:
    verdict = next(s for s in samples() if isinstance(s, Verdict))
    assert verdict.source == "verifier_mmed"
    return SERDE.encode(verdict, topic=DBPM_VERDICTS)


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (_pin(value=_forged_verdict()), "not an operator's pin"),
        (_pin(user="someone-else"), "not the requesting user's"),
        (_pin(pin_id="another"), "under the request's id"),
        (_pin(key=b"ner|other"), "is keyed 'ner|fever' and targeted 'ner|fever'"),
        (_pin(target="ner|other"), "is keyed 'ner|fever' and targeted 'ner|fever'"),
        (_pin(topic=FHIR_UPDATES), "a pin is a record of clingate.dbpm.verdicts"),
        (_pin(value=VALID), "not a clingate.dbpm.Verdict"),
        (_pin(role="pharmacist"), "may not pin"),
    ],
)
def test_a_pin_request_cannot_carry_any_other_verdict(request_: ConsoleRequest, says: str) -> None:
    refused = check(request_, Evidence(), SERDE)
    assert isinstance(refused, Refused) and says in refused.reason


def test_redrives_and_pharmacists_decisions_mark_their_target_done_pins_and_reviews_only_the_request() -> (
    None
):
    assert marks("redrive", "a-1", TARGET) == ("a-1", TARGET)
    assert marks("pin", "a-2", "ner|fever") == ("a-2",)
    assert marks("review", "a-3", "doc-1") == ("a-3",)
    target = touchpoint_target("PT-1", "run-1", AT)
    assert marks("query-decision", "a-4", target) == ("a-4", target)
    assert marks("evidence-review", "a-5", target) == ("a-5", target)
    assert coordinates(TARGET) is not None and str(coordinates(TARGET)) == TARGET
    assert coordinates("x[1]@") is None and coordinates("x[²]@1") is None


QUERIES = ["digoxin toxicity management", "renal dosing of digoxin"]
PERSONS: dict[RequestAction, tuple[str, str, AvroModel]] = {
    RequestAction.REVIEW: (
        "sme", "sam",
        Review(doc_id="doc-1", ts=AT, reviewer="sam", decision=ReviewDecision.CORRECTS,
               corrected_dominant_type=DocumentType.OTHER, notes="a requisition"),
    ),
    RequestAction.ASK: (
        "clinician", "dr", AgentRequest(conversation_id="t-1", request_id="t-1", event_time=AT, query="INR?"),
    ),
    RequestAction.QUERY_DECISION: (
        "pharmacist", "ph",
        QueryDecision(patient_id="PT-1", run_id="run-1", event_time=AT, proposed_at=AT, pharmacist="ph",
                      decision_id="a-7", decision=QueryVerdict.EDITED, proposed=QUERIES[:1], queries=QUERIES),
    ),
    RequestAction.EVIDENCE_REVIEW: (
        "pharmacist", "ph",
        EvidenceReview(patient_id="PT-1", run_id="run-1", event_time=AT, bundle_time=AT, pharmacist="ph",
                       review_id="a-7", decision=EvidenceVerdict.ACCEPTED,
                       packets=[ReviewedPacket(source="digoxin label", accepted=True)]),
    ),
}  # fmt: skip
"""A record of each action that publishes a person's own record: the role, the user and the record."""

WHERE = {
    RequestAction.REVIEW: (DOCS_REVIEWS, b"doc-1", "doc-1"),
    RequestAction.ASK: (AGENT_REQUESTS, b"t-1", "t-1"),
    RequestAction.QUERY_DECISION: (CLINICAL_QUERY_DECISIONS, b"PT-1", touchpoint_target("PT-1", "run-1", AT)),
    RequestAction.EVIDENCE_REVIEW: (
        CLINICAL_EVIDENCE_REVIEWS,
        b"PT-1",
        touchpoint_target("PT-1", "run-1", AT),
    ),
}
"""Where each is published: topic, key, target."""


def _person(kind: RequestAction, **update: Any) -> ConsoleRequest:
    role, user, record = PERSONS[kind]
    request = publication_request(kind, record, SERDE, request_id="a-7", user=user, role=role, at=AT)
    return request.model_copy(update=update)


@pytest.mark.parametrize("kind", sorted(PERSONS))
def test_a_persons_own_record_is_published_as_it_is_keyed_as_its_topic_keys_it(kind: RequestAction) -> None:
    carried = check(_person(kind), Evidence(), SERDE)
    topic, key, target = WHERE[kind]
    assert isinstance(carried, Carried) and _person(kind).target == target
    assert (carried.topic, carried.partition, carried.key, carried.value) == (
        topic, None, key, _person(kind).value,
    )  # fmt: skip


@pytest.mark.parametrize("kind", sorted(PERSONS))
def test_a_persons_record_is_refused_when_it_is_not_theirs_or_not_keyed_for_what_it_is_about(
    kind: RequestAction,
) -> None:
    topic, _, _ = WHERE[kind]
    other = next(k for k in PERSONS if PERSONS[k][0] != PERSONS[kind][0])
    refusals = {
        "may not": _person(kind, role=PERSONS[other][0]),
        f"a {kind} is a record of {topic}": _person(kind, topic=FHIR_UPDATES),
        "is keyed": _person(kind, key=b"someone-else"),
        "and targeted": _person(kind, target="another"),
        "its value is not a": _person(kind, value=_person(other).value),
        "carried out already": _person(kind),
    }
    if kind != RequestAction.ASK:  # a question names nobody: its asker is the request's user
        refusals["not the requesting user's"] = _person(kind, user="someone-else")
    for says, request in refusals.items():
        refused = check(request, Evidence(done=says == "carried out already"), SERDE)
        assert isinstance(refused, Refused) and says in refused.reason, (says, refused)


def test_a_pharmacists_decision_carries_the_audit_records_id() -> None:
    refused = check(_person(RequestAction.QUERY_DECISION, request_id="a-8"), Evidence(), SERDE)
    assert isinstance(refused, Refused) and "under the request's id" in refused.reason


def test_a_decision_that_breaks_its_records_rules_does_not_decode_and_is_refused() -> None:
    broken = PERSONS[RequestAction.QUERY_DECISION][2].model_copy(update={"decision": QueryVerdict.APPROVED})
    request = _person(
        RequestAction.QUERY_DECISION, value=SERDE.encode(broken, topic=CLINICAL_QUERY_DECISIONS)
    )
    refused = check(request, Evidence(), SERDE)
    assert isinstance(refused, Refused) and "APPROVED exactly when" in refused.reason
