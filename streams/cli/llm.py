"""``clingate llm``: where LLM calls go, the local OpenAI-compatible server (test answers or SmolLM2) and
the in-process vLLM backend's self-check on a GPU node."""

from __future__ import annotations

from typing import Annotated, cast

import typer

from streams.llm.config import resolve_roles
from streams.llm.serve.server import serve
from streams.runtime.settings import get_settings

app = typer.Typer(
    help="LLM serving: per-role status, a local OpenAI-compatible server, the in-process vLLM check.",
    no_args_is_help=True,
)


@app.command()
def status() -> None:
    """Print, per role, the server and model its calls go to, or why its LLM phases are off."""
    for config in resolve_roles(get_settings()).values():
        typer.echo(config.status)


app.command()(serve)


@app.command("vllm-check")
def vllm_check(
    model: Annotated[str, typer.Option(help="Hugging Face model id or local path of the checkpoint.")],
    structured_outputs_backend: Annotated[
        str, typer.Option(help="Grammar engine: xgrammar (default) or outlines (docs/llm-serving.md).")
    ] = "xgrammar",
    tensor_parallel_size: Annotated[int, typer.Option(help="GPUs for the model.")] = 2,
    max_model_len: Annotated[int, typer.Option(help="Context window.")] = 8192,
    gpu_memory_utilization: Annotated[float, typer.Option(help="Share of GPU memory vLLM may take.")] = 0.90,
) -> None:
    """Load the in-process vLLM backend (the gpu extra, on a GPU node) and make one constrained call of
    each verdict type; print each result, exit 1 if any call failed, 2 if the engine cannot load."""
    from streams.llm import LlmOk
    from streams.llm.serve.vllm_inprocess import (
        SELF_CHECK_CALLS,
        STRUCTURED_OUTPUTS_BACKENDS,
        EngineConfig,
        StructuredOutputsBackend,
        VllmInProcess,
        self_check,
    )

    if structured_outputs_backend not in STRUCTURED_OUTPUTS_BACKENDS:
        typer.echo(
            f"error: --structured-outputs-backend is one of {list(STRUCTURED_OUTPUTS_BACKENDS)}", err=True
        )
        raise typer.Exit(2)
    config = EngineConfig(
        model,
        tensor_parallel_size=tensor_parallel_size,
        max_model_len=max_model_len,
        gpu_memory_utilization=gpu_memory_utilization,
        structured_outputs_backend=cast(StructuredOutputsBackend, structured_outputs_backend),
    )
    try:
        backend = VllmInProcess.load(config)
    except RuntimeError as exc:  # vllm missing: say how to install it, no traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    results = self_check(backend)
    for (call_type, _, _), result in zip(SELF_CHECK_CALLS, results, strict=True):
        if isinstance(result, LlmOk):
            typer.echo(f"{call_type}: ok {result.value.model_dump_json()} ({result.latency_s:.2f} s)")
        else:
            typer.echo(f"{call_type}: {result.kind} {result.operator_detail}")
    typer.echo(f"structured outputs: {structured_outputs_backend}; model: {model}")
    if not all(isinstance(r, LlmOk) for r in results):
        raise typer.Exit(1)
