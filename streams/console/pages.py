"""Rendering the console's pages: Jinja2 templates from ``templates/``, the navigation of a role, and the
error a page shows when Kafka does not answer.

What holds: every template is rendered with autoescaping on (a patient id or a user name is text, never
markup) and with :class:`jinja2.StrictUndefined` (a misspelt variable fails the test that renders it
instead of showing nothing). Every page gets the request's session (``session``: who is signed in, with
which role) and its CSRF token (``csrf_token``), which every form template embeds as the hidden field
:data:`CSRF_FIELD`; the navigation lists only the pages of the session's role (:func:`pages_of`). An id
put into a link's path goes through the ``segment`` filter (:func:`segment`), in every template, and so
does one put into a redirect's path. The pages are plain HTML and one CSS file served from ``static/``: no
script, no build step, nothing fetched from another site.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import jinja2
from aiohttp import web
from confluent_kafka import KafkaException

from schemas.console import Role
from streams.console.sessions import SESSION

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

CSRF_FIELD = "csrf_token"
"""The form field that carries the session's CSRF token."""


def segment(value: object) -> str:
    """``value`` as one segment of a URL's path: every character but ASCII letters, digits and ``-._~``
    percent-encoded, ``/`` and ``?`` included, so that an id (a patient's, a packet's, a candidate's, a
    turn's) can neither add a segment nor climb out of its page (``../../dead-letters`` is
    ``..%2F..%2Fdead-letters``). The server decodes it back into the one id. An id that is ``.`` or ``..``
    alone stays a dot segment, which a browser resolves whatever its encoding (the URL standard)."""
    return quote(str(value), safe="")


_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENVIRONMENT.filters["segment"] = segment


@dataclass(frozen=True)
class PageLink:
    """A page of the navigation and the roles that may open it."""

    path: str
    title: str
    roles: frozenset[Role]


NAVIGATION = web.AppKey("navigation", tuple[PageLink, ...])
"""Every page of the application that the navigation lists, in order."""


class Unavailable(RuntimeError):
    """What a page shows could not be read (Kafka did not answer in time); the message says what."""


T = TypeVar("T")


async def read_in_thread(what: str, read: Callable[..., T], *args: object) -> T:
    """``read(*args)``, a blocking read of Kafka, in a thread (the event loop goes on); a Kafka error or
    a timeout is :class:`Unavailable`, saying that ``what`` could not be read."""
    try:
        return await asyncio.to_thread(read, *args)
    except (KafkaException, TimeoutError) as exc:
        raise Unavailable(f"{what} could not be read: {exc}") from exc


def pages_of(request: web.Request) -> list[PageLink]:
    """The pages the request's session may open (none without a signed-in session)."""
    session = request.get(SESSION)
    role = session.role if session is not None else None
    return [page for page in request.app[NAVIGATION] if role in page.roles]


def render(request: web.Request, template: str, *, status: int = 200, **context: Any) -> web.Response:
    """``template`` rendered for ``request`` (module docstring) as an HTML response."""
    session = request.get(SESSION)
    html = _ENVIRONMENT.get_template(template).render(
        session=session,
        csrf_field=CSRF_FIELD,
        csrf_token=session.csrf if session is not None else "",
        navigation=pages_of(request),
        **context,
    )
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")
