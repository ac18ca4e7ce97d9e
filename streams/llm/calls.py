"""The call-type table: role, temperature and token budget of every kind of LLM call, in one place.

Why a table: DocGemma §7 shows that temperature and the token budget are per-node decisions with
measured optima, not client defaults (T=0.0 for operational calls, which prevents hidden thinking
tokens and JSON parse errors; T=0.5 and 256 tokens for free-form synthesis). The DBPM paper (Table 14)
fixes greedy decoding (T=0.0) for all generator and verifier calls and per-stage budgets: 1500 tokens
for JSON extraction, 160 for QAR, 60 for a verifier verdict. Callers name a :class:`CallType`; they never
pass a temperature or a budget, so no call can drift from the table.

Choices where the sources leave room (recorded here so they are visible):

* NER extraction takes the 1500-token extraction budget: the paper names "RE/JSON extraction" and the
  NER stage is a JSON extraction of the same shape.
* QA extraction is the paper's QAR stage: one call per deterministic question template (the paper's
  ``QA_TEMPLATES_GEN`` maps each question to its category), answered within 160 tokens. Code chooses the
  question and its category; the model only answers (DocGemma §1: classification/extraction -> LLM,
  control flow -> code).
* Top-p is never sent: the paper engages top-p 0.9 only when temperature > 0, which no gated call uses;
  synthesis keeps the server default, as DocGemma §7 specifies only temperature and budget.
* ``SYNTHESIS`` answers are schema-constrained too (a caller-defined model with one bounded text
  field), where DocGemma §7 uses free-form output: every answer in this project is validated against
  a model, and a one-field object costs the decoder nothing. Temperature and budget are DocGemma's.
* ``OPERATIONAL`` covers DocGemma-style classification calls outside the DBPM loop (e.g. the
  arbiter's semantic checks): T=0.0 with the largest operational budget of §7 (256, INTENT_CLASSIFY).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """Which server answers a call. Each role resolves to its own URL and model (see config)."""

    GENERATOR = "generator"
    VERIFIER = "verifier"
    DEFAULT = "default"
    VISION = "vision"


class CallType(StrEnum):
    """Every kind of LLM call the project makes."""

    NER_EXTRACTION = "ner_extraction"
    RE_EXTRACTION = "re_extraction"
    QA_EXTRACTION = "qa_extraction"
    NER_VERDICT = "ner_verdict"
    RE_VERDICT = "re_verdict"
    QA_VERDICT = "qa_verdict"
    OPERATIONAL = "operational"
    SYNTHESIS = "synthesis"
    AGENT_IMAGE = "agent_image"
    AGENT_INTENT = "agent_intent"
    AGENT_TOOL_SELECT = "agent_tool_select"
    AGENT_TOOL_ARGS = "agent_tool_args"
    AGENT_RESULT = "agent_result"
    AGENT_RETRY = "agent_retry"
    AGENT_SYNTHESIS = "agent_synthesis"


@dataclass(frozen=True, slots=True)
class CallProfile:
    """Generation settings of one call type.

    Attributes:
        role: the server role that answers it.
        temperature: sampling temperature; 0.0 is greedy decoding.
        max_tokens: completion budget; an answer that reaches it is a failed call (truncated).
        source: where the numbers come from.
    """

    role: Role
    temperature: float
    max_tokens: int
    source: str


CALL_PROFILES: dict[CallType, CallProfile] = {
    CallType.NER_EXTRACTION: CallProfile(Role.GENERATOR, 0.0, 1500, "DBPM Table 14: extraction 1500, greedy"),
    CallType.RE_EXTRACTION: CallProfile(Role.GENERATOR, 0.0, 1500, "DBPM Table 14: RE/JSON extraction 1500"),
    CallType.QA_EXTRACTION: CallProfile(Role.GENERATOR, 0.0, 160, "DBPM Table 14: QAR 160, greedy"),
    CallType.NER_VERDICT: CallProfile(Role.VERIFIER, 0.0, 60, "DBPM Table 14: verifier verdict 60, greedy"),
    CallType.RE_VERDICT: CallProfile(Role.VERIFIER, 0.0, 60, "DBPM Table 14: verifier verdict 60, greedy"),
    CallType.QA_VERDICT: CallProfile(Role.VERIFIER, 0.0, 60, "DBPM Table 14: verifier verdict 60, greedy"),
    CallType.OPERATIONAL: CallProfile(Role.DEFAULT, 0.0, 256, "DocGemma §7: operational T=0.0"),
    CallType.SYNTHESIS: CallProfile(Role.DEFAULT, 0.5, 256, "DocGemma §7: synthesis T=0.5, 256 tokens"),
    # The clinician's agent, one call type per LLM node (DocGemma §7; the same numbers are the pure graph's
    # in processors.agent.prompts, and a test holds the two equal). The image analysis goes to the vision
    # role's server.
    CallType.AGENT_IMAGE: CallProfile(Role.VISION, 0.3, 512, "DocGemma §7: image analysis T=0.3, 512"),
    CallType.AGENT_INTENT: CallProfile(Role.DEFAULT, 0.0, 256, "DocGemma §7: INTENT_CLASSIFY T=0.0, 256"),
    CallType.AGENT_TOOL_SELECT: CallProfile(Role.DEFAULT, 0.0, 64, "DocGemma §7: TOOL_SELECT stage 1, 64"),
    CallType.AGENT_TOOL_ARGS: CallProfile(Role.DEFAULT, 0.0, 128, "DocGemma §7: TOOL_SELECT stage 2, 128"),
    CallType.AGENT_RESULT: CallProfile(Role.DEFAULT, 0.0, 128, "DocGemma §7: RESULT_CLASSIFY T=0.0, 128"),
    CallType.AGENT_RETRY: CallProfile(Role.DEFAULT, 0.0, 64, "DocGemma §7: ERROR_HANDLER T=0.0, 64"),
    CallType.AGENT_SYNTHESIS: CallProfile(Role.DEFAULT, 0.5, 256, "DocGemma §7: SYNTHESIZE free text T=0.5"),
}
