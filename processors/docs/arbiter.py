"""The verification pipeline and retry orchestrator as a pure step machine (slides 4–8).

``start(request, config)`` and ``resume(state, results)`` each return either :class:`AwaitingLlm`
(the LLM requests of the current attempt, all independent of each other, and the state to resume)
or :class:`Finished` (the disposition, and the review packet when escalated). A runner awaits the
requests however it likes — concurrently, across many documents — and calls ``resume``; nothing
here does I/O or reads a clock (the event time is the request's). :func:`run` drives the machine
synchronously with a judgement callable, or none for rules-only.

One attempt:

1. rule phases: V1, V2 phase 1, V3 phase 1, V4 deterministic evidence verification;
2. LLM phases, requested together: V2 semantic check only when V1 and V2 phase 1 found no BLOCKER
   (the seed: "If Phase 1 finds a BLOCKER, Phase 2 is skipped"; V1's BLOCKERs count, since V1 runs
   "before any LLM money is spent"), V3 contextual check and V4 quality judgement always (the
   budget table: "1 always");
3. V5 decides over all issues.

Retry loop: AUTO_RETRY → AutoFixEngine → re-verify, at most ``MAX_RETRIES`` = 2 times (three
attempts); still AUTO_RETRY on the last attempt → ESCALATE_TO_SME (``MAX_RETRIES_EXHAUSTED``); a
fix whose fingerprint was already seen → ESCALATE_TO_SME at once (``FIX_CYCLE``), without spending
another attempt.

LLM-call budget (slide 11), verification calls only (the primary classifier runs upstream): an
attempt costs 2 (V2 semantic skipped) or 3 calls, so a document costs 2 at best and 3 × 3 = 9 at
most, the two totals of the seed's table. Two findings about that table, both covered by tests:

* it labels its best case "AUTO_ACCEPT, no rule BLOCKERs", but by its own rows such a document runs
  V2's LLM and costs 3; the total 2 is reached when a rule BLOCKER skips V2 phase 2;
* 9 is the loop's bound, not a reachable cost: every repair of the AutoFixEngine targets something
  the rule phases detect on attempt 0 and converges in one pass, and LLM findings are not
  auto-fixable, so attempt 1 never decides AUTO_RETRY again and a document costs at most 6.
  :func:`retry_outcome` keeps the MAX_RETRIES bound anyway, so the loop is bounded by construction
  and not by the convergence of today's repairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from processors.docs.autofix import apply_fixes, fingerprint
from processors.docs.issues import number, quality_score
from processors.docs.llm import PHASE_AGENT, LlmPhase, LlmRequest, LlmResult, build_requests, result_issues
from processors.docs.packet import build_review_packet
from processors.docs.v1 import check_v1
from processors.docs.v2 import check_v2_rules
from processors.docs.v3 import TrapRules, check_v3_rules
from processors.docs.v4 import verify_evidence
from processors.docs.v5 import RULES, decide
from schemas.docs import (
    Agent,
    ArbiterDecision,
    AttemptRecord,
    ClassificationOutput,
    ClassificationRequest,
    Disposition,
    EscalationReason,
    FixKind,
    Issue,
    LlmMode,
    ReviewPacket,
    Severity,
)

MAX_RETRIES = 2
"""Retries after the first attempt: three verification attempts in all (slide 8)."""

RULES_ONLY_NOTE = (
    "rules-only: LLM not configured, so the V2 semantic check, the V3 contextual check and the V4 "
    "evidence-quality judgement did not run; every rule phase did"
)
LLM_NOTE = "LLM phases ran within the seed's budget; per-attempt phases run and skipped are listed"


@dataclass(frozen=True)
class ArbiterConfig:
    """What the arbiter needs besides the request: V3's rule sets and whether an LLM is available."""

    trap_rules: TrapRules
    llm_enabled: bool


@dataclass(frozen=True)
class _Attempt:
    attempt: int
    classification: ClassificationOutput
    fingerprint: str
    rule_issues: dict[Agent, list[Issue]]
    requests: tuple[LlmRequest, ...]
    skipped: tuple[str, ...]
    fixes_applied: tuple[FixKind, ...]


@dataclass(frozen=True)
class ArbiterState:
    """Everything needed to resume a document's verification when its LLM results arrive."""

    request: ClassificationRequest
    config: ArbiterConfig
    seen_fingerprints: tuple[str, ...]
    history: tuple[AttemptRecord, ...]
    current: _Attempt


@dataclass(frozen=True)
class AwaitingLlm:
    """The attempt needs these LLM calls; pass their results to :func:`resume` with ``state``."""

    state: ArbiterState
    requests: tuple[LlmRequest, ...]


@dataclass(frozen=True)
class Finished:
    """The document is decided; ``packet`` is set exactly when the decision is ESCALATE_TO_SME."""

    disposition: Disposition
    packet: ReviewPacket | None


Step = AwaitingLlm | Finished


def start(request: ClassificationRequest, config: ArbiterConfig) -> Step:
    """Begin verifying ``request`` at attempt 0."""
    classification = request.classification
    return _begin(request, config, (), (), 0, classification, ())


def resume(state: ArbiterState, results: Sequence[LlmResult]) -> Step:
    """Continue after the LLM results of the current attempt.

    Args:
        state: the state of the :class:`AwaitingLlm` step being answered.
        results: one result per request, in any order. A request without a result counts as a failed
            phase (a MAJOR issue); a result for no pending request is a caller error.

    Raises:
        ValueError: when a result answers no request of the current attempt.
    """
    by_id = {result.request_id: result for result in results}
    expected = {request.request_id for request in state.current.requests}
    unknown = sorted(set(by_id) - expected)
    if unknown:
        raise ValueError(f"results {unknown} answer no pending request of {state.request.doc_id}")
    llm_issues: dict[Agent, list[Issue]] = {agent: [] for agent in Agent}
    for request in state.current.requests:
        result = by_id.get(request.request_id, LlmResult(request_id=request.request_id, error="no result"))
        llm_issues[PHASE_AGENT[request.phase]].extend(result_issues(request.phase, result))
    return _conclude(state, llm_issues)


