"""The vLLM servers' structured-outputs backend is one setting with one definition.

``deploy/vllm/serve.sh`` is run with a stand-in ``vllm`` on the PATH that prints its arguments (no GPU
here): each ``STRUCTURED_OUTPUTS_BACKEND`` gives the engine config
:func:`~streams.llm.serve.vllm_inprocess.structured_outputs_config` defines for the in-process backend,
xgrammar by default, and anything else is refused. The compose file and the Kubernetes manifests serve
with the default.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from streams.llm.serve.vllm_inprocess import (
    DEFAULT_STRUCTURED_OUTPUTS_BACKEND,
    STRUCTURED_OUTPUTS_BACKENDS,
    structured_outputs_config,
)

REPO = Path(__file__).resolve().parents[3]
SERVE = REPO / "deploy" / "vllm" / "serve.sh"
FLAG = "--structured-outputs-config"


def _serve(tmp_path: Path, role: str, **env: str) -> subprocess.CompletedProcess[str]:
    stub = tmp_path / "vllm"
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES" "$@"\n')
    stub.chmod(0o755)
    inherited = {k: v for k, v in os.environ.items() if k != "STRUCTURED_OUTPUTS_BACKEND"}
    environment = {**inherited, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", **env}
    return subprocess.run(
        ["bash", str(SERVE), role], env=environment, capture_output=True, text=True, timeout=30, check=False
    )


def _config_of(args: list[str]) -> dict[str, object]:
    return json.loads(args[args.index(FLAG) + 1])


@pytest.mark.parametrize("backend", [None, *STRUCTURED_OUTPUTS_BACKENDS])
def test_serve_sh_passes_the_chosen_backends_engine_config(tmp_path: Path, backend: str | None) -> None:
    env = {} if backend is None else {"STRUCTURED_OUTPUTS_BACKEND": backend}
    result = _serve(tmp_path, "medgemma", **env)
    assert result.returncode == 0, result.stderr
    args = result.stdout.splitlines()
    assert args[:3] == ["CUDA_VISIBLE_DEVICES=0", "serve", "google/medgemma-1.5-4b-it"]
    assert _config_of(args) == structured_outputs_config(backend or DEFAULT_STRUCTURED_OUTPUTS_BACKEND)


def test_serve_sh_keeps_the_papers_settings_for_the_70b_roles(tmp_path: Path) -> None:
    result = _serve(tmp_path, "generator", STRUCTURED_OUTPUTS_BACKEND="outlines")
    args = result.stdout.splitlines()
    assert args[0] == "CUDA_VISIBLE_DEVICES=0,1" and "--enable-chunked-prefill" in args
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert _config_of(args) == {"backend": "outlines"}


def test_serve_sh_refuses_another_backend(tmp_path: Path) -> None:
    result = _serve(tmp_path, "medgemma", STRUCTURED_OUTPUTS_BACKEND="guidance")
    assert result.returncode == 2 and "use xgrammar or outlines" in result.stderr
    assert not result.stdout, "vllm was not started"


def _flag_values(args: list[str]) -> list[dict[str, object]]:
    return [json.loads(a.split("=", 1)[1]) for a in args if a.startswith(f"{FLAG}=")]


def test_compose_and_kubernetes_serve_with_the_default_backend() -> None:
    compose = yaml.safe_load((REPO / "deploy" / "compose" / "docker-compose.yml").read_text())
    k8s = list(yaml.safe_load_all((REPO / "deploy" / "k8s" / "llm.yaml").read_text()))
    configs = [c for s in compose["services"].values() for c in _flag_values(s.get("command") or [])]
    configs += [
        c
        for d in k8s
        if d and d.get("kind") == "Deployment"
        for container in d["spec"]["template"]["spec"]["containers"]
        for c in _flag_values(container.get("args") or [])
    ]
    assert len(configs) == 4
    assert all(c == structured_outputs_config(DEFAULT_STRUCTURED_OUTPUTS_BACKEND) for c in configs)
