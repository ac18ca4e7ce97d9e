"""The ten tools (spec §16) as data, and node ④ TOOL_EXECUTE's pure parts (§4.4, §10).

The catalog holds, per tool, its clinician-facing label (§4.4 step 3), its ``full_desc`` (§16, the
wrapped lines joined with single spaces; words and punctuation verbatim), its stage-2 argument model
(§6), its deadline (§4.4: default 10 s) and whether it writes to the record (``prescribe_medication``,
``add_allergy``, ``save_clinical_note``).

TOOL_EXECUTE never runs a tool here (the runtime does); it

* validates arguments before a call is emitted (:func:`validate_args`): the argument model, required
  strings non-blank after stripping, and a ``patient_id`` that has a patient-identifier format, is the
  request's patient in context, or came back from an earlier patient search;
* formats a result with its clinical label (:func:`format_result`), so no tool name reaches a model;
* pre-formats an error with the §4.4/§10 templates (:func:`format_error`), so no raw error text reaches
  a model (§10: raw errors 4.8/10, pre-formatted 10/10).

Error categories (:data:`ErrorType`) are the ones §4.4, §4.5a, §9 and §10 name. Templates for
``timeout``, ``not_found``, ``invalid_args``, ``rate_limit`` and ``server_error`` are §4.4's verbatim;
``drug_not_in_database`` and ``service_unavailable`` use the §9 messages; the others (and ``generic``,
which §10 uses but never defines) are this package's wording in the same style.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ValidationError

from processors.agent.entities import is_patient_id
from processors.agent.schemas import TOOL_ARG_SCHEMAS, ToolName

ErrorType = Literal[
    "timeout",
    "rate_limit",
    "server_error",
    "service_unavailable",
    "invalid_response",
    "not_found",
    "invalid_args",
    "missing_required_args",
    "missing_patient_id",
    "multiple_patient_matches",
    "ambiguous_drug_name",
    "drug_not_in_database",
]
"""What the runtime reports for a failed tool call (``ToolOutcome.error_type``), and ``invalid_args``
for arguments TOOL_EXECUTE rejects before a call."""

TRANSIENT_ERRORS: Final[frozenset[str]] = frozenset(
    {"timeout", "rate_limit", "server_error", "service_unavailable"}
)
"""Errors a repeat of the same call may clear (§4.5a: "transient error (timeout, rate limit)")."""

DEFAULT_DEADLINE_S: Final = 10.0
"""§4.4: tool timeouts have a configurable deadline, default 10 s."""

_NEEDS_INFORMATION: Final = (
    "The request to {tool_label} could not be completed — additional information is needed."
)
"""§4.4 ``invalid_args`` template."""

ERROR_TEMPLATES: Final[dict[str, str]] = {
    "timeout": "The {tool_label} was temporarily unavailable. Please try again shortly.",
    "not_found": "No results were found for {entity} in the {tool_label}.",
    "invalid_args": _NEEDS_INFORMATION,
    "rate_limit": "The {tool_label} is temporarily busy. The system will retry automatically.",
    "server_error": "The {tool_label} experienced a temporary error. The system will retry automatically.",
    "drug_not_in_database": "{drug_name} was not found in the drug database.",
    "service_unavailable": "{tool_label} is currently unavailable.",
    "missing_required_args": _NEEDS_INFORMATION,
    "missing_patient_id": "The request to {tool_label} could not be completed — a patient ID is needed.",
    "multiple_patient_matches": "More than one patient matched {entity} in the {tool_label}.",
    "ambiguous_drug_name": "The drug name {entity} matched more than one drug in the {tool_label}.",
    "invalid_response": "The {tool_label} returned a response that could not be read.",
    "generic": "The request to {tool_label} could not be completed.",
}
"""§4.4 templates, §9 messages and this package's wording for the rest (module docstring)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool of §16 as the graph needs it."""

    name: ToolName
    label: str
    full_desc: str
    args_model: type[BaseModel]
    deadline_s: float
    writes: bool


def _spec(name: ToolName, label: str, full_desc: str, writes: bool = False) -> ToolSpec:
    return ToolSpec(name, label, full_desc, TOOL_ARG_SCHEMAS[name], DEFAULT_DEADLINE_S, writes)


