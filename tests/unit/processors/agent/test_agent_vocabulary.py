"""The agent's drug dictionary (spec §4.1: about 5,000 generic and brand names, exact whole-word match).

The packaged FDA vocabulary is checked for size, content and provenance, and for being exactly what
its generator writes; the generator's rules run on a small UNII Names sample made here (the real list
comes from a 26 MB wheel, fetched only to regenerate the file).
"""

from __future__ import annotations

from importlib import resources

import pytest

from processors.agent.drugs import (
    default_drug_data,
    drug_dictionary,
    drug_safety,
    drug_vocabulary,
    parse_drug_vocabulary,
)
from processors.agent.entities import drug_mentions
from processors.agent.graph import start
from processors.agent.state import AgentRequest, default_config
from processors.clinical.knowledge import default_knowledge
from streams.agent.vocabulary import WHEEL_SHA256, build_vocabulary, parse_unii_names, render


def _packaged_text() -> str:
    return resources.files("processors.agent").joinpath("data", "drug_vocabulary.txt").read_text("utf-8")


def test_the_dictionary_has_the_specs_size_in_generic_and_brand_names():
    kinds = list(drug_vocabulary().values())
    assert len(kinds) >= 5000
    assert kinds.count("generic") >= 2000 and kinds.count("brand") >= 2000
    assert len(drug_dictionary()) >= len(kinds)


def test_every_name_of_the_safety_data_stays_in_the_dictionary():
    assert default_drug_data().names() <= drug_dictionary()


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Is Eliquis safe with amlodipine and levothyroxine?", ("eliquis", "amlodipine", "levothyroxine")),
        ("Switch LIPITOR to rosuvastatin; keep Synthroid", ("lipitor", "rosuvastatin", "synthroid")),
        ("started insulin glargine (Lantus) and semaglutide", ("insulin glargine", "lantus", "semaglutide")),
        ("heparin drip, then Xarelto", ("heparin", "xarelto")),
    ],
)
def test_names_beyond_the_safety_data_are_recognised(text: str, found: tuple[str, ...]):
    assert drug_mentions(text, drug_dictionary()) == found
    assert drug_mentions(text, default_drug_data().names()) != found


def test_brand_names_that_are_english_words_are_not_drug_mentions():
    for word in ("choice", "today", "justice", "success"):
        assert word not in drug_vocabulary()
    assert drug_mentions("The best choice today is to wait.", drug_dictionary()) == ()


def test_safety_facts_stay_on_the_drug_data():
    """A vocabulary drug is recognised but check_drug_safety does not know it: no facts are made up."""
    assert "rosuvastatin" in drug_dictionary()
    assert drug_safety("rosuvastatin", default_drug_data(), default_knowledge()) is None
    assert drug_safety("warfarin", default_drug_data(), default_knowledge()) is not None


def test_input_assembly_hands_the_mentions_to_the_graph():
    request = AgentRequest(conversation_id="c-1", query="Check Eliquis with Coumadin for PT-TEST-009")
    state, _ = start(request, default_config(drug_dictionary()))
    assert state.extracted_entities.drug_mentions == ("eliquis", "coumadin")


def test_the_file_states_its_source_and_licence_and_is_what_the_generator_writes():
    text = _packaged_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    for fact in (
        "UNII Names",
        WHEEL_SHA256,
        "17 U.S.C. 105",
        "[ORANGE BOOK]",
        "python -m streams.agent.vocabulary",
    ):
        assert fact in header
    assert render(drug_vocabulary()) == text
    assert list(drug_vocabulary()) == sorted(drug_vocabulary())


_SAMPLE = "\r\n".join(
    [
        "Name\tTYPE\tUNII\tDisplay Name",
        "WARFARIN\tof\tU1\tWARFARIN",
        "WARFARIN SODIUM [ORANGE BOOK]\tcn\tU2\tWARFARIN SODIUM",
        "COUMADIN\tbn\tU2\tWARFARIN SODIUM",
        "CHOICE\tbn\tU2\tWARFARIN SODIUM",
        "WARFCOMBO COMPONENT WARFARIN SODIUM\tbn\tU2\tWARFARIN SODIUM",
        "SODIUM CHLORIDE [ORANGE BOOK]\tcn\tU3\tSODIUM CHLORIDE",
        "SODIUM\tcn\tU4\tSODIUM",
        "DEXAMETHASONE ACETATE [ORANGE BOOK]\tcn\tU5\tDEXAMETHASONE ACETATE, UNSPECIFIED FORM",
        "DEXAMETHASONE ACETATE\tcn\tU6\tDEXAMETHASONE ACETATE",
        "DEXAMETHASONE\tof\tU7\tDEXAMETHASONE",
        "GLUCOVIX\tbn\tU8\tGLUCOVIXIN",
        "ABC\tbn\tU2\tWARFARIN SODIUM",
    ]
)


def test_the_generator_keeps_approved_substances_parents_and_brands_that_are_not_words():
    vocabulary = build_vocabulary(parse_unii_names(_SAMPLE), frozenset({"choice"}))
    assert vocabulary == {
        "abc": "brand",
        "coumadin": "brand",
        "dexamethasone": "generic",
        "dexamethasone acetate": "generic",
        "sodium chloride": "generic",
        "warfarin": "generic",
        "warfarin sodium": "generic",
    }
    assert parse_drug_vocabulary(render(vocabulary)) == vocabulary


@pytest.mark.parametrize(
    "line", ["warfarin", "warfarin\tsalt", "Warfarin\tgeneric", "warfarin  sodium\tgeneric"]
)
def test_a_malformed_vocabulary_line_is_refused_with_its_position(line: str):
    with pytest.raises(ValueError, match=r"x\.txt:2"):
        parse_drug_vocabulary(f"# header\n{line}\n", "x.txt")


def test_a_name_listed_twice_is_refused():
    with pytest.raises(ValueError, match="listed twice"):
        parse_drug_vocabulary("warfarin\tgeneric\nwarfarin\tbrand\n")
