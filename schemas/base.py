"""The base of every event model.

Convention (every event clingate reads or writes follows it):

* the Avro schema lives in ``schemas/avro/<area>/<Name>.avsc`` with full name ``clingate.<area>.<Name>``;
* the pydantic model mirroring it is ``schemas.<area>.<Name>``, a subclass of :class:`AvroModel` whose
  ``avro_name`` is that full name;
* ``model.model_dump(mode="json")`` MUST produce a datum that the Avro schema accepts, and validating that
  datum back MUST give an equal model (the round-trip property test checks every registered model).

Free-form JSON documents (a FHIR resource, a relation payload of an open task) travel as Avro strings
holding JSON, so the schema stays stable while the document evolves.

Further rules (:mod:`schemas.registry` checks names and enums when it loads, failing start-up; the
tests check the rest):

* every record field carries a ``doc``; a field that may be absent SHOULD be ``["null", T]`` with
  ``"default": null`` in the schema and ``T | None = None`` in the model; a field added after a release
  MUST have a default (the compatibility test refuses it otherwise);
* the model's field names (or their aliases) are exactly the record's field names;
* every named type (record, enum) nested in a schema has a full name in the ``clingate.<area>`` namespace,
  and a record type reused by another schema file is referenced there by its full name (the registry
  resolves references across files; see :mod:`schemas.registry`);
* an Avro ``bytes`` field is typed :data:`RawBytes` in the model (its JSON form is base64 text, the one
  exception to "the JSON dump is the Avro datum", undone by the serde) and shares a union only with
  ``null``;
* an Avro ``int`` field is bounded to 32 bits in the model (``Field(ge=..., le=...)``) so that the model
  rejects what the schema cannot carry;
* a schema's enum is mirrored by a :class:`enum.StrEnum` of the same name (checked: values equal the
  symbols), by one marked :func:`avro_enum` with that name where two areas share an enum name, or by a
  ``Literal``.

Time. Every event carries its event time in a field typed :data:`EventTime`. Choice (the brief left
``timestamp-millis`` or ISO strings open): an Avro ``string`` holding ISO 8601 in UTC with a ``Z``
suffix, e.g. ``2026-05-04T10:00:00Z`` (microseconds appear only when non-zero). Why: the replay-stream
contract writes ``ts`` exactly so, ``model_dump(mode="json")`` yields it without a per-field Avro
adapter (the convention above), a record read with ``kcat`` is legible, and no precision is lost to
millisecond truncation. The cost, ~15 bytes per event more than a ``long``, is accepted. Naive
datetimes are rejected: an event time without a zone is ambiguous and would break replays.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
)

E = TypeVar("E", bound=type[StrEnum])

#: The attribute :func:`avro_enum` sets; the registry reads it (default: the class name).
AVRO_ENUM_NAME = "__avro_enum_name__"


def avro_enum(name: str) -> Callable[[E], E]:
    """Mark a :class:`~enum.StrEnum` as the mirror of the Avro enum ``name`` of its module's area.

    Avro names are unique per namespace, so ``clingate.dbpm.Decision`` and ``clingate.docs.Decision``
    may both exist; in Python they need names of their own, and this keeps the registry's mirror
    check (symbols equal values) on them.
    """

    def mark(cls: E) -> E:
        setattr(cls, AVRO_ENUM_NAME, name)
        return cls

    return mark


def _to_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:  # e.g. 0001-01-01T00:00+02:00: no UTC instant exists
        raise ValueError(f"{value.isoformat()} has no UTC representation") from exc


def iso_utc(value: datetime) -> str:
    """An event time's wire form: ISO 8601 in UTC with ``Z`` (microseconds only when non-zero)."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _require_json(value: str) -> str:
    try:
        json.loads(value)
    except ValueError as exc:
        raise ValueError(f"not a JSON document: {exc}") from exc
    return value


def _bytes_from_base64_text(value: object) -> object:
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"not base64 text: {exc}") from exc
    return value


def _base64_text(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


EventTime = Annotated[
    AwareDatetime,
    AfterValidator(_to_utc),
    PlainSerializer(iso_utc, return_type=str, when_used="json"),
]
"""An event time: a zone-aware datetime normalised to UTC, serialised as ISO 8601 with ``Z``."""

JsonText = Annotated[str, AfterValidator(_require_json)]
"""A JSON document carried as text (an Avro ``string``); validated to parse, kept verbatim."""

Count32 = Annotated[int, Field(ge=0, le=2**31 - 1)]
"""A count carried as an Avro ``int``."""


RawBytes = Annotated[
    bytes,
    BeforeValidator(_bytes_from_base64_text),
    PlainSerializer(_base64_text, return_type=str, when_used="json"),
]
"""Raw bytes (an Avro ``bytes``): the model holds them as given; their JSON form is base64 text.

JSON cannot hold arbitrary bytes, so ``model_dump(mode="json")`` writes base64 and validation accepts
either bytes (from the Avro reader or a constructor) or base64 text (from a JSON dump). The serde turns
that text back into bytes before writing Avro, so the wire carries the bytes themselves.
"""


class AvroModel(BaseModel):
    """A frozen event model bound to one Avro schema by its full name."""

    # ser_json_inf_nan: an Avro double carries inf and NaN; the default JSON dump would turn them into
    # null, which the schema rejects.
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    avro_name: ClassVar[str]
