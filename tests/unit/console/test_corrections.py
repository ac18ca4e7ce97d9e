"""An SME's correction of segments and mixture on the packet page: the Correct form as the page fills it
changes nothing; a changed page range, type, removed or added segment, or mixture row is the review's
corrected segments or mixture; a segmentation with a gap or an overlap, or shares that do not add up to 1,
is refused with its reasons and nothing is published."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from schemas.console import Role
from schemas.docs import DocumentType, PresenceLevel, ReviewPacket
from streams.console.corrections import CorrectionError, read_corrections
from streams.demo.plan import verify_example
from streams.requests.check import RequestAction

from .conftest import PASSWORD, Console, csrf_of, sign_in

Client = TestClient[Any, Any]


@pytest.fixture(scope="module")
def packet() -> ReviewPacket:
    """The fabricated-evidence example's packet: 8 pages, a genomic report (1-5) and a clinical note (6-8)."""
    _, finished = verify_example("fabricated")
    assert finished.packet is not None
    return finished.packet


def as_filled(packet: ReviewPacket) -> dict[str, str]:
    """The Correct form's rows as the page fills them from the LLM's classification."""
    form = {"segment-new-start": "", "segment-new-end": "", "segment-new-type": "CLINICAL_NOTE"}
    for index, s in enumerate(packet.classification.segments):
        form |= {f"segment-{index}-start": str(s.start_page), f"segment-{index}-end": str(s.end_page),
                 f"segment-{index}-type": s.dominant_type.value}  # fmt: skip
    given = {e.document_type: e for e in packet.classification.document_mixture}
    for kind in DocumentType:
        entry = given.get(kind)
        form[f"mixture-{kind.value}-presence"] = entry.presence_level.value if entry else "NO_EVIDENCE"
        form[f"mixture-{kind.value}-share"] = f"{entry.overall_share if entry else 0:.2f}"
    return form


def test_the_form_as_filled_corrects_nothing_and_a_form_without_rows_neither(packet: ReviewPacket) -> None:
    unchanged = read_corrections(as_filled(packet), packet)
    assert (unchanged.segments, unchanged.mixture) == (None, None)
    assert read_corrections({}, packet) == unchanged


def test_a_changed_range_type_and_an_added_segment_are_the_corrected_segments(packet: ReviewPacket) -> None:
    added = {"segment-new-start": "5", "segment-new-end": "5", "segment-new-type": "OTHER"}
    form = as_filled(packet) | {"segment-0-end": "4", "segment-1-type": "PATHOLOGY_REPORT"} | added
    segments = read_corrections(form, packet).segments
    assert segments is not None
    assert [
        (s.segment_id, s.start_page, s.end_page, s.segment_page_count, s.dominant_type) for s in segments
    ] == [
        (1, 1, 4, 4, DocumentType.GENOMIC_REPORT),
        (2, 5, 5, 1, DocumentType.OTHER),
        (3, 6, 8, 3, DocumentType.PATHOLOGY_REPORT),
    ]
    original = packet.classification.segments
    assert segments[0].classifications == original[0].classifications, "the LLM's evidence is kept"
    assert segments[1].classifications == [], "a segment the SME added has none"


def test_removing_a_segment_and_widening_its_neighbour_merges_them(packet: ReviewPacket) -> None:
    form = as_filled(packet) | {"segment-0-end": "8", "segment-1-remove": "1"}
    segments = read_corrections(form, packet).segments
    assert segments is not None and [(s.start_page, s.end_page) for s in segments] == [(1, 8)]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"segment-0-end": "3"}, "leaves pages 4-5 out"),
        ({"segment-0-end": "6"}, "overlaps the previous segment"),
        ({"segment-1-end": "9"}, "must cover pages 1-8"),
        ({"segment-1-start": "seven"}, "a page number is needed"),
        ({"segment-1-type": "LETTER"}, "not a document type"),
        ({"mixture-OTHER-share": "0.50"}, "the shares add up to 1.49"),
        ({"mixture-OTHER-share": "-1"}, "a share is a number from 0 to 1"),
        ({"mixture-OTHER-presence": "SOME"}, "not a presence level"),
    ],
)
def test_a_segmentation_or_mixture_that_cannot_be_a_ground_truth_is_refused(
    packet: ReviewPacket, change: dict[str, str], reason: str
) -> None:
    with pytest.raises(CorrectionError) as refused:
        read_corrections(as_filled(packet) | change, packet)
    assert any(reason in r for r in refused.value.reasons), refused.value.reasons


def test_a_changed_mixture_row_has_the_smes_confidence_and_the_rest_stay_the_llms(
    packet: ReviewPacket,
) -> None:
    form = as_filled(packet) | {"mixture-GENOMIC_REPORT-share": "0.60", "mixture-CLINICAL_NOTE-share": "0.37"}
    mixture = read_corrections(form, packet).mixture
    assert mixture is not None
    by_type = {e.document_type: e for e in mixture}
    assert (
        by_type[DocumentType.GENOMIC_REPORT].overall_share,
        by_type[DocumentType.GENOMIC_REPORT].confidence,
    ) == (0.6, 1.0)
    given = {e.document_type: e for e in packet.classification.document_mixture}
    assert by_type[DocumentType.OTHER] == given[DocumentType.OTHER]
    assert by_type[DocumentType.OTHER].presence_level is PresenceLevel.NO_EVIDENCE


def _post(site: Console, packet: ReviewPacket, form: dict[str, str]) -> Any:
    async def scenario(client: Client) -> Any:
        await sign_in(client, "sam")
        page = await client.get(f"/sme/packet/{packet.doc_id}")
        html = await page.text()
        assert 'name="segment-1-type"' in html and 'name="mixture-OTHER-share" value="0.01"' in html
        data = {
            "csrf_token": csrf_of(html),
            "decision": "CORRECTS",
            "corrected_type": "CLINICAL_NOTE",
            **form,
        }
        response = await client.post(f"/sme/packet/{packet.doc_id}", data=data, allow_redirects=False)
        return response.status, await response.text()

    return site.run(scenario)


def test_the_page_publishes_the_corrected_segments_and_refuses_a_gap_publishing_nothing(
    console: Console, packet: ReviewPacket
) -> None:
    console.users.add("sam", Role.SME, PASSWORD)
    console.reviews.packets[packet.doc_id] = packet
    status, body = _post(console, packet, as_filled(packet) | {"segment-0-end": "3"})
    assert status == 400 and "leaves pages 4-5 out" in body and not console.requests.produced
    status, _ = _post(console, packet, as_filled(packet) | {"segment-1-type": "PATHOLOGY_REPORT"})
    assert status == 303
    [(review, _)] = console.requests.records(RequestAction.REVIEW)
    assert review.corrected_segments is not None and review.corrected_mixture is None
    assert [s.dominant_type for s in review.corrected_segments] == [
        DocumentType.GENOMIC_REPORT,
        DocumentType.PATHOLOGY_REPORT,
    ]
    [action] = [a for a in console.trail.records if a.action == "review"]
    assert (
        re.search(r'"corrected_segments": true', action.detail)
        and '"corrected_mixture": false' in action.detail
    )
