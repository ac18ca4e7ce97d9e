"""The console's application in process, around fakes of its Kafka parts.

:class:`Console` builds the real application (:func:`streams.console.app.build_app`: the real guard,
sessions, sign-in and pages) with a users file in the test's directory, a clock the test moves
(:class:`FakeClock`), an audit trail that keeps its records in a list (:class:`MemoryTrail`), a fixed
list of assessments (:class:`FakeAssessments`), fixed review packets and reviews (:class:`FakeReviews`),
a review publisher that keeps what it publishes (:class:`MemoryPublisher`), a DBPM memory the test fills
through the real engine (:class:`FakeMemory`) and a pin publisher that keeps what it publishes
(:class:`MemoryPins`), and runs a scenario against it with aiohttp's test client on a loopback port.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology
from schemas.clinical import ClinicalAssessment
from schemas.console import ConsoleAction
from schemas.dbpm import GateDecision, Verdict
from schemas.dbpm import Propagation as PropagationRecord
from schemas.docs import Review, ReviewPacket
from state import MemoryStore
from streams.console.app import build_app
from streams.console.assessments import AssessmentLog
from streams.console.audit import AuditUnavailable
from streams.console.auth import Access
from streams.console.memory import Explorer
from streams.console.memorylog import PinNotRecorded, SignatureLog, memory_keys
from streams.console.pages import Unavailable
from streams.console.reviews import ReviewLog, ReviewNotRecorded
from streams.console.sessions import Sessions, SignInThrottle
from streams.console.users import Role, UserStore
from streams.demo.samples import golden_assessment
from streams.worker.dbpm import contract_event, memory_key, verdict_key

PASSWORD = "correct horse battery"
LIFETIME_S = 8 * 3600.0
IDLE_S = 1800.0


@dataclass
class FakeClock:
    """Monotonic seconds that move only when the test says."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class MemoryTrail:
    """An audit trail in a list; ``down`` makes every record fail as Kafka's would."""

    records: list[ConsoleAction] = field(default_factory=list)
    down: bool = False

    async def record(self, action: ConsoleAction) -> None:
        if self.down:
            raise AuditUnavailable("clingate.console.audit: broker down")
        self.records.append(action)


@dataclass
class FakeAssessments:
    """The assessments topic as a list, in publication order; ``down`` makes a read fail."""

    records: list[ClinicalAssessment] = field(default_factory=list)
    down: bool = False

    async def read(self) -> AssessmentLog:
        if self.down:
            raise Unavailable("clingate.clinical.assessments could not be read: timed out")
        return AssessmentLog(tuple(self.records))


@dataclass
class FakeReviews:
    """The packet and review topics: the latest packet per document and the reviews in publication order;
    ``down`` makes a read fail."""

    packets: dict[str, ReviewPacket] = field(default_factory=dict)
    reviews: list[Review] = field(default_factory=list)
    down: bool = False

    async def read(self) -> ReviewLog:
        if self.down:
            raise Unavailable("clingate.docs.review-packets could not be read: timed out")
        return ReviewLog(dict(self.packets), tuple(self.reviews))


@dataclass
class MemoryPublisher:
    """A review publisher that keeps what it publishes; ``down`` makes a publication fail as Kafka's would."""

    published: list[Review] = field(default_factory=list)
    down: bool = False

    async def publish(self, review: Review) -> None:
        if self.down:
            raise ReviewNotRecorded("clingate.docs.reviews: broker down")
        self.published.append(review)


