"""Events shared by every area: the dead letter.

A dead letter keeps the failed record whole (key, value and headers, byte for byte) with the reason and
its coordinates, so an operator can fix the cause and replay it. Only a record too large for its
dead-letter topic is cut: its largest fields are kept as prefixes, each with its original size and
SHA-256 (:class:`Truncation`), so the original can still be found in the source topic. The same reason
and coordinates also travel as Kafka headers on the dead-letter record (KIP-1034 style, see
:mod:`streams.runtime.dlq`) so that tools which do not read Avro can still triage.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from schemas.base import AvroModel, EventTime, RawBytes


class Stage(StrEnum):
    """Where a record failed."""

    DECODE = "decode"
    VALIDATE = "validate"
    PROCESS = "process"
    PRODUCE = "produce"


class Header(AvroModel):
    """One Kafka record header."""

    avro_name: ClassVar[str] = "clingate.common.Header"

    key: str
    value: RawBytes | None = None


class Truncation(AvroModel):
    """A byte field of the original record of which the dead letter holds only the first bytes."""

    avro_name: ClassVar[str] = "clingate.common.Truncation"

    field: str
    size: int = Field(ge=0, le=2**63 - 1)
    sha256: str


class DeadLetter(AvroModel):
    """A record a stage could not handle, with the reason and where it came from."""

    avro_name: ClassVar[str] = "clingate.common.DeadLetter"

    ts: EventTime
    topic: str
    partition: int = Field(ge=0, le=2**31 - 1)
    offset: int = Field(ge=0, le=2**63 - 1)
    stage: Stage
    error_type: str
    error: str
    key: RawBytes | None = None
    value: RawBytes | None = None
    headers: tuple[Header, ...] = ()
    expected_schema: str | None = None
    truncations: tuple[Truncation, ...] = ()
