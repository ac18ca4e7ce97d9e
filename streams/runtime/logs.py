"""Structured logs of every clingate process: text or JSON lines on stderr, ids but never clinical text.

Every command calls :func:`configure` once its arguments parsed (:func:`streams.cli.configure_logs`), with
the process's :class:`~streams.runtime.settings.Settings` (``CLINGATE_LOG_FORMAT``, ``CLINGATE_LOG_LEVEL``).

Records carry identifiers, not content. A call site passes the ids it has as ``extra``::

    log.info("decided", extra={"patient_id": pid, "candidate_id": cid, "decision": "BLOCK"})

and both formats render exactly the fields of :data:`CONTEXT_FIELDS` (JSON keys; ``key=value`` after the
message in text). Anything else passed in ``extra`` is dropped, so a payload that slips into ``extra`` never
reaches the output.

Clinical text rule: narratives, spans, answers, FHIR notes, document pages and validation errors
that quote input values MUST NOT be logged at INFO or above. Such detail goes to the dead-letter record
(which is access-controlled like the input topic) or to DEBUG. :func:`log_dead_letter` is the one way a
worker reports a dead letter: coordinates and error type at WARNING, the reason (which may quote the
record) at DEBUG only. ``tests/unit/streams/test_logs.py`` checks the rule on a FHIR validation error that
quotes clinical text, and ``tests/integration/test_worker_observability.py`` runs a real worker at INFO on
records full of clinical text and asserts none of it reaches its log.

Choices:

* stderr, never stdout: commands print their results (JSON, tables) on stdout for pipes.
* Timestamps are the wall clock of the log record (UTC, ISO 8601, milliseconds): logs are about the
  process, not the event; event times travel as ids when they matter.
* Exceptions are rendered with their traceback (``exc`` in JSON); exception messages raised by clingate
  code name records by id, never by content.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # streams.runtime.dlq pulls in Kafka clients; every command imports this module
    from streams.runtime.dlq import Rejected

LogFormat = Literal["text", "json"]

CONTEXT_FIELDS: tuple[str, ...] = (
    "patient_id",
    "candidate_id",
    "document_id",
    "task",
    "decision",
    "light",
    "topic",
    "partition",
    "offset",
    "error_type",
    "stage",
)
"""The record attributes both formats render (passed with ``extra=``); everything else is dropped."""

_TEXT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {name: record.__dict__[name] for name in CONTEXT_FIELDS if record.__dict__.get(name) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, the context ids, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line (see the module docstring for the fields)."""
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Human-readable lines: time, level, logger, message, then the context ids as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one text line (plus its traceback, if any)."""
        text = super().format(record)
        context = " ".join(f"{k}={v}" for k, v in _context(record).items())
        if not context:
            return text
        head, sep, tail = text.partition("\n")
        return f"{head} [{context}]{sep}{tail}"


def formatter(fmt: LogFormat) -> logging.Formatter:
    """The formatter of ``fmt``."""
    return JsonFormatter() if fmt == "json" else TextFormatter()


def configure(level: str, fmt: LogFormat) -> None:
    """Route every logger to one stderr handler with the clingate formatter at ``level`` (idempotent);
    httpx's request lines only at DEBUG."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx logs every request it makes at INFO (a model server's readiness probe, the SmolLM2 calls); the
    # line that made the request says what it was for, so below DEBUG httpx speaks only of trouble.
    logging.getLogger("httpx").setLevel(logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING)


def log_dead_letter(logger: logging.Logger, failed: Rejected) -> None:
    """Report a dead letter: coordinates and error type at WARNING, the reason at DEBUG only.

    The reason may quote the record (a validation error names the offending value), so it stays out of
    INFO and above; the dead-letter record keeps it in full.
    """
    record = failed.record
    ids = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "error_type": failed.error_type,
        "stage": failed.stage.value,
    }
    logger.warning("dead-lettering %s[%d]@%d: %s", record.topic, record.partition, record.offset,
                   failed.error_type, extra=ids)  # fmt: skip
    logger.debug("dead-letter reason: %s", failed.reason, extra=ids)
