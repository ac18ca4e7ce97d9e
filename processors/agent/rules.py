"""The deterministic rules engine (spec §4.5a, §4.6, §9, §10, §11): routing, termination, error
escalation, and what replaces a model answer that does not validate. Never an LLM decision (§13).

DETERMINISTIC_ROUTER (:func:`route`), after each classified result, in this order:

1. an error (the tool failed, or RESULT_CLASSIFY said ``error_*``) → ERROR_HANDLER;
2. a patient search with more than one match → ask_user (§9);
3. ``step_count >= MAX_STEPS`` → SYNTHESIZE (§9, §11);
4. task patterns (§11): every pattern whose keywords the query contains adds its required tools; all
   of them called without error → SYNTHESIZE, else → TOOL_SELECT. No pattern → SYNTHESIZE (§11's
   default: done after the first successful tool). ``search_patient`` is not required when the query
   names a patient id (§4.6: the search is needed for a patient *name*).

Keywords match as whole words or phrases, case-insensitively, with an optional plural ``s``/``es``
("Check FDA warnings", "Check interactions": §11 lists singular keywords, its examples use plurals).

The duplicate-call stop (§9) is checked before a call is executed (:func:`is_duplicate`): a proposal
equal to a call already executed this turn, same tool and same normalised arguments, goes to SYNTHESIZE
unexecuted. An explicit retry_same is exempt: repeating the call is its purpose, and MAX_RETRIES bounds it.

ERROR_HANDLER (:func:`handle_error`), §4.5a's order: ask_user for several patient matches, a missing
patient id, missing or invalid arguments, an ambiguous drug name; skip when the retries of the tool
(MAX_RETRIES) or of the turn (MAX_TOTAL_RETRIES) are used up, for a drug not in the database, for a
service still unavailable after one retry; otherwise the model chooses retry_same or retry_different_args.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from processors.agent.schemas import Intent, Quality, Strategy, ToolName
from processors.agent.state import AgentConfig, AgentState, ToolResult
from processors.agent.tools import (
    TOOLS,
    TRANSIENT_ERRORS,
    describe_match,
    field_label,
    match_patient_id,
    patient_matches,
    validate_args,
)

ERROR_QUALITIES: Final[frozenset[Quality]] = frozenset({"error_retryable", "error_fatal"})

PATIENT_ID_QUESTION: Final = "I need a patient ID to proceed. Could you provide one?"
"""§9 ``missing_patient_id``."""
MULTIPLE_PATIENTS_QUESTION: Final = (
    "I found multiple patients matching that name. Could you clarify which one?"
)
"""§4.6, for several matches the runtime did not list."""


@dataclass(frozen=True, slots=True)
class TaskPattern:
    """§11: a query pattern (every group needs one of its keywords) and the tools it requires."""

    name: str
    groups: tuple[tuple[str, ...], ...]
    requires: frozenset[ToolName]

    def matches(self, query: str) -> bool:
        """Whether every keyword group has a whole-word match in ``query``."""
        return all(any(_keyword(k).search(query) for k in group) for group in self.groups)


def _keyword(keyword: str) -> re.Pattern[str]:
    words = r"\s+".join(re.escape(w) for w in keyword.split())
    return re.compile(rf"(?<!\w){words}(?:s|es)?(?!\w)", re.IGNORECASE)


TASK_PATTERNS: Final[tuple[TaskPattern, ...]] = (
    TaskPattern(
        "drug_safety", (("safety", "warning", "boxed warning", "FDA"),), frozenset({"check_drug_safety"})
    ),
    TaskPattern(
        "drug_interaction",
        (("interaction", "combining", "together with"),),
        frozenset({"check_drug_interactions"}),
    ),
    TaskPattern(
        "patient_lookup_and_review",
        (("patient",), ("chart", "record", "summary")),
        frozenset({"search_patient", "get_patient_chart"}),
    ),
    TaskPattern("prescribe", (("prescribe", "start", "order"),), frozenset({"prescribe_medication"})),
    TaskPattern(
        "literature_search",
        (("studies", "research", "evidence", "literature", "PubMed"),),
        frozenset({"search_medical_literature"}),
    ),
    TaskPattern(
        "clinical_trial", (("trial", "recruiting", "experimental"),), frozenset({"find_clinical_trials"})
    ),
)
"""§11 ``TASK_PATTERNS``, keywords verbatim."""


def matched_patterns(query: str) -> tuple[TaskPattern, ...]:
    """The task patterns ``query`` matches, in §11 order."""
    return tuple(p for p in TASK_PATTERNS if p.matches(query))


def required_tools(state: AgentState) -> frozenset[ToolName]:
    """The union of the matched patterns' tools; no patient search when the query names a patient id."""
    required: set[ToolName] = set()
    for pattern in matched_patterns(state.user_query):
        required |= pattern.requires
    if state.extracted_entities.patient_ids:
        required.discard("search_patient")
    return frozenset(required)


