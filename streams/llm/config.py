"""Where each role's LLM calls go: endpoint resolution from :class:`streams.runtime.settings.Settings`.

Resolution per role (names kept exactly: external tools rely on them):

* URL: ``CLINGATE_GENERATOR_URL`` / ``CLINGATE_VERIFIER_URL`` / ``CLINGATE_VISION_URL`` (the agent's
  image analysis) for their role, else ``CLINGATE_LLM_URL``; the default role (operational, synthesis
  and the agent's other calls) uses ``CLINGATE_LLM_URL`` only.
* model: ``CLINGATE_GENERATOR_MODEL`` / ``CLINGATE_VERIFIER_MODEL`` / ``CLINGATE_VISION_MODEL``, else
  ``CLINGATE_LLM_MODEL``.

A role with no URL is *off*: its calls return ``LlmFailed(kind=DISABLED)`` at once and the status line
says which variable turns it on. A role with a URL but no model is also off (and says so) rather than
guessing: vLLM answers 404 for an unknown model name, and the served name is the operator's to choose.
The URL is the OpenAI base URL including ``/v1``; it is used as given (no path is guessed).
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.llm.calls import Role
from streams.runtime.settings import Settings

_URL_VARS = {
    Role.GENERATOR: "CLINGATE_GENERATOR_URL",
    Role.VERIFIER: "CLINGATE_VERIFIER_URL",
    Role.VISION: "CLINGATE_VISION_URL",
    Role.DEFAULT: "CLINGATE_LLM_URL",
}
_MODEL_VARS = {
    Role.GENERATOR: "CLINGATE_GENERATOR_MODEL",
    Role.VERIFIER: "CLINGATE_VERIFIER_MODEL",
    Role.VISION: "CLINGATE_VISION_MODEL",
    Role.DEFAULT: "CLINGATE_LLM_MODEL",
}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One OpenAI-compatible server and the model name to send it.

    Attributes:
        base_url: the OpenAI base URL, including ``/v1``, without a trailing slash.
        model: the served model name.
    """

    base_url: str
    model: str

    def __post_init__(self) -> None:
        scheme, _, rest = self.base_url.partition("://")
        if scheme not in ("http", "https") or not rest.strip("/"):
            raise ValueError(f"{self.base_url!r} is not an http(s) base URL such as http://127.0.0.1:8000/v1")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))


@dataclass(frozen=True, slots=True)
class RoleConfig:
    """A role's resolved endpoint, or why it is off.

    Attributes:
        role: the role.
        endpoint: where its calls go; None when the role is off.
        status: one human-readable line for logs and ``--help``-style status output.
    """

    role: Role
    endpoint: Endpoint | None
    status: str


def enabling_variables(role: Role) -> str:
    """The environment variables that give ``role`` a server, for operator-facing messages.

    Args:
        role: the role.

    Returns:
        The URL and model variables, e.g. for the verifier
        ``"CLINGATE_VERIFIER_URL or CLINGATE_LLM_URL, with CLINGATE_VERIFIER_MODEL or CLINGATE_LLM_MODEL"``.
    """
    urls = "CLINGATE_LLM_URL" if role is Role.DEFAULT else f"{_URL_VARS[role]} or CLINGATE_LLM_URL"
    models = "CLINGATE_LLM_MODEL" if role is Role.DEFAULT else f"{_MODEL_VARS[role]} or CLINGATE_LLM_MODEL"
    return f"{urls}, with {models}"


def resolve_role(settings: Settings, role: Role) -> RoleConfig:
    """Resolve one role's endpoint (role URL > LLM URL > off; role model > LLM model > off).

    Args:
        settings: the process settings.
        role: the role to resolve.

    Returns:
        The role's configuration with a status line saying where calls go or why they are off.
    """
    role_url = {
        Role.GENERATOR: settings.generator_url, Role.VERIFIER: settings.verifier_url,
        Role.VISION: settings.vision_url,
    }.get(role)  # fmt: skip
    role_model = {
        Role.GENERATOR: settings.generator_model, Role.VERIFIER: settings.verifier_model,
        Role.VISION: settings.vision_model,
    }.get(role)  # fmt: skip
    url = role_url or settings.llm_url
    model = role_model or settings.llm_model
    if url is None:
        return RoleConfig(role, None, f"{role}: LLM phases off (no server; set {enabling_variables(role)})")
    if model is None:
        return RoleConfig(
            role, None, f"{role}: LLM phases off ({url} has no model name; set {enabling_variables(role)})"
        )
    try:
        endpoint = Endpoint(url, model)
    except ValueError as exc:
        return RoleConfig(role, None, f"{role}: LLM phases off ({exc})")
    return RoleConfig(role, endpoint, f"{role}: {endpoint.base_url} model {model}")


def resolve_roles(settings: Settings) -> dict[Role, RoleConfig]:
    """Resolve every role.

    Args:
        settings: the process settings.

    Returns:
        One :class:`RoleConfig` per role.
    """
    return {role: resolve_role(settings, role) for role in Role}
