"""Where the pharmacist's pages get the assessments: ``clingate.clinical.assessments``, as the clinical
workers published them.

:class:`KafkaAssessments` follows the topic (a :class:`~streams.console.records.TopicFollower`): the
first page load reads it from the beginning of each partition, every later one only what was committed
since, so that what a page shows is every committed assessment read up to that moment, in each patient's
order (the topic is keyed by patient, so a patient's records are one partition's, in the order the worker
published them). It keeps what it has read (the topic is compacted to about one record per patient plus
the not yet compacted tail, and retains 30 days); an assessment compaction later removes from the topic
stays shown until the console restarts.

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
from streams.console.records import TopicFollower
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
    """``clingate.clinical.assessments`` followed to its end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._topic = TopicFollower(bootstrap, serde, CLINICAL_ASSESSMENTS, ClinicalAssessment)

    async def read(self) -> AssessmentLog:
        """Every committed assessment on the topic now (read in a thread: the event loop goes on)."""
        return await read_in_thread(CLINICAL_ASSESSMENTS, self._read)

    def _read(self) -> AssessmentLog:
        kept = self._topic.read()
        return AssessmentLog(tuple(kept.values()), kept.unreadable)


ASSESSMENTS = web.AppKey("assessments", AssessmentSource)
"""The application's source of assessments."""
