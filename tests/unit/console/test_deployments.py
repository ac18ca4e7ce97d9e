"""Both deployments serve the console behind the TLS proxy they document, so both mark its session cookie
``Secure``: a browser then never sends it over plain HTTP."""

from __future__ import annotations

from pathlib import Path

import yaml

from streams.runtime.settings import Settings

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
SECURE_COOKIES = str(Settings.model_fields["console_secure_cookies"].validation_alias)


def _secure(value: object) -> bool:
    return Settings.model_validate({SECURE_COOKIES: value}).console_secure_cookies


def test_compose_marks_the_consoles_cookie_secure() -> None:
    compose = yaml.safe_load((DEPLOY / "compose" / "docker-compose.yml").read_text(encoding="utf-8"))
    assert _secure(compose["services"]["console"]["environment"][SECURE_COOKIES])


def test_kubernetes_marks_the_consoles_cookie_secure() -> None:
    documents = yaml.safe_load_all((DEPLOY / "k8s" / "workers.yaml").read_text(encoding="utf-8"))
    console = ("Deployment", "console")
    [deployment] = [d for d in documents if d and (d["kind"], d["metadata"]["name"]) == console]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert _secure({e["name"]: e.get("value") for e in container["env"]}[SECURE_COOKIES])
