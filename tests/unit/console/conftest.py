"""The console's application in process, around fakes of its Kafka parts.

:class:`Console` builds the real application (:func:`streams.console.app.build_app`: the real guard,
sessions, sign-in and pages) with a users file in the test's directory, a clock the test moves
(:class:`FakeClock`), an audit trail that keeps its records in a list and reads them back
(:class:`FakeTrail`), a fixed list of assessments (:class:`FakeAssessments`), fixed review packets and
reviews (:class:`FakeReviews`), fixed dead letters (:class:`FakeDeadLetters`), a request sink that keeps
the requests sent, the records they carry built by the real request builder (:class:`FakeRequests`),
the agent's topics in memory, its requests those asked for (:class:`FakeAgent`), fixed gated drafts and
routes (:class:`FakeDrafts`), a DBPM memory the test fills through the real engine (:class:`FakeMemory`),
a pin publisher that keeps what it publishes (:class:`FakePins`) and the touchpoints' topics as lists
(:class:`FakeTouchpoints`), and runs a scenario against it
with aiohttp's test client on a loopback port, served as ``clingate console`` serves it (its access
logger). :func:`visitor` is one more browser of the same server, from any loopback address.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse, ClientSession, CookieJar, TCPConnector
from aiohttp.test_utils import TestClient, TestServer

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology
from schemas.agent import AgentRequest
from schemas.base import AvroModel
from schemas.clinical import (
    ClinicalAssessment,
    EvidenceBundle,
    EvidenceReview,
    GatedDraft,
    QueryDecision,
    QueryProposal,
    RevisionRoute,
)
from schemas.console import ConsoleAction, ConsoleRequest, ConsoleRequestOutcome, Role
from schemas.dbpm import GateDecision, Verdict
from schemas.dbpm import Propagation as PropagationRecord
from schemas.docs import Review, ReviewPacket
from schemas.registry import load_registry
from schemas.wire import make_serde
from state import RamStore
from streams.console.agent_topics import Turn
from streams.console.app import AccessLogger, build_app
from streams.console.assessments import AssessmentLog
from streams.console.audit import Action, AuditUnavailable
from streams.console.auth import Access
from streams.console.dead_letter_queues import DEAD_LETTER_QUEUES, PAGE_OFFSETS, Letter, LetterPage, Queue
from streams.console.delivery import NotAcknowledged
from streams.console.drafts import DraftLog
from streams.console.memory import Explorer
from streams.console.memorylog import SignatureLog, memory_keys
from streams.console.pages import Unavailable
from streams.console.requests import person_request
from streams.console.reviews import ReviewLog
from streams.console.sessions import Sessions, SignInThrottle
from streams.console.touchpoint_topics import TouchpointLog
from streams.console.users import PasswordChecks, UserStore
from streams.demo.samples import golden_assessment
from streams.requests.check import PUBLICATIONS, RequestAction
from streams.worker.keys import memory_key, verdict_key
from streams.worker.wire import contract_event
from topics.catalog import CATALOG

PASSWORD = "correct horse battery"
SERDE = make_serde(None)
LIFETIME_S = 8 * 3600.0
IDLE_S = 1800.0


@dataclass
class FakeClock:
    """Monotonic seconds that move only when the test says."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeTrail:
    """An audit trail in a list, read back as the console's history; ``down`` makes every record fail as
    Kafka's would, ``unreadable`` every read back."""

    records: list[ConsoleAction] = field(default_factory=list)
    down: bool = False
    unreadable: bool = False
    request_outcomes: list[ConsoleRequestOutcome] = field(default_factory=list)
    """What the request runtime did with the console's requests, in order."""

    async def record(self, action: ConsoleAction) -> None:
        if self.down:
            raise AuditUnavailable("clingate.console.audit: broker down")
        self.records.append(action)

    async def actions(self, kinds: Collection[Action]) -> list[ConsoleAction]:
        if self.unreadable:
            raise Unavailable("clingate.console.audit could not be read: timed out")
        return [record for record in self.records if record.action in kinds]

    async def outcomes(self) -> dict[str, ConsoleRequestOutcome]:
        return {outcome.request_id: outcome for outcome in self.request_outcomes}


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
class FakeDrafts:
    """The gated-draft and route topics as lists, in publication order; ``down`` makes a read fail."""

    gated: list[GatedDraft] = field(default_factory=list)
    routes: list[RevisionRoute] = field(default_factory=list)
    down: bool = False

    async def read(self) -> DraftLog:
        if self.down:
            raise Unavailable("clingate.clinical.gated-drafts could not be read: timed out")
        return DraftLog(tuple(self.gated), tuple(self.routes))


