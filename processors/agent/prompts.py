"""Prompt templates (spec §8) and generation settings (§7) of every model call, and the messages built
from the state.

System prompts are §8's text verbatim, filled in: INTENT_CLASSIFY, TOOL_SELECT stages 1 and 2,
RESULT_CLASSIFY and SYNTHESIZE (§8's versions where §4 shows older drafts). §8 gives no prompt for the
ERROR_HANDLER retry decision or the vision call; theirs are this package's, in the same register.

Every call has a user message (Gemma's chat template folds the system prompt into the first user turn and
needs one). Where the §8 template is a pure system prompt (intent, stage 1, synthesis) the user message
carries the request: the conversation history (§4.1: the strongest natural quality lever), the image
findings, the query. Where the §8 template already embeds the request (stage 2, result classification)
the user message carries only what §8 leaves to the loop (results so far, the failed attempt) and asks
for the JSON.

Stage 1 gets its 1-shot example by ``suggested_tool`` (§4.3, §19: matched 1-shot is the sweet spot;
never more than one example, §13) and the analytical prefix "Analyzing the task requirements, " (§4.3)
leads the user message's instruction, since chat messages cannot prefill the answer. Stage 2 gets the
entity hints (§4.3, §8 format ``Detected patient ID: …``); the patient in context and the patient id a
single-match search returned are hinted the same way.

Synthesis (§4.7, §8): the §8 system prompt, and the §8 user message: the clinician's question and the
clinical context (the task summary) on every path, then the image, tool-result, error and clarification
sections, each included only when it has content. After an ask_user the clarification section carries
the deterministic message (§9) for the model to ask the clinician, keeping its options exactly. For a
single-tool lookup the user message begins with the "Brief" instruction (§4.7).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from processors.agent.schemas import ToolName
from processors.agent.state import AgentState, ToolResult
from processors.agent.tools import TOOLS, match_patient_id, patient_matches


@dataclass(frozen=True, slots=True)
class Generation:
    """§7: temperature and token budget of one kind of call."""

    temperature: float
    max_tokens: int


IMAGE_ANALYSIS: Final = Generation(0.3, 512)
INTENT: Final = Generation(0.0, 256)
TOOL_SELECT_STAGE1: Final = Generation(0.0, 64)
TOOL_SELECT_STAGE2: Final = Generation(0.0, 128)
RESULT_CLASSIFY: Final = Generation(0.0, 128)
RETRY: Final = Generation(0.0, 64)
SYNTHESIZE: Final = Generation(0.5, 256)

INTENT_SYSTEM: Final = """\
You are a clinical decision-support assistant integrated with an electronic health record
system and medical knowledge tools.

Your task: classify the user's query and provide a brief clinical summary.

Classification rules:
- DIRECT: General medical questions, greetings, thanks, or questions answerable from
  medical knowledge alone (e.g., "What is hypertension?", "Hello", "Explain metformin MOA")
- TOOL_NEEDED: Requests requiring specific patient data, drug safety lookups, literature
  searches, clinical trial searches, prescriptions, allergy documentation, clinical notes,
  or medical image analysis

Provide a task_summary that captures the clinical context in ~50 words or fewer.
If TOOL_NEEDED, suggest the most relevant tool name."""

TOOL_SELECT_STAGE1_SYSTEM: Final = """\
You are a clinical tool router. Select the single most appropriate tool for the task.

Available tools:
{full_desc_tool_list}

Example:
User: "{matched_example_query}"
Tool: {matched_example_tool}

Now select the tool for the current task."""

TOOL_SELECT_STAGE2_SYSTEM: Final = """\
Extract the arguments for the {tool_name} tool from the user's request.

Tool: {tool_name}
Description: {tool_full_description}

User query: {user_query}
{entity_hints}

Fill in the required arguments."""

RESULT_CLASSIFY_SYSTEM: Final = """\
You are evaluating a tool result. Classify the quality of the data returned.

User's original question: {user_query}
Clinical context: {task_summary}

Tool used: {tool_label}
Result:
{formatted_tool_result}

Classify the result quality and provide a brief summary."""

RETRY_SYSTEM: Final = """\
You are deciding how to retry a clinical information request that did not succeed.

- retry_same: the failure looks temporary (the service timed out, was busy or briefly unavailable),
  so the same request may succeed now.
