"""Specification tests for the QA error classifier (processors/dbpm/qa_classifier.py)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from processors.dbpm.qa_classifier import (
    NEGATION_CUES,
    NEGATION_WINDOW,
    SUPPORT_THRESHOLD,
    Quantity,
    assess_answer,
    classify_qa_error,
)
from schemas.dbpm import QaErrorClass

NARRATIVE = (
    "A 64-year-old man presented with exertional chest pain for 3 days. "
    "He denied fever and cough. Troponin was 0.40 ng/ml. "
    "He was started on aspirin 75 mg daily and atorvastatin 40mg. "
    "Echocardiography showed an ejection fraction of 45%. "
    "He was discharged home on day 5."
)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("exertional chest pain", None),
        ("aspirin 75 mg daily", None),
        ("Atorvastatin 40 milligrams", None),
        ("troponin 0.4 ng/mL", None),
        ("ejection fraction 45 %", None),
        ("64-year-old man", None),
        ("discharged home", None),
        ("fever", QaErrorClass.CONTRADICTED),
        ("no chest pain", QaErrorClass.CONTRADICTED),
        ("he didn't receive aspirin", QaErrorClass.CONTRADICTED),
        ("metformin and insulin", QaErrorClass.UNSUPPORTED),
        ("not documented in the narrative", QaErrorClass.UNSUPPORTED),
        ("aspirin 300 mg daily", QaErrorClass.OVER_SPECIFIED),
        ("aspirin 75 g daily", QaErrorClass.OVER_SPECIFIED),
        ("chest pain for 3 weeks", QaErrorClass.OVER_SPECIFIED),
        ("", None),
    ],
)
def test_worked_examples_against_one_narrative(answer: str, expected: QaErrorClass | None) -> None:
    assert classify_qa_error(answer, NARRATIVE) == expected


def test_error_class_values_are_the_replay_contract_spellings() -> None:
    assert {c.value for c in QaErrorClass} == {"unsupported", "contradicted", "over_specified"}


def test_equal_decimals_match_whatever_their_spelling() -> None:
    assert classify_qa_error("temperature 38 °C", "temperature 38.0 °C") is None
    assert classify_qa_error("dose 0.50 mg", "dose .5 mg") is None
    assert classify_qa_error("1392 cells", "1,392 cells") is None


def test_a_unitless_number_matches_a_number_with_a_unit_and_back() -> None:
    assert classify_qa_error("aspirin 75", "aspirin 75 mg") is None
    assert classify_qa_error("aspirin 75 mg", "aspirin 75") is None


def test_a_comma_between_list_items_is_not_a_thousands_separator() -> None:
    assessment = assess_answer("days 1,2", "days 1, 2")
    assert assessment.unmatched_numbers == ()


def test_digits_inside_a_word_are_not_numbers() -> None:
    assert assess_answer("hba1c raised", "hba1c raised").unmatched_numbers == ()
    assert classify_qa_error("hba1c", "hba raised") == QaErrorClass.UNSUPPORTED


def test_contradiction_outranks_unsupported_and_over_specified() -> None:
    # one flipped term, two missing terms (coverage 1/3) and an unmatched number all at once
    assessment = assess_answer("fever with rash and myalgia 41", NARRATIVE)
    assert assessment.flipped_terms == ("fever",)
    assert assessment.coverage < SUPPORT_THRESHOLD
    assert assessment.unmatched_numbers == (Quantity(Decimal(41), None),)
    assert assessment.error_class == QaErrorClass.CONTRADICTED


def test_unsupported_outranks_over_specified() -> None:
    assert classify_qa_error("metformin 1000 mg", NARRATIVE) == QaErrorClass.UNSUPPORTED


def test_coverage_at_exactly_the_threshold_is_supported() -> None:
    assessment = assess_answer("aspirin warfarin", "aspirin")
    assert assessment.coverage == SUPPORT_THRESHOLD
    assert assessment.error_class is None


def test_a_term_the_context_states_both_ways_is_never_flipped() -> None:
    context = "No fever on admission. Fever developed on day 2."
    assert classify_qa_error("fever", context) is None
    assert classify_qa_error("no fever", context) is None


def test_a_scope_terminator_ends_the_negation() -> None:
    assert classify_qa_error("cough", "no fever but cough") is None
    assert classify_qa_error("cough", "no fever, cough") == QaErrorClass.CONTRADICTED


def test_a_clause_boundary_ends_the_negation() -> None:
    assert classify_qa_error("cough", "no fever. cough") is None


def test_the_negation_window_covers_exactly_its_width() -> None:
    fillers = " ".join(f"w{i}x" for i in range(NEGATION_WINDOW - 1))
    inside = f"no {fillers} rash"
    outside = f"no {fillers} w9x rash"
    assert classify_qa_error("rash", inside) == QaErrorClass.CONTRADICTED
    assert classify_qa_error("rash", outside) is None


def test_plural_and_singular_share_a_key_but_short_words_are_kept_whole() -> None:
    assert classify_qa_error("fevers", "fever") is None
    assert classify_qa_error("pelvis abscess virus", "pelvis abscess virus") is None


def test_the_classifier_ignores_case_and_spacing() -> None:
    assert classify_qa_error("  ASPIRIN   75 MG  ", NARRATIVE) is None


# --- properties -----------------------------------------------------------------------------

_WORDS = st.sampled_from(
    [
        "fever",
        "cough",
        "rash",
        "aspirin",
        "heparin",
        "sepsis",
        "anemia",
        "troponin",
        "biopsy",
        "pneumonia",
        "headache",
        "insulin",
        "the",
        "and",
        "of",
        "was",
        "with",
    ]
)
_UNITS = st.sampled_from(["", " mg", "mg", " ng/ml", " days", " %", " weeks"])
_NUMBERS = st.builds(
    lambda whole, frac, unit: f"{whole}{frac}{unit}",
    st.integers(0, 999),
    st.sampled_from(["", ".5", ".25", ".0"]),
    _UNITS,
)
_PUNCT = st.sampled_from([".", ";", ","])
_CUE = st.sampled_from(sorted(NEGATION_CUES))


def _atoms(with_cues: bool) -> st.SearchStrategy[list[str]]:
    parts = [_WORDS, _NUMBERS, _PUNCT]
    if with_cues:
        parts.append(_CUE)
    return st.lists(st.one_of(*parts), min_size=1, max_size=30)


@given(atoms=_atoms(with_cues=True), data=st.data())
def test_a_token_aligned_span_of_the_context_is_never_unsupported(
    atoms: list[str], data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(atoms) - 1))
    end = data.draw(st.integers(start + 1, len(atoms)))
    context = " ".join(atoms)
    answer = " ".join(atoms[start:end])
    assessment = assess_answer(answer, context)
    assert assessment.coverage == 1.0
    assert assessment.unmatched_numbers == ()
    assert assessment.error_class in (None, QaErrorClass.CONTRADICTED)


@given(atoms=_atoms(with_cues=False), data=st.data())
def test_a_span_of_a_context_without_negation_is_supported(atoms: list[str], data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(atoms) - 1))
    end = data.draw(st.integers(start + 1, len(atoms)))
    assert classify_qa_error(" ".join(atoms[start:end]), " ".join(atoms)) is None


@given(atoms=_atoms(with_cues=True), data=st.data(), absent=st.integers(1000, 10**6), unit=_UNITS)
def test_adding_an_absent_number_to_a_supported_answer_makes_it_over_specified(
    atoms: list[str], data: st.DataObject, absent: int, unit: str
) -> None:
    # every number the context strategy can produce is below 1000, so `absent` is not in the context
    context = " ".join(atoms)
    start = data.draw(st.integers(0, len(atoms) - 1))
    end = data.draw(st.integers(start + 1, len(atoms)))
    answer = " ".join(atoms[start:end])
    assume(classify_qa_error(answer, context) is None)
    assert classify_qa_error(f"{answer} {absent}{unit}", context) == QaErrorClass.OVER_SPECIFIED


@given(answer=st.text(max_size=80), context=st.text(max_size=200))
def test_the_classifier_is_total_and_deterministic_on_any_text(answer: str, context: str) -> None:
    first = assess_answer(answer, context)
    assert first == assess_answer(answer, context)
    assert 0.0 <= first.coverage <= 1.0
    assert (first.error_class is None) == (
        not first.flipped_terms and first.coverage >= SUPPORT_THRESHOLD and not first.unmatched_numbers
    )


@given(atoms=_atoms(with_cues=True))
def test_an_answer_identical_to_its_context_is_supported(atoms: list[str]) -> None:
    text = " ".join(atoms)
    assert classify_qa_error(text, text) is None


@given(atoms=_atoms(with_cues=True), data=st.data(), spaces=st.sampled_from([" ", "  ", "\t", " \n "]))
def test_the_class_does_not_depend_on_letter_case_or_spacing(
    atoms: list[str], data: st.DataObject, spaces: str
) -> None:
    context = " ".join(atoms)
    answer = " ".join(data.draw(st.lists(st.sampled_from(atoms), min_size=1, max_size=6)))
    expected = classify_qa_error(answer, context)
    assert classify_qa_error(spaces.join(answer.upper().split(" ")), context.title()) == expected
