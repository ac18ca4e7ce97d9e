"""V1, V2 phase 1 and V3 phase 1: every check of the seed's tables, with severity and fixability."""

from __future__ import annotations

import pytest
from docs_examples import classification, example

from processors.docs.issues import number
from processors.docs.v1 import check_v1
from processors.docs.v2 import check_v2_rules, share_sum_ok
from processors.docs.v3 import TrapRules, check_v3_rules
from schemas.docs import DocumentType, FixKind, PresenceLevel, Severity


def _seg(c, index, **update):
    segments = list(c.segments)
    segments[index] = segments[index].model_copy(update=update)
    return c.model_copy(update={"segments": segments})


@pytest.fixture
def clean():
    return classification("classification_doc2_6_clean")


@pytest.fixture
def doc():
    return example("clean").bundle


def test_the_clean_example_passes_every_rule(clean, doc, trap_rules):
    assert check_v1(clean, doc) == check_v2_rules(clean) == check_v3_rules(clean, doc, trap_rules) == []


def test_v1_page_range_outside_the_bundle_is_a_non_fixable_blocker(clean, doc):
    [issue] = check_v1(_seg(clean, 1, end_page=9, segment_page_count=4), doc)
    assert (issue.severity, issue.auto_fixable, issue.ig_code) == (Severity.BLOCKER, False, "IG-2")


def test_v1_start_after_end_is_a_blocker_and_its_page_count_is_not_judged(clean, doc):
    issues = check_v1(_seg(clean, 1, start_page=8, end_page=6), doc)
    assert [i.ig_code for i in issues] == ["IG-2"]


def test_v1_evidence_citing_a_page_outside_the_bundle_is_a_blocker(clean, doc):
    segment = clean.segments[0]
    genomic = segment.classifications[0]
    moved = genomic.model_copy(
        update={"top_evidence": [genomic.top_evidence[0].model_copy(update={"page": 12})]}
    )
    changed = _seg(clean, 0, classifications=[moved, *segment.classifications[1:]])
    assert [(i.ig_code, i.severity) for i in check_v1(changed, doc)] == [("IG-2", Severity.BLOCKER)]


def test_v1_wrong_segment_page_count_is_a_fixable_major(clean, doc):
    [issue] = check_v1(_seg(clean, 0, segment_page_count=4), doc)
    assert (issue.severity, issue.fix, issue.ig_code) == (Severity.MAJOR, FixKind.SET_PAGE_COUNT, "IG-3")
    assert issue.message == "Segment 1 segment_page_count is 4 but pages 1-5 span 5"


@pytest.mark.parametrize("value", [1.2, -0.1, float("nan")])
def test_v1_confidence_outside_unit_interval_is_a_non_fixable_blocker(clean, doc, value):
    segment = clean.segments[0]
    bad = segment.classifications[0].model_copy(update={"confidence": value})
    [issue] = check_v1(_seg(clean, 0, classifications=[bad, *segment.classifications[1:]]), doc)
    assert (issue.severity, issue.auto_fixable, issue.ig_code) == (Severity.BLOCKER, False, "IG-4")


def test_v1_self_evaluation_and_mixture_confidences_are_checked_too(clean, doc):
    changed = clean.model_copy(
        update={
            "self_evaluation": clean.self_evaluation.model_copy(update={"confidence": 1.5}),
            "document_mixture": [
                clean.document_mixture[0].model_copy(update={"confidence": 2.0}),
                *clean.document_mixture[1:],
            ],
        }
    )
    assert [i.location for i in check_v1(changed, doc)] == [
        "document_mixture → Genomic Report",
        "self_evaluation",
    ]


def test_v1_missing_types_are_a_fixable_blocker_and_duplicates_a_non_fixable_one(clean, doc):
    segment = clean.segments[1]
    changed = _seg(clean, 1, classifications=[*segment.classifications[:3], segment.classifications[0]])
    changed = changed.model_copy(update={"document_mixture": changed.document_mixture[:4]})
    issues = [(i.message, i.fix) for i in check_v1(changed, doc)]
    assert issues == [
        ("Segment 2 is missing document types: Radiology Report, Other", FixKind.ADD_MISSING_TYPES),
        ("Segment 2 lists document types more than once: Clinical Note", None),
        ("document_mixture is missing document types: Other", FixKind.ADD_MISSING_TYPES),
    ]


