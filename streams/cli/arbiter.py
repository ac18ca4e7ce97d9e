"""``clingate arbiter``: the classification arbiter without Kafka.

* ``verify`` runs V1–V5 with auto-fix and retries on a classification and its bundle and prints the
  disposition JSON (``--packet-out`` also writes the review packet of an escalation);
* ``show-packet`` renders a review packet in the terminal, the matched evidence highlighted in the
  real page text around it;
* ``worker`` runs the stream processor of :mod:`streams.groups.arbiter` (its own consumer group, not part of
  ``clingate worker``);
* ``reviews`` lists the pending packets of the compacted ``clingate.docs.review-packets`` topic;
  ``review DOC_ID`` shows one and asks for the SME's decision to be published on ``clingate.docs.reviews``:
  a request on ``clingate.console.requests``, as the console's SME page asks, which the request runtime
  (``clingate worker --role requests``) checks and carries out (the docs worker then turns the review into
  ground truth and marks the packet reviewed).

LLM: ``verify`` calls the project's LLM client (``streams.llm``) when ``CLINGATE_LLM_URL`` and
``CLINGATE_LLM_MODEL`` give the operational role a server
(:func:`streams.groups.arbiter_calls.configured_call`);
otherwise, or with ``--no-llm``, it runs rules-only and says "rules-only: LLM not configured" on stderr
and in the disposition.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ValidationError
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from processors.docs.arbiter import ArbiterConfig, Finished
from processors.docs.packet import format_issue
from processors.docs.v3 import load_trap_rules
from schemas.console import Role
from schemas.docs import (
    DOCUMENT_TYPE_NAMES,
    ClassificationOutput,
    ClassificationRequest,
    DocumentBundle,
    DocumentType,
    MixtureEntry,
    ReviewDecision,
    ReviewPacket,
    Segment,
    Severity,
)
from schemas.wire import make_serde
from streams.groups.arbiter import (
    ONE_READ_FETCH_WAIT_MS,
    PacketFollower,
    make_review,
    run_worker,
)
from streams.groups.arbiter_calls import LLM_ROLE, arbitrate, configured_call
from streams.groups.metrics import DocsMetrics
from streams.llm import LlmClient
from streams.llm.config import resolve_role
from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_file
from streams.requests.check import RequestAction, publication_request
from streams.runtime.kafka_clients import ensure_catalog, producer_config
from streams.runtime.metrics import serve
from streams.runtime.settings import Settings, env_help, get_settings
from topics.catalog import CONSOLE_REQUESTS

app = typer.Typer(
    help="Classification arbiter: verify classifications, render review packets.", no_args_is_help=True
)

M = TypeVar("M", bound=BaseModel)

_SEVERITY_STYLE = {Severity.BLOCKER: "bold red", Severity.MAJOR: "yellow", Severity.MINOR: "cyan"}


def _rules_only(settings: Settings, no_llm: bool = False) -> str:
    reason = "--no-llm" if no_llm else resolve_role(settings, LLM_ROLE).status
    return f"rules-only: LLM not configured ({reason})"


async def _decide(request: ClassificationRequest, no_llm: bool) -> Finished:
    """Run the arbiter on one request with the configured LLM (or rules-only), closing the client."""
    settings = get_settings()
    trap_rules = load_trap_rules(settings.docs_trap_rules)
    async with LlmClient.from_settings(settings) as client:
        call = None if no_llm else configured_call(client)
        if call is None:
            typer.echo(_rules_only(settings, no_llm), err=True)
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
    classification: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="ClassificationOutput JSON.")
    ],
    bundle: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="DocumentBundle JSON.")],
    no_llm: Annotated[
        bool, typer.Option("--no-llm", help="Run rules-only even if an LLM is configured.")
    ] = False,
    production_label: Annotated[
        DocumentType | None, typer.Option(help="The production classifier's dominant type, for comparison.")
    ] = None,
    packet_out: Annotated[
        Path | None, typer.Option(callback=output_file, help="Write the review packet here when escalated.")
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


def _bootstrap() -> str:
    bootstrap = require_bootstrap(get_settings())
    return bootstrap


def _packets(bootstrap: str) -> PacketFollower:
    follower = PacketFollower(
        bootstrap, make_serde(get_settings().schema_registry_url), fetch_wait_ms=ONE_READ_FETCH_WAIT_MS
    )
    follower.catch_up()
    return follower


@app.command()
def worker(
    max_in_flight: Annotated[
        int | None,
        typer.Option(help=f"Documents decided at once {env_help('docs_max_in_flight')}."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help=f"Port of /metrics {env_help('docs_metrics_port')}."),
    ] = None,
) -> None:
    """Run the arbiter stream processor (consumer group CLINGATE_DOCS_GROUP_ID) until SIGINT/SIGTERM."""
    settings = get_settings()
    metrics = DocsMetrics(CollectorRegistry())
    port = settings.docs_metrics_port if metrics_port is None else metrics_port
    bootstrap = _bootstrap()
    ensure_catalog(settings, bootstrap)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with LlmClient.from_settings(settings) as client:
            call = configured_call(client, metrics.llm)
            typer.echo("LLM phases on" if call else _rules_only(settings), err=True)
            rules = load_trap_rules(settings.docs_trap_rules)
            done = await run_worker(
                bootstrap, make_serde(settings.schema_registry_url), rules, call,
                group_id=settings.docs_group_id, stop=stop,
                max_in_flight=max_in_flight or settings.docs_max_in_flight, metrics=metrics,
                session_timeout_s=settings.consumer_session_timeout_s,
            )  # fmt: skip
        typer.echo(f"stopped after {done.decided} documents", err=True)

    endpoint = serve(metrics.registry, port, settings.metrics_host)
    typer.echo(f"metrics on :{endpoint.port}/metrics", err=True)
    try:
        asyncio.run(main())
    finally:
        endpoint.close()


@app.command()
def reviews() -> None:
    """List the review packets pending an SME decision (oldest first)."""
    follower = _packets(_bootstrap())
    try:
        pending = follower.pending()
    finally:
        follower.close()
    table = Table("doc_id", "event time", "classified as", "rule", "issues")
    for packet in pending:
        dominant = DOCUMENT_TYPE_NAMES[packet.classification.dominant_type_overall]
        issues = str(packet.total_issues)
        table.add_row(packet.doc_id, packet.ts.isoformat(), dominant, str(packet.rule_fired), issues)
    Console(file=sys.stdout).print(table)
    typer.echo(f"{len(pending)} pending", err=True)


@app.command()
def review(
    doc_id: Annotated[str, typer.Argument(help="The document to review.")],
    reviewer: Annotated[str, typer.Option(help="Who decides.", prompt=True)],
    decision: Annotated[ReviewDecision, typer.Option(help="AGREES or CORRECTS.", prompt=True)],
    corrected_type: Annotated[
        DocumentType | None, typer.Option(help="The correct dominant type (CORRECTS only).")
    ] = None,
    corrected_segments: Annotated[
        Path | None,
        typer.Option(exists=True, dir_okay=False, help="JSON list of corrected segments (CORRECTS only)."),
    ] = None,
    corrected_mixture: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="JSON list of the corrected document mixture (CORRECTS only)."
        ),
    ] = None,
    notes: Annotated[str, typer.Option(help="Notes for the ground-truth record.")] = "",
) -> None:
    """Show one packet with its context highlighted and ask for the SME's decision to be published to
    clingate.docs.reviews (by the request runtime, `clingate worker --role requests`).

    The review's event time is the moment the SME decides (:func:`streams.groups.arbiter.make_review`, which
    the console's SME page uses too); it travels in a request of the reviewer, as the SME page's does
    (:func:`streams.requests.check.publication_request`), with an id of its own.
    """
    bootstrap = _bootstrap()
    follower = _packets(bootstrap)
    try:
        packet = follower.packets.get(doc_id)
    finally:
        follower.close()
    if packet is None:
        typer.echo(f"no review packet for {doc_id}: see `clingate arbiter reviews`", err=True)
        raise typer.Exit(1)
    Console(file=sys.stdout).print(render_packet(packet))
    if decision is ReviewDecision.CORRECTS and corrected_type is None:
        corrected_type = typer.prompt("Corrected dominant type", type=DocumentType)
    try:
        event = make_review(
            doc_id, reviewer, decision, corrected_type=corrected_type,
            corrected_segments=_load_list(Segment, corrected_segments),
            corrected_mixture=_load_list(MixtureEntry, corrected_mixture), notes=notes,
        )  # fmt: skip
    except ValidationError as error:
        typer.echo(f"invalid review: {error}", err=True)
        raise typer.Exit(2) from error
    serde = make_serde(get_settings().schema_registry_url)
    request = publication_request(
        RequestAction.REVIEW, event, serde, request_id=secrets.token_urlsafe(16), user=reviewer,
        role=Role.SME, at=event.ts, note=notes,
    )  # fmt: skip
    producer = Producer(producer_config(bootstrap))
    value = serde.encode(request, topic=CONSOLE_REQUESTS)
    producer.produce(CONSOLE_REQUESTS, key=request.target.encode(), value=value)
    if producer.flush(30):
        typer.echo("the review was not acknowledged by Kafka; nothing recorded, try again", err=True)
        raise typer.Exit(1)
    typer.echo(
        f"review of {doc_id} asked for ({decision.value}, request {request.request_id}): the request runtime "
        "(clingate worker --role requests) publishes it",
        err=True,
    )


def _load_list(model: type[M], path: Path | None) -> list[M] | None:
    if path is None:
        return None
    try:
        return [model.model_validate(item) for item in json.loads(path.read_bytes())]
    except (OSError, ValueError) as error:
        typer.echo(f"invalid {model.__name__} list in {path}: {error}", err=True)
        raise typer.Exit(2) from error


@app.command("show-packet")
def show_packet(
    packet: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="ReviewPacket JSON.")],
) -> None:
    """Render a review packet in the terminal."""
    Console(file=sys.stdout).print(render_packet(_load(ReviewPacket, packet)))