def tools_called(state: AgentState) -> frozenset[ToolName]:
    """Tools that returned without an error this turn (§11: errors do not count)."""
    return frozenset(r.tool_name for r in state.tool_results if r.error is None)


def known_patient_ids(state: AgentState) -> frozenset[str]:
    """Patient ids a ``patient_id`` argument may be besides the id formats: the patient in context and
    every id a patient search returned this turn."""
    known = {state.request.patient_id} if state.request.patient_id else set()
    for result in state.tool_results:
        known |= {i for m in patient_matches(result.tool_name, result.result) if (i := match_patient_id(m))}
    return frozenset(known)


def is_duplicate(state: AgentState, tool: ToolName, args: Mapping[str, Any]) -> bool:
    """§9 ``duplicate_tool_call``: the same tool with the same arguments was executed this turn."""
    return any(e.tool == tool and e.args == args for e in state.executed)


def patients_question(name: object, matches: Sequence[Mapping[str, Any]]) -> str:
    """§9: "I found {n} patients matching '{name}'. Which one did you mean? {list}"."""
    if not matches:
        return MULTIPLE_PATIENTS_QUESTION
    listed = "; ".join(describe_match(m) for m in matches)
    return f"I found {len(matches)} patients matching '{name}'. Which one did you mean? {listed}"


def fields_question(fields: Sequence[str]) -> str:
    """§9 ``missing_required_fields``: "I need more information: {fields}"."""
    return f"I need more information: {', '.join(field_label(f) for f in fields)}"


def drug_question(suggestions: Sequence[str]) -> str:
    """§9 ``ambiguous_drug_name``: "Did you mean {option_a} or {option_b}?" for any number of options."""
    if not suggestions:
        return "Could you clarify which drug you meant?"
    if len(suggestions) == 1:
        return f"Did you mean {suggestions[0]}?"
    return f"Did you mean {', '.join(suggestions[:-1])} or {suggestions[-1]}?"


RouteTarget = Literal["ERROR_HANDLER", "SYNTHESIZE", "TOOL_SELECT"]


@dataclass(frozen=True, slots=True)
class Route:
    """The router's decision: the next node, why, and the ask_user question when there is one."""

    next: RouteTarget
    reason: str
    clarification: str | None = None


def route(state: AgentState, config: AgentConfig) -> Route:
    """DETERMINISTIC_ROUTER after RESULT_CLASSIFY (module docstring, rules 1–4)."""
    last = state.tool_results[-1]
    if last.error is not None:
        return Route("ERROR_HANDLER", f"tool error ({last.error_type or 'untyped'})")
    if state.last_result_classification in ERROR_QUALITIES:
        return Route("ERROR_HANDLER", f"classified {state.last_result_classification}")
    matches = patient_matches(last.tool_name, last.result)
    if len(matches) > 1:
        question = patients_question(last.args.get("name"), matches)
        return Route("SYNTHESIZE", f"ask_user: {len(matches)} patient matches", question)
    if state.step_count >= config.max_steps:
        return Route("SYNTHESIZE", f"step_count={state.step_count} reached MAX_STEPS={config.max_steps}")
    patterns = matched_patterns(state.user_query)
    if not patterns:
        return Route("SYNTHESIZE", "no task pattern: done after the first successful tool")
    names = ", ".join(p.name for p in patterns)
    missing = sorted(required_tools(state) - tools_called(state))
    if not missing:
        return Route("SYNTHESIZE", f"task pattern satisfied ({names})")
    return Route("TOOL_SELECT", f"task pattern ({names}) needs {', '.join(missing)}")


ErrorKind = Literal["ask_user", "skip", "llm_retry"]


