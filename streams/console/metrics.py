"""The console's Prometheus metrics, served at ``/metrics`` on its own port.

What holds: a request refused before anyone signed in (a sign-in form posted without its token, a body
that cannot be read, a failed or throttled sign-in, one refused while too many were under way) is counted
here by its reason and leaves no record on the audit trail, so that an anonymous client cannot write that
topic, which is kept 365 days, at the rate it sends requests. The audit trail keeps what signed-in people do
(:mod:`streams.console.audit`). Each application has a registry of its own (the tests build many).
"""

from __future__ import annotations

from enum import StrEnum

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest


class Refusal(StrEnum):
    """Why a request was refused without an audit record (the ``reason`` label)."""

    CSRF = "csrf"
    """A POST without a signed-in session's CSRF token (the sign-in form's included)."""
    MALFORMED = "malformed"
    """A body that cannot be read as a form of text fields (bytes not of its charset, an unknown charset,
    multipart without its boundary, a Content-Encoding it is not in, a file)."""
    NOT_A_NAME = "not-a-user-name"
    """A sign-in whose name cannot be any user's."""
    WRONG_PASSWORD = "wrong-password"
    """A sign-in whose name and password do not match (the password was checked)."""
    THROTTLED = "throttled"
    """A sign-in refused unchecked: its name and address, or its address, is locked."""
    BUSY = "busy"
    """A sign-in refused unchecked: too many password checks were under way."""


class ConsoleMetrics:
    """The console's metrics in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.refused = Counter(
            "clingate_console_refused", "Requests the console refused without an audit record, by reason.",
            ["reason"], registry=self.registry,
        )  # fmt: skip
        for reason in Refusal:
            self.refused.labels(reason.value)

    def refuse(self, reason: Refusal) -> None:
        """Count a request refused for ``reason``."""
        self.refused.labels(reason.value).inc()


METRICS = web.AppKey("metrics", ConsoleMetrics)


def refused(request: web.Request, reason: Refusal) -> None:
    """Count ``request`` as refused for ``reason``."""
    request.app[METRICS].refuse(reason)


async def metrics_page(request: web.Request) -> web.StreamResponse:
    """``GET /metrics``: the metrics in Prometheus' text format."""
    return web.Response(
        body=generate_latest(request.app[METRICS].registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )
