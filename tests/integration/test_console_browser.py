"""``clingate console`` in a real browser: Debian's Chromium, headless, driven by Playwright, against the
console as the command line runs it on the session broker.

Real parts: the broker; the golden patients' assessments published on ``clingate.clinical.assessments``
as the clinical workers publish them (keyed by patient, Java's murmur2 partitioner); users made by
``clingate console users add`` with the password on standard input; ``clingate console --port 0`` as a
child process; Chromium (``/usr/bin/chromium``, the Debian package; never a browser Playwright downloads).
The test skips, saying why, where Chromium or Playwright is absent.

What it shows: a pharmacist signs in and sees the board with every RED patient before every YELLOW one and
every YELLOW before every GREEN one, PT-TEST-010 (NTI CRITICAL) first of the patients published here,
with the sources of its light and its staleness; its page lists its assessments newest first; a
clinician signed in gets 403 on the board, never its content; a sign-out posted without the CSRF token is
refused (403) and the pharmacist stays signed in; each of these is a record on the audit topic. A
screenshot of the board is saved in the test's directory.

And the SME's review: the rules-only arbiter's review packets of two of the demo's examples (as
``streams.demo.plan.verify_example`` makes them, each under a doc id of this run) are published on
``clingate.docs.review-packets`` as the docs worker publishes them; an SME opens the queue, agrees with one
packet and corrects the other (its type, its segment's type and its mixture), and the two Review records
are on ``clingate.docs.reviews``, published by the request runtime (``clingate worker --role requests``)
on the console's requests, by that SME, with the decision and the corrections, and each decision is on
the audit topic.

And the pharmacist's touchpoints: a run of a patient of this test (PT-TEST-010's assessment under its
id, for its must-retrieve sources) puts the seed's three drug-centric evidence queries before the Query
Gate (``clingate.clinical.query-proposals``, as the reasoning step upstream publishes them) and an
evidence bundle with an off-target label before the Evidence Review (``clingate.clinical.evidence``).
The pharmacist edits the queries (one removed, one added beyond the drugs) and reviews the evidence (the
must-retrieve sources it lacks on the page; the off-target packet rejected, the evidence accepted); the
request runtime publishes the QueryDecision and the EvidenceReview the retrieval and reasoning steps read
(read back here as ``clingate-upstream`` reads them), each by that pharmacist under the id of its
audit record; its outcome says so; the pages then show them decided; a clinician gets 403 on the
touchpoints.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from schemas.clinical import (
    ClinicalAssessment,
    EvidenceBundle,
    EvidencePacket,
    EvidenceReview,
    EvidenceVerdict,
    QueryDecision,
    QueryProposal,
    QueryVerdict,
    ReviewedPacket,
)
from schemas.console import ConsoleRequestOutcome
from schemas.docs import DocumentType, Review, ReviewDecision, ReviewPacket
from schemas.wire import make_serde
from streams.console.records import read_records
from streams.demo.plan import verify_example
from streams.demo.samples import golden_assessment
from streams.groups import arbiter as docs_worker
from streams.local.process import eventually
from streams.requests.check import touchpoint_target
from streams.runtime.kafka_clients import producer_config, read_to_end, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.console import (
    add_user,
    audit_trail,
    chromium,
    console_env,
    request_runtime,
    running_console,
    sign_in,
)
from topics.admin import ensure_topics
from topics.catalog import (
    CLINICAL_ASSESSMENTS,
    CLINICAL_EVIDENCE,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_QUERY_DECISIONS,
    CLINICAL_QUERY_PROPOSALS,
    CONSOLE_REQUEST_OUTCOMES,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
    build_catalog,
)

pytestmark = pytest.mark.integration

LIGHT_RANK = {"RED": 0, "YELLOW": 1, "GREEN": 2}


def _publish(bootstrap: str, assessments: list[ClinicalAssessment]) -> None:
    _upstream(bootstrap, [(CLINICAL_ASSESSMENTS, assessment) for assessment in assessments])


def _upstream(
    bootstrap: str, records: list[tuple[str, ClinicalAssessment | QueryProposal | EvidenceBundle]]
) -> None:
    """``records`` on their topics as the clinical workers or the pipeline upstream publish them (keyed
    by patient, Java's murmur2 partitioner)."""
    serde = make_serde(None)
    producer = Producer(producer_config(bootstrap))
    for topic, record in records:
        producer.produce(topic, key=record.patient_id.encode(), value=serde.encode(record, topic=topic))
    assert producer.flush(30) == 0


def _audit(bootstrap: str, users: set[str]) -> dict[str, list[tuple[str, str, str]]]:
    """(action, target, outcome) of each of ``users``' audit records, in order."""
    trail = audit_trail(bootstrap, users)
    return {user: [(a.action, a.target, a.outcome) for a in actions] for user, actions in trail.items()}


@pytest.fixture(scope="module")
def runtime(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The request runtime of an app id of this module, which publishes what the console's people ask for;
    yields its app id."""
    app_id = f"clingate-console-it-{uuid.uuid4().hex[:8]}"
    with request_runtime(kafka_bootstrap, app_id, tmp_path_factory.mktemp("console-requests") / "requests"):
        yield app_id


@pytest.fixture
def console_url(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[str, str, str, str]]:
    """A console on the session broker with a pharmacist, a clinician and an SME; yields (URL, their
    names)."""
    ensure_topics(admin_client(kafka_bootstrap), build_catalog(Settings().topic_partitions))
    env = console_env(kafka_bootstrap, tmp_path / "users.json")
    suffix = uuid.uuid4().hex[:8]
    pharmacist, clinician, sme = f"ph-{suffix}", f"dr-{suffix}", f"sme-{suffix}"
    add_user(env, pharmacist, "pharmacist")
    add_user(env, clinician, "clinician")
    add_user(env, sme, "sme")
    with running_console(env, tmp_path / "console.log") as url:
        yield url, pharmacist, clinician, sme


def test_a_pharmacist_sees_red_first_a_clinician_is_refused_and_a_post_without_csrf_is_403(
    kafka_bootstrap: str, console_url: tuple[str, str, str, str], tmp_path: Path
) -> None:
    chromium_of = chromium()
    url, pharmacist, clinician, _ = console_url
    golden = {case: golden_assessment(case, reviewed=False) for case in
              ("PT-TEST-008", "PT-TEST-009", "PT-TEST-010", "PT-TEST-012")}  # fmt: skip
    # Published GREEN first; PT-TEST-010 twice: its current assessment is the reviewed one.
    _publish(kafka_bootstrap, [golden["PT-TEST-012"], golden["PT-TEST-010"], golden["PT-TEST-008"],
                               golden["PT-TEST-009"], golden_assessment("PT-TEST-010")])  # fmt: skip

    with chromium_of as browser:
        page = browser.new_context().new_page()
        response = sign_in(page, url, pharmacist, "/pharmacist")
        assert response.status == 200 and page.url == url + "/pharmacist"
        rows = page.locator("table.board tbody tr")
        board = [(rows.nth(i).get_attribute("data-patient"), rows.nth(i).get_attribute("data-light"))
                 for i in range(rows.count())]  # fmt: skip
        page.screenshot(path=str(tmp_path / "board.png"), full_page=True)
        assert board[0][1] == "RED"
        assert [LIGHT_RANK[light or ""] for _, light in board] == sorted(
            LIGHT_RANK[light or ""] for _, light in board
        )
        ours = [row for row in board if row[0] in golden]
        assert ours == [("PT-TEST-010", "RED"), ("PT-TEST-008", "YELLOW"), ("PT-TEST-009", "YELLOW"),
                        ("PT-TEST-012", "GREEN")]  # fmt: skip
        red = page.locator("tr[data-patient='PT-TEST-010']")
        assert "Rule C: NTI CRITICAL" in red.inner_text() and "CRITICAL" in red.inner_text()
        assert "STALE" in red.inner_text()

        page.click("a[href='/pharmacist/patient/PT-TEST-010']")
        # Newest first: a reviewed assessment is current, and the unreviewed one published before it
        # is listed below. Other tests on this broker publish the same golden patient, before and
        # around this test's two records, so their places among the sections are not fixed.
        sections = page.locator("section.assessment")
        texts = [sections.nth(i).inner_text() for i in range(sections.count())]
        assert len(texts) >= 2
        assert "CAA CONCUR" in texts[0] and "(current)" in texts[0]
        assert any("deterministic inputs only" in text for text in texts[1:])

        # The sign-out form without its CSRF token (removed from the page: a forged form lacks it).
        page.goto(url + "/pharmacist")
        page.locator("form.sign-out input[name=csrf_token]").evaluate("input => input.remove()")
        with page.expect_navigation() as navigation:
            page.click("form.sign-out button")
        assert navigation.value.status == 403 and "Refused" in page.content()
        assert page.goto(url + "/pharmacist").status == 200, "still signed in"

        other = browser.new_context().new_page()
        assert sign_in(other, url, clinician, "/").status == 200
        refused = other.goto(url + "/pharmacist")
        assert refused.status == 403
        assert "PT-TEST-010" not in other.content() and "not for the clinician role" in other.content()

    assert _audit(kafka_bootstrap, {pharmacist, clinician}) == {
        pharmacist: [("sign-in", "/login", "ok"), ("csrf-refused", "/logout", "refused")],
        clinician: [("sign-in", "/login", "ok"), ("access-denied", "/pharmacist", "refused")],
    }


def _publish_packets(bootstrap: str, packets: list[ReviewPacket]) -> None:
    """``packets`` on the packet topic as the docs worker publishes them (keyed by document)."""
    serde = make_serde(None)
    producer = Producer(docs_worker.producer_config(bootstrap))
    for packet in packets:
        value = serde.encode(packet, topic=DOCS_REVIEW_PACKETS)
        producer.produce(DOCS_REVIEW_PACKETS, key=packet.doc_id.encode(), value=value)
    assert producer.flush(30) == 0


def _reviews(bootstrap: str, doc_ids: set[str]) -> dict[str, Review]:
    """The reviews of ``doc_ids`` on the topic; the session broker's topic also holds other tests' records,
    bad ones among them (the poison suite's), which are not this test's and are skipped."""
    serde = make_serde(None)
    consumer = reader(bootstrap, "console-test-reviews", **{"isolation.level": "read_committed"})
    reviews = []
    try:
        for message in read_to_end(consumer, {DOCS_REVIEWS: {}}, 30):
            if message.key() is not None and message.key().decode("utf-8", "replace") in doc_ids:
                reviews.append(serde.decode(message.value(), Review, topic=DOCS_REVIEWS))
    finally:
        consumer.close()
    return {review.doc_id: review for review in reviews}


def test_an_sme_agrees_with_one_packet_and_corrects_another_and_both_reviews_are_on_the_topic(
    kafka_bootstrap: str, runtime: str, console_url: tuple[str, str, str, str], tmp_path: Path
) -> None:
    chromium_of = chromium()
    url, _, _, sme = console_url
    run = uuid.uuid4().hex[:8]
    packets = []
    for case in ("quest", "requisition"):
        _, finished = verify_example(case)
        assert finished.packet is not None
        packets.append(finished.packet.model_copy(update={"doc_id": f"{finished.packet.doc_id}-{run}"}))
    agreed, corrected = (packet.doc_id for packet in packets)
    _publish_packets(kafka_bootstrap, packets)

    with chromium_of as browser:
        page = browser.new_context().new_page()
        response = sign_in(page, url, sme, "/sme")
        assert response.status == 200 and page.url == url + "/sme"
        queued = page.locator("table.queue tbody tr")
        docs = [queued.nth(i).get_attribute("data-doc") for i in range(queued.count())]
        assert agreed in docs and corrected in docs

        page.click(f"a[href='/sme/packet/{agreed}']")
        assert "QUEST DIAGNOSTICS" in page.locator("ol.context").first.inner_text(), "the page's text"
        assert page.locator("ol.context mark").count() >= 1, "the located text marked"
        page.screenshot(path=str(tmp_path / "packet.png"), full_page=True)
        with page.expect_navigation() as navigation:
            page.click("button[name=agree]")
        assert navigation.value.status == 200 and page.url.startswith(url + "/sme?")
        assert f"Review of {agreed} recorded (AGREES)." in page.content()

        page.goto(url + f"/sme/packet/{corrected}")
        page.select_option("select[name=corrected_type]", DocumentType.OTHER.value)
        page.select_option("select[name=segment-0-type]", DocumentType.OTHER.value)
        page.select_option("select[name=mixture-PATHOLOGY_REPORT-presence]", "MENTION_ONLY")
        page.fill("input[name=mixture-PATHOLOGY_REPORT-share]", "0")
        page.fill("input[name=mixture-OTHER-share]", "1")
        page.fill("textarea[name=notes]", "a requisition form")
        with page.expect_navigation() as navigation:
            page.click("button[name=correct]")
        assert navigation.value.status == 200
        assert f"Review of {corrected} recorded (CORRECTS)." in page.content()

    reviews = eventually(
        "the request runtime's reviews",
        lambda: found if len(found := _reviews(kafka_bootstrap, {agreed, corrected})) == 2 else None,
    )
    assert {
        doc: (r.reviewer, r.decision, r.corrected_dominant_type, r.notes) for doc, r in reviews.items()
    } == {
        agreed: (sme, ReviewDecision.AGREES, None, ""),
        corrected: (sme, ReviewDecision.CORRECTS, DocumentType.OTHER, "a requisition form"),
    }
    segments, mixture = reviews[corrected].corrected_segments, reviews[corrected].corrected_mixture
    assert segments is not None and [(s.start_page, s.end_page, s.dominant_type) for s in segments] == [
        (1, 1, DocumentType.OTHER)
    ]
    assert mixture is not None and {(m.document_type, m.overall_share) for m in mixture} >= {
        (DocumentType.PATHOLOGY_REPORT, 0.0), (DocumentType.OTHER, 1.0)
    }  # fmt: skip
    assert _audit(kafka_bootstrap, {sme}) == {
        sme: [("sign-in", "/login", "ok"), ("review", agreed, "ok"), ("review", corrected, "ok")]
    }


QUERIES = [
    "digoxin toxicity management",
    "electrolyte correction in the context of cardiac glycoside toxicity",
    "heart failure medication optimization",
]
"""The queries the seed's PT-TEST-010 trace says the reasoning step generated (its budget: three)."""


def _records_of(
    bootstrap: str, topic: str, model: type[QueryDecision] | type[EvidenceReview], patient: str
) -> list[QueryDecision | EvidenceReview]:
    """The committed records of ``patient`` on ``topic``, as the pipeline upstream reads them."""
    return [
        r for r in read_records(bootstrap, make_serde(None), topic, model).values() if r.patient_id == patient
    ]


def test_a_pharmacist_edits_a_runs_queries_and_reviews_its_evidence_and_the_pipeline_gets_both(
    kafka_bootstrap: str, runtime: str, console_url: tuple[str, str, str, str], tmp_path: Path
) -> None:
    chromium_of = chromium()
    url, pharmacist, clinician, _ = console_url
    suffix = uuid.uuid4().hex[:8]
    patient, run = f"PT-IT-{suffix}", f"run-{suffix}"
    assessment = golden_assessment("PT-TEST-010").model_copy(update={"patient_id": patient})
    must = assessment.nti.must_retrieve
    proposed_at = datetime(2026, 3, 29, 9, 0, tzinfo=UTC)
    bundle = EvidenceBundle(
        patient_id=patient, run_id=run, event_time=proposed_at + timedelta(minutes=5), packets=[
            EvidencePacket(source=must[0], text="Digoxin: therapeutic serum range 0.5-2.0 ng/mL."),
            EvidencePacket(source="rivaroxaban label.pdf", text="Rivaroxaban <b>is</b> a Xa inhibitor."),
            EvidencePacket(source=must[3], text="Digoxin immune Fab for life-threatening toxicity."),
        ],
    )  # fmt: skip
    _upstream(kafka_bootstrap, [
        (CLINICAL_ASSESSMENTS, assessment),
        (CLINICAL_QUERY_PROPOSALS, QueryProposal(patient_id=patient, run_id=run, event_time=proposed_at,
                                                 queries=QUERIES)),
        (CLINICAL_EVIDENCE, bundle),
    ])  # fmt: skip
    queries_page = f"/pharmacist/queries/{patient}/{run}"
    evidence_page = f"/pharmacist/evidence/{patient}/{run}"
    sepsis = "sepsis source and empiric antibiotics with an eGFR of 36"

    with chromium_of as browser:
        page = browser.new_context().new_page()
        page.on("dialog", lambda dialog: pytest.fail(f"a script ran: {dialog.message}"))
        assert sign_in(page, url, pharmacist, "/pharmacist/queries").status == 200
        row = page.locator(f"tr[data-patient='{patient}'][data-run='{run}']")
        assert row.get_attribute("data-status") == "pending"
        row.locator("a.run").click()
        assert page.url == url + queries_page
        assert [t.strip() for t in page.locator("ol.proposed li").all_inner_texts()] == QUERIES
        page.fill("textarea[name=query-2]", "")
        page.fill("textarea[name=query-3]", sepsis)
        page.fill("textarea[name=note]", "drug-centric: fever and hypotension need a sepsis work-up")
        with page.expect_navigation() as navigation:
            page.click("button[name=decide]")
        assert navigation.value.status == 200 and page.url == url + queries_page

        page.goto(url + evidence_page)
        must_retrieve = page.locator("dd.must-retrieve").inner_text()
        assert f"2 of the patient's {len(must)} in the bundle" in must_retrieve
        assert must[1] in must_retrieve and must[0] not in must_retrieve.split("missing:")[1]
        off_target = page.locator("section[data-source='rivaroxaban label.pdf'] pre").text_content()
        assert off_target is not None and "<b>is</b>" in off_target, "the packet's text, escaped"
        page.check("tr[data-source='rivaroxaban label.pdf'] input[value=reject]")
        page.fill("textarea[name=note]", "the rivaroxaban label is off target")
        with page.expect_navigation() as navigation:
            page.click("button[value=ACCEPTED]")
        assert navigation.value.status == 200 and page.url == url + evidence_page
        page.screenshot(path=str(tmp_path / "evidence-review.png"), full_page=True)

        [decision] = eventually(
            "the query decision", lambda: _records_of(kafka_bootstrap, CLINICAL_QUERY_DECISIONS,
                                                      QueryDecision, patient)
        )  # fmt: skip
        [review] = eventually(
            "the evidence review", lambda: _records_of(kafka_bootstrap, CLINICAL_EVIDENCE_REVIEWS,
                                                       EvidenceReview, patient)
        )  # fmt: skip
        page.goto(url + queries_page)
        assert "EDITED by " + pharmacist in page.locator("dd.status").inner_text()
        assert page.locator("ol.decided li").all_inner_texts() == [QUERIES[0], QUERIES[1], sepsis]
        assert page.locator("form.decide").count() == 0
        page.screenshot(path=str(tmp_path / "query-gate.png"), full_page=True)
        page.goto(url + "/pharmacist/evidence")
        row = page.locator(f"tr[data-patient='{patient}'][data-run='{run}']")
        assert row.get_attribute("data-status") == "decided" and "ACCEPTED" in row.inner_text()

        other = browser.new_context().new_page()
        assert sign_in(other, url, clinician, "/").status == 200
        for path in ("/pharmacist/queries", evidence_page):
            refused = other.goto(url + path)
            assert refused is not None and refused.status == 403 and run not in other.content()

    assert (decision.decision, decision.queries, decision.proposed) == (
        QueryVerdict.EDITED, [QUERIES[0], QUERIES[1], sepsis], QUERIES,
    )  # fmt: skip
    assert (decision.pharmacist, decision.run_id, decision.proposed_at) == (pharmacist, run, proposed_at)
    assert decision.note == "drug-centric: fever and hypotension need a sepsis work-up"
    assert (review.decision, review.pharmacist, review.bundle_time) == (
        EvidenceVerdict.ACCEPTED, pharmacist, bundle.event_time,
    )  # fmt: skip
    assert review.packets == [
        ReviewedPacket(source=must[0], accepted=True),
        ReviewedPacket(source="rivaroxaban label.pdf", accepted=False),
        ReviewedPacket(source=must[3], accepted=True),
    ]
    trail = audit_trail(kafka_bootstrap, {pharmacist})[pharmacist]
    decided = {a.action: a for a in trail if a.action in ("query-decision", "evidence-review")}
    assert (decided["query-decision"].target, decided["query-decision"].outcome) == (
        touchpoint_target(patient, run, proposed_at), "ok",
    )  # fmt: skip
    assert decided["evidence-review"].target == touchpoint_target(patient, run, bundle.event_time)
    assert (decision.decision_id, review.review_id) == (
        decided["query-decision"].action_id, decided["evidence-review"].action_id,
    )  # fmt: skip
    outcomes = {
        o.request_id: o
        for o in read_records(
            kafka_bootstrap, make_serde(None), CONSOLE_REQUEST_OUTCOMES, ConsoleRequestOutcome
        ).values()
    }
    for action in decided.values():
        assert outcomes[action.action_id].outcome == "ok", outcomes[action.action_id].reason
