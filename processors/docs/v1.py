"""V1 — schema and completeness validator: pure rules, zero LLM calls (slide 4).

Every check of the seed's table, in its order, with its severity and auto-fixability. The table's
heading says "5 checks" but lists six; all six run. IG codes are the table's row numbers
(``IG-1`` = the segment-count check, as the seed's example shows). Choices where the seed is terse:

* Check 2 ("all page numbers within 1..total_pages") covers segment ranges and the pages evidence
  cites; ``total_pages`` is the bundle's (the source of truth), not a number the classifier supplies.
* Check 3 is judged only for a segment whose range passed check 2: the page count of an impossible
  range has no right answer to fix towards.
* Check 4 covers every confidence in the output: type classifications, mixture entries and the
  self evaluation. NaN fails it.
* Check 5 reports missing types (fixable: added as NO_EVIDENCE, confidence 0, share 0) and, apart,
  duplicated types (not fixable: which of two contradictory entries is right is not mechanical).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from processors.docs.issues import make_issue, mixture_location, segment_location, type_name
from schemas.docs import (
    Agent,
    ClassificationOutput,
    DocumentBundle,
    DocumentType,
    FixKind,
    Issue,
    PresenceLevel,
    Segment,
    Severity,
)


def _in_unit_interval(value: float) -> bool:
    return 0.0 <= value <= 1.0


def _range_valid(segment: Segment, total_pages: int) -> bool:
    return 1 <= segment.start_page <= segment.end_page <= total_pages


def check_v1(classification: ClassificationOutput, bundle: DocumentBundle) -> list[Issue]:
    """Run V1's six checks; issues come out in check order (so the first is ``V1-0001``)."""
    return [
        *_segment_count(classification),
        *_page_ranges(classification, bundle.total_pages),
        *_page_counts(classification, bundle.total_pages),
        *_confidences(classification),
        *_completeness(classification),
        *_evidence_present(classification),
    ]


def _segment_count(classification: ClassificationOutput) -> list[Issue]:
    actual = len(classification.segments)
    if classification.number_of_segments == actual:
        return []
    return [
        make_issue(
            Agent.V1,
            Severity.BLOCKER,
            f"number_of_segments is {classification.number_of_segments} "
            f"but segments array has {actual} items",
            "number_of_segments",
            fix=FixKind.SET_SEGMENT_COUNT,
            ig_code="IG-1",
        )
    ]


def _page_ranges(classification: ClassificationOutput, total_pages: int) -> list[Issue]:
    issues = []
    for index, segment in enumerate(classification.segments):
        if not _range_valid(segment, total_pages):
            issues.append(
                make_issue(
                    Agent.V1,
                    Severity.BLOCKER,
                    f"Segment {index + 1} page range {segment.start_page}-{segment.end_page} is not a valid "
                    f"range within 1..{total_pages} with start <= end",
                    segment_location(index),
                    ig_code="IG-2",
                    segment_index=index,
                )
            )
        for classified in segment.classifications:
            for evidence in classified.top_evidence:
                if not 1 <= evidence.page <= total_pages:
                    issues.append(
                        make_issue(
                            Agent.V1,
                            Severity.BLOCKER,
                            f"Segment {index + 1} {type_name(classified.document_type)} evidence cites page "
                            f"{evidence.page} outside 1..{total_pages}",
                            segment_location(index, classified.document_type),
                            ig_code="IG-2",
                            segment_index=index,
                            document_type=classified.document_type,
                            evidence_text=evidence.snippet,
                        )
                    )
    return issues


def _page_counts(classification: ClassificationOutput, total_pages: int) -> list[Issue]:
    issues = []
    for index, segment in enumerate(classification.segments):
        expected = segment.end_page - segment.start_page + 1
        if _range_valid(segment, total_pages) and segment.segment_page_count != expected:
            issues.append(
                make_issue(
                    Agent.V1,
                    Severity.MAJOR,
                    f"Segment {index + 1} segment_page_count is {segment.segment_page_count} but pages "
                    f"{segment.start_page}-{segment.end_page} span {expected}",
                    segment_location(index),
                    fix=FixKind.SET_PAGE_COUNT,
                    ig_code="IG-3",
                    segment_index=index,
                )
            )
    return issues


