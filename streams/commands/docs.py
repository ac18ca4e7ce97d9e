"""``clingate docs``: the classification arbiter without Kafka.

* ``verify`` runs V1–V5 with auto-fix and retries on a classification and its bundle and prints the
  disposition JSON (``--packet-out`` also writes the review packet of an escalation);
* ``show-packet`` renders a review packet in the terminal, the matched evidence highlighted in the
  real page text around it.

LLM: ``verify`` calls the project's LLM client (``streams.llm``) when ``CLINGATE_LLM_URL`` and
``CLINGATE_LLM_MODEL`` give the operational role a server (:func:`streams.docs_arbiter.configured_call`);
otherwise, or with ``--no-llm``, it runs rules-only and says "rules-only: LLM not configured" on stderr
and in the disposition.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from processors.docs.arbiter import ArbiterConfig, Finished
from processors.docs.packet import format_issue
from processors.docs.v3 import load_trap_rules
from schemas.docs import (
    DOCUMENT_TYPE_NAMES,
    ClassificationOutput,
    ClassificationRequest,
    DocumentBundle,
    DocumentType,
    ReviewPacket,
    Severity,
)
from streams.docs_arbiter import LLM_ROLE, arbitrate, configured_call
from streams.llm import LlmClient
from streams.llm.config import resolve_role
from streams.settings import get_settings

app = typer.Typer(
    help="Classification arbiter: verify classifications, render review packets.", no_args_is_help=True
)

M = TypeVar("M", bound=BaseModel)

_SEVERITY_STYLE = {Severity.BLOCKER: "bold red", Severity.MAJOR: "yellow", Severity.MINOR: "cyan"}


async def _decide(request: ClassificationRequest, no_llm: bool) -> Finished:
    """Run the arbiter on one request with the configured LLM (or rules-only), closing the client."""
    settings = get_settings()
    trap_rules = load_trap_rules(settings.docs_trap_rules)
    async with LlmClient.from_settings(settings) as client:
        call = None if no_llm else configured_call(client)
        if call is None:
            reason = "--no-llm" if no_llm else resolve_role(settings, LLM_ROLE).status
            typer.echo(f"rules-only: LLM not configured ({reason})", err=True)
        config = ArbiterConfig(trap_rules=trap_rules, llm_enabled=call is not None)
        return await arbitrate(request, config, call)


def _load(model: type[M], path: Path) -> M:
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as error:
        # Structurally invalid input is not one of the seed's issue kinds: refuse it (the stream
        # processor sends such records to the DLQ).
        typer.echo(f"invalid {model.__name__} in {path}: {error}", err=True)
        raise typer.Exit(code=2) from error


@app.command()
def verify(
    classification: Annotated[Path, typer.Option(help="ClassificationOutput JSON.")],
    bundle: Annotated[Path, typer.Option(help="DocumentBundle JSON.")],
    no_llm: Annotated[
        bool, typer.Option("--no-llm", help="Run rules-only even if an LLM is configured.")
    ] = False,
    production_label: Annotated[
        DocumentType | None, typer.Option(help="The production classifier's dominant type, for comparison.")
    ] = None,
    packet_out: Annotated[
        Path | None, typer.Option(help="Write the review packet here when escalated.")
    ] = None,
) -> None:
    """Verify a classification against its bundle and print the disposition JSON."""
    output = _load(ClassificationOutput, classification)
    doc = _load(DocumentBundle, bundle)
    request = ClassificationRequest(
        doc_id=doc.doc_id,
        ts=datetime.fromisoformat(doc.processing_timestamp.replace("Z", "+00:00")),
        classification=output,
        bundle=doc,
        production_label=production_label,
    )
    finished = asyncio.run(_decide(request, no_llm))
    typer.echo(json.dumps(finished.disposition.model_dump(mode="json"), indent=2, ensure_ascii=False))
    if packet_out is not None and finished.packet is not None:
        packet_out.write_text(
            json.dumps(finished.packet.model_dump(mode="json"), indent=2, ensure_ascii=False)
        )
        typer.echo(f"review packet written to {packet_out}", err=True)


def render_packet(packet: ReviewPacket) -> RenderableType:
    """A review packet for the terminal: document info, issues as the seed formats them, page context.

    In each context the matched paragraph is highlighted and the located text within it reversed.
    """
    info = Table.grid(padding=(0, 2))
    info.add_row("Document", f"{packet.doc_id} ({packet.pdf_filename}, {packet.total_pages} pages)")
    info.add_row(
        "Decision", f"{packet.v5_decision.value} (V5 rule {packet.rule_fired}, {packet.reason.value})"
    )
    info.add_row("Classified as", DOCUMENT_TYPE_NAMES[packet.classification.dominant_type_overall])
    if packet.production_label is not None:
        verdict = "differs" if packet.production_differs else "agrees"
        info.add_row("Production", f"{DOCUMENT_TYPE_NAMES[packet.production_label]} ({verdict})")
    info.add_row("Review status", packet.review_status.value)
    info.add_row("Issues", str(packet.total_issues))
    parts: list[RenderableType] = [Panel(info, title="SME review packet")]
    contexts = {context.issue_id: context for context in packet.contexts}
    for issue in packet.issues:
        body: list[RenderableType] = [Text(format_issue(issue))]
        context = contexts.get(issue.id)
        if context is not None and context.segment_start_page is not None:
            dominant = (
                DOCUMENT_TYPE_NAMES[context.segment_dominant_type] if context.segment_dominant_type else "?"
            )
            body.append(
                Text(
                    f"Segment pages {context.segment_start_page}-{context.segment_end_page}, {dominant}",
                    "dim",
                )
            )
        if context is not None and context.paragraphs:
            body.append(Text(f"Page {context.page} (actual text):", "bold"))
            for paragraph in context.paragraphs:
                line = Text(f"  ¶{paragraph.index + 1} {paragraph.text}")
                if paragraph.is_match:
                    line.stylize("on dark_green")
                    if context.located_text:
                        line.highlight_words([context.located_text], "reverse", case_sensitive=False)
                body.append(line)
        parts.append(Panel(Group(*body), border_style=_SEVERITY_STYLE[issue.severity]))
    return Group(*parts)


@app.command("show-packet")
def show_packet(packet: Annotated[Path, typer.Option(help="ReviewPacket JSON.")]) -> None:
    """Render a review packet in the terminal."""
    Console(file=sys.stdout).print(render_packet(_load(ReviewPacket, packet)))