@dataclass
class FakeDeadLetters:
    """The dead-letter topics as a list of records (any order); ``down`` makes a read fail."""

    letters: list[Letter] = field(default_factory=list)
    down: bool = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("dead-letter topics could not be read: timed out")

    async def queues(self) -> list[Queue]:
        self._check()
        queues = []
        for topic, source in DEAD_LETTER_QUEUES.items():
            mine = [item.written for item in self.letters if item.topic == topic]
            written = [w for w in mine if w is not None]
            queues.append(Queue(topic, source, len(mine), max(written) if written else None))
        return queues

    async def page(self, topic: str, partition: int, before: int | None) -> LetterPage:
        self._check()
        mine = [i for i in self.letters if (i.topic, i.partition) == (topic, partition)]
        end = max((i.offset + 1 for i in mine), default=0) if before is None else before
        start = max(0, end - PAGE_OFFSETS)
        window = sorted((i for i in mine if start <= i.offset < end), key=lambda i: -i.offset)
        return LetterPage(topic, partition, (0,), tuple(window), start if start > 0 else None)

    async def letter(self, topic: str, partition: int, offset: int) -> Letter | None:
        self._check()
        return next(
            (i for i in self.letters if (i.topic, i.partition, i.offset) == (topic, partition, offset)), None
        )


@dataclass(frozen=True)
class Sent:
    """A request the console sent, and the audit records there were when it was sent."""

    request: ConsoleRequest
    audited: tuple[ConsoleAction, ...]


@dataclass
class FakeRequests:
    """Where the console's requests go, kept with the audit trail of that moment; ``down`` makes a
    request fail as Kafka's would."""

    trail: FakeTrail
    produced: list[Sent] = field(default_factory=list)
    down: bool = False

    async def send(self, request: ConsoleRequest) -> None:
        if self.down:
            raise NotAcknowledged("clingate.console.requests: not acknowledged: broker down")
        self.produced.append(Sent(request, tuple(self.trail.records)))

    async def publish(
        self, action: ConsoleAction, kind: RequestAction, record: AvroModel, note: str = ""
    ) -> None:
        await self.send(person_request(action, kind, record, SERDE, note))

    def records(self, kind: RequestAction) -> list[tuple[Any, Sent]]:
        """The records the requests of ``kind`` carry, decoded, each with what was sent."""
        topic = PUBLICATIONS[kind].topic
        model = load_registry().entries[CATALOG.get(topic).value_schema].model
        return [
            (SERDE.decode(sent.request.value or b"", model, topic=topic), sent)
            for sent in self.produced
            if sent.request.action == kind
        ]


@dataclass
class FakeAgent:
    """The agent's topics in memory: its requests are the questions asked for (``published`` False: the
    request runtime has not published them yet) and, per request id, what the agent made of it (set by
    the test)."""

    sink: FakeRequests
    turns: dict[str, Turn] = field(default_factory=dict)
    published: bool = True

    @property
    def asked(self) -> list[tuple[AgentRequest, tuple[ConsoleAction, ...]]]:
        """The questions asked for, each with the audit trail of the moment it was asked for."""
        return [(record, sent.audited) for record, sent in self.sink.records(RequestAction.ASK)]

    def _requests(self) -> dict[str, AgentRequest]:
        return {request.request_id: request for request, _ in self.asked} if self.published else {}

    async def turn(self, conversation_id: str, request_id: str, asked: datetime) -> Turn | None:
        request = self._requests().get(request_id)
        if request is None or request.conversation_id != conversation_id:
            return None
        return self.turns.get(request_id, Turn(request, None, (), ()))

    async def requests(self, request_ids: Collection[str], since: datetime) -> dict[str, AgentRequest]:
        return {i: r for i, r in self._requests().items() if i in request_ids}


