"""Structured logs (:mod:`streams.runtime.logs`): ids in every format, clinical text never at INFO+."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from schemas.common import Stage
from schemas.fhir import FhirUpdate
from streams.cli import app
from streams.runtime.dlq import Rejected, SourceRecord
from streams.runtime.logs import JsonFormatter, TextFormatter, configure, log_dead_letter
from streams.worker.clinical import fhir_input

CLINICAL_TEXT = "Patient reports crushing chest pain radiating to the left arm"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger's output at INFO in JSON, restored afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    yield stream
    root.handlers[:], root.level = saved[0], saved[1]


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("clingate.test", logging.INFO, __file__, 1, message, (), None)
    record.__dict__.update(extra)
    return record


def test_json_lines_carry_the_ids_and_drop_every_other_extra() -> None:
    line = json.loads(JsonFormatter().format(
        _record("decided", patient_id="p1", candidate_id="c1", document_id="d1", payload=CLINICAL_TEXT)
    ))  # fmt: skip
    assert line["message"] == "decided" and line["level"] == "INFO" and line["logger"] == "clingate.test"
    assert (line["patient_id"], line["candidate_id"], line["document_id"]) == ("p1", "c1", "d1")
    assert "payload" not in line and CLINICAL_TEXT not in json.dumps(line)


def test_text_lines_append_the_ids_as_key_value_pairs() -> None:
    text = TextFormatter().format(_record("decided", patient_id="p1", payload=CLINICAL_TEXT))
    assert text.endswith("clingate.test: decided [patient_id=p1]")


def _fhir_dead_letter() -> Rejected:
    """A FHIR update whose invalid Observation quotes clinical text in its validation error."""
    observation = {
        "resourceType": "Observation", "id": "obs-1", "status": CLINICAL_TEXT,
        "code": {"text": "Heart rate"}, "subject": {"reference": "Patient/p1"},
        "note": [{"text": CLINICAL_TEXT}],
    }  # fmt: skip
    update = FhirUpdate(ts="2026-03-29T00:00:00Z", patient_id="p1", resource_type="Observation",
                        resource=json.dumps(observation))  # fmt: skip
    _, errors = fhir_input(update)
    assert errors and CLINICAL_TEXT in "; ".join(errors)  # the reason does quote the record
    record = SourceRecord("clingate.fhir.updates", 3, 41, None, b"p1", b"...", ())
    return Rejected(record, Stage.VALIDATE, "FhirInvalid", "; ".join(errors), None, FhirUpdate.avro_name)


def test_a_dead_letter_is_logged_with_coordinates_and_error_type_but_never_its_reason_at_info(
    captured: io.StringIO,
) -> None:
    log_dead_letter(logging.getLogger("clingate.test"), _fhir_dead_letter())
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert [(x["level"], x["topic"], x["partition"], x["offset"], x["error_type"]) for x in lines] == [
        ("WARNING", "clingate.fhir.updates", 3, 41, "FhirInvalid")
    ]
    assert CLINICAL_TEXT not in captured.getvalue()


def test_the_reason_of_a_dead_letter_is_available_at_debug(captured: io.StringIO) -> None:
    logging.getLogger().setLevel(logging.DEBUG)
    log_dead_letter(logging.getLogger("clingate.test"), _fhir_dead_letter())
    assert CLINICAL_TEXT in captured.getvalue()


def test_every_command_logs_in_the_configured_format(monkeypatch: pytest.MonkeyPatch) -> None:
    from streams.runtime.settings import get_settings

    monkeypatch.setenv("CLINGATE_LOG_FORMAT", "json")
    monkeypatch.setenv("CLINGATE_LOG_LEVEL", "warning")
    get_settings.cache_clear()
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        assert CliRunner().invoke(app, ["config", "--markdown"]).exit_code == 0
        assert root.level == logging.WARNING
        assert [type(h.formatter) for h in root.handlers] == [JsonFormatter]
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        get_settings.cache_clear()


def test_configure_replaces_the_handlers_it_finds() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        configure("INFO", "text")
        configure("DEBUG", "json")
        assert len(root.handlers) == 1 and isinstance(root.handlers[0].formatter, JsonFormatter)
        assert root.level == logging.DEBUG
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