TOOLS: Final[dict[ToolName, ToolSpec]] = {
    spec.name: spec
    for spec in (
        _spec(
            "check_drug_safety",
            "Drug Safety Report",
            "check_drug_safety(drug_name: str) — Look up FDA boxed warnings, contraindications, and major "
            "safety alerts for a specific drug. Use when a clinician asks about drug safety, warnings, or "
            "whether a drug is safe for a particular patient.",
        ),
        _spec(
            "check_drug_interactions",
            "Drug Interaction Check",
            "check_drug_interactions(drug_names: list[str]) — Check for known interactions between two or "
            "more drugs. Returns severity, mechanism, and clinical significance. Use when a clinician asks "
            "about combining medications or potential drug-drug interactions.",
        ),
        _spec(
            "search_medical_literature",
            "Medical Literature",
            "search_medical_literature(query: str) — Search PubMed and medical literature databases for "
            "published studies, systematic reviews, and clinical evidence. Use when a clinician asks about "
            "research, evidence, studies, or medical literature on a topic.",
        ),
        _spec(
            "find_clinical_trials",
            "Clinical Trials",
            "find_clinical_trials(condition: str, status: str = None) — Search ClinicalTrials.gov for "
            "active, recruiting, or completed clinical trials for a specific condition or treatment. Use "
            "when a clinician asks about experimental treatments, ongoing trials, or new therapies being "
            "studied.",
        ),
        _spec(
            "search_patient",
            "Patient Search",
            "search_patient(name: str) — Search the electronic health record system for a patient by name. "
            "Returns matching patient IDs and basic demographics. Use when a clinician mentions a patient "
            "by name and needs to look them up.",
        ),
        _spec(
            "get_patient_chart",
            "Patient Record",
            "get_patient_chart(patient_id: str) — Retrieve the full clinical summary for a patient, "
            "including diagnoses, medications, allergies, lab results, and vitals. Requires a patient ID "
            "(not a name). Use when a clinician wants to review a patient's record.",
        ),
        _spec(
            "prescribe_medication",
            "Prescription",
            "prescribe_medication(patient_id: str, medication_name: str, dosage: str, frequency: str) — "
            "Create a new medication order for a patient in the EHR. Use when a clinician wants to "
            "prescribe, order, or start a medication for a specific patient.",
            writes=True,
        ),
        _spec(
            "add_allergy",
            "Allergy Documentation",
            "add_allergy(patient_id: str, substance: str, reaction: str, severity: str = None) — Document "
            "an allergy or adverse reaction in a patient's record. Use when a clinician wants to record, "
            "document, or note an allergy.",
            writes=True,
        ),
        _spec(
            "save_clinical_note",
            "Clinical Note",
            "save_clinical_note(patient_id: str, note_type: str, note_text: str) — Save a clinical note "
            "(progress note, consult note, procedure note, etc.) to a patient's record. Use when a "
            "clinician wants to write, save, or document a clinical note.",
            writes=True,
        ),
        _spec(
            "analyze_medical_image",
            "Image Analysis",
            "analyze_medical_image(query: str) — Analyze an attached medical image (X-ray, CT, MRI, "
            "histopathology slide, etc.) for findings relevant to the specified query. Use when a "
            "clinician shares a medical image and asks for analysis or interpretation.",
        ),
    )
}
"""The catalog, in §6/§16 order."""

_FIELD_LABELS: Final[dict[str, str]] = {
    "patient_id": "patient ID",
    "drug_names": "two or more drug names",
    "query": "search query",
}


def field_label(name: str) -> str:
    """How a clarification question names an argument (``dosage``, ``medication name``, ``patient ID``)."""
    return _FIELD_LABELS.get(name, name.replace("_", " "))


@dataclass(frozen=True, slots=True)
class ArgCheck:
    """The outcome of :func:`validate_args`: the normalised arguments, or the fields that failed."""

    args: dict[str, Any] | None
    invalid_fields: tuple[str, ...] = ()


