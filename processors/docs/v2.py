"""V2 — internal consistency, phase 1 (rules; slide 4 "V2"). Phase 2 is an LLM request (see llm.py).

Share sums: each segment's five ``segment_share`` values and the mixture's ``overall_share`` values
must sum to 1.0 ± 0.01 (MAJOR, auto-fixable by normalisation); no two segments may share a page
(BLOCKER). The tolerance comparison allows 1e-9 of float slack so that a sum printed as 1.010 is
inside it, as a reader of the message would expect.
"""

from __future__ import annotations

from collections.abc import Sequence

from processors.docs.issues import make_issue, mixture_location, segment_location
from schemas.docs import Agent, ClassificationOutput, FixKind, Issue, Severity

SHARE_TOLERANCE = 0.01
_FLOAT_SLACK = 1e-9


def share_sum_ok(shares: Sequence[float]) -> bool:
    """True when ``shares`` sum to 1.0 within the seed's ±0.01 tolerance."""
    return abs(sum(shares) - 1.0) <= SHARE_TOLERANCE + _FLOAT_SLACK


def segment_shares(classification: ClassificationOutput, segment_index: int) -> list[float]:
    """The ``segment_share`` values of one segment, in listed order."""
    return [c.segment_share for c in classification.segments[segment_index].classifications]


def mixture_shares(classification: ClassificationOutput) -> list[float]:
    """The mixture's ``overall_share`` values, in listed order."""
    return [entry.overall_share for entry in classification.document_mixture]


def check_v2_rules(classification: ClassificationOutput) -> list[Issue]:
    """Phase 1 of V2: share sums per segment, the mixture's share sum, page overlaps."""
    issues = []
    for index in range(len(classification.segments)):
        shares = segment_shares(classification, index)
        if not share_sum_ok(shares):
            issues.append(
                make_issue(
                    Agent.V2,
                    Severity.MAJOR,
                    f"Segment {index + 1} shares sum to {sum(shares):.3f} instead of 1.0",
                    f"{segment_location(index)} → segment_share",
                    fix=FixKind.NORMALISE_SEGMENT_SHARES,
                    segment_index=index,
                )
            )
    shares = mixture_shares(classification)
    if not share_sum_ok(shares):
        issues.append(
            make_issue(
                Agent.V2,
                Severity.MAJOR,
                f"Mixture overall_share sums to {sum(shares):.3f} instead of 1.0",
                f"{mixture_location()} → overall_share",
                fix=FixKind.NORMALISE_MIXTURE_SHARES,
            )
        )
    segments = classification.segments
    for first in range(len(segments)):
        for second in range(first + 1, len(segments)):
            shared = sorted(
                set(range(segments[first].start_page, segments[first].end_page + 1))
                & set(range(segments[second].start_page, segments[second].end_page + 1))
            )
            if shared:
                issues.append(
                    make_issue(
                        Agent.V2,
                        Severity.BLOCKER,
                        f"Segments {first + 1} and {second + 1} overlap on pages "
                        f"{', '.join(str(page) for page in shared)}",
                        f"{segment_location(first)} / {segment_location(second)}",
                        segment_index=second,
                        page=shared[0],
                    )
                )
    return issues