@dataclass
class FakeMemory:
    """The DBPM topics and the memory table: ``store`` the memory as its writers hold it, ``events`` the
    verdict and propagation records, ``decisions`` the decision records (each in publication order);
    ``down`` makes a read fail."""

    engine: Any
    store: MemoryStore = field(default_factory=MemoryStore)
    events: list[Verdict | PropagationRecord] = field(default_factory=list)
    decisions: list[GateDecision] = field(default_factory=list)
    down: bool = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("the DBPM topics could not be read: timed out")

    def _key(self, event: Verdict | PropagationRecord) -> bytes:
        if isinstance(event, PropagationRecord):
            return memory_key(event.task, event.signature)
        return verdict_key(self.engine, contract_event(event))  # type: ignore[arg-type]

    async def signature(self, task: str, sig: str) -> SignatureLog:
        self._check()
        records = {k: v for k in memory_keys(task, sig) if (v := self.store.get(k)) is not None}
        events = tuple(e for e in self.events if self._key(e) == memory_key(task, sig))
        decisions = tuple(d for d in self.decisions if (d.task, d.signature) == (task, sig))
        return SignatureLog(records, events, decisions)

    async def decision(self, candidate_id: str) -> GateDecision | None:
        self._check()
        return next((d for d in self.decisions if d.candidate_id == candidate_id), None)


@dataclass
class MemoryPins:
    """A pin publisher that keeps each pin with the audit records there were when it was published;
    ``down`` makes a publication fail as Kafka's would."""

    trail: MemoryTrail
    published: list[tuple[Verdict, list[ConsoleAction]]] = field(default_factory=list)
    down: bool = False

    async def publish(self, pin: Verdict) -> None:
        if self.down:
            raise PinNotRecorded("clingate.dbpm.verdicts: broker down")
        self.published.append((pin, list(self.trail.records)))


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


class Console:
    """The application with a users file, a fake clock, trail and assessments (module docstring)."""

    def __init__(self, directory: Path, *, secure_cookies: bool = False) -> None:
        self.clock = FakeClock()
        self.users = UserStore(directory / "users.json")
        self.trail = MemoryTrail()
        self.assessments = FakeAssessments()
        self.reviews = FakeReviews()
        self.publisher = MemoryPublisher()
        self.dbpm = DBPMConfig()
        self.memory = FakeMemory(DBPMEngine(self.dbpm, load_ontology()))
        self.pins = MemoryPins(self.trail)
        self.sessions = Sessions(LIFETIME_S, IDLE_S, self.clock)
        self.throttle = SignInThrottle(clock=self.clock)
        self.secure_cookies = secure_cookies

    def run(self, scenario: Callable[[TestClient[Any, Any]], Awaitable[Any]]) -> Any:
        """Run ``scenario`` with a client of a fresh server of the application (cookies kept per client)."""
        access = Access(self.users, self.sessions, self.throttle, self.secure_cookies)
        explorer = Explorer(self.memory, self.pins, self.dbpm)
        app = build_app(access, self.trail, self.assessments, self.reviews, self.publisher, explorer=explorer)

        async def main() -> Any:
            async with TestClient(TestServer(app)) as client:
                return await scenario(client)

        return asyncio.run(main())


async def sign_in(
    client: TestClient[Any, Any], name: str, password: str = PASSWORD, target: str = "/"
) -> Any:
    """Open the sign-in page and post its form; returns the response (redirects not followed)."""
    page = await client.get("/login", params={"next": target})
    form = {"csrf_token": csrf_of(await page.text()), "name": name, "password": password, "next": target}
    return await client.post("/login", data=form, allow_redirects=False)


@pytest.fixture(scope="session")
def golden() -> dict[str, ClinicalAssessment]:
    """The golden patients' assessments on their FHIR bundles alone: PT-TEST-010 RED (NTI CRITICAL),
    PT-TEST-008 and -009 YELLOW (NTI ELEVATED), PT-TEST-012 GREEN."""
    cases = ("PT-TEST-008", "PT-TEST-009", "PT-TEST-010", "PT-TEST-012")
    return {case: golden_assessment(case, reviewed=False) for case in cases}


@pytest.fixture
def console(tmp_path: Path, golden: dict[str, ClinicalAssessment]) -> Console:
    """The console with a pharmacist ``ph`` and a clinician ``dr`` (password :data:`PASSWORD`) and the
    golden assessments published GREEN first."""
    site = Console(tmp_path)
    site.users.add("ph", Role.PHARMACIST, PASSWORD)
    site.users.add("dr", Role.CLINICIAN, PASSWORD)
    site.assessments.records = [
        golden[c] for c in ("PT-TEST-012", "PT-TEST-008", "PT-TEST-010", "PT-TEST-009")
    ]
    return site
