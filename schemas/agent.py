"""Events of the clinician's agent (DocGemma's graph as a consumer group): requests in; responses, a trace
record per node and the write tools' proposals out.

Every record of one conversation is keyed by its ``conversation_id`` (a proposal by its patient, so it
lands with the patient's clinical records), and ``event_time`` is the request's: the same request gives
the same records.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.base import AvroModel, Count32, EventTime, JsonText


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AgentTurn(_Part):
    """One earlier exchange of the conversation."""

    role: Literal["user", "assistant"]
    content: str


class AgentRequest(AvroModel):
    """A clinician's message to the agent."""

    avro_name = "clingate.agent.AgentRequest"

    conversation_id: str
    request_id: str
    event_time: EventTime
    query: str
    history: list[AgentTurn] = Field(default_factory=list)
    patient_id: str | None = None
    image_ref: str | None = None


class AgentToolCall(_Part):
    """One tool execution of a turn: the tool, its arguments as JSON, and ``success`` or the error type."""

    tool: str
    args: JsonText
    outcome: str


class AgentResponse(AvroModel):
    """The agent's answer to a request: the synthesized text, set on every response the agent gives.
    After an ask_user the answer is the clarification question the model wrote and ``clarification``
    the deterministic message it was written from; otherwise ``clarification`` is None."""

    avro_name = "clingate.agent.AgentResponse"

    conversation_id: str
    request_id: str
    event_time: EventTime
    answer: str | None = None
    clarification: str | None = None
    path: list[str]
    tool_calls: list[AgentToolCall]
    llm_calls: Count32
    proposals: list[str] = Field(default_factory=list)


class AgentTrace(AvroModel):
    """One node decision of a turn, in order; with the event it took (an LLM answer or a tool outcome),
    the trace replays the turn exactly."""

    avro_name = "clingate.agent.AgentTrace"

    conversation_id: str
    request_id: str
    step: Count32
    node: str
    decision: str
    schema_name: str | None = None
    llm_answer: str | None = None
    event: JsonText | None = None
    latency_ms: float


class AgentProposal(AvroModel):
    """A write tool's proposal: a FHIR R4 resource in draft form, never written to an EHR; a prescription
    carries clingate's clinical gates on the patient with the drug added."""

    avro_name = "clingate.agent.AgentProposal"

    proposal_id: str
    patient_id: str
    conversation_id: str
    request_id: str
    event_time: EventTime
    tool: str
    resource_type: str
    resource: JsonText
    gates: JsonText | None = None
