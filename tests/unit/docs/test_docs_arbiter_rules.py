"""V5's eight priority-ordered rules and the AutoFixEngine."""

from __future__ import annotations

import random

import pytest
from docs_examples import classification, example
from hypothesis import given
from hypothesis import strategies as st

from processors.docs.autofix import apply_fixes, fingerprint, normalise_shares
from processors.docs.issues import make_issue
from processors.docs.v1 import check_v1
from processors.docs.v2 import check_v2_rules, share_sum_ok
from processors.docs.v5 import RULES, decide
from schemas.docs import Agent, ArbiterDecision, FixKind, Issue, Severity


def _issue(severity: Severity, fixable: bool = False) -> Issue:
    fix = FixKind.NORMALISE_SEGMENT_SHARES if fixable else None
    return make_issue(Agent.V2, severity, "m", "l", fix=fix)


B, M, MF, m = (
    _issue(Severity.BLOCKER),
    _issue(Severity.MAJOR),
    _issue(Severity.MAJOR, fixable=True),
    _issue(Severity.MINOR),
)


@pytest.mark.parametrize(
    ("issues", "rule", "decision"),
    [
        ([B, MF, m], 1, ArbiterDecision.ESCALATE_TO_SME),
        ([MF, MF, MF], 2, ArbiterDecision.ESCALATE_TO_SME),
        ([M, M], 3, ArbiterDecision.ESCALATE_TO_SME),
        ([M, MF, m], 4, ArbiterDecision.ESCALATE_TO_SME),
        ([MF], 5, ArbiterDecision.AUTO_RETRY),
        ([MF, MF, m], 5, ArbiterDecision.AUTO_RETRY),
        ([m, m], 6, ArbiterDecision.AUTO_ACCEPT),
        ([], 7, ArbiterDecision.AUTO_ACCEPT),
    ],
)
def test_each_v5_rule_fires_in_priority_order(issues, rule, decision):
    fired = decide(issues)
    assert (fired.number, fired.decision) == (rule, decision)


def test_the_table_has_the_seeds_eight_rules_in_order():
    assert [r.number for r in RULES] == list(range(1, 9))
    assert RULES[-1].decision is ArbiterDecision.ESCALATE_TO_SME


_issues = st.lists(st.sampled_from([B, M, MF, m]), max_size=8)


@given(_issues, st.randoms())
def test_v5_is_order_independent_and_its_fallback_is_never_needed(issues, rnd: random.Random):
    shuffled = list(issues)
    rnd.shuffle(shuffled)
    assert decide(issues) == decide(shuffled)
    assert decide(issues).number != 8


@given(_issues)
def test_any_non_fixable_major_escalates(issues):
    if M in issues:
        assert decide(issues).decision is ArbiterDecision.ESCALATE_TO_SME


def test_worked_share_normalisation():
    assert normalise_shares([0.50, 0.30, 0.10, 0.08, 0.08]) == [0.472, 0.283, 0.094, 0.075, 0.075]


_share = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(st.lists(_share, min_size=5, max_size=5).filter(lambda s: sum(s) > 1e-6))
def test_normalised_shares_sum_to_one_within_tolerance_and_stay_put(shares):
    once = normalise_shares(shares)
    assert share_sum_ok(once)


@given(st.lists(_share, min_size=5, max_size=5).filter(lambda s: sum(s) > 1e-6), st.integers(1, 4))
def test_repairs_converge_in_one_pass(shares, page_count):
    c = classification("classification_doc2_6_clean")
    seg = c.segments[0]
    classes = [
        x.model_copy(update={"segment_share": s}) for x, s in zip(seg.classifications, shares, strict=True)
    ]
    broken = c.model_copy(
        update={
            "number_of_segments": 5,
            "segments": [
                seg.model_copy(update={"classifications": classes, "segment_page_count": page_count}),
                *c.segments[1:],
            ],
        }
    )
    bundle = example("clean").bundle
    issues = [*check_v1(broken, bundle), *check_v2_rules(broken)]
    fixed, _ = apply_fixes(broken, issues)
    assert [i for i in [*check_v1(fixed, bundle), *check_v2_rules(fixed)] if i.auto_fixable] == []
    again, _ = apply_fixes(fixed, issues)
    assert fingerprint(again) == fingerprint(fixed)


def test_missing_types_are_added_with_no_evidence_and_zero_share():
    c = classification("classification_doc2_6_clean")
    seg = c.segments[1].model_copy(update={"classifications": c.segments[1].classifications[:3]})
    broken = c.model_copy(update={"segments": [c.segments[0], seg]})
    fixed, applied = apply_fixes(
        broken, [make_issue(Agent.V1, Severity.BLOCKER, "m", "l", fix=FixKind.ADD_MISSING_TYPES)]
    )
    added = fixed.segments[1].classifications[3:]
    assert applied == [FixKind.ADD_MISSING_TYPES]
    assert [(a.document_type.value, a.presence_level.value, a.segment_share) for a in added] == [
        ("RADIOLOGY_REPORT", "NO_EVIDENCE", 0.0),
        ("OTHER", "NO_EVIDENCE", 0.0),
    ]
    assert fingerprint(fixed) != fingerprint(broken)


def test_page_and_segment_count_repairs_change_the_fingerprint():
    c = classification("classification_doc2_6_clean")
    broken = c.model_copy(update={"number_of_segments": 3})
    fixed, _ = apply_fixes(
        broken, [make_issue(Agent.V1, Severity.BLOCKER, "m", "l", fix=FixKind.SET_SEGMENT_COUNT)]
    )
    assert fixed == c and fingerprint(fixed) != fingerprint(broken)
