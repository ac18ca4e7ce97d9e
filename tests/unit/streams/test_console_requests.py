"""What the request runtime writes for a console request, or why it refuses it (:func:`check`, without
Kafka): a re-drive produces the dead letter's own key, value and headers to its source partition with the
re-drive headers, only for an operator, a whole dead letter that is still the record at its source
coordinates, a value of the source topic's schema, once; a pin is an operator's pin verdict by the
requesting user, keyed for its signature; nothing else is written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from processors.dbpm.config import OPERATOR_PIN
from schemas.common import DeadLetter, Header, Truncation
from schemas.console import ConsoleRequest
from schemas.dbpm import PinAction, Verdict
from schemas.serde import make_serde
from streams.requests.check import (
    REDRIVE_PREFIX,
    Carried,
    Evidence,
    Original,
    Refused,
    check,
    coordinates,
    marks,
)
from streams.testing.schema_samples import samples
from streams.worker.dbpm import memory_key, pin_record
from topics.catalog import CONSOLE_REQUESTS, DBPM_VERDICTS, FHIR_UPDATES, dlq_name

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
        (_pin(user="someone-else"), "not the requesting operator's"),
        (_pin(pin_id="another"), "under the request's id"),
        (_pin(key=b"ner|other"), "keyed and targeted"),
        (_pin(target="ner|other"), "keyed and targeted"),
        (_pin(topic=FHIR_UPDATES), "a pin is a verdict"),
        (_pin(value=VALID), "not a clingate.dbpm.Verdict"),
        (_pin(role="pharmacist"), "may not pin"),
    ],
)
def test_a_pin_request_cannot_carry_any_other_verdict(request_: ConsoleRequest, says: str) -> None:
    refused = check(request_, Evidence(), SERDE)
    assert isinstance(refused, Refused) and says in refused.reason


def test_a_redrive_marks_its_dead_letter_done_a_pin_only_its_request() -> None:
    assert marks("redrive", "a-1", TARGET) == ("a-1", TARGET)
    assert marks("pin", "a-2", "ner|fever") == ("a-2",)
    assert coordinates(TARGET) is not None and str(coordinates(TARGET)) == TARGET
    assert coordinates("x[1]@") is None and coordinates("x[²]@1") is None
