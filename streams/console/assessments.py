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

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from schemas.clinical import ClinicalAssessment
from schemas.serde import Serde
from streams.console.pages import read_in_thread
from streams.console.records import read_records
from topics.catalog import CLINICAL_ASSESSMENTS


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
        return await read_in_thread(CLINICAL_ASSESSMENTS, self._read)

    def _read(self) -> AssessmentLog:
        topic = read_records(self._bootstrap, self._serde, CLINICAL_ASSESSMENTS, ClinicalAssessment)
        records: list[ClinicalAssessment] = []
        for key, value in topic.records:
            if value is None:
                records = [record for record in records if record.patient_id != key]
            else:
                records.append(value)
        return AssessmentLog(tuple(records), topic.unreadable)


ASSESSMENTS = web.AppKey("assessments", AssessmentSource)
"""The application's source of assessments."""