def _confidences(classification: ClassificationOutput) -> list[Issue]:
    issues = []
    for index, segment in enumerate(classification.segments):
        for classified in segment.classifications:
            if not _in_unit_interval(classified.confidence):
                issues.append(
                    make_issue(
                        Agent.V1,
                        Severity.BLOCKER,
                        f"Segment {index + 1} {type_name(classified.document_type)} confidence "
                        f"{classified.confidence} is outside [0.0, 1.0]",
                        segment_location(index, classified.document_type),
                        ig_code="IG-4",
                        segment_index=index,
                        document_type=classified.document_type,
                    )
                )
    for entry in classification.document_mixture:
        if not _in_unit_interval(entry.confidence):
            issues.append(
                make_issue(
                    Agent.V1,
                    Severity.BLOCKER,
                    f"Mixture {type_name(entry.document_type)} confidence {entry.confidence} "
                    "is outside [0.0, 1.0]",
                    mixture_location(entry.document_type),
                    ig_code="IG-4",
                    document_type=entry.document_type,
                )
            )
    if not _in_unit_interval(classification.self_evaluation.confidence):
        issues.append(
            make_issue(
                Agent.V1,
                Severity.BLOCKER,
                f"Self-evaluation confidence {classification.self_evaluation.confidence} "
                "is outside [0.0, 1.0]",
                "self_evaluation",
                ig_code="IG-4",
            )
        )
    return issues


def _type_set_issues(types: Sequence[DocumentType], where: str, segment_index: int | None) -> list[Issue]:
    counts = Counter(types)
    missing = [document_type for document_type in DocumentType if counts[document_type] == 0]
    duplicated = [document_type for document_type in DocumentType if counts[document_type] > 1]
    issues = []
    if missing:
        issues.append(
            make_issue(
                Agent.V1,
                Severity.BLOCKER,
                f"{where} is missing document types: {', '.join(type_name(t) for t in missing)}",
                where if segment_index is None else segment_location(segment_index),
                fix=FixKind.ADD_MISSING_TYPES,
                ig_code="IG-5",
                segment_index=segment_index,
            )
        )
    if duplicated:
        issues.append(
            make_issue(
                Agent.V1,
                Severity.BLOCKER,
                f"{where} lists document types more than once: {', '.join(type_name(t) for t in duplicated)}",
                where if segment_index is None else segment_location(segment_index),
                ig_code="IG-5",
                segment_index=segment_index,
            )
        )
    return issues


def _completeness(classification: ClassificationOutput) -> list[Issue]:
    issues = []
    for index, segment in enumerate(classification.segments):
        types = [classified.document_type for classified in segment.classifications]
        issues.extend(_type_set_issues(types, f"Segment {index + 1}", index))
    mixture_types = [entry.document_type for entry in classification.document_mixture]
    issues.extend(_type_set_issues(mixture_types, mixture_location(), None))
    return issues


def _evidence_present(classification: ClassificationOutput) -> list[Issue]:
    issues = []
    for index, segment in enumerate(classification.segments):
        for classified in segment.classifications:
            if classified.presence_level is not PresenceLevel.NO_EVIDENCE and not classified.top_evidence:
                issues.append(
                    make_issue(
                        Agent.V1,
                        Severity.MINOR,
                        f"{type_name(classified.document_type)} is {classified.presence_level.value} "
                        "but has no evidence snippets",
                        segment_location(index, classified.document_type),
                        ig_code="IG-6",
                        segment_index=index,
                        document_type=classified.document_type,
                        page=segment.start_page,
                    )
                )
    return issues
