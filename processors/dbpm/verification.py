"""Verifier verdict semantics: from the verifier's answers to a memory verdict, decided by code.

The verifier model proposes a verdict; this module disposes (DocGemma §1: control flow is code). It is
pure: answers in, verdict out, no I/O, no clock.

Paper rules (DBPM Appendix A.2, "conservative-pass"):

* NER (PASS / FAIL): only an explicit FAIL ("NO") fails; an ambiguous answer is PASS.
* RE (PASS_STRONG / PASS_WEAK / FAIL): an ambiguous answer is PASS_WEAK, the middle of the scale.
* QA (PASS / FAIL): a single ambiguous answer triggers a three-vote ensemble with tie-break to PASS.

What "ambiguous" means here (the paper's verifier answered free text; ours is schema-constrained, so
it can only name a verdict of the schema or fail). An answer is *ambiguous* when the model answered
but its answer is not a verdict: output that does not validate against the verdict schema or that hit
the token budget (``LlmFailed`` kinds ``invalid_output`` and ``truncated``). That is the constrained
analogue of an unparseable free-text verdict. A call that produced no answer at all (timeout, server
unavailable, rate limited, circuit open, rejected, disabled) is *not* ambiguous: nobody judged the
candidate, so no verdict is made up and no memory event is emitted; the stream adapter dead-letters
the candidate with the reason instead (see :mod:`streams.groups.verifier`).

The QA ensemble (choices the paper leaves open, recorded here):

* The ambiguous first answer casts no vote; three further calls are made, one per prompt variant of
  :data:`ENSEMBLE_VARIANTS`. Verdict calls are greedy (T=0, the call table pins it: paper Table 14),
  so asking the same prompt three times would give three identical votes. Diversity comes from the
  prompt instead: each variant states the same criterion with a different framing and a different
  order of evidence and claim (see :func:`verdict_messages`). Sampling at T>0 was rejected because a
  replay must reproduce the verdict.
* Majority of three with tie-break to PASS: FAIL only when at least two votes are an explicit FAIL.
  An ambiguous vote counts for neither side, so 1 FAIL + 2 ambiguous, or 1 FAIL + 1 PASS +
  1 ambiguous, is a tie and resolves to PASS.
* The failing verdict's error class is the most common class among the FAIL votes that name one
  (earliest vote first on a tie), or none.
* If any ensemble call produces no answer, the candidate is unverified (as above): a verdict from
  fewer than three votes would be a different rule.

Memory mapping: FAIL -> ``hard_fail``, PASS_WEAK -> ``soft_downgrade``, PASS / PASS_STRONG ->
``success``, source ``verifier_mmed`` (paper Table 4).

DOWNGRADEd candidates. The paper (§4.2, Eq. 4) sends a DOWNGRADEd candidate to the verifier like an
ALLOWed one, tagged, with its confidence multiplied by 0.7; it says nothing that treats its verdict
differently. So the verdict of a DOWNGRADEd candidate is applied to the memory exactly like any other
(a success whitelists the signature, which is how a wrongly downgraded pattern recovers), and the
tag and multiplier travel downstream with the verified candidate (record headers, see
:mod:`streams.groups.verifier`). A candidate is published downstream as verified when its memory label is
``success`` or ``soft_downgrade`` (a weak pass is still a pass); a FAIL is not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from schemas.dbpm import Candidate, QaErrorClass, QaPayload, Verdict, VerdictLabel

VERIFIER_SOURCE = "verifier_mmed"
"""Source of every verifier verdict (paper Table 4, weight 1.0)."""

ENSEMBLE_SIZE = 3
"""Votes of the QA ensemble (paper A.2)."""

AnswerVerdict = Literal["PASS", "FAIL", "PASS_STRONG", "PASS_WEAK"]


class Ambiguous(StrEnum):
    """The model answered, but not with a verdict of the schema (invalid or truncated output)."""

    AMBIGUOUS = "ambiguous"


AMBIGUOUS = Ambiguous.AMBIGUOUS


@dataclass(frozen=True, slots=True)
class Answer:
    """One verifier answer as the semantics see it.

    Attributes:
        verdict: the schema verdict, or :data:`AMBIGUOUS`.
        error_class: the QA failure class the answer named, if any.
    """

    verdict: AnswerVerdict | Ambiguous
    error_class: QaErrorClass | None = None


@dataclass(frozen=True, slots=True)
class Final:
    """A decided verdict.

    Attributes:
        verdict: PASS, FAIL, PASS_STRONG or PASS_WEAK.
        error_class: QA failure class (FAIL only).
        defaulted: True when a conservative default or the ensemble decided it, not a single answer.
        confidence: the share of the answers counted that named this verdict: 1.0 for a single
            answer, votes / 3 for the ensemble, 0.0 for a conservative default (no answer named it).
    """

    verdict: AnswerVerdict
    error_class: QaErrorClass | None = None
    defaulted: bool = False
    confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class NeedsEnsemble:
    """A QA answer was ambiguous: ask :data:`ENSEMBLE_SIZE` more votes, then call :func:`ensemble`."""


_TASK_VERDICTS: dict[str, frozenset[str]] = {
    "ner": frozenset({"PASS", "FAIL"}),
    "re": frozenset({"PASS_STRONG", "PASS_WEAK", "FAIL"}),
    "qa": frozenset({"PASS", "FAIL"}),
}


def conservative(task: str, answer: Answer) -> Final | NeedsEnsemble:
    """Apply the paper's conservative-pass rule to the first verifier answer on a candidate.

    Args:
        task: ``ner``, ``re`` or ``qa``.
        answer: the verifier's answer.

    Returns:
        The verdict, or :class:`NeedsEnsemble` for an ambiguous QA answer.

    Raises:
        ValueError: an unknown task, or a verdict outside the task's verdict space.
    """
    allowed = _TASK_VERDICTS.get(task)
    if allowed is None:
        raise ValueError(f"task {task!r} has no verifier verdict space (gated tasks: ner, re, qa)")
    if answer.verdict is AMBIGUOUS:
        if task == "ner":
            return Final("PASS", defaulted=True, confidence=0.0)
        if task == "re":
            return Final("PASS_WEAK", defaulted=True, confidence=0.0)
        return NeedsEnsemble()
    if answer.verdict not in allowed:
        raise ValueError(f"verdict {answer.verdict!r} is not in the {task} verdict space {sorted(allowed)}")
    error_class = answer.error_class if answer.verdict == "FAIL" else None
    return Final(answer.verdict, error_class)


def ensemble(votes: Sequence[Answer]) -> Final:
    """Decide an ambiguous QA candidate from its ensemble votes: FAIL needs a majority of explicit FAILs.

    Args:
        votes: exactly :data:`ENSEMBLE_SIZE` answers, in variant order.

    Returns:
        FAIL with the most common named error class when at least two votes are FAIL, else PASS.

    Raises:
        ValueError: not exactly three votes, or a vote outside PASS / FAIL / ambiguous.
    """
    if len(votes) != ENSEMBLE_SIZE:
        raise ValueError(f"the QA ensemble takes {ENSEMBLE_SIZE} votes, got {len(votes)}")
    for vote in votes:
        if vote.verdict is not AMBIGUOUS and vote.verdict not in _TASK_VERDICTS["qa"]:
            raise ValueError(f"QA vote {vote.verdict!r} is not PASS, FAIL or ambiguous")
    fails = [vote for vote in votes if vote.verdict == "FAIL"]
    if len(fails) * 2 <= ENSEMBLE_SIZE:
        passes = sum(vote.verdict == "PASS" for vote in votes)
        return Final("PASS", defaulted=True, confidence=passes / ENSEMBLE_SIZE)
    classes = Counter(vote.error_class for vote in fails if vote.error_class is not None)
    # Counter keeps first-insertion order among equal counts, so the earliest vote wins a tie.
    error_class = classes.most_common(1)[0][0] if classes else None
    return Final("FAIL", error_class, defaulted=True, confidence=len(fails) / ENSEMBLE_SIZE)


_LABELS: dict[str, VerdictLabel] = {
    "FAIL": VerdictLabel.HARD_FAIL,
    "PASS_WEAK": VerdictLabel.SOFT_DOWNGRADE,
    "PASS": VerdictLabel.SUCCESS,
    "PASS_STRONG": VerdictLabel.SUCCESS,
}


def memory_label(verdict: AnswerVerdict) -> VerdictLabel:
    """The memory event of a verdict: FAIL -> hard_fail, PASS_WEAK -> soft_downgrade, else success."""
    return _LABELS[verdict]


def is_verified(label: VerdictLabel) -> bool:
    """Whether a candidate with this memory label goes downstream as verified (success or weak pass)."""
    return label is not VerdictLabel.HARD_FAIL


VERIFIER_STAGE = "verifier"
"""The rejection log's stage of every verifier verdict (paper Table 7)."""