@dataclass
class FakeMemory:
    """The DBPM topics and the memory table: ``store`` the memory as its writers hold it, ``events`` the
    verdict and propagation records, ``decisions`` the decision records (each in publication order);
    ``down`` makes a read fail."""

    engine: Any
    store: RamStore = field(default_factory=RamStore)
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
class FakePins:
    """A pin publisher that keeps each pin with the audit records there were when it was published;
    ``down`` makes a publication fail as Kafka's would."""

    trail: FakeTrail
    published: list[tuple[Verdict, list[ConsoleAction]]] = field(default_factory=list)
    down: bool = False

    async def publish(self, pin: Verdict) -> None:
        if self.down:
            raise NotAcknowledged("clingate.dbpm.verdicts: not acknowledged: broker down")
        self.published.append((pin, list(self.trail.records)))


@dataclass
class FakeTouchpoints:
    """The touchpoints' topics as lists, each in publication order; ``down`` makes a read fail."""

    proposals: list[QueryProposal] = field(default_factory=list)
    decisions: list[QueryDecision] = field(default_factory=list)
    bundles: list[EvidenceBundle] = field(default_factory=list)
    reviews: list[EvidenceReview] = field(default_factory=list)
    down: bool = False

    def _check(self) -> None:
        if self.down:
            raise Unavailable("clingate.clinical.query-proposals could not be read: timed out")

    async def queries(self) -> TouchpointLog[QueryProposal, QueryDecision]:
        self._check()
        return TouchpointLog(tuple(self.proposals), tuple(self.decisions))

    async def evidence(self) -> TouchpointLog[EvidenceBundle, EvidenceReview]:
        self._check()
        return TouchpointLog(tuple(self.bundles), tuple(self.reviews))


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


class Console:
    """The application with a users file, a fake clock, trail and assessments (module docstring)."""

    def __init__(self, directory: Path, *, secure_cookies: bool = False, trusted_proxies: int = 0) -> None:
        self.clock = FakeClock()
        self.users = UserStore(directory / "users.json")
        self.trail = FakeTrail()
        self.assessments = FakeAssessments()
        self.reviews = FakeReviews()
        self.dead_letters = FakeDeadLetters()
        self.requests = FakeRequests(self.trail)
        self.agent = FakeAgent(self.requests)
        self.drafts = FakeDrafts()
        self.touchpoints = FakeTouchpoints()
        self.dbpm = DBPMConfig()
        self.memory = FakeMemory(DBPMEngine(self.dbpm, load_ontology()))
        self.pins = FakePins(self.trail)
        self.sessions = Sessions(LIFETIME_S, IDLE_S, self.clock)
        self.throttle = SignInThrottle(clock=self.clock)
        self.checks = PasswordChecks()
        self.secure_cookies = secure_cookies
        self.trusted_proxies = trusted_proxies

    def run(self, scenario: Callable[[TestClient[Any, Any]], Awaitable[Any]]) -> Any:
        """Run ``scenario`` with a client of a fresh server of the application (cookies kept per client)."""
        self.checks = PasswordChecks()
        access = Access(self.users, self.sessions, self.throttle, self.checks, self.secure_cookies,
                        self.trusted_proxies)  # fmt: skip
        app = build_app(
            access, self.trail, self.assessments, self.reviews, history=self.trail,
            dead_letter_source=self.dead_letters, requests=self.requests, agent_desk=self.agent,
            drafts=self.drafts, explorer=Explorer(self.memory, self.pins, self.dbpm),
            touchpoint_source=self.touchpoints,
        )  # fmt: skip

        async def main() -> Any:
            server = TestServer(app)
            await server.start_server(access_log_class=AccessLogger)
            async with TestClient(server) as client:
                return await scenario(client)

        try:
            return asyncio.run(main())
        finally:
            self.checks.close()


@asynccontextmanager
async def visitor(client: TestClient[Any, Any], address: str = "127.0.0.1") -> AsyncIterator[ClientSession]:
    """Another browser of ``client``'s server, with cookies of its own, connecting from ``address`` (any
    address of the loopback network, 127.0.0.0/8, reaches the server)."""
    async with ClientSession(
        str(client.make_url("/")), connector=TCPConnector(local_addr=(address, 0)),
        cookie_jar=CookieJar(unsafe=True),
    ) as session:  # fmt: skip
        yield session


async def sign_in(
    client: TestClient[Any, Any] | ClientSession, name: str, password: str = PASSWORD, target: str = "/"
) -> ClientResponse:
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
