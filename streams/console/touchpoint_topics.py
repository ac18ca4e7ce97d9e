"""Where the pharmacist's touchpoints get what the reasoning pipeline put before the pharmacist, and what
was decided on it: a run's proposed evidence queries (``clingate.clinical.query-proposals``) with the Query
Gate's decisions (``clingate.clinical.query-decisions``), and a run's retrieved evidence
(``clingate.clinical.evidence``, the bundles the clinical workers check for must-retrieve sources) with the
Evidence Reviews (``clingate.clinical.evidence-reviews``).

:class:`KafkaTouchpoints` follows the four topics (:class:`~streams.console.records.TopicFollower`), as the
pharmacist's other pages follow theirs: the first page load reads them whole, every later one only what was
committed since. All four are keyed by patient, so a run's records are one partition's, in the order they
were published. What was read is kept until the console restarts: the proposals' 30 days and the bundles'
7 days, and the decisions' and reviews' 365 (a console for a very large ward would keep them in a table on
disk instead). Records that cannot be decoded are counted and the pages say how many.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from aiohttp import web

from schemas.clinical import EvidenceBundle, EvidenceReview, QueryDecision, QueryProposal
from schemas.serde import Serde
from streams.console.pages import read_in_thread
from streams.console.records import TopicFollower
from topics.catalog import (
    CLINICAL_EVIDENCE,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_QUERY_DECISIONS,
    CLINICAL_QUERY_PROPOSALS,
)

P = TypeVar("P", QueryProposal, EvidenceBundle)
D = TypeVar("D", QueryDecision, EvidenceReview)


@dataclass(frozen=True)
class TouchpointLog(Generic[P, D]):
    """What runs put before the pharmacist and the pharmacist's decisions, each partition's in publication
    order."""

    put: tuple[P, ...]
    decided: tuple[D, ...]
    unreadable: int = 0
    """Records of either topic skipped because they could not be decoded."""


class TouchpointSource(Protocol):
    """What the pharmacist's touchpoints read."""

    async def queries(self) -> TouchpointLog[QueryProposal, QueryDecision]:
        """Every query proposal and decision now on their topics.

        Raises:
            Unavailable: a topic could not be read.
        """
        ...

    async def evidence(self) -> TouchpointLog[EvidenceBundle, EvidenceReview]:
        """Every evidence bundle and review now on their topics.

        Raises:
            Unavailable: a topic could not be read.
        """
        ...


class _Pair(Generic[P, D]):
    """Two topics followed together: what was put before the pharmacist and what was decided on it."""

    def __init__(
        self, bootstrap: str, serde: Serde, put: tuple[str, type[P]], decided: tuple[str, type[D]]
    ) -> None:
        self.topics = f"{put[0]} or {decided[0]}"
        self._put = TopicFollower(bootstrap, serde, *put)
        self._decided = TopicFollower(bootstrap, serde, *decided)

    def read(self) -> TouchpointLog[P, D]:
        put, decided = self._put.read(), self._decided.read()
        return TouchpointLog(
            tuple(put.values()), tuple(decided.values()), put.unreadable + decided.unreadable
        )


class KafkaTouchpoints:
    """The four topics followed to their end on each call (module docstring)."""

    def __init__(self, bootstrap: str, serde: Serde) -> None:
        self._queries = _Pair(
            bootstrap,
            serde,
            (CLINICAL_QUERY_PROPOSALS, QueryProposal),
            (CLINICAL_QUERY_DECISIONS, QueryDecision),
        )
        self._evidence = _Pair(
            bootstrap, serde, (CLINICAL_EVIDENCE, EvidenceBundle), (CLINICAL_EVIDENCE_REVIEWS, EvidenceReview)
        )

    async def queries(self) -> TouchpointLog[QueryProposal, QueryDecision]:
        """Every committed proposal and decision now (read in a thread: the event loop goes on)."""
        return await read_in_thread(self._queries.topics, self._queries.read)

    async def evidence(self) -> TouchpointLog[EvidenceBundle, EvidenceReview]:
        """Every committed bundle and review now (read in a thread)."""
        return await read_in_thread(self._evidence.topics, self._evidence.read)


TOUCHPOINTS = web.AppKey("touchpoints", TouchpointSource)
"""The application's source of the pharmacist's touchpoints."""