_REASONS: dict[str, str] = {"FAIL": "Reject", "PASS_WEAK": "Weak", "PASS": "Pass", "PASS_STRONG": "Pass"}


def verdict_reason(task: str, verdict: AnswerVerdict) -> str:
    """The rejection log's reason of a verifier verdict: ``<TASK>_Verifier_Reject`` for a FAIL (Table 7's
    ``NER_Verifier_Reject``, ``QA_Verifier_Reject``), ``..._Weak`` for PASS_WEAK, ``..._Pass`` otherwise."""
    return f"{task.upper()}_Verifier_{_REASONS[verdict]}"


def verdict_event(candidate: Candidate, final: Final, ts: datetime) -> Verdict:
    """The memory verdict event of a judged candidate, with the rejection log's fields (Table 7).

    Args:
        candidate: the judged candidate.
        final: the decided verdict.
        ts: the verdict's event time: when it was decided (the caller's clock; paper §3.2 records the
            wall-clock time of each verdict event, and Eq. 5 decays on it).

    Returns:
        A :class:`~schemas.dbpm.Verdict` from ``verifier_mmed``, stage ``verifier``; a failing QA
        verdict carries its error class in the payload, where the memory looks for it (it selects the
        class pattern).
    """
    payload = candidate.payload
    if isinstance(payload, QaPayload):
        error_class = final.error_class if final.verdict == "FAIL" else None
        payload = payload.model_copy(
            update={"error_class": None if error_class is None else QaErrorClass(error_class)}
        )
    return Verdict(
        ts=ts,
        task=candidate.task,
        verdict=memory_label(final.verdict),
        source=VERIFIER_SOURCE,
        patient_id=candidate.patient_id,
        payload=payload,
        candidate_id=candidate.candidate_id,
        stage=VERIFIER_STAGE,
        reason=verdict_reason(candidate.task, final.verdict),
        confidence=final.confidence,
    )