def _strip(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def validate_args(tool: ToolName, args: Mapping[str, Any], known_patient_ids: frozenset[str]) -> ArgCheck:
    """§4.4 step 1: ``args`` against the tool's argument model, strings stripped, unknown keys dropped.

    Valid arguments come back as the model dumps them (optional fields left unset are omitted), so two
    calls with the same meaning compare equal in the duplicate check. A ``patient_id`` must have a
    patient-identifier format or be one of ``known_patient_ids``.
    """
    model = TOOLS[tool].args_model
    fields = tuple(model.model_fields)
    try:
        parsed = model.model_validate({k: _strip(v) for k, v in args.items() if k in fields})
    except ValidationError as error:
        failed = {str(e["loc"][0]) for e in error.errors() if e["loc"]}
        return ArgCheck(None, tuple(f for f in fields if f in failed))
    normalised = parsed.model_dump(mode="json", exclude_none=True)
    patient = normalised.get("patient_id")
    if patient is not None and not (is_patient_id(patient) or patient in known_patient_ids):
        return ArgCheck(None, ("patient_id",))
    return ArgCheck(normalised)


def primary_entity(args: Mapping[str, Any]) -> str:
    """The first argument's value (arguments are critical-first), for "No results were found for …"."""
    for value in args.values():
        if isinstance(value, list) and value:
            return " and ".join(str(v) for v in value)
        if isinstance(value, str) and value:
            return value
    return "the request"


def drug_of(args: Mapping[str, Any]) -> str:
    """The drug a call was about, for the §9 "not found in the drug database" message."""
    for key in ("drug_name", "medication_name", "substance"):
        if isinstance(args.get(key), str) and args[key]:
            return str(args[key])
    names = args.get("drug_names")
    if isinstance(names, list) and names:
        return " and ".join(str(n) for n in names)
    return "The requested drug"


def format_error(tool: ToolName, error_type: str | None, args: Mapping[str, Any]) -> str:
    """§10 ``format_error_for_synthesis``: the clinician-safe message for a failed call."""
    template = ERROR_TEMPLATES.get(error_type or "generic", ERROR_TEMPLATES["generic"])
    return template.format(tool_label=TOOLS[tool].label, entity=primary_entity(args), drug_name=drug_of(args))


def _scalar(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _key(name: object) -> str:
    text = str(name).replace("_", " ")
    return text[:1].upper() + text[1:]


def _render(value: Any, indent: str) -> list[str]:
    """Lines of a JSON value: ``Key: value`` for mappings, ``- item`` for lists, nested by indent."""
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, Mapping | list):
                lines.append(f"{indent}{_key(key)}:")
                lines.extend(_render(item, indent + "  ") or [f"{indent}  none"])
            else:
                lines.append(f"{indent}{_key(key)}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping | list):
                nested = _render(item, indent + "  ") or [f"{indent}  none"]
                lines.append(f"{indent}- {nested[0].lstrip()}")
                lines.extend(nested[1:])
            else:
                lines.append(f"{indent}- {_scalar(item)}")
    else:
        lines.append(f"{indent}{_scalar(value)}")
    return lines


def format_result(tool: ToolName, result: Mapping[str, Any] | None) -> str:
    """§4.4 step 3: the result under its clinical label (``[Drug Safety Report]``), keys in clinical case."""
    body = _render(result, "") if result else []
    return "\n".join([f"[{TOOLS[tool].label}]", *(body or ["No data returned."])])


_TOOL_NAME = re.compile(r"\b(" + "|".join(TOOL_ARG_SCHEMAS) + r")\b")


def redact_tool_names(text: str) -> str:
    """``text`` with every internal tool name replaced by its clinical label (§4.4 step 3, §15: synthesis
    output never names a tool such as ``[check_drug_safety]``)."""
    return _TOOL_NAME.sub(lambda m: TOOLS[m.group()].label, text)  # type: ignore[index]


def patient_matches(tool: ToolName, result: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], ...]:
    """The matches of a patient search (``result["matches"]``); empty for any other tool."""
    if tool != "search_patient" or not result:
        return ()
    matches = result.get("matches")
    if not isinstance(matches, list):
        return ()
    return tuple(m for m in matches if isinstance(m, Mapping))


def match_patient_id(match: Mapping[str, Any]) -> str | None:
    """The identifier of one patient-search match (``patient_id``, else ``id``)."""
    for key in ("patient_id", "id"):
        if isinstance(match.get(key), str) and match[key]:
            return str(match[key])
    return None


def describe_match(match: Mapping[str, Any]) -> str:
    """One match for a clarification question: its scalar values in the runtime's key order."""
    values = [_scalar(v) for v in match.values() if not isinstance(v, Mapping | list)]
    return ", ".join(values) or "unnamed match"
