"""Where the pharmacist's pages get the assessments: ``clingate.clinical.assessments``, as the clinical
workers published them.

:class:`KafkaAssessments` reads the whole topic on every page load, with a ``read_committed`` reader of
its own from the beginning of each partition up to the end it has when the page asks: what a page shows
is every committed assessment at that moment, in each patient's order (the topic is keyed by patient, so
a patient's records are one partition's, in the order the worker published them). The known cost: a
page load reads every retained record (the topic is compacted to about one record per patient, plus the
not yet compacted tail); a console for a large ward would keep a table of the latest assessment per
patient up to date from the topic instead.

A record that cannot be decoded is skipped and counted (:attr:`AssessmentLog.unreadable`; the page says
how many); a tombstone (a null value, an operator's deletion of a patient from the compacted topic)
removes the patient's earlier records.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from confluent_kafka import KafkaException

from schemas.clinical import ClinicalAssessment
from schemas.serde import SchemaDecodeError, Serde
from streams.console.pages import Unavailable
from streams.runtime.kafka_clients import read_to_end, reader
from topics.catalog import CLINICAL_ASSESSMENTS

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 30.0
"""Longest a page waits for the topic to be read to its end."""


@dataclass(frozen=True)
class AssessmentLog:
    """The assessments of the topic, each patient's in the order they were published."""

    records: tuple[ClinicalAssessment, ...]
    unreadable: int = 0
    """Records skipped because they could not be decoded."""


class AssessmentSource(Protocol):
    """What the pharmacist's pages read."""

    async def read(self) -> AssessmentLog:
        """Every assessment now on the topic.

        Raises:
            Unavailable: the topic could not be read.
        """
        ...


class KafkaAssessments:
    """``clingate.clinical.assessments`` read to its end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._bootstrap = bootstrap
        self._serde = serde

    async def read(self) -> AssessmentLog:
        """Every committed assessment on the topic now (read in a thread: the event loop goes on)."""
        try:
            return await asyncio.to_thread(self._read)
        except (KafkaException, TimeoutError) as exc:
            raise Unavailable(f"{CLINICAL_ASSESSMENTS} could not be read: {exc}") from exc

    def _read(self) -> AssessmentLog:
        consumer = reader(self._bootstrap, "console-assessments", **{"isolation.level": "read_committed"})
        records: list[ClinicalAssessment] = []
        unreadable = 0
        try:
            for message in read_to_end(consumer, {CLINICAL_ASSESSMENTS: {}}, READ_TIMEOUT_S):
                value = message.value()
                if value is None:
                    key = (message.key() or b"").decode("utf-8", "replace")
                    records = [record for record in records if record.patient_id != key]
                    continue
                try:
                    records.append(self._serde.decode(value, ClinicalAssessment, topic=CLINICAL_ASSESSMENTS))
                except SchemaDecodeError as exc:
                    unreadable += 1
                    log.warning("console: skipped an assessment at %s[%s]@%s: %s", CLINICAL_ASSESSMENTS,
                                message.partition(), message.offset(), exc)  # fmt: skip
        finally:
            consumer.close()
        return AssessmentLog(tuple(records), unreadable)


ASSESSMENTS = web.AppKey("assessments", AssessmentSource)
"""The application's source of assessments."""
