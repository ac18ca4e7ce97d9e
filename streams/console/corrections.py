"""An SME's correction of a packet's segments and mixture, read from the packet page's Correct form.

The form shows the LLM's classification as editable rows, so a correction that changes nothing changes
nothing: the review then carries no corrected segments or mixture, and the ground truth keeps the LLM's
(:func:`processors.docs.packet.ground_truth`), exactly as ``clingate arbiter review`` without
``--corrected-segments``/``--corrected-mixture``.

**Segments.** One row per LLM segment (``segment-<i>-start``, ``-end``, ``-type``, and ``-remove`` to drop
it) and one blank row for a segment the LLM missed (``segment-new-*``). What holds for a corrected list:
the segments are renumbered in page order and cover pages 1..``total_pages`` once each, with no gap and
no overlap (a classifier's segmentation partitions the document, and so must its ground truth). The
per-type classifications of an LLM segment are kept as the LLM's evidence, since the SME judges the page
range and the dominant type, not the confidences; a segment the SME added has none.

**Mixture.** One row per document type (``mixture-<TYPE>-presence`` and ``-share``), the LLM's values
prefilled (NO_EVIDENCE, 0 for a type it left out). What holds for a corrected mixture: each share is in
[0, 1] and the shares add up to 1 (within 0.01), as the classifier's do; an entry the SME changed has
confidence 1.0 (the SME's judgement), one left as the LLM gave it is the LLM's entry; a type the LLM left
out and the SME left at NO_EVIDENCE, 0 stays out.

A form without segment rows or without mixture rows (a client other than the page) corrects neither. A
form that breaks any of these is refused with every reason at once (:class:`CorrectionError`), and
nothing is published.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from schemas.docs import DocumentType, MixtureEntry, PresenceLevel, ReviewPacket, Segment

SHARE_TOLERANCE = 0.01
"""How far the present types' shares may add up from 1 (the form's shares have two decimals)."""


class CorrectionError(ValueError):
    """The form's segments or mixture cannot be a ground truth; ``reasons`` says each problem."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class Corrections:
    """What the SME corrected beyond the dominant type (None: as the LLM gave it)."""

    segments: list[Segment] | None
    mixture: list[MixtureEntry] | None


def _int(form: Mapping[str, str], name: str, reasons: list[str]) -> int | None:
    raw = form.get(name, "").strip()
    try:
        return int(raw)
    except ValueError:
        reasons.append(f"{name}: a page number is needed, not {raw!r}")
        return None


def _type(form: Mapping[str, str], name: str, reasons: list[str]) -> DocumentType | None:
    raw = form.get(name, "")
    if raw in DocumentType.__members__:
        return DocumentType(raw)
    reasons.append(f"{name}: not a document type: {raw!r}")
    return None


def _segments(form: Mapping[str, str], packet: ReviewPacket, reasons: list[str]) -> list[Segment] | None:
    original = packet.classification.segments
    rows: list[tuple[int, int, DocumentType, Segment | None]] = []
    for index, segment in enumerate(original):
        if form.get(f"segment-{index}-remove"):
            continue
        start, end = (_int(form, f"segment-{index}-{edge}", reasons) for edge in ("start", "end"))
        kind = _type(form, f"segment-{index}-type", reasons)
        if start is not None and end is not None and kind is not None:
            rows.append((start, end, kind, segment))
    if form.get("segment-new-start", "").strip() or form.get("segment-new-end", "").strip():
        start, end = _int(form, "segment-new-start", reasons), _int(form, "segment-new-end", reasons)
        kind = _type(form, "segment-new-type", reasons)
        if start is not None and end is not None and kind is not None:
            rows.append((start, end, kind, None))
    rows.sort(key=lambda row: row[0])
    expected = 1
    for start, end, _kind, _segment in rows:
        if start > end:
            reasons.append(f"a segment starts on page {start} after it ends ({end})")
        elif start != expected:
            what = (
                "overlaps the previous segment"
                if start < expected
                else f"leaves pages {expected}-{start - 1} out"
            )
            reasons.append(f"the segment of pages {start}-{end} {what}")
        expected = max(expected, end + 1)
    if expected != packet.total_pages + 1:
        reasons.append(f"the segments must cover pages 1-{packet.total_pages} once each")
    unchanged = [(s.start_page, s.end_page, s.dominant_type) for s in original]
    if reasons or [(start, end, kind) for start, end, kind, _ in rows] == unchanged:
        return None
    return [
        Segment(
            segment_id=number,
            start_page=start,
            end_page=end,
            segment_page_count=end - start + 1,
            dominant_type=kind,
            classifications=segment.classifications if segment else [],
            reasoning=segment.reasoning if segment else "",
        )
        for number, (start, end, kind, segment) in enumerate(rows, start=1)
    ]


def _mixture(form: Mapping[str, str], packet: ReviewPacket, reasons: list[str]) -> list[MixtureEntry] | None:
    given = {entry.document_type: entry for entry in packet.classification.document_mixture}
    entries: list[MixtureEntry] = []
    changed = False
    for kind in DocumentType:
        presence_raw = form.get(f"mixture-{kind.value}-presence", "")
        share_raw = form.get(f"mixture-{kind.value}-share", "").strip()
        if presence_raw not in PresenceLevel.__members__:
            reasons.append(f"{kind.value}: not a presence level: {presence_raw!r}")
            continue
        try:
            share = float(share_raw)
        except ValueError:
            reasons.append(f"{kind.value}: a share is a number from 0 to 1, not {share_raw!r}")
            continue
        if not 0.0 <= share <= 1.0:
            reasons.append(f"{kind.value}: a share is a number from 0 to 1, not {share_raw!r}")
            continue
        presence = PresenceLevel(presence_raw)
        llm = given.get(kind)
        if (
            llm is not None
            and llm.presence_level is presence
            and round(llm.overall_share, 2) == round(share, 2)
        ):
            entries.append(llm)
        elif llm is not None or presence is not PresenceLevel.NO_EVIDENCE or share > 0.0:
            changed = True
            entries.append(MixtureEntry(document_type=kind, presence_level=presence, confidence=1.0,
                                        overall_share=share))  # fmt: skip
    total = sum(entry.overall_share for entry in entries)
    if not reasons and changed and abs(total - 1.0) > SHARE_TOLERANCE:
        reasons.append(f"the shares add up to {total:.2f}, not 1")
    return entries if changed and not reasons else None


def read_corrections(form: Mapping[str, str], packet: ReviewPacket) -> Corrections:
    """The corrected segments and mixture of the Correct ``form`` for ``packet`` (module docstring).

    Raises:
        CorrectionError: the form's segments or mixture cannot be a ground truth.
    """
    reasons: list[str] = []
    fields = {name.split("-", 1)[0] for name in form}
    segments = _segments(form, packet, reasons) if "segment" in fields else None
    mixture = _mixture(form, packet, reasons) if "mixture" in fields else None
    corrections = Corrections(segments, mixture)
    if reasons:
        raise CorrectionError(reasons)
    return corrections