@dataclass(frozen=True, slots=True)
class ErrorAction:
    """ERROR_HANDLER's decision: ask_user (``message`` is the question), skip (``message`` goes to
    synthesis) or let the model choose the retry strategy."""

    kind: ErrorKind
    reason: str
    message: str | None = None


def _required_fields(tool: ToolName) -> tuple[str, ...]:
    return tuple(n for n, f in TOOLS[tool].args_model.model_fields.items() if f.is_required())


def handle_error(state: AgentState, config: AgentConfig) -> ErrorAction:
    """ERROR_HANDLER's deterministic part (§4.5a, §9) for the last result."""
    last = state.tool_results[-1]
    kind = last.error_type
    matches = patient_matches(last.tool_name, last.result)
    if kind == "multiple_patient_matches" or len(matches) > 1:
        question = patients_question(last.args.get("name"), matches)
        return ErrorAction("ask_user", "several patient matches", question)
    if kind == "missing_patient_id":
        return ErrorAction("ask_user", "missing patient id", PATIENT_ID_QUESTION)
    if kind in ("invalid_args", "missing_required_args"):
        fields = validate_args(last.tool_name, last.args, known_patient_ids(state)).invalid_fields
        fields = fields or _required_fields(last.tool_name)
        question = PATIENT_ID_QUESTION if fields == ("patient_id",) else fields_question(fields)
        return ErrorAction("ask_user", f"missing or invalid arguments ({', '.join(fields)})", question)
    if kind == "ambiguous_drug_name":
        raw = (last.result or {}).get("suggestions")
        suggestions = [str(s) for s in raw] if isinstance(raw, list) else []
        return ErrorAction("ask_user", "ambiguous drug name", drug_question(suggestions))
    if state.retry_count >= config.max_retries:
        return ErrorAction(
            "skip", f"retry_count={state.retry_count} reached MAX_RETRIES", last.formatted_result
        )
    if state.total_retries >= config.max_total_retries:
        reason = f"total retries={state.total_retries} reached MAX_TOTAL_RETRIES"
        return ErrorAction("skip", reason, last.formatted_result)
    if kind == "drug_not_in_database":
        return ErrorAction("skip", "drug not in database", last.formatted_result)
    if kind == "service_unavailable" and state.retry_count >= 1:
        return ErrorAction("skip", "service unavailable after a retry", last.formatted_result)
    return ErrorAction("llm_retry", f"retryable ({kind or 'untyped'}), retry_count={state.retry_count}")


def intent_fallback(state: AgentState) -> Intent:
    """INTENT_CLASSIFY when the answer does not validate: TOOL_NEEDED when the query names a patient id or
    an action verb (§4.2: specific patient data or an action needs a tool), DIRECT otherwise (a drug name
    alone does not: §8's own DIRECT example is "Explain metformin MOA")."""
    entities = state.extracted_entities
    return "TOOL_NEEDED" if entities.patient_ids or entities.action_verbs else "DIRECT"


def summary_fallback(state: AgentState) -> str:
    """The task summary when INTENT_CLASSIFY gave none (its answer did not validate, or the summary is
    blank): the question as asked with what INPUT_ASSEMBLY extracted from it, so result classification
    and synthesis carry a clinical context on every path (§8 ``Clinical context: {task_summary}``)."""
    entities = state.extracted_entities
    found = (
        ("patient", entities.patient_ids),
        ("drugs", entities.drug_mentions),
        ("actions", entities.action_verbs),
    )
    details = "".join(f"; {label}: {', '.join(values)}" for label, values in found if values)
    return f"The clinician's question as asked{details}."


def _is_empty(value: Any) -> bool:
    if isinstance(value, Mapping):
        return all(_is_empty(v) for v in value.values())
    if isinstance(value, list | str):
        return not value
    return value is None


def assessment_fallback(result: ToolResult) -> Quality:
    """RESULT_CLASSIFY when the answer does not validate: the category the outcome itself shows."""
    if result.error is not None:
        return "error_retryable" if result.error_type in TRANSIENT_ERRORS else "error_fatal"
    return "no_results" if _is_empty(result.result) else "success_partial"


def retry_fallback(result: ToolResult) -> Strategy | None:
    """ERROR_HANDLER's retry decision when the answer does not validate: retry_same for a transient error
    (§4.5a), else None, which skips (new arguments would need another model answer)."""
    return "retry_same" if result.error_type in TRANSIENT_ERRORS else None
