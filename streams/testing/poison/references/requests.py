"""The console's requests: requests whose check needs nothing read from Kafka, and the outcome (and the
record carried out) :func:`streams.requests.check.check` gives each, as the request runtime does.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from schemas.agent import AgentRequest
from schemas.clinical import EvidenceReview, EvidenceVerdict, QueryDecision, QueryVerdict, ReviewedPacket
from schemas.console import ConsoleRequest
from schemas.serde import Serde
from streams.requests.check import Carried, Evidence, RequestAction, check, publication_request
from streams.requests.runtime import outcome_of
from streams.testing.poison.records import Expected, Record, Scale
from streams.testing.poison.references.clinical import LABEL
from streams.testing.poison.references.common import CONDITIONS, DRUGS, Family, noise
from topics.catalog import CONSOLE_REQUEST_OUTCOMES, CONSOLE_REQUESTS, FHIR_UPDATES


def requests_family(tag: str, scale: Scale, rng: random.Random, serde: Serde) -> Family:
    """``scale.good`` console requests of the kinds :mod:`streams.testing.poison` names, in turn, and their
    outputs: what :func:`~streams.requests.check.check` makes of each, with the runtime's outcome."""
    start = datetime(2026, 5, 4, 11, 0, tzinfo=UTC)
    family = Family({CONSOLE_REQUESTS: []})
    for i in range(scale.good):
        at, about, request_id = start + timedelta(minutes=i), f"{tag}-req-{i:05d}", f"{tag}-req-action-{i}"
        queries = [f"{rng.choice(DRUGS)} dosing in {rng.choice(CONDITIONS)}" for _ in range(2)]
        request: ConsoleRequest
        match i % 4:
            case 0:
                question = AgentRequest(
                    conversation_id=about, request_id=about, event_time=at, query=queries[0]
                )
                role = "pharmacist" if i % 8 == 4 else "clinician"  # the former may not ask
                request = publication_request(
                    RequestAction.ASK, question, serde, request_id=request_id, user="dr", role=role, at=at
                )
            case 1:
                decision = QueryDecision(
                    patient_id=about, run_id="run-1", event_time=at, proposed_at=at, pharmacist="ph",
                    decision_id=request_id, decision=QueryVerdict.EDITED, proposed=queries[:1],
                    queries=queries, note="broader than the drugs",
                )  # fmt: skip
                request = publication_request(
                    RequestAction.QUERY_DECISION, decision, serde, request_id=request_id, user="ph",
                    role="pharmacist", at=at, note=decision.note,
                )  # fmt: skip
            case 2:
                review = EvidenceReview(
                    patient_id=about, run_id="run-1", event_time=at, bundle_time=at, pharmacist="ph",
                    review_id=request_id, decision=EvidenceVerdict.ACCEPTED,
                    packets=[ReviewedPacket(source=s, accepted=s != "warfarin label") for s in LABEL],
                )  # fmt: skip
                request = publication_request(
                    RequestAction.EVIDENCE_REVIEW, review, serde, request_id=request_id, user="ph",
                    role="pharmacist", at=at,
                )  # fmt: skip
            case _:  # refused by the check: it names no dead letter
                request = ConsoleRequest(
                    request_id=request_id, event_time=at, user="op", role="operator",
                    action=RequestAction.REDRIVE, target=about, topic=FHIR_UPDATES, note="poison suite",
                )  # fmt: skip
        key = request.target.encode()
        record = Record(
            CONSOLE_REQUESTS, key, serde.encode(request, topic=CONSOLE_REQUESTS),
            noise(rng, CONSOLE_REQUESTS), ident=request_id,
        )  # fmt: skip
        family.feeds[CONSOLE_REQUESTS].append(record)
        result = check(request, Evidence(), serde)
        outcome = serde.encode(outcome_of(request, result), topic=CONSOLE_REQUEST_OUTCOMES)
        family.expected.append(
            Expected(CONSOLE_REQUEST_OUTCOMES, key, outcome, (), CONSOLE_REQUESTS, request_id)
        )
        if isinstance(result, Carried):
            family.expected.append(
                Expected(result.topic, result.key or b"", result.value, (), CONSOLE_REQUESTS, request_id)
            )
    return family