- retry_different_args: the request found nothing or could not be completed as asked, so the same
  request with different arguments (another spelling, a broader or more specific term) may succeed.

Choose the retry strategy."""

SYNTHESIZE_SYSTEM: Final = """\
You are a clinical decision-support assistant. Provide a clear, concise response to the
clinician based on the information below.

Guidelines:
- Include only the most critical findings
- If information was unavailable, state this clearly without speculating
- Do not reference any system internals, tool names, or databases
- Use standard medical terminology appropriate for a clinical audience"""

IMAGE_SYSTEM: Final = """\
You are a medical imaging assistant. Describe the attached medical image: its modality, the findings
relevant to the clinician's question, and your overall confidence from 0 to 1."""

BRIEF_PREFIX: Final = "Include only the most critical findings."
"""§4.7 "Brief" variant, prepended for single-tool lookups."""
ANALYTICAL_PREFIX: Final = "Analyzing the task requirements, "
"""§4.3 stage-1 analytical prefix."""
JSON_REQUEST: Final = "Respond with the JSON object."
CLARIFICATION_SECTION: Final = (
    "Clarification needed before the question can be answered. Ask the clinician for it, keeping every "
    "option listed below exactly as written:\n{message}"
)
"""§8 ``{clarification_section}``: the ask_user message for synthesis to turn into the question."""

EXAMPLES: Final[dict[ToolName, str]] = {
    "check_drug_safety": "Check FDA warnings for dofetilide",
    "check_drug_interactions": "Check interactions between warfarin and aspirin",
    "search_medical_literature": "Find recent studies on SGLT2 inhibitors in heart failure",
    "find_clinical_trials": "Are there recruiting trials for glioblastoma?",
    "search_patient": "Search for patient James Wilson",
    "get_patient_chart": "Show me the chart for patient abc-123",
    "prescribe_medication": "Prescribe metformin 500mg twice daily for abc-123",
    "add_allergy": "Document a penicillin allergy with hives for patient abc-123",
    "save_clinical_note": "Write a note for patient abc-123",
    "analyze_medical_image": "What does this chest X-ray show?",
}
"""One 1-shot example per tool (§15's queries where it has one); ``check_drug_safety``'s when the intent
suggested no tool."""

_DEFAULT_EXAMPLE: Final[ToolName] = "check_drug_safety"

Messages = tuple[dict[str, str], ...]


def _messages(system: str, user: str) -> Messages:
    return ({"role": "system", "content": system}, {"role": "user", "content": user})


def _join(*sections: str) -> str:
    return "\n\n".join(s for s in sections if s)


def _history(state: AgentState) -> str:
    if not state.conversation_history:
        return ""
    turns = (
        f"{'User' if t.role == 'user' else 'Assistant'}: {t.content}" for t in state.conversation_history
    )
    return "Conversation so far:\n" + "\n".join(turns)


def _image(state: AgentState) -> str:
    findings = state.image_findings
    if findings is None:
        return ""
    listed = "\n".join(f"- {f}" for f in findings.findings) or "- no findings reported"
    return f"Image findings ({findings.modality}, confidence {findings.confidence:.2f}):\n{listed}"


def successful_results(state: AgentState) -> tuple[ToolResult, ...]:
    """Results without an error, in the order they came."""
    return tuple(r for r in state.tool_results if r.error is None)


def _results_so_far(state: AgentState) -> str:
    done = successful_results(state)
    if not done:
        return ""
    return "Results so far:\n" + "\n\n".join(r.formatted_result for r in done)


def image_analysis(state: AgentState, image_ref: str) -> Messages:
    """The vision call of INPUT_ASSEMBLY (§4.1 step 3); the user message carries ``image_ref``."""
    return (
        {"role": "system", "content": IMAGE_SYSTEM},
        {"role": "user", "content": state.user_query, "image_ref": image_ref},
    )


def intent(state: AgentState) -> Messages:
    """INTENT_CLASSIFY: the §8 system prompt; history, image findings and the query."""
    return _messages(INTENT_SYSTEM, _join(_history(state), _image(state), f"Query: {state.user_query}"))


def tool_list() -> str:
    """§8 ``{full_desc_tool_list}``: every tool's §16 ``full_desc``, one bullet each."""
    return "\n\n".join(f"- {spec.full_desc}" for spec in TOOLS.values())


