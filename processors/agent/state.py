"""The agent's request, configuration, steps, events and state (spec §5), all frozen and JSON-round-trippable.

The runtime keeps :class:`AgentState` in a table (``model_dump_json``) and a restarted worker resumes from
it (``model_validate_json``): the state therefore holds everything the graph needs to take the next event,
including what it waits for (``pending``). A pending :class:`LlmCall` serialises its ``schema_name`` and
not its ``response_model`` class; the class is resolved from :data:`~processors.agent.schemas.RESPONSE_MODELS`
when the call is built or parsed, so both always agree.

Steps (what the graph asks of the runtime) are :class:`LlmCall`, :class:`ToolCall` and :class:`Respond`;
events (what the runtime brings back) are :class:`LlmAnswer` and :class:`ToolOutcome`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from processors.agent.schemas import RESPONSE_MODELS, ImageFindings, Intent, Quality, ToolName
from processors.agent.tools import ErrorType

NodeName = Literal[
    "INPUT_ASSEMBLY",
    "INTENT_CLASSIFY",
    "TOOL_SELECT",
    "TOOL_EXECUTE",
    "RESULT_CLASSIFY",
    "ERROR_HANDLER",
    "DETERMINISTIC_ROUTER",
    "SYNTHESIZE",
]
"""The seven nodes of §2 and the ERROR_HANDLER sub-node (⑤a), as ``path`` spells them."""

MAX_STEPS: Final = 4
"""§11 (and §9): hard limit on tool-loop iterations."""
MAX_RETRIES: Final = 2
"""§11 (and §4.5a, §9): retries of the current tool."""
MAX_TOTAL_RETRIES: Final = 4
"""§11: retries across all tools of one turn."""
MAX_HISTORY_TURNS: Final = 4
"""§4.1: the last 2–4 turns of conversation history."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """What the graph takes besides the request: the drug dictionary and the §11 safety valves."""

    drug_names: frozenset[str]
    max_steps: int = MAX_STEPS
    max_retries: int = MAX_RETRIES
    max_total_retries: int = MAX_TOTAL_RETRIES


def default_config(drug_names: Iterable[str] = ()) -> AgentConfig:
    """The spec's configuration (§11 limits) with ``drug_names`` as the §4.1 drug dictionary."""
    return AgentConfig(drug_names=frozenset(drug_names))


class Turn(BaseModel):
    """One earlier exchange of the conversation."""

    model_config = _FROZEN

    role: Literal["user", "assistant"]
    content: str


class AgentRequest(BaseModel):
    """One clinician message: the query, the last turns, the patient in context and an attached image."""

    model_config = _FROZEN

    conversation_id: str
    query: str
    history: tuple[Turn, ...] = ()
    patient_id: str | None = None
    image_ref: str | None = None