def test_v1_missing_evidence_for_a_present_type_is_a_minor(clean, doc):
    segment = clean.segments[0]
    bare = segment.classifications[0].model_copy(update={"top_evidence": []})
    [issue] = check_v1(_seg(clean, 0, classifications=[bare, *segment.classifications[1:]]), doc)
    assert (issue.severity, issue.message) == (
        Severity.MINOR,
        "Genomic Report is PRIMARY but has no evidence snippets",
    )


def test_v1_issue_ids_follow_check_order(clean, doc):
    changed = _seg(clean.model_copy(update={"number_of_segments": 3}), 0, segment_page_count=2)
    ids = [(i.id, i.ig_code) for i in number(check_v1(changed, doc))]
    assert ids == [("V1-0001", "IG-1"), ("V1-0002", "IG-3")]


@pytest.mark.parametrize(
    ("total", "ok"), [(1.0, True), (1.01, True), (0.99, True), (1.011, False), (0.989, False)]
)
def test_share_tolerance_is_plus_minus_one_hundredth(total, ok):
    assert share_sum_ok([total - 0.4, 0.1, 0.1, 0.1, 0.1]) is ok


def test_v2_page_overlap_is_a_blocker(clean):
    issues = check_v2_rules(_seg(clean, 1, start_page=5, segment_page_count=4))
    assert [(i.severity, i.message) for i in issues] == [
        (Severity.BLOCKER, "Segments 1 and 2 overlap on pages 5")
    ]


def test_v3_rules_are_data_a_new_vendor_is_one_yaml_entry(clean, doc, trap_rules):
    vendor = trap_rules.vendor_rules[0].model_copy(update={"vendors": ["Oncology Associates"]})
    rules = TrapRules(vendor_rules=[vendor], keyword_rules=[], header_footer_rules=[])
    [issue] = check_v3_rules(clean, doc, rules)
    assert (
        issue.message == "Routine lab vendor detected (Oncology Associates) but Genomic Report marked PRIMARY"
    )


def test_v3_vendor_trap_needs_the_type_at_primary(trap_rules):
    request = example("quest")
    c = request.classification
    mention = [
        e.model_copy(update={"presence_level": PresenceLevel.MENTION_ONLY})
        if e.document_type is DocumentType.GENOMIC_REPORT
        else e
        for e in c.document_mixture
    ]
    seg = c.segments[0]
    classes = [
        x.model_copy(update={"presence_level": PresenceLevel.MENTION_ONLY})
        if x.document_type is DocumentType.GENOMIC_REPORT
        else x
        for x in seg.classifications
    ]
    changed = c.model_copy(
        update={
            "document_mixture": mention,
            "segments": [seg.model_copy(update={"classifications": classes})],
        }
    )
    assert check_v3_rules(changed, request.bundle, trap_rules) == []


def test_v3_keyword_match_respects_word_boundaries(trap_rules):
    request = example("requisition")
    page = request.bundle.pages[0]
    text = "Specimens were requisitioned for tests requested by the clinic."
    bundle = request.bundle.model_copy(update={"pages": [page.model_copy(update={"text": text})]})
    assert check_v3_rules(request.classification, bundle, trap_rules) == []


@pytest.mark.parametrize(
    ("snippet", "pattern"),
    [
        ("Page 2 of 8", "page_x_of_y"),
        ("Fax: (555) 123-4567", "fax_number"),
        ("MRN 00482913", "mrn"),
        ("Date of birth 01/15/1970", "date_of_birth"),
    ],
)
def test_v3_header_footer_evidence_is_a_minor(trap_rules, snippet, pattern):
    request = example("clean")
    c = request.classification
    genomic = c.segments[0].classifications[0]
    evidence = genomic.top_evidence[0].model_copy(update={"snippet": snippet})
    changed = _seg(
        c,
        0,
        classifications=[
            genomic.model_copy(update={"top_evidence": [evidence]}),
            *c.segments[0].classifications[1:],
        ],
    )
    [issue] = check_v3_rules(changed, request.bundle, trap_rules)
    assert issue.severity is Severity.MINOR and pattern in issue.message