# -- prompts ------------------------------------------------------------------------------------

ENSEMBLE_VARIANTS: tuple[str, ...] = ("claim_first", "falsify", "reanswer")
"""The three ensemble prompt variants (the first call uses ``primary``)."""

_CRITERIA = {
    "ner": "The entity must appear in the narrative and belong to the stated category.",
    "re": "Both entities must appear in the narrative and the narrative must state the relation between "
    "them: PASS_STRONG when stated explicitly, PASS_WEAK when only implied, FAIL when absent or wrong.",
    "qa": "The answer must be supported by the narrative, must not contradict it and must not add detail "
    "the narrative does not give. On FAIL name the error class: unsupported, contradicted or "
    "over_specified.",
}

_FRAMING = {
    "primary": "You verify clinical information extracted from a patient narrative.",
    "claim_first": "You audit a claim about a patient. Read the claim, then check it against the record.",
    "falsify": "You are a sceptical clinical reviewer. Look for any statement in the narrative that "
    "contradicts the claim or leaves it unsupported; answer FAIL if you find one.",
    "reanswer": "You are a clinician. Answer the question from the narrative yourself, then compare your "
    "answer with the proposed one; answer PASS only if they agree.",
}


_NOT_CLAIMED = ("error_class", "ner_categories", "difficulty")
"""Payload fields that are not part of what the generator claims: the verdict's error class, and the
gate's inputs (the NER categories the coverage join stamps on a QA candidate, the patient difficulty),
which a verifier must not see: it judges the extraction against the narrative alone."""


def _claim(candidate: Candidate) -> str:
    payload = candidate.payload.model_dump(mode="json", exclude_none=True)
    for name in _NOT_CLAIMED:
        payload.pop(name, None)
    return "\n".join(f"{name}: {value}" for name, value in payload.items())


def verdict_messages(candidate: Candidate, narrative: str, variant: str = "primary") -> list[dict[str, str]]:
    """The chat messages of one verdict call (system prompt, then the user turn).

    Args:
        candidate: the candidate to judge.
        narrative: the patient narrative it was extracted from.
        variant: ``primary`` or one of :data:`ENSEMBLE_VARIANTS`; ``claim_first`` puts the claim before
            the narrative, the others put the narrative first.

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]``.

    Raises:
        KeyError: an unknown variant or task.
    """
    system = f"{_FRAMING[variant]} {_CRITERIA[candidate.task]} Answer with the verdict only."
    claim = f"Task: {candidate.task}\nClaim:\n{_claim(candidate)}"
    record = f"Narrative:\n{narrative}"
    parts = (claim, record) if variant == "claim_first" else (record, claim)
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]
