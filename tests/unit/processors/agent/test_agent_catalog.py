"""Schemas (§6), generation settings (§7), prompts (§8), the tool catalog (§4.4, §16) and TOOL_EXECUTE's
validation and formatting.

Where the spec is beside the clone (``../shared/seeds``), the §8 prompts and §16 descriptions are compared
with its text; elsewhere those two tests skip.
"""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel, ValidationError

from processors.agent import LlmCall
from processors.agent import prompts as p
from processors.agent.schemas import (
    RESPONSE_MODELS,
    TOOL_ARG_SCHEMAS,
    TOOL_NAMES,
    IntentClassification,
    ToolSelection,
    tool_named,
)
from processors.agent.tools import (
    ERROR_TEMPLATES,
    TOOLS,
    format_error,
    format_result,
    redact_tool_names,
    validate_args,
)
from streams.llm.lint import lint_response_model
from tests.seeds import AGENT_SPEC, needs_agent_spec

# ── §6 schemas (their field order against §6: tests/unit/llm/test_agent_llm.py) ──


@pytest.mark.parametrize("name", sorted(RESPONSE_MODELS))
def test_every_response_model_passes_the_project_schema_linter(name: str):
    assert lint_response_model(RESPONSE_MODELS[name]) == []


def test_decisions_are_enums_and_the_tool_enum_is_the_catalog():
    schema = ToolSelection.model_json_schema()["properties"]["tool_name"]
    assert tuple(schema["enum"]) == TOOL_NAMES == tuple(TOOLS) == tuple(TOOL_ARG_SCHEMAS)
    intent = IntentClassification.model_json_schema()["properties"]
    assert intent["intent"]["enum"] == ["DIRECT", "TOOL_NEEDED"]


def test_the_suggested_tool_is_a_bounded_free_string_that_counts_only_when_it_names_a_tool():
    hint = IntentClassification.model_json_schema()["properties"]["suggested_tool"]
    assert hint["anyOf"] == [{"type": "string", "maxLength": 40}, {"type": "null"}]
    assert max(map(len, TOOL_NAMES)) <= 40
    hints = ("get_patient_chart", " search_patient ", "none", "Drug safety", None)
    assert [tool_named(h) for h in hints] == ["get_patient_chart", "search_patient", None, None, None]


def test_drug_interactions_need_two_drugs_and_required_strings_cannot_be_empty():
    with pytest.raises(ValidationError):
        TOOL_ARG_SCHEMAS["check_drug_interactions"].model_validate({"drug_names": ["warfarin"]})
    with pytest.raises(ValidationError):
        TOOL_ARG_SCHEMAS["check_drug_safety"].model_validate({"drug_name": ""})


def test_a_pending_call_stores_the_schema_name_and_resolves_the_model():
    call = LlmCall(
        node="RESULT_CLASSIFY", schema_name="ResultAssessment", messages=(), temperature=0.0, max_tokens=128
    )
    assert call.response_model is RESPONSE_MODELS["ResultAssessment"]
    dumped = call.model_dump_json()
    assert "response_model" not in dumped
    assert LlmCall.model_validate_json(dumped) == call
    with pytest.raises(ValidationError, match="unknown response schema"):
        LlmCall(node="TOOL_SELECT", schema_name="TaskPlan", messages=(), temperature=0.0, max_tokens=64)
    with pytest.raises(ValidationError, match="does not match"):
        LlmCall(
            node="TOOL_SELECT",
            schema_name="ToolSelection",
            response_model=IntentClassification,
            messages=(),
            temperature=0.0,
            max_tokens=64,
        )


# ── §7 generation settings ──


def test_generation_settings_are_section_7s():
    settings = (
        p.IMAGE_ANALYSIS, p.INTENT, p.TOOL_SELECT_STAGE1, p.TOOL_SELECT_STAGE2, p.RESULT_CLASSIFY, p.RETRY,
        p.SYNTHESIZE,
    )  # fmt: skip
    assert [(g.temperature, g.max_tokens) for g in settings] == [
        (0.3, 512), (0.0, 256), (0.0, 64), (0.0, 128), (0.0, 128), (0.0, 64), (0.5, 256),
    ]  # fmt: skip


# ── §8 prompts and §16 descriptions against the spec's text ──


def _section(title: str) -> str:
    text = AGENT_SPEC.read_text(encoding="utf-8")
    start = text.index(title)
    return text[start : text.index("\n## ", start + 1)]


@needs_agent_spec
def test_system_prompts_are_section_8_verbatim():
    blocks = re.findall(r"```\n(.*?)\n```", _section("## 8. Prompt Templates per Node"), re.DOTALL)
    intent, stage1, stage2, _hints, classify, synthesize, _assembly = blocks
    assert (
        intent,
        stage1,
        stage2,
    ) == (p.INTENT_SYSTEM, p.TOOL_SELECT_STAGE1_SYSTEM, p.TOOL_SELECT_STAGE2_SYSTEM)
    assert (classify, synthesize) == (p.RESULT_CLASSIFY_SYSTEM, p.SYNTHESIZE_SYSTEM)


