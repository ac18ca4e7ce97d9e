"""The DocGemma agent graph (seed spec ``docgemma-agent-graph-v3-spec.md``) as a pure processor.

Classification goes to the model, control flow to code (§1). The graph never calls a model or a tool:
:func:`start` and :func:`advance` return the next :data:`Step` (an :class:`LlmCall`, a :class:`ToolCall`
or the :class:`Respond`), the runtime performs it and brings back an :class:`LlmAnswer` or a
:class:`ToolOutcome`. No I/O, clock, randomness or threads: the same request, configuration and events
give the same state and answer byte for byte, which :func:`run_scripted` replays. The state
(:class:`AgentState`) is JSON and round-trips, so a restarted worker resumes mid-turn.

Modules: ``schemas`` (§6 response models), ``tools`` (§16 catalog, argument validation, §4.4/§10
formatting), ``entities`` (§4.1 extraction), ``prompts`` (§7 settings, §8 templates), ``rules`` (§4.5a,
§4.6, §9, §11), ``state``, ``graph``, ``replay``.

Where the spec reads two ways, this package settles it as follows.

Flow and path

* RESULT_CLASSIFY runs on every executed call, failures included, and DETERMINISTIC_ROUTER then sends
  errors to ERROR_HANDLER (walkthrough 4, §4.6). A call that returned an error goes to ERROR_HANDLER even
  if the model classified it as a success (code knows the call failed); a clean outcome the model
  classifies ``error_*`` goes there too (§4.6 routes on the classification).
* Arguments that fail validation skip execution and go from TOOL_EXECUTE straight to ERROR_HANDLER with
  ``invalid_args`` (§4.4), which asks the user (§9 ``missing_required_fields``; only ``patient_id``
  missing or malformed: §9 ``missing_patient_id``). A stage-2 answer that does not validate is such a
  failure: its JSON object (or nothing) goes to TOOL_EXECUTE, which names the failing fields.
* The duplicate-call stop (§9) is checked in TOOL_EXECUTE before a call is emitted: path
  TOOL_EXECUTE → DETERMINISTIC_ROUTER → SYNTHESIZE, the call not executed and not in ``executed``. An
  explicit retry_same is exempt. If the stopped call was a retry of a failed call, that failure's
  pre-formatted message goes to synthesis.
* retry_same visits TOOL_SELECT without a model call (walkthrough 4, "Step 3' (retry): TOOL_SELECT →
  same tool, same args"; its total of 6 calls has no second selection). retry_different_args runs stage 2
  again for the same tool, with the failed arguments and message in the prompt (§6 ``RetryStrategy``
  has no ``adjusted_args``; the §4.5a sketch's ``adjusted_args: dict`` is not used).
* skip goes to SYNTHESIZE (§3 diagram: EH_SKIP → SY_PREP), also in a multi-tool task.
* ask_user (router or ERROR_HANDLER) goes to SYNTHESIZE, which asks the model to write the clarification
  question (§4.6: "Synthesize the clarification question"; §4.7: SYNTHESIZE is the only node that writes
  text a clinician reads). The §9 message fills §8's ``{clarification_section}``; the synthesized question
  is ``Respond.answer`` and ``Respond.clarification`` keeps the §9 message as code wrote it, so a listed
  patient id reaches the clinician exactly whatever the model wrote. Deciding to ask stays in code (the
  model never defers to the user, §13); an empty synthesis falls back on the §9 message.
* A patient search with several matches is a result (``{"matches": [...]}``): RESULT_CLASSIFY runs, then
  the router asks (§4.6 ``_needs_user_clarification``); if the model calls it an error, ERROR_HANDLER's
  first rule asks the same question.
* An attached image adds the §4.1 vision call at INPUT_ASSEMBLY (``ImageFindings`` schema, T=0.3, 512
  tokens); the user message dict carries ``image_ref`` for the runtime to attach. §15's image row is a
  direct path, so an image alone does not make the intent TOOL_NEEDED.
* §15's "9 nodes" for the timeout-and-retry row does not match walkthrough 4's steps; the walkthrough
  decides (12 visits, 8 distinct nodes).

Counting

* ``llm_calls``: direct 2, single tool 5, each further tool +3 (stage 1, stage 2, RESULT_CLASSIFY); an
  image +1; a retry_same +2 (RetryStrategy, RESULT_CLASSIFY), a retry_different_args +3. Walkthrough 4 is
  7 in this count (the spec counts the two-stage TOOL_SELECT as one call: 6). A turn that ends in a
  question counts like an answer: its synthesis is a call (a patient search with several matches: 5).
* ``step_count`` counts tool-loop iterations: executed calls that are not retries. Retries are bounded
  by MAX_RETRIES per tool and MAX_TOTAL_RETRIES per turn (§11; the latter would be moot if retries were
  steps under MAX_STEPS=4). ``retry_count`` restarts at each stage-1 selection.

Termination (§4.6, §9, §11; walkthrough 3 decides)

* An intent of DIRECT for a query that matches a §11 task pattern is overruled to TOOL_NEEDED (the
  decision records it): the patterns say which tools the task needs, §1 gives routing to code, and a
  small model may answer DIRECT to "Check FDA warnings for dofetilide", which would answer a
  drug-safety question from the model's memory instead of the drug data.
* Every matched task pattern adds its required tools (walkthrough 3 needs "patient"+"chart" and then
  "safety"; §11's ``_match_pattern`` returns one). Done when all required tools returned without error.
* §9's "all results success_rich or no_results and step_count ≥ 1 → SYNTHESIZE" and the diagram's
  "success_* → SYNTHESIZE" would end walkthrough 3 after one tool: they hold only when no pattern
  matches (§11's default: done after the first successful tool). ``success_partial`` is a success.
* §11's ``patient_lookup_and_review`` (patient AND chart|record|summary) is used, not §4.6's looser
  "chart or record"; §4.6's "patient name mentioned → search_patient required" becomes: search_patient is
  not required when the query itself names a patient id (no patient-name extraction exists in §5).
* Keywords match whole words and phrases, case-insensitively, with an optional plural ``s``/``es``.
* MAX_STEPS is checked before the patterns; a several-match ask_user before MAX_STEPS.
* §11's tertiary signal (stage 1 answering ``"none"``) is not implemented: §6's ``ToolSelection`` has no
  such value, and the router only re-enters TOOL_SELECT when the patterns say work remains, so the
  signal could never be accepted.

Errors

* Error categories keep the spec's names (:data:`ErrorType`): ``multiple_patient_matches`` (§4.5a), not
  ``patient_matches`` (§4.6's result key).
* Skip messages are §9's: the pre-formatted template when retries are used up (not §4.5a's "Unable to
  complete … after multiple attempts"), "{drug} was not found in the drug database.", "{tool_label} is
  currently unavailable.". MAX_TOTAL_RETRIES skips like MAX_RETRIES.
* Ask messages are §9's templates; §4.6's "I found multiple patients matching that name…" only when the
  runtime reports several matches without listing them.
* Only final errors reach synthesis (skip, a duplicate stop after a failure): an error a retry
  recovered from does not (walkthrough 4's answer "includes amiodarone safety data").
* §8 has no prompt for the retry decision; ``prompts.RETRY_SYSTEM`` is this package's. The retry decision
  sees the request, the arguments and the pre-formatted message, never the raw error.

Answers that do not validate (deterministic replacements)

* INTENT_CLASSIFY: TOOL_NEEDED when the query names a patient id or an action verb, else DIRECT; no
  suggested tool; the task summary is the question as asked with its extracted entities (also when a
  valid answer's summary is blank), so result classification and synthesis always carry §8's
  "Clinical context".
* TOOL_SELECT stage 1: the intent's ``suggested_tool`` on the first selection; otherwise (re-entry, or
  no suggestion) SYNTHESIZE with what was gathered ("The requested information could not be retrieved."
  when nothing was).
* Stage 2: an arguments failure, so ask_user with the failing fields (above).
* RESULT_CLASSIFY: from the outcome: error → ``error_retryable`` if transient else ``error_fatal``; empty
  result → ``no_results``; else ``success_partial``.
* RetryStrategy: retry_same for a transient error (timeout, rate limit, server error, service
  unavailable), else skip.
* Vision: no findings, and "The attached image could not be analyzed." goes to synthesis.
* SYNTHESIZE (free text, always accepted): tool names are replaced by their clinical labels (§15: no
  ``[check_drug_safety]`` in the output); an empty answer becomes a fixed message plus the error messages,
  or after an ask_user the §9 message (§15: no zero-length response).

Prompts and context

* §8's prompts where §4 shows other drafts (intent, synthesis). The task summary is the "Clinical
  context" of result classification and synthesis on every path, the direct one included. Every call
  has a user message (see :mod:`processors.agent.prompts`); history (the last 4 turns) goes into
  intent, both tool-selection stages and synthesis; §8's synthesis assembly has no history section, and
  §4.1 calls history the strongest quality lever.
* ``suggested_tool`` is §6's optional free string, generated after the task summary: a hint that names
  no tool (``"none"``, a label) is no suggestion. The 1-shot example is matched to it
  (check_drug_safety's without one), also on re-entry. The analytical prefix opens the stage-1 instruction.
* Entity hints use §8's format ("Detected patient ID: …", "Detected drug name: …"). The request's
  ``patient_id`` is context, not a query entity: hinted as "Patient in context: …" and accepted as a
  valid ``patient_id`` argument, like an id a patient search returned (also hinted when it was the only
  match).
* The §4.7 "Brief" instruction is prepended to the synthesis user message when exactly one tool, a read
  tool, gave results (§8's system prompt already carries it as its first guideline).
* Write tools execute once their arguments validate: the spec has no confirmation step.
* ``full_desc`` is §16's text with its line wrapping joined by single spaces.
* Patient ids: §4.1's two regular expressions, its eight-hex example (``f47ac10b``: a letter and a digit
  required) and clingate's ``PT-…-NNN`` and ``p-NNN…`` (three digits or more).
"""

from processors.agent.graph import AgentProtocolError, advance, start
from processors.agent.replay import ScriptError, run_scripted
from processors.agent.state import (
    AgentConfig,
    AgentRequest,
    AgentState,
    Event,
    LlmAnswer,
    LlmCall,
    NodeDecision,
    Respond,
    Step,
    ToolCall,
    ToolExecution,
    ToolOutcome,
    Turn,
    default_config,
)
from processors.agent.tools import ErrorType

__all__ = [
    "AgentConfig",
    "AgentProtocolError",
    "AgentRequest",
    "AgentState",
    "ErrorType",
    "Event",
    "LlmAnswer",
    "LlmCall",
    "NodeDecision",
    "Respond",
    "ScriptError",
    "Step",
    "ToolCall",
    "ToolExecution",
    "ToolOutcome",
    "Turn",
    "advance",
    "default_config",
    "run_scripted",
    "start",
]
