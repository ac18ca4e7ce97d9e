"""Per-role endpoint resolution from the settings: role URL > CLINGATE_LLM_URL > off."""

from __future__ import annotations

import asyncio

import pytest

from streams.llm import CallType, FailureKind, LlmClient, Role, resolve_role, resolve_roles
from streams.llm.schemas import NerVerdict
from streams.runtime.settings import Settings

VARS = (
    "CLINGATE_LLM_URL",
    "CLINGATE_GENERATOR_URL",
    "CLINGATE_VERIFIER_URL",
    "CLINGATE_LLM_MODEL",
    "CLINGATE_GENERATOR_MODEL",
    "CLINGATE_VERIFIER_MODEL",
)


@pytest.fixture
def env(monkeypatch):
    for name in VARS:
        monkeypatch.delenv(name, raising=False)

    def settings(**values: str) -> Settings:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        return Settings()

    return settings


def test_nothing_set_means_every_role_is_off_and_says_how_to_turn_it_on(env):
    roles = resolve_roles(env())
    assert all(config.endpoint is None for config in roles.values())
    assert "off" in roles[Role.GENERATOR].status
    assert "CLINGATE_GENERATOR_URL or CLINGATE_LLM_URL" in roles[Role.GENERATOR].status


def test_llm_url_serves_every_role(env):
    settings = env(CLINGATE_LLM_URL="http://llm:8000/v1/", CLINGATE_LLM_MODEL="m")
    for role in Role:
        endpoint = resolve_role(settings, role).endpoint
        assert endpoint is not None and (endpoint.base_url, endpoint.model) == ("http://llm:8000/v1", "m")


def test_role_url_and_model_override_the_shared_ones(env):
    settings = env(
        CLINGATE_LLM_URL="http://llm/v1",
        CLINGATE_LLM_MODEL="shared",
        CLINGATE_GENERATOR_URL="http://gen/v1",
        CLINGATE_VERIFIER_MODEL="mmed",
    )
    generator = resolve_role(settings, Role.GENERATOR).endpoint
    verifier = resolve_role(settings, Role.VERIFIER).endpoint
    default = resolve_role(settings, Role.DEFAULT).endpoint
    assert (generator.base_url, generator.model) == ("http://gen/v1", "shared")
    assert (verifier.base_url, verifier.model) == ("http://llm/v1", "mmed")
    assert (default.base_url, default.model) == ("http://llm/v1", "shared")


def test_role_url_alone_enables_only_that_role(env):
    roles = resolve_roles(env(CLINGATE_VERIFIER_URL="http://v/v1", CLINGATE_VERIFIER_MODEL="v"))
    assert roles[Role.VERIFIER].endpoint is not None
    assert roles[Role.GENERATOR].endpoint is None and roles[Role.DEFAULT].endpoint is None


def test_url_without_a_model_is_off_and_says_so(env):
    config = resolve_role(env(CLINGATE_LLM_URL="http://llm/v1"), Role.VERIFIER)
    assert config.endpoint is None and "no model name" in config.status


def test_blank_variables_mean_unset(env):
    assert resolve_role(env(CLINGATE_LLM_URL="  ", CLINGATE_LLM_MODEL="m"), Role.DEFAULT).endpoint is None


def test_client_from_settings_reports_disabled_roles_without_io(env):
    async def main():
        async with LlmClient.from_settings(env()) as client:
            return client.enabled(Role.VERIFIER), await client.call(CallType.NER_VERDICT, NerVerdict, [])

    enabled, result = asyncio.run(main())
    assert not enabled and result.kind is FailureKind.DISABLED


def test_status_command_says_which_roles_are_off(env):
    from typer.testing import CliRunner

    from streams.cli.llm import app
    from streams.runtime.settings import get_settings

    env(CLINGATE_VERIFIER_URL="http://v:8001/v1", CLINGATE_LLM_MODEL="m")
    get_settings.cache_clear()
    try:
        output = CliRunner().invoke(app, ["status"]).output
    finally:
        get_settings.cache_clear()
    assert "verifier: http://v:8001/v1 model m" in output
    assert "generator: LLM phases off" in output and "default: LLM phases off" in output


def test_a_url_without_scheme_is_off_and_says_why(env):
    config = resolve_role(env(CLINGATE_LLM_URL="localhost:8000/v1", CLINGATE_LLM_MODEL="m"), Role.DEFAULT)
    assert config.endpoint is None and "not an http(s) base URL" in config.status