class LlmCall(BaseModel):
    """A model request. ``schema_name``/``response_model`` name the §6 class the answer must validate
    against; both are None only for SYNTHESIZE (free text, §7). ``messages`` are OpenAI chat messages; the
    vision call's user message also carries ``image_ref`` for the runtime to attach."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: NodeName
    schema_name: str | None
    response_model: type[BaseModel] | None = Field(default=None, exclude=True)
    messages: tuple[dict[str, str], ...]
    temperature: float
    max_tokens: int

    @model_validator(mode="before")
    @classmethod
    def _resolve_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("response_model") is None and data.get("schema_name"):
            model = RESPONSE_MODELS.get(data["schema_name"])
            if model is None:
                raise ValueError(f"unknown response schema {data['schema_name']!r}")
            return {**data, "response_model": model}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> LlmCall:
        expected = RESPONSE_MODELS.get(self.schema_name) if self.schema_name else None
        if self.response_model is not expected:
            raise ValueError(f"response_model does not match schema_name {self.schema_name!r}")
        return self


class ToolCall(BaseModel):
    """A tool execution with validated arguments and its deadline."""

    model_config = _FROZEN

    tool: ToolName
    args: dict[str, Any]
    deadline_s: float


class Respond(BaseModel):
    """The turn's output: the synthesised answer, always. After an ask_user the answer is the clarification
    question the model wrote and ``clarification`` the deterministic message it was written from (§9's
    template, with a patient list exactly as the search returned it); otherwise ``clarification`` is None."""

    model_config = _FROZEN

    answer: str
    clarification: str | None = None


Step = LlmCall | ToolCall | Respond


class LlmAnswer(BaseModel):
    """The raw text the model returned for the pending :class:`LlmCall`."""

    model_config = _FROZEN

    text: str


class ToolOutcome(BaseModel):
    """What executing the pending :class:`ToolCall` gave: a result, or an error with its category.

    A patient search with several matches is a result (``{"matches": [...]}``); the graph asks the user
    which one was meant (§9).
    """

    model_config = _FROZEN

    result: dict[str, Any] | None = None
    error: str | None = None
    error_type: ErrorType | None = None

    @model_validator(mode="after")
    def _typed_errors_only(self) -> ToolOutcome:
        if self.error_type is not None and self.error is None:
            raise ValueError("error_type without error")
        return self


Event = LlmAnswer | ToolOutcome


class ExtractedEntities(BaseModel):
    """§5 ``ExtractedEntities``: what INPUT_ASSEMBLY found in the query (never in the history)."""

    model_config = _FROZEN

    patient_ids: tuple[str, ...] = ()
    drug_mentions: tuple[str, ...] = ()
    action_verbs: tuple[str, ...] = ()
    has_image: bool = False


class ToolResult(BaseModel):
    """§5 ``ToolResult``: one TOOL_EXECUTE outcome. ``error`` keeps the runtime's raw text for the record;
    only ``formatted_result`` (the labelled result or the pre-formatted error) is ever shown to a model."""

    model_config = _FROZEN

    tool_name: ToolName
    tool_label: str
    args: dict[str, Any]
    result: dict[str, Any] | None
    formatted_result: str
    error: str | None = None
    error_type: ErrorType | None = None


class NodeDecision(BaseModel):
    """One decision of a node, for the reasoning trace (``llm_answer``: the raw text of an LLM node)."""

    model_config = _FROZEN

    node: NodeName
    decision: str
    schema_name: str | None = None
    llm_answer: str | None = None


class ToolExecution(BaseModel):
    """A call the runtime executed and how it ended: ``success`` or its error type (``error`` untyped)."""

    model_config = _FROZEN

    tool: ToolName
    args: dict[str, Any]
    outcome: str


class AgentState(BaseModel):
    """§5 state plus what resuming needs: the request, the pending step, the path, the trace, counters."""

    model_config = _FROZEN

    request: AgentRequest
    # Input (§5)
    user_query: str
    conversation_history: tuple[Turn, ...] = ()
    extracted_entities: ExtractedEntities = ExtractedEntities()
    image_findings: ImageFindings | None = None
    # Intent classification
    intent: Intent | None = None
    task_summary: str = ""
    suggested_tool: ToolName | None = None
    # Tool loop
    current_tool: ToolName | None = None
    current_args: dict[str, Any] | None = None
    tool_results: tuple[ToolResult, ...] = ()
    step_count: int = 0
    retry_count: int = 0
    total_retries: int = 0
    # Result classification
    last_result_classification: Quality | None = None
    last_result_summary: str | None = None
    # Error handling
    error_messages: tuple[str, ...] = ()
    clarification_request: str | None = None
    # Synthesis
    final_response: str | None = None
    # Resumption and record
    pending: LlmCall | ToolCall | None = None
    path: tuple[NodeName, ...] = ()
    trace: tuple[NodeDecision, ...] = ()
    llm_calls: int = 0
    executed: tuple[ToolExecution, ...] = ()
    done: bool = False
