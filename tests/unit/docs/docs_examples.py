"""Example inputs of streams/data/docs and stub judgements for the arbiter's tests.

A stub judgement is a pure callable ``LlmRequest -> LlmResult``: the arbiter emits requests as data,
so no client, broker or network is involved, and nothing is mocked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

from processors.docs.llm import LlmFinding, LlmJudgement, LlmPhase, LlmRequest, LlmResult
from schemas.docs import ClassificationOutput, ClassificationRequest, DocumentBundle, DocumentType, Severity
from streams.data import DOCS, DOCS_EXAMPLES

DATA = DOCS

EXAMPLES = DOCS_EXAMPLES


def load_json(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))


def classification(name: str) -> ClassificationOutput:
    return ClassificationOutput.model_validate(load_json(name))


def bundle(name: str) -> DocumentBundle:
    return DocumentBundle.model_validate(load_json(name))


def example(key: str, production_label: DocumentType | None = None) -> ClassificationRequest:
    """The request of one example pair, with a fixed event time."""
    c, b = EXAMPLES[key]
    doc = bundle(b)
    return ClassificationRequest(
        doc_id=doc.doc_id,
        ts=datetime(2025, 2, 18, 14, 30, tzinfo=UTC),
        classification=classification(c),
        bundle=doc,
        production_label=production_label,
    )


def judge_with(findings: dict[LlmPhase, list[LlmFinding]] | None = None) -> Callable[[LlmRequest], LlmResult]:
    """A stub judgement returning the given findings per phase (none by default)."""
    table = findings or {}

    def judge(request: LlmRequest) -> LlmResult:
        judgement = LlmJudgement(findings=table.get(request.phase, []))
        return LlmResult(request_id=request.request_id, judgement=judgement)

    return judge


MAJOR_SEMANTIC = LlmFinding(
    severity=Severity.MAJOR,
    message="Segment 1 text contains routine lab values inconsistent with Genomic Report PRIMARY "
    "classification",
    location="segment 1 → Genomic Report",
)
