"""FHIR datetime sanitisation (ESC-014) and datetime arithmetic helpers.

ESC-014: staleness annotations leaked into FHIR datetime fields ("2026-03-03T08:00:00Z [STALE 26d]") and
downstream agents parsed annotation text as clinical data. The gate keeps structured datetime fields
ISO 8601 only, with one permitted annotation, ``[ESTIMATED]``, which is removed from the field and kept
as a flag. Anything else after the ISO 8601 token is stripped and reported as an issue; a field with no
ISO 8601 token at all is left alone so validation rejects the resource (and it goes to the DLQ).

Partial FHIR dates (``2026``, ``2026-03``, ``2026-03-03``) are valid. For arithmetic, a partial value
is completed to the first instant of its period at 00:00 UTC: it can only make data look older and a
patient older, which escalates and never de-escalates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

#: Element names that hold FHIR date / dateTime / instant values in the resources we read.
DATETIME_FIELDS = frozenset(
    {
        "birthDate",
        "deceasedDateTime",
        "effectiveDateTime",
        "effectiveInstant",
        "issued",
        "lastUpdated",
        "start",
        "end",
        "authoredOn",
        "onsetDateTime",
        "abatementDateTime",
        "recordedDate",
        "dateAsserted",
        "occurrenceDateTime",
        "valueDateTime",
    }
)

_ISO = re.compile(
    r"^\s*(\d{4}(?:-\d{2}(?:-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?)?)?)?)(.*)$",
    re.DOTALL,
)
ESTIMATED = "[ESTIMATED]"


def sanitise_datetimes(resource: Any, path: str = "") -> tuple[Any, tuple[str, ...]]:
    """Return a copy of ``resource`` with datetime fields reduced to ISO 8601, and the issues found.

    Args:
        resource: a FHIR resource as parsed JSON (dicts, lists, scalars).
        path: the element path of ``resource`` (used in issue messages).

    Returns:
        ``(clean, issues)``; ``clean`` shares no mutable structure with ``resource``.
    """
    issues: list[str] = []

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, Mapping):
            out: dict[str, Any] = {}
            for key, value in node.items():
                here = f"{where}.{key}" if where else key
                if key in DATETIME_FIELDS and isinstance(value, str):
                    out[key] = _clean(value, here, issues)
                else:
                    out[key] = walk(value, here)
            return out
        if isinstance(node, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(node)]
        return node

    return walk(resource, path), tuple(issues)


def _clean(value: str, where: str, issues: list[str]) -> str:
    match = _ISO.match(value)
    if match is None:
        return value
    iso, rest = match.group(1), match.group(2).strip()
    if not rest:
        return iso
    if rest == ESTIMATED:
        issues.append(f"{where}: estimated value ({ESTIMATED} annotation moved out of the field)")
        return iso
    issues.append(f"{where}: non-ISO text {rest!r} stripped from a datetime field (ESC-014)")
    return iso


def parse_instant(value: str) -> datetime:
    """Parse a sanitised FHIR date / dateTime / instant into an aware UTC datetime.

    Partial dates complete to the start of their period at 00:00 UTC (see module docstring).

    Raises:
        ValueError: when ``value`` is not ISO 8601.
    """
    text = value.strip()
    if len(text) == 4:
        return datetime(int(text), 1, 1, tzinfo=UTC)
    if len(text) == 7:
        return datetime(int(text[:4]), int(text[5:7]), 1, tzinfo=UTC)
    if len(text) == 10:
        d = date.fromisoformat(text)
        return datetime(d.year, d.month, d.day, tzinfo=UTC)
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        # FHIR requires a zone when a time is given; a zoneless one is read as UTC and reported upstream.
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def format_instant(value: str) -> str:
    """Render a sanitised FHIR datetime for output: UTC with ``Z``; date-only values stay date-only."""
    text = value.strip()
    if len(text) <= 10:
        return text
    parsed = parse_instant(text)
    return (
        parsed.strftime("%Y-%m-%dT%H:%M:%S")
        + (f".{parsed.microsecond:06d}" if parsed.microsecond else "")
        + "Z"
    )
