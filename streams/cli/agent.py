"""``clingate agent``: the clinician's agent (DocGemma's graph) as a worker, a one-shot question, a replay.

See :mod:`streams.agent.worker` (the consumer group), :mod:`streams.agent.runner` (one turn) and
docs/agent.md.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_file
from streams.runtime.settings import env_help, get_settings

app = typer.Typer(
    help="The clinician's agent: worker, one-shot questions, trace replay.", no_args_is_help=True
)


@app.command()
def worker(
    max_in_flight: Annotated[
        int | None, typer.Option(help=f"Conversations at once {env_help('agent_max_in_flight')}.")
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help=f"/metrics port, 0: off {env_help('agent_metrics_port')}."),
    ] = None,
) -> None:
    """Answer clingate.agent.requests until SIGINT/SIGTERM (responses, traces, proposals)."""
    from streams.agent.worker import run_agent
    from streams.groups.llm import run_until_signalled

    settings = get_settings()
    bootstrap = require_bootstrap(settings)
    _require_llm(settings)
    port = settings.agent_metrics_port if metrics_port is None else metrics_port
    loop = run_until_signalled(run_agent, bootstrap, settings, port, max_in_flight=max_in_flight)
    typer.echo(f"stopped after {loop.processed} requests", err=True)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The clinician's question.")],
    patient_bundle: Annotated[
        list[Path] | None,
        typer.Option(
            "--patient-bundle",
            exists=True,
            dir_okay=False,
            help="A FHIR R4 Bundle (or resource) JSON file; repeatable.",
        ),
    ] = None,
    patient: Annotated[str | None, typer.Option(help="The patient in context (an id).")] = None,
    image: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="An image attached to the question.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the turn as JSON.")] = False,
    record: Annotated[
        Path | None,
        typer.Option(
            callback=output_file, help="Write the request and its trace here (for `clingate agent replay`)."
        ),
    ] = None,
) -> None:
    """Run the graph once in this process against CLINGATE_LLM_URL and print the answer, the path and each
    node's decision."""
    from schemas.agent import AgentRequest
    from streams.agent.local import answer_locally

    settings = get_settings()
    _require_llm(settings)
    request = AgentRequest(
        conversation_id=f"cli-{uuid.uuid4().hex[:12]}", request_id=f"cli-{uuid.uuid4().hex[:12]}",
        event_time=datetime.now(UTC), query=question, patient_id=patient,
        image_ref=None if image is None else str(image.resolve()),
    )  # fmt: skip
    try:
        turn = asyncio.run(answer_locally(request, settings, list(patient_bundle or [])))
    except (OSError, ValueError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    if record is not None:
        traces = [t.model_dump(mode="json") for t in turn.result.traces]
        record.write_text(
            json.dumps({"request": request.model_dump(mode="json"), "traces": traces}, indent=2) + "\n",
            encoding="utf-8",
        )
    if as_json:
        typer.echo(json.dumps(turn.summary(), indent=2))
        return
    typer.echo(turn.text())


@app.command()
def replay(
    recording: Annotated[
        Path | None,
        typer.Argument(
            exists=True, dir_okay=False, help="A recording written by `clingate agent ask --record`."
        ),
    ] = None,
    conversation: Annotated[str | None, typer.Option(help="Conversation id (replay from Kafka).")] = None,
    request_id: Annotated[
        str | None, typer.Option("--request", help="Request id (replay from Kafka).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the replayed turn as JSON.")] = False,
) -> None:
    """Re-run a recorded turn from its trace, with no model or tool call, and check that it reproduces the
    recorded decisions and answer (exit 1 if it does not)."""
    from streams.agent.local import Replayed, replay_from_kafka, replay_recording
    from streams.groups.llm import default_serde

    if recording is not None:
        replayed: Replayed = replay_recording(json.loads(recording.read_text(encoding="utf-8")))
    elif conversation and request_id:
        settings = get_settings()
        try:
            replayed = replay_from_kafka(
                require_bootstrap(settings), default_serde(settings), conversation, request_id
            )
        except LookupError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from error
    else:
        typer.echo("error: give a recording file, or --conversation and --request", err=True)
        raise typer.Exit(2)
    if as_json:
        typer.echo(json.dumps(replayed.summary(), indent=2))
    else:
        typer.echo(replayed.text())
    if not replayed.reproduced:
        raise typer.Exit(1)


def _require_llm(settings: Any) -> None:
    from streams.llm import Role
    from streams.llm.config import resolve_role

    config = resolve_role(settings, Role.DEFAULT)
    if config.endpoint is None:
        typer.echo(f"error: {config.status}", err=True)
        raise typer.Exit(2)
