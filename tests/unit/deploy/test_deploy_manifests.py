"""The compose file and the Kubernetes manifests only use what clingate has, and agree.

Checked statically (tests/integration/test_compose_deployment.py runs the compose deployment; no
Kubernetes cluster runs here): every environment variable a clingate container gets is a real
setting, every clingate command line parses with the real CLI, every principal a container
authenticates as is in the ACL plan, the broker script is valid bash and configures what the tested
local SASL broker configures. What the two deployments share comes from one source: the settings
(deploy/env/*.env, read by both), the images (the names ``make images`` builds), each command's
principal, and a readiness probe for every broker and long-running clingate process.
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
from streams.local.broker import LISTENER_PORTS, sasl_local_kafka
from streams.local.images import image_names
from streams.runtime.settings import Settings
from topics.acls import DEFAULT_PLAN, load_plan

REPO = Path(__file__).resolve().parents[3]
COMPOSE = REPO / "deploy" / "compose" / "docker-compose.yml"
COMPOSE_ENV = REPO / "deploy" / "compose" / ".env"
K8S = REPO / "deploy" / "k8s"
KUSTOMIZATION = REPO / "deploy" / "kustomization.yaml"
SHARED_ENV = REPO / "deploy" / "env" / "clingate.env"
KAFKA_NODE = REPO / "deploy" / "kafka" / "kafka-node.sh"
PLAN = load_plan(DEFAULT_PLAN, app_id="clingate-dbpm", docs_group_id="clingate-docs")
PRINCIPALS = {p.name for p in PLAN.principals} | {PLAN.super_user}
SETTINGS_VARIABLES = {str(field.validation_alias) for field in Settings.model_fields.values()}
PROBED = {"console": "/login"}
"""The page that says a process is up where it is not /metrics: the console's sign-in page."""


def _parses(arguments: list[str]) -> bool:
    """Whether the real CLI accepts ``arguments``: its commands, its options (``--help`` stops it there)."""
    return CliRunner().invoke(cli.app, [*arguments, "--help"]).exit_code == 0


def _check_command(arguments: list[str]) -> None:
    assert _parses(arguments), arguments


def _compose_services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]


def _clingate_services() -> Iterator[tuple[str, dict[str, Any]]]:
    return ((n, s) for n, s in _compose_services().items() if s.get("image") == "${CLINGATE_IMAGE}")


def _env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of an env file (Compose's and kustomize's format), comments skipped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def _kustomization() -> dict[str, Any]:
    return yaml.safe_load(KUSTOMIZATION.read_text(encoding="utf-8"))


def _k8s_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _pod(document: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a workload (empty for other objects)."""
    spec = document.get("spec", {})
    return dict(spec.get("template", {}).get("spec", {})) if "template" in spec else {}


def _k8s_clingate_containers() -> Iterator[dict[str, Any]]:
    for doc in _k8s_documents():
        pod = _pod(doc)
        for container in (*pod.get("initContainers", ()), *pod.get("containers", ())):
            if container["image"] == "clingate":
                yield container


def test_compose_runs_a_three_node_cluster_and_every_role() -> None:
    services = _compose_services()
    roles = {"topics", "acls", "worker-1", "docs-worker", "generator", "verifier", "prometheus", "grafana"}
    assert all(service["network_mode"] == "host" for service in services.values()), "loopback only"
    assert {"kafka-1", "kafka-2", "kafka-3", "vllm-generator", "vllm-verifier", *roles} <= services.keys()
    for name in ("vllm-generator", "vllm-verifier"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]


@pytest.mark.parametrize("name", [name for name, _ in _clingate_services()])
def test_compose_clingate_service_uses_real_settings_commands_and_principals(name: str) -> None:
    service = _compose_services()[name]
    environment = service["environment"]
    assert set(environment) <= SETTINGS_VARIABLES, set(environment) - SETTINGS_VARIABLES
    assert service["env_file"] == ["../env/clingate.env"]
    user = environment["CLINGATE_KAFKA_USERNAME"]
    assert user in PRINCIPALS
    passwords = [v for v in service["volumes"] if v.startswith("${CLINGATE_SECRETS_DIR}")]
    assert passwords == [f"${{CLINGATE_SECRETS_DIR}}/{user}:/run/secrets/scram/{user}:ro"], "its own only"
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
            generated = host.startswith(("${CLINGATE_CERTS_DIR}", "${CLINGATE_SECRETS_DIR}"))
            if host.startswith(".") and not generated:
                assert (COMPOSE.parent / host).exists(), host


def test_compose_listens_where_neither_the_tests_nor_outgoing_connections_take_ports() -> None:
    """The rehearsal runs beside other integration tests on the host's network: a broker or client of
    theirs holding a port of the deployment would keep one of its nodes from starting."""
    text = COMPOSE.read_text()
    ports = {int(p) for p in re.findall(r'_PORT: "(\d+)"', text)}
    ports |= {int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", text)}
    assert len(ports) >= 14, sorted(ports)  # six broker listeners, six metrics, the console, Prometheus
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    low, _ = LISTENER_PORTS
    assert all(port < min(first_ephemeral, low) for port in ports), sorted(ports)


def test_the_shared_settings_are_real_and_both_deployments_read_them() -> None:
    shared = _env_file(SHARED_ENV)
    assert set(shared) <= SETTINGS_VARIABLES, set(shared) - SETTINGS_VARIABLES
    generators = {g["name"]: g for g in _kustomization()["configMapGenerator"]}
    assert generators["clingate-config"]["envs"] == ["env/clingate.env"]
    literals = dict(entry.split("=", 1) for entry in generators["clingate-config"]["literals"])
    assert set(literals) <= SETTINGS_VARIABLES and not set(literals) & set(shared)
    assert generators["kafka-env"]["envs"] == ["env/kafka.env"]
    assert generators["kafka-node"]["files"] == ["kafka/kafka-node.sh"]
    for _, service in _clingate_services():
        assert not set(service["environment"]) & set(shared), "a shared setting set again"
    for container in _k8s_clingate_containers():
        assert container["envFrom"] == [{"configMapRef": {"name": "clingate-config"}}]


def test_the_memory_settings_the_console_explains_with_are_the_workers_in_both_deployments() -> None:
    """The console's memory explorer reads ``<CLINGATE_APP_ID>-dbpm-memory-changelog`` and decays with the
    DBPM settings: neither may be set for one process alone, or the console explores another memory."""
    memory = re.compile(r"CLINGATE_(APP_ID|DBPM_\w+)$")
    for name, service in _clingate_services():
        assert not [v for v in service["environment"] if memory.match(v)], name
    for container in _k8s_clingate_containers():
        assert not [e["name"] for e in container.get("env", ()) if memory.match(e["name"])], container["name"]


def test_both_deployments_run_the_images_make_images_builds() -> None:
    names = image_names(Settings())
    built = {"clingate": names.clingate, "clingate-kafka": names.kafka}
    latest = {key: name.rsplit(":", 1)[0] + ":latest" for key, name in built.items()}
    kustomized = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in _kustomization()["images"]}
    assert kustomized == latest
    compose = _env_file(COMPOSE_ENV)
    assert compose["CLINGATE_IMAGE"] == latest["clingate"]
    assert compose["CLINGATE_KAFKA_IMAGE"] == latest["clingate-kafka"]
    assert compose["CLINGATE_PROMETHEUS_IMAGE"] == names.prometheus.rsplit(":", 1)[0] + ":latest"
    images = {c["image"] for d in _k8s_documents() for c in _pod(d).get("containers", ())}
    assert images - {"clingate", "clingate-kafka"} == {"vllm/vllm-openai:v0.12.0"}


def test_each_command_runs_as_the_same_principal_in_both_deployments() -> None:
    compose = {
        tuple(s["command"]): s["environment"]["CLINGATE_KAFKA_USERNAME"] for _, s in _clingate_services()
    }
    kubernetes = {
        tuple(c["args"]): next(e["value"] for e in c["env"] if e["name"] == "CLINGATE_KAFKA_USERNAME")
        for c in _k8s_clingate_containers()
    }
    assert compose == kubernetes


def test_every_broker_and_long_running_process_has_a_readiness_probe_in_both() -> None:
    services = _compose_services()
    for name in ("kafka-1", "kafka-2", "kafka-3"):
        assert "KAFKA_CLIENT_PORT" in " ".join(services[name]["healthcheck"]["test"])
    for name, service in _clingate_services():
        if service["restart"] == "unless-stopped":
            assert PROBED.get(name, "/metrics") in " ".join(service["healthcheck"]["test"]), name
    for document in _k8s_documents():
        for container in _pod(document).get("containers", ()):
            if document["kind"] in ("StatefulSet", "Deployment"):
                assert "readinessProbe" in container, (document["metadata"]["name"], container["name"])
                if container["image"] == "clingate":
                    probed = PROBED.get(document["metadata"]["name"], "/metrics")
                    assert container["readinessProbe"]["httpGet"]["path"] == probed


def test_kubernetes_clingate_containers_use_real_settings_commands_and_principals() -> None:
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
    manifests = {f"k8s/{p.name}" for p in K8S.glob("*.yaml")} - {"k8s/secrets.example.yaml"}
    assert set(_kustomization()["resources"]) == manifests


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
