"""V4's deterministic evidence verification and the match ladder it uses (citation-fidelity gate)."""

from __future__ import annotations

import pytest
from docs_examples import example
from hypothesis import given
from hypothesis import strategies as st

from processors.docs.issues import make_issue, quality_score
from processors.docs.text import MatchLevel, locate, match_text, normalise, shorten, window_overlap, words
from processors.docs.v4 import verify_evidence
from schemas.docs import Agent, Severity

PAGE = "VARIANT FINDINGS\nBRCA2 c.5946delT (p.Ser1982fs) heterozygous pathogenic variant detected."


def test_exact_substring_is_an_exact_match():
    assert match_text("heterozygous pathogenic variant", PAGE).level is MatchLevel.EXACT


def test_case_punctuation_and_dashes_are_normalised_away():
    assert match_text("brca2 c 5946delt — (p.ser1982fs) HETEROZYGOUS", PAGE).level is MatchLevel.NORMALISED


def test_seventy_percent_word_overlap_is_a_paraphrase_and_less_is_not_found():
    # 7 of 10 words on the page: exactly the gate's threshold.
    seventy = "BRCA2 c 5946delT p Ser1982fs heterozygous pathogenic alteration was seen"
    assert match_text(seventy, PAGE).level is MatchLevel.OVERLAP
    sixty = "BRCA2 c 5946delT p Ser1982fs heterozygous benign alteration was seen"
    assert match_text(sixty, PAGE).level is MatchLevel.NONE


def test_overlap_is_measured_in_a_window_not_over_the_whole_page():
    scattered = "alpha " + " ".join(f"w{i}" for i in range(50)) + " beta gamma"
    assert window_overlap(words("alpha beta gamma"), words(scattered)) < 0.7


@given(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=30), st.data())
def test_any_run_of_page_words_is_found_fully(page_words, data):
    start = data.draw(st.integers(0, len(page_words) - 1))
    end = data.draw(st.integers(start + 1, len(page_words)))
    assert window_overlap(page_words[start:end], page_words) == 1.0


def test_locate_prefers_the_claimed_page_then_reports_where_else_the_text_is():
    pages = [(1, "alpha beta"), (2, "gamma delta epsilon"), (3, "gamma delta epsilon")]
    assert locate("gamma delta", pages, 3).page == 3
    assert locate("gamma delta", pages, 1).page == 2
    assert locate("zeta", pages, 1).page is None


def test_normalise_is_idempotent_on_examples():
    for text in ["“Quoted” — text…", "BRCA1/2 Analysis", "  spaced   out  "]:
        assert normalise(normalise(text)) == normalise(text)


def test_shorten_quotes_like_the_seed():
    assert shorten("BRCA1 pathogenic variant c.5266dupC detected") == "BRCA1 pathogenic variant..."
    assert shorten("See attached results") == "See attached results"


def _with_evidence(snippet: str, page: int, anchors: list[str] | None = None):
    request = example("clean")
    c = request.classification
    genomic = c.segments[0].classifications[0]
    evidence = genomic.top_evidence[0].model_copy(
        update={"snippet": snippet, "page": page, "anchors_found": anchors or []}
    )
    seg = c.segments[0].model_copy(
        update={
            "classifications": [
                genomic.model_copy(update={"top_evidence": [evidence]}),
                *c.segments[0].classifications[1:],
            ]
        }
    )
    return c.model_copy(update={"segments": [seg, *c.segments[1:]]}), request.bundle


def test_v4_verifies_the_clean_example_without_issues():
    request = example("clean")
    assert verify_evidence(request.classification, request.bundle) == []


def test_v4_paraphrase_on_the_claimed_page_is_a_minor():
    c, b = _with_evidence("BRCA2 c.5946delT (p.Ser1982fs) heterozygous pathogenic change detected", 2)
    [issue] = verify_evidence(c, b)
    assert issue.severity is Severity.MINOR and "paraphrase" in issue.message


def test_v4_misattribution_inside_the_segment_is_a_minor_and_outside_a_major():
    c, b = _with_evidence("Family history: mother with breast cancer age 52.", 2)
    [inside] = verify_evidence(c, b)
    assert (inside.severity, inside.page) == (Severity.MINOR, 3)
    c, b = _with_evidence("Discussed cascade testing for his two daughters and his sister.", 2)
    [outside] = verify_evidence(c, b)
    assert (outside.severity, outside.page) == (Severity.MAJOR, 7)
    assert "outside segment pages 1-5" in outside.message


def test_v4_a_fabricated_anchor_is_a_blocker():
    c, b = _with_evidence("Variant Classification", 2, ["Pathogenic Variant Table"])
    [issue] = verify_evidence(c, b)
    assert issue.severity is Severity.BLOCKER
    assert issue.message.startswith("Anchor 'Pathogenic Variant Table' not found")


def test_quality_score_weights_and_floor():
    def of(*severities: Severity) -> float:
        return quality_score([make_issue(Agent.V4, s, "m", "l") for s in severities])

    assert of() == 1.0
    assert of(Severity.BLOCKER, Severity.MAJOR, Severity.MINOR) == 0.5
    assert of(*[Severity.BLOCKER] * 4) == 0.0


@given(st.lists(st.sampled_from(Severity), max_size=12))
def test_quality_score_stays_in_the_unit_interval(severities):
    score = quality_score([make_issue(Agent.V4, s, "m", "l") for s in severities])
    assert 0.0 <= score <= 1.0


@pytest.mark.parametrize("key", ["fabricated"])
def test_v4_reports_the_fabricated_example_as_a_blocker(key):
    request = example(key)
    blockers = [
        i for i in verify_evidence(request.classification, request.bundle) if i.severity is Severity.BLOCKER
    ]
    assert len(blockers) == 1
