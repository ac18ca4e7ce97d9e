"""The compose file and the Kubernetes manifests only use what clingate has.

No Docker engine or cluster here, so the files are checked statically: every environment variable
a clingate container gets is a real setting, every clingate command line parses with the real CLI,
every principal a container authenticates as is in the ACL plan, the broker script is valid bash
and configures what the tested local SASL broker configures.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from streams import cli
from streams.runtime.settings import Settings
from streams.testing.broker import sasl_local_kafka
from topics.acls import DEFAULT_PLAN, load_plan

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "deploy" / "compose" / "docker-compose.yml"
K8S = REPO / "deploy" / "k8s"
KAFKA_NODE = REPO / "deploy" / "kafka" / "kafka-node.sh"
PLAN = load_plan(DEFAULT_PLAN, app_id="clingate-dbpm", docs_group_id="clingate-docs")
PRINCIPALS = {p.name for p in PLAN.principals} | {PLAN.super_user}
SETTINGS_VARIABLES = {str(field.validation_alias) for field in Settings.model_fields.values()}


def _parses(arguments: list[str]) -> bool:
    """Whether the real CLI accepts ``arguments``: its commands, its options (``--help`` stops it there)."""
    return CliRunner().invoke(cli.app, [*arguments, "--help"]).exit_code == 0


def _check_command(arguments: list[str]) -> None:
    assert _parses(arguments), arguments


def _compose_services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]


def _clingate_services() -> Iterator[tuple[str, dict[str, Any]]]:
    return ((n, s) for n, s in _compose_services().items() if s.get("image", "").startswith("clingate"))


def _k8s_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _k8s_clingate_containers() -> Iterator[dict[str, Any]]:
    for doc in _k8s_documents():
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec", {}) if "template" in spec else spec.get("jobTemplate", {})
        for container in (*pod.get("initContainers", ()), *pod.get("containers", ())):
            if container["image"] == "clingate":
                yield container


def test_compose_runs_a_three_node_cluster_and_every_role() -> None:
    services = _compose_services()
    roles = {"topics", "acls", "worker-1", "docs-worker", "generator", "verifier", "prometheus", "grafana"}
    assert {"kafka-1", "kafka-2", "kafka-3", "vllm-generator", "vllm-verifier", *roles} <= services.keys()
    for name in ("vllm-generator", "vllm-verifier"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


@pytest.mark.parametrize("name", [name for name, _ in _clingate_services()])
def test_compose_clingate_service_uses_real_settings_commands_and_principals(name: str) -> None:
    service = _compose_services()[name]
    environment = service["environment"]
    assert set(environment) <= SETTINGS_VARIABLES, set(environment) - SETTINGS_VARIABLES
    user = environment["CLINGATE_KAFKA_USERNAME"]
    assert user in PRINCIPALS
    passwords = [v for v in service["volumes"] if v.startswith("./secrets")]
    assert passwords == [f"./secrets/{user}:/run/secrets/scram/{user}:ro"], "only its own password"
    _check_command(service["command"])


def test_compose_workers_keep_state_on_their_own_volumes() -> None:
    services = _compose_services()
    mounts = [v for name in ("worker-1", "worker-2") for v in services[name]["volumes"]]
    volumes = [v for v in mounts if v.startswith("worker-")]
    assert len(volumes) == len(set(volumes)) == 2


def test_compose_host_paths_exist_except_generated_certificates_and_passwords() -> None:
    for service in _compose_services().values():
        for volume in service.get("volumes", ()):
            host = volume.split(":")[0]
            generated = host.startswith(("./certs", "./secrets"))
            if host.startswith(".") and not generated:
                assert (COMPOSE.parent / host).exists(), host


def test_kubernetes_clingate_containers_use_real_settings_commands_and_principals() -> None:
    [config] = [d for d in _k8s_documents() if d["kind"] == "ConfigMap"]
    assert set(config["data"]) <= SETTINGS_VARIABLES, set(config["data"]) - SETTINGS_VARIABLES
    containers = list(_k8s_clingate_containers())
    assert len(containers) >= 6
    for container in containers:
        names = {entry["name"] for entry in container.get("env", ())}
        assert names <= SETTINGS_VARIABLES, names - SETTINGS_VARIABLES
        user = next(e["value"] for e in container["env"] if e["name"] == "CLINGATE_KAFKA_USERNAME")
        password = next(e for e in container["env"] if e["name"] == "CLINGATE_KAFKA_PASSWORD")
        assert password["valueFrom"]["secretKeyRef"] == {"name": "kafka-scram", "key": user}
        assert user in PRINCIPALS
        _check_command(container["args"])


def test_kubernetes_workers_are_a_statefulset_with_a_volume_per_pod_and_vllm_gets_gpus() -> None:
    documents = {(d["kind"], d["metadata"]["name"]): d for d in _k8s_documents() if "metadata" in d}
    worker = documents[("StatefulSet", "clingate-worker")]
    assert worker["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "state"
    assert documents[("Job", "clingate-provision")]
    for role in ("generator", "verifier"):
        [container] = documents[("Deployment", f"vllm-{role}")]["spec"]["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_kubernetes_example_secret_has_a_password_per_principal() -> None:
    secret = next(d for d in yaml.safe_load_all((K8S / "secrets.example.yaml").read_text())
                  if d["metadata"]["name"] == "kafka-scram")  # fmt: skip
    assert set(secret["stringData"]) == PRINCIPALS


def test_kustomization_lists_every_manifest_but_the_secret_example() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secrets.example.yaml"}
    assert set(kustomization["resources"]) == manifests


@pytest.mark.parametrize("arguments", [["wokrer"], ["worker", "--no-such-option"], ["topics", "acl"]])
def test_the_command_check_refuses_what_the_cli_refuses(arguments: list[str]) -> None:
    assert not _parses(arguments)


def test_broker_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(KAFKA_NODE)], check=True)


def test_broker_script_sets_every_property_the_tested_local_sasl_broker_sets(tmp_path: Path) -> None:
    """The compose/Kubernetes nodes and the integration tests' broker agree on security properties."""
    local = sasl_local_kafka(tmp_path, home=tmp_path, super_user="admin", passwords={"admin": "pw"},
                             tls_dir=tmp_path)  # fmt: skip
    script = set(re.findall(r"^([a-z][a-z0-9_.-]+)=", KAFKA_NODE.read_text(), flags=re.MULTILINE))
    assert set(local.extra_properties) <= script, set(local.extra_properties) - script