@needs_agent_spec
def test_full_desc_is_section_16_verbatim():
    block = re.findall(r"```\n(.*?)\n```", _section("## 16. Appendix"), re.DOTALL)[0]
    entries = block.removeprefix("Available tools:\n\n").split("\n\n")
    assert [" ".join(line.strip() for line in e.removeprefix("- ").splitlines()) for e in entries] == [
        spec.full_desc for spec in TOOLS.values()
    ]


# ── §4.4 catalog, validation and formatting ──


def test_catalog_labels_writes_and_deadlines():
    assert {name: spec.label for name, spec in TOOLS.items()} == {
        "search_patient": "Patient Search",
        "get_patient_chart": "Patient Record",
        "check_drug_safety": "Drug Safety Report",
        "check_drug_interactions": "Drug Interaction Check",
        "search_medical_literature": "Medical Literature",
        "find_clinical_trials": "Clinical Trials",
        "prescribe_medication": "Prescription",
        "add_allergy": "Allergy Documentation",
        "save_clinical_note": "Clinical Note",
        "analyze_medical_image": "Image Analysis",
    }
    assert {n for n, s in TOOLS.items() if s.writes} == {
        "prescribe_medication",
        "add_allergy",
        "save_clinical_note",
    }
    assert {s.deadline_s for s in TOOLS.values()} == {10.0}
    assert all(
        issubclass(s.args_model, BaseModel) and s.full_desc.startswith(f"{n}(") for n, s in TOOLS.items()
    )


def test_error_templates_of_section_4_4_are_verbatim():
    section_4_4 = {
        "timeout": "The {tool_label} was temporarily unavailable. Please try again shortly.",
        "not_found": "No results were found for {entity} in the {tool_label}.",
        "invalid_args": "The request to {tool_label} could not be completed — additional information is "
        "needed.",
        "rate_limit": "The {tool_label} is temporarily busy. The system will retry automatically.",
        "server_error": "The {tool_label} experienced a temporary error. The system will retry "
        "automatically.",
    }
    assert {k: ERROR_TEMPLATES[k] for k in section_4_4} == section_4_4
    assert format_error("check_drug_interactions", "not_found", {"drug_names": ["a", "b"]}) == (
        "No results were found for a and b in the Drug Interaction Check."
    )
    assert format_error("check_drug_safety", None, {"drug_name": "x"}) == (
        "The request to Drug Safety Report could not be completed."
    )


def test_validation_strips_drops_unknown_keys_and_omits_unset_options():
    check = validate_args(
        "find_clinical_trials", {"condition": " glioma ", "status": None, "page": 2}, frozenset()
    )
    assert check.args == {"condition": "glioma"} and check.invalid_fields == ()
    assert validate_args(
        "check_drug_interactions", {"drug_names": ["warfarin"]}, frozenset()
    ).invalid_fields == ("drug_names",)
    missing = validate_args("add_allergy", {"patient_id": "abc-123", "severity": "fatal"}, frozenset())
    assert missing.invalid_fields == ("substance", "reaction", "severity")


@pytest.mark.parametrize(
    ("patient_id", "valid"),
    [
        ("abc-123", True), ("f47ac10b-58cc-4372-a567-0e02b2c3d479", True), ("f47ac10b", True),
        ("PT-TEST-009", True), ("p-000123", True), ("John Smith", False), ("12345", False), ("known-1", True),
    ],
)  # fmt: skip
def test_a_patient_id_argument_needs_an_id_format_or_a_known_id(patient_id: str, valid: bool):
    check = validate_args("get_patient_chart", {"patient_id": patient_id}, frozenset({"known-1"}))
    assert (check.args is not None) == valid


def test_results_render_nested_values_under_the_clinical_label():
    result = {"matches": [{"patient_id": "abc-123", "flags": {"deceased": False}}], "total": 1, "note": None}
    assert format_result("search_patient", result) == (
        "[Patient Search]\nMatches:\n  - Patient id: abc-123\n    Flags:\n      Deceased: no\n"
        "Total: 1\nNote: none"
    )
    assert format_result("get_patient_chart", {}) == "[Patient Record]\nNo data returned."
    assert format_result("get_patient_chart", None) == "[Patient Record]\nNo data returned."


def test_tool_names_are_redacted_to_labels():
    assert redact_tool_names("[check_drug_safety] via get_patient_chart; search_patients stays") == (
        "[Drug Safety Report] via Patient Record; search_patients stays"
    )
