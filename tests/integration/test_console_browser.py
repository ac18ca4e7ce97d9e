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
packet and corrects the other, and the two Review records are on ``clingate.docs.reviews``, by that SME,
with the decision and the corrected type, and each decision is on the audit topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from schemas.clinical import ClinicalAssessment
from schemas.docs import DocumentType, Review, ReviewDecision, ReviewPacket
from schemas.serde import make_serde
from streams.demo.plan import verify_example
from streams.demo.samples import golden_assessment
from streams.groups import arbiter as docs_worker
from streams.runtime.kafka_clients import read_to_end, reader
from streams.testing.console import CHROMIUM, CHROMIUM_ARGS, audit_records, sign_in
from streams.worker.dbpm import producer_config
from topics.catalog import CLINICAL_ASSESSMENTS, DOCS_REVIEW_PACKETS, DOCS_REVIEWS

pytestmark = pytest.mark.integration

LIGHT_RANK = {"RED": 0, "YELLOW": 1, "GREEN": 2}


def _publish(bootstrap: str, assessments: list[ClinicalAssessment]) -> None:
    serde = make_serde(None)
    producer = Producer(producer_config(bootstrap))
    for assessment in assessments:
        value = serde.encode(assessment, topic=CLINICAL_ASSESSMENTS)
        producer.produce(CLINICAL_ASSESSMENTS, key=assessment.patient_id.encode(), value=value)
    assert producer.flush(30) == 0


def _audit(bootstrap: str, users: set[str]) -> dict[str, list[tuple[str, str, str]]]:
    """(action, target, outcome) of each of ``users``' audit records, in order."""
    return {
        u: [(a.action, a.target, a.outcome) for a in r] for u, r in audit_records(bootstrap, users).items()
    }


@pytest.fixture
def console_url(console_site: Callable[..., str]) -> tuple[str, str, str, str]:
    """A console on the session broker with a pharmacist, a clinician and an SME; (URL, their names)."""
    suffix = uuid.uuid4().hex[:8]
    pharmacist, clinician, sme = f"ph-{suffix}", f"dr-{suffix}", f"sme-{suffix}"
    url = console_site({pharmacist: "pharmacist", clinician: "clinician", sme: "sme"})
    return url, pharmacist, clinician, sme


def test_a_pharmacist_sees_red_first_a_clinician_is_refused_and_a_post_without_csrf_is_403(
    kafka_bootstrap: str, console_url: tuple[str, str, str, str], tmp_path: Path, sync_playwright: Any
) -> None:
    url, pharmacist, clinician, _ = console_url
    golden = {case: golden_assessment(case, reviewed=False) for case in
              ("PT-TEST-008", "PT-TEST-009", "PT-TEST-010", "PT-TEST-012")}  # fmt: skip
    # Published GREEN first; PT-TEST-010 twice: its current assessment is the reviewed one.
    _publish(kafka_bootstrap, [golden["PT-TEST-012"], golden["PT-TEST-010"], golden["PT-TEST-008"],
                               golden["PT-TEST-009"], golden_assessment("PT-TEST-010")])  # fmt: skip

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
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
            # Newest first: the reviewed assessment, the one before, then earlier runs' on this broker.
            sections = page.locator("section.assessment")
            assert sections.count() >= 2
            assert (
                "CAA CONCUR" in sections.nth(0).inner_text() and "(current)" in sections.nth(0).inner_text()
            )
            assert "deterministic inputs only" in sections.nth(1).inner_text()

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
        finally:
            browser.close()

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
    kafka_bootstrap: str, console_url: tuple[str, str, str, str], tmp_path: Path, sync_playwright: Any
) -> None:
    url, _, _, sme = console_url
    run = uuid.uuid4().hex[:8]
    packets = []
    for case in ("quest", "requisition"):
        _, finished = verify_example(case)
        assert finished.packet is not None
        packets.append(finished.packet.model_copy(update={"doc_id": f"{finished.packet.doc_id}-{run}"}))
    agreed, corrected = (packet.doc_id for packet in packets)
    _publish_packets(kafka_bootstrap, packets)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
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
            page.fill("textarea[name=notes]", "a requisition form")
            with page.expect_navigation() as navigation:
                page.click("button[name=correct]")
            assert navigation.value.status == 200
            assert f"Review of {corrected} recorded (CORRECTS)." in page.content()
        finally:
            browser.close()

    reviews = _reviews(kafka_bootstrap, {agreed, corrected})
    assert {
        doc: (r.reviewer, r.decision, r.corrected_dominant_type, r.notes) for doc, r in reviews.items()
    } == {
        agreed: (sme, ReviewDecision.AGREES, None, ""),
        corrected: (sme, ReviewDecision.CORRECTS, DocumentType.OTHER, "a requisition form"),
    }
    assert _audit(kafka_bootstrap, {sme}) == {
        sme: [("sign-in", "/login", "ok"), ("review", agreed, "ok"), ("review", corrected, "ok")]
    }
