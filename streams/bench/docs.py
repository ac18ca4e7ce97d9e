"""``clingate bench docs``: classification-arbiter throughput, rules-only and with a stub LLM.

Two measurements on one realistic document (the 8-page genomic report + clinical note of the seed's
slide 2, from streams/data/docs unless paths are given):

* rules-only: documents/s of the synchronous step machine (V1–V5, auto-fix, no LLM phase);
* stub LLM: every LLM call sleeps a fixed latency under a semaphore of ``concurrency`` permits, and
  all documents are in flight at once. If the arbiter serialised calls, wall time would be
  calls × latency; overlapping them, it approaches calls × latency / concurrency. The report gives
  the achieved concurrency (busy LLM time / wall time), the peak of calls in flight, and both
  against the bound.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from processors.docs.arbiter import ArbiterConfig, run
from processors.docs.llm import LlmJudgement, LlmRequest, LlmResult
from processors.docs.v3 import load_trap_rules
from schemas.docs import ClassificationOutput, ClassificationRequest, DocumentBundle
from streams.data import DOCS
from streams.groups.arbiter_calls import arbitrate

_EXAMPLES = DOCS


@dataclass(frozen=True)
class StubLlmRun:
    """Outcome of the stub-LLM measurement."""

    documents: int
    llm_calls: int
    wall_s: float
    latency_s: float
    concurrency: int
    peak_in_flight: int

    @property
    def achieved_concurrency(self) -> float:
        """Average number of LLM calls in flight: busy LLM time over wall time."""
        return self.llm_calls * self.latency_s / self.wall_s

    @property
    def documents_per_s(self) -> float:
        """Documents decided per second."""
        return self.documents / self.wall_s


BENCH_TIME = datetime(2026, 1, 1, tzinfo=UTC)
"""The event time of every benchmark request (a benchmark decides nothing by time)."""


def load_request(classification: Path, bundle: Path) -> ClassificationRequest:
    """The benchmark document as a request (event time fixed: a benchmark decides nothing by time)."""
    doc = DocumentBundle.model_validate_json(bundle.read_bytes())
    return ClassificationRequest(
        doc_id=doc.doc_id,
        ts=BENCH_TIME,
        classification=ClassificationOutput.model_validate_json(classification.read_bytes()),
        bundle=doc,
    )


def rules_only_rate(request: ClassificationRequest, documents: int) -> float:
    """Documents/s of rules-only verification of ``documents`` copies of ``request``."""
    config = ArbiterConfig(trap_rules=load_trap_rules(), llm_enabled=False)
    started = time.perf_counter()
    for index in range(documents):
        run(request.model_copy(update={"doc_id": f"{request.doc_id}-{index}"}), config)
    return documents / (time.perf_counter() - started)


async def stub_llm_run(
    request: ClassificationRequest, documents: int, latency_s: float, concurrency: int
) -> StubLlmRun:
    """Decide ``documents`` copies at once; the stub LLM has a fixed latency and ``concurrency`` permits."""
    config = ArbiterConfig(trap_rules=load_trap_rules(), llm_enabled=True)
    permits = asyncio.Semaphore(concurrency)
    in_flight = peak = calls = 0

    async def call(llm_request: LlmRequest) -> LlmResult:
        nonlocal in_flight, peak, calls
        async with permits:
            in_flight += 1
            calls += 1
            peak = max(peak, in_flight)
            await asyncio.sleep(latency_s)
            in_flight -= 1
        return LlmResult(request_id=llm_request.request_id, judgement=LlmJudgement())

    copies = [request.model_copy(update={"doc_id": f"{request.doc_id}-{i}"}) for i in range(documents)]
    started = time.perf_counter()
    await asyncio.gather(*(arbitrate(copy, config, call) for copy in copies))
    return StubLlmRun(documents, calls, time.perf_counter() - started, latency_s, concurrency, peak)


def docs(
    documents: Annotated[int, typer.Option(help="Documents for the rules-only measurement.")] = 500,
    llm_documents: Annotated[int, typer.Option(help="Documents for the stub-LLM measurement.")] = 200,
    llm_latency_ms: Annotated[float, typer.Option(help="Fixed latency of each stub LLM call.")] = 50.0,
    concurrency: Annotated[int, typer.Option(help="LLM calls allowed in flight at once.")] = 16,
    classification: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="ClassificationOutput JSON.")
    ] = _EXAMPLES / "classification_doc2_6_clean.json",
    bundle: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="DocumentBundle JSON (8 pages by default).")
    ] = _EXAMPLES / "bundle_doc2_6.json",
) -> None:
    """Measure arbiter throughput rules-only and with a stub LLM at a configured concurrency."""
    request = load_request(classification, bundle)
    rate = rules_only_rate(request, documents)
    stub = asyncio.run(stub_llm_run(request, llm_documents, llm_latency_ms / 1000, concurrency))
    serial_s = stub.llm_calls * stub.latency_s
    table = Table(title=f"clingate bench docs ({request.bundle.total_pages}-page bundle)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("rules-only documents/s", f"{rate:,.0f}")
    table.add_row("stub LLM: documents, calls", f"{stub.documents}, {stub.llm_calls}")
    table.add_row("stub LLM: latency, concurrency bound", f"{llm_latency_ms:.0f} ms, {concurrency}")
    table.add_row("stub LLM: wall time (serialised would be)", f"{stub.wall_s:.2f} s ({serial_s:.2f} s)")
    per_doc = stub.llm_calls / stub.documents
    bound = concurrency / (per_doc * stub.latency_s)
    table.add_row("stub LLM: documents/s (bound)", f"{stub.documents_per_s:,.1f} ({bound:,.1f})")
    table.add_row("achieved concurrency / bound", f"{stub.achieved_concurrency:.1f} / {concurrency}")
    table.add_row("peak calls in flight / bound", f"{stub.peak_in_flight} / {concurrency}")
    Console().print(table)