def run(
    request: ClassificationRequest,
    config: ArbiterConfig,
    judge: Callable[[LlmRequest], LlmResult] | None = None,
) -> Finished:
    """Drive the step machine synchronously; ``judge`` answers LLM requests (required when LLM is enabled).

    Raises:
        ValueError: when the configuration enables the LLM but no ``judge`` is given.
    """
    if config.llm_enabled and judge is None:
        raise ValueError("llm_enabled needs a judge; pass llm_enabled=False to run rules-only")
    step = start(request, config)
    while isinstance(step, AwaitingLlm):
        assert judge is not None  # guarded above: requests are only emitted when the LLM is enabled
        step = resume(step.state, [judge(r) for r in step.requests])
    return step


def retry_outcome(attempt: int, fixed_fingerprint: str, seen: Sequence[str]) -> EscalationReason | None:
    """After V5 said AUTO_RETRY on ``attempt``: None to verify the fixed output next, else why to escalate.

    The retry budget is checked first (attempt ``MAX_RETRIES`` is the last), then the cycle: a fixed
    output whose fingerprint was already verified would only repeat an attempt.
    """
    if attempt >= MAX_RETRIES:
        return EscalationReason.MAX_RETRIES_EXHAUSTED
    if fixed_fingerprint in seen:
        return EscalationReason.FIX_CYCLE
    return None


def _begin(
    request: ClassificationRequest,
    config: ArbiterConfig,
    seen: tuple[str, ...],
    history: tuple[AttemptRecord, ...],
    attempt: int,
    classification: ClassificationOutput,
    fixes_applied: tuple[FixKind, ...],
) -> Step:
    bundle = request.bundle
    rule_issues = {
        Agent.V1: check_v1(classification, bundle),
        Agent.V2: check_v2_rules(classification),
        Agent.V3: check_v3_rules(classification, bundle, config.trap_rules),
        Agent.V4: verify_evidence(classification, bundle),
    }
    early_blocker = any(
        issue.severity is Severity.BLOCKER for agent in (Agent.V1, Agent.V2) for issue in rule_issues[agent]
    )
    if not config.llm_enabled:
        phases: list[LlmPhase] = []
        skipped = tuple(f"{phase.value}: no LLM configured" for phase in LlmPhase)
    elif early_blocker:
        phases = [LlmPhase.V3_CONTEXT, LlmPhase.V4_QUALITY]
        skipped = (f"{LlmPhase.V2_SEMANTIC.value}: BLOCKER in V1/V2 rule phase",)
    else:
        phases, skipped = list(LlmPhase), ()
    fp = fingerprint(classification)
    requests = build_requests(phases, request.doc_id, attempt, classification, bundle, rule_issues[Agent.V4])
    state = ArbiterState(
        request=request,
        config=config,
        seen_fingerprints=(*seen, fp),
        history=history,
        current=_Attempt(attempt, classification, fp, rule_issues, requests, skipped, fixes_applied),
    )
    if requests:
        return AwaitingLlm(state, requests)
    return _conclude(state, {agent: [] for agent in Agent})


def _conclude(state: ArbiterState, llm_issues: dict[Agent, list[Issue]]) -> Step:
    current = state.current
    issues = number(issue for agent in Agent for issue in (*current.rule_issues[agent], *llm_issues[agent]))
    rule = decide(issues)
    record = AttemptRecord(
        attempt=current.attempt,
        fingerprint=current.fingerprint,
        decision=rule.decision,
        rule_fired=rule.number,
        issues=issues,
        quality_score=quality_score([issue for issue in issues if issue.agent is Agent.V4]),
        llm_calls=len(current.requests),
        llm_phases_run=[request.phase.value for request in current.requests],
        llm_phases_skipped=list(current.skipped),
        fixes_applied=list(current.fixes_applied),
    )
    history = (*state.history, record)
    if rule.decision is not ArbiterDecision.AUTO_RETRY:
        return _finish(state, history, rule.decision, EscalationReason.V5_RULE)
    fixed, applied = apply_fixes(current.classification, issues)
    stop = retry_outcome(current.attempt, fingerprint(fixed), state.seen_fingerprints)
    if stop is not None:
        return _finish(state, history, ArbiterDecision.ESCALATE_TO_SME, stop)
    return _begin(
        state.request,
        state.config,
        state.seen_fingerprints,
        history,
        current.attempt + 1,
        fixed,
        tuple(applied),
    )


def _finish(
    state: ArbiterState,
    history: tuple[AttemptRecord, ...],
    decision: ArbiterDecision,
    reason: EscalationReason,
) -> Finished:
    last = history[-1]
    disposition = Disposition(
        doc_id=state.request.doc_id,
        ts=state.request.ts,
        decision=decision,
        rule_fired=last.rule_fired,
        rule=RULES[last.rule_fired - 1].condition,
        reason=reason,
        attempts=list(history),
        issues=last.issues,
        quality_score=last.quality_score,
        final_classification=state.current.classification,
        llm_mode=LlmMode.LLM if state.config.llm_enabled else LlmMode.RULES_ONLY,
        llm_note=LLM_NOTE if state.config.llm_enabled else RULES_ONLY_NOTE,
        llm_calls=sum(record.llm_calls for record in history),
    )
    packet = (
        build_review_packet(state.request, disposition)
        if decision is ArbiterDecision.ESCALATE_TO_SME
        else None
    )
    return Finished(disposition, packet)
