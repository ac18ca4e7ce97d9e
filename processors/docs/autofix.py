"""AutoFixEngine and the retry loop's cycle fingerprint (slide 8).

Repairs are per kind, applied to every place that needs them (so a repair is idempotent and its
outcome does not depend on which issue asked for it), in a fixed order: missing types are added
before shares are normalised, so a segment that gained a zero-share type is normalised once.

Choices where the seed is silent or loose:

* Normalised shares are rounded to 3 decimals: the seed's worked example gives
  [0.50, 0.30, 0.10, 0.08, 0.08] → [0.472, 0.283, 0.094, 0.075, 0.075] (which sums to 0.999, inside
  the tolerance; the seed prints it as 1.000). A zero sum cannot be normalised and is left as it is,
  so the unchanged fingerprint sends the document to an SME.
* The fingerprint is MD5 over canonical JSON of the segment boundaries, the dominant types and all
  share values (the seed's three ingredients). "Boundaries" is read as each segment's declared
  structure — start page, end page, page count — plus the number of segments: otherwise the segment-
  and page-count repairs, which change nothing else, would always look like a cycle.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from processors.docs.v2 import share_sum_ok
from schemas.docs import (
    ClassificationOutput,
    DocumentType,
    FixKind,
    Issue,
    MixtureEntry,
    PresenceLevel,
    Segment,
    TypeClassification,
)

SHARE_DECIMALS = 3


def normalise_shares(shares: Sequence[float]) -> list[float]:
    """Divide each share by their sum, rounded to 3 decimals; unchanged when the sum is zero."""
    total = sum(shares)
    if total == 0:
        return list(shares)
    return [round(share / total, SHARE_DECIMALS) for share in shares]


def _add_missing_types(classification: ClassificationOutput) -> ClassificationOutput:
    segments = []
    for segment in classification.segments:
        present = {c.document_type for c in segment.classifications}
        added = [
            TypeClassification(
                document_type=t, presence_level=PresenceLevel.NO_EVIDENCE, confidence=0.0, segment_share=0.0
            )
            for t in DocumentType
            if t not in present
        ]
        segments.append(segment.model_copy(update={"classifications": [*segment.classifications, *added]}))
    present = {entry.document_type for entry in classification.document_mixture}
    mixture = [
        *classification.document_mixture,
        *(
            MixtureEntry(
                document_type=t, presence_level=PresenceLevel.NO_EVIDENCE, confidence=0.0, overall_share=0.0
            )
            for t in DocumentType
            if t not in present
        ),
    ]
    return classification.model_copy(update={"segments": segments, "document_mixture": mixture})


def _set_segment_count(classification: ClassificationOutput) -> ClassificationOutput:
    return classification.model_copy(update={"number_of_segments": len(classification.segments)})


def _set_page_counts(classification: ClassificationOutput) -> ClassificationOutput:
    segments = [
        s.model_copy(update={"segment_page_count": s.end_page - s.start_page + 1})
        if s.start_page <= s.end_page
        else s
        for s in classification.segments
    ]
    return classification.model_copy(update={"segments": segments})


def _normalise_segment(segment: Segment) -> Segment:
    shares = [c.segment_share for c in segment.classifications]
    if share_sum_ok(shares):
        return segment
    fixed = [
        c.model_copy(update={"segment_share": share})
        for c, share in zip(segment.classifications, normalise_shares(shares), strict=True)
    ]
    return segment.model_copy(update={"classifications": fixed})


def _normalise_segment_shares(classification: ClassificationOutput) -> ClassificationOutput:
    return classification.model_copy(
        update={"segments": [_normalise_segment(s) for s in classification.segments]}
    )


def _normalise_mixture_shares(classification: ClassificationOutput) -> ClassificationOutput:
    shares = [entry.overall_share for entry in classification.document_mixture]
    if share_sum_ok(shares):
        return classification
    mixture = [
        entry.model_copy(update={"overall_share": share})
        for entry, share in zip(classification.document_mixture, normalise_shares(shares), strict=True)
    ]
    return classification.model_copy(update={"document_mixture": mixture})


_REPAIRS = (
    (FixKind.ADD_MISSING_TYPES, _add_missing_types),
    (FixKind.SET_SEGMENT_COUNT, _set_segment_count),
    (FixKind.SET_PAGE_COUNT, _set_page_counts),
    (FixKind.NORMALISE_SEGMENT_SHARES, _normalise_segment_shares),
    (FixKind.NORMALISE_MIXTURE_SHARES, _normalise_mixture_shares),
)


def apply_fixes(
    classification: ClassificationOutput, issues: Sequence[Issue]
) -> tuple[ClassificationOutput, list[FixKind]]:
    """Apply every repair the auto-fixable ``issues`` name.

    Returns:
        The repaired classification and the repairs applied, in application order.
    """
    wanted = {issue.fix for issue in issues if issue.fix is not None}
    applied = []
    for kind, repair in _REPAIRS:
        if kind in wanted:
            classification = repair(classification)
            applied.append(kind)
    return classification, applied


def fingerprint(classification: ClassificationOutput) -> str:
    """MD5 of boundaries + dominant types + shares: equal fingerprints mean a fix changed nothing."""
    canonical = {
        "number_of_segments": classification.number_of_segments,
        "boundaries": [[s.start_page, s.end_page, s.segment_page_count] for s in classification.segments],
        "dominant": [
            classification.dominant_type_overall,
            *(s.dominant_type for s in classification.segments),
        ],
        "segment_shares": [
            [[c.document_type, c.segment_share] for c in s.classifications] for s in classification.segments
        ],
        "mixture_shares": [[e.document_type, e.overall_share] for e in classification.document_mixture],
    }
    return hashlib.md5(json.dumps(canonical, sort_keys=True).encode(), usedforsecurity=False).hexdigest()