def tool_select_stage1(state: AgentState) -> Messages:
    """TOOL_SELECT stage 1: tools, the matched 1-shot example, the task and (re-entry) results so far."""
    example = state.suggested_tool or _DEFAULT_EXAMPLE
    system = TOOL_SELECT_STAGE1_SYSTEM.format(
        full_desc_tool_list=tool_list(), matched_example_query=EXAMPLES[example], matched_example_tool=example
    )
    what = "select the next tool." if state.tool_results else "select the tool."
    user = _join(
        _history(state),
        _image(state),
        f"Clinical task: {state.task_summary}",
        f"User query: {state.user_query}",
        _results_so_far(state),
        ANALYTICAL_PREFIX + what,
    )
    return _messages(system, user)


def entity_hints(state: AgentState) -> str:
    """§8 ``{entity_hints}``: query patient ids and drugs, the patient in context, a single search match."""
    hints = [f"Detected patient ID: {p}" for p in state.extracted_entities.patient_ids]
    if state.request.patient_id and state.request.patient_id not in state.extracted_entities.patient_ids:
        hints.append(f"Patient in context: {state.request.patient_id}")
    for result in successful_results(state):
        matches = patient_matches(result.tool_name, result.result)
        found = match_patient_id(matches[0]) if len(matches) == 1 else None
        if found is not None:
            hints.append(f"Patient ID from the patient search: {found}")
    hints += [f"Detected drug name: {d}" for d in state.extracted_entities.drug_mentions]
    return "\n".join(dict.fromkeys(hints))


def tool_select_stage2(state: AgentState, tool: ToolName, failed: ToolResult | None) -> Messages:
    """TOOL_SELECT stage 2 for ``tool``; ``failed`` is the attempt a retry_different_args replaces."""
    system = TOOL_SELECT_STAGE2_SYSTEM.format(
        tool_name=tool,
        tool_full_description=TOOLS[tool].full_desc,
        user_query=state.user_query,
        entity_hints=entity_hints(state),
    )
    retry = ""
    if failed is not None:
        retry = (
            f"A previous attempt with the arguments {json.dumps(failed.args, ensure_ascii=False)} did not "
            f"succeed: {failed.formatted_result}\nProvide different arguments."
        )
    return _messages(system, _join(_history(state), _results_so_far(state), retry, JSON_REQUEST))


def result_classify(state: AgentState, result: ToolResult) -> Messages:
    """RESULT_CLASSIFY: §8 template with the query, the task summary and the labelled result."""
    system = RESULT_CLASSIFY_SYSTEM.format(
        user_query=state.user_query,
        task_summary=state.task_summary,
        tool_label=result.tool_label,
        formatted_tool_result=result.formatted_result,
    )
    return _messages(system, JSON_REQUEST)


def retry_strategy(state: AgentState, result: ToolResult) -> Messages:
    """ERROR_HANDLER's retry decision: the request, the arguments and the pre-formatted error only."""
    user = _join(
        f"User's original question: {state.user_query}",
        f"Tool used: {result.tool_label}\nArguments: {json.dumps(result.args, ensure_ascii=False)}",
        f"Outcome: {result.formatted_result}",
        JSON_REQUEST,
    )
    return _messages(RETRY_SYSTEM, user)


def is_single_lookup(state: AgentState) -> bool:
    """§4.7 "Brief" variant: exactly one tool gave results and it reads (does not write) the record."""
    tools = {r.tool_name for r in successful_results(state)}
    return len(tools) == 1 and not TOOLS[next(iter(tools))].writes


def synthesize(state: AgentState) -> Messages:
    """SYNTHESIZE: §8 system prompt; §8 user message: the question and the clinical context always, the
    other sections only when they have content."""
    results = successful_results(state)
    errors = "\n".join(f"- {m}" for m in state.error_messages)
    question = state.clarification_request
    user = _join(
        BRIEF_PREFIX if is_single_lookup(state) else "",
        _history(state),
        f"Clinician's question: {state.user_query}",
        f"Clinical context: {state.task_summary}",
        _image(state),
        ("Retrieved information:\n" + "\n\n".join(r.formatted_result for r in results)) if results else "",
        f"Information that could not be retrieved:\n{errors}" if errors else "",
        CLARIFICATION_SECTION.format(message=question) if question else "",
    )
    return _messages(SYNTHESIZE_SYSTEM, user)
