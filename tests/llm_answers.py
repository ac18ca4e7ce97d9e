"""Test-server answers the LLM group tests share: every narrative names one hallucinated entity, and the
verifier fails exactly that entity."""

from __future__ import annotations

from typing import Any

from streams.llm.serve.http import ChatRequest
from streams.llm.serve.testserver import OpenAiTestServer

FAILING_ENTITY = "tumour lysis syndrome"
"""The entity the generator always extracts and the verifier always fails."""


def _schema_fields(request: ChatRequest) -> set[str]:
    return set(request.schema.get("properties", {}))


def clinical_responder(request: ChatRequest) -> Any:
    """Generator and verifier in one: NER finds the failing entity, the verifier FAILs exactly it."""
    fields = _schema_fields(request)
    if "entities" in fields:
        return {"entities": [{"entity": FAILING_ENTITY, "category": "Diagnosis"}]}
    if "relations" in fields:
        return {"relations": []}
    if "status" in fields:
        return {"status": "NOT_IN_NARRATIVE", "answer": ""}
    if "verdict" in fields:
        return {"verdict": "FAIL" if f"entity: {FAILING_ENTITY}" in request.prompt else "PASS"}
    raise AssertionError(f"unexpected schema {sorted(fields)}")


def verdict_requests(server: OpenAiTestServer) -> int:
    """How many verdict calls ``server`` has answered (it records its requests)."""
    return sum(1 for body in server.requests if "verdict" in body["response_format"]["json_schema"]["schema"]
               .get("properties", {}))  # fmt: skip
