"""Who may do what in the console: sign-in and sign-out, the session cookie, CSRF on every POST, and the
role each page declares.

What holds, for every request (:func:`guard`, the application's middleware):

* its session is the one its cookie names, if that session is still valid (:class:`Sessions`); the cookie
  is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page sends it),
  ``Path=/``, and ``Secure`` with ``CLINGATE_CONSOLE_SECURE_COOKIES`` (behind a TLS proxy);
* a POST is refused (403) unless its form carries the session's CSRF token, whatever its path (the
  sign-in form's token is its anonymous session's); a body that cannot be read as a form of text fields
  (bytes not of its charset, an unknown charset, multipart without its boundary, a Content-Encoding it
  is not in, a file) is refused with 400;
* a page that declares roles (:func:`requires`) is answered only for a signed-in session of one of them:
  without one the browser is sent to ``/login?next=<the page>``, with another role it gets a 403 page,
  never the content; pages that declare none (the sign-in page, the stylesheet) are public.

Sign-in (:func:`sign_in`) checks the password on the pool of password checks (:class:`PasswordChecks`:
never the pool the pages read Kafka on; 429 when too many checks are under way), refuses a name and
address whose failures locked them without checking the password (:class:`SignInThrottle`), and records a
sign-in on the audit trail (:mod:`streams.console.audit`) before its session is made. A refused sign-in
is logged with the client's address (:func:`client_address`: the peer's, or behind trusted proxies the
one ``X-Forwarded-For`` names) and, for the name, its keyed hash (:meth:`Access.tag`: the same name
gives the same tag while the console runs, and nobody without the process's key can tell which name it
is), since a name typed may be a password typed in the wrong field; it is never recorded on the audit
trail, only counted (:mod:`streams.console.metrics`), as is every request refused before sign-in.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlencode

from aiohttp import web
from multidict import MultiDictProxy

from schemas.console import Role
from streams.console.audit import Action, Outcome, audit, record_refusal
from streams.console.metrics import Refusal, refused
from streams.console.pages import CSRF_FIELD, render
from streams.console.sessions import SESSION, Session, Sessions, SignInThrottle
from streams.console.users import NAME_PATTERN, ChecksBusy, PasswordChecks, UserStore

log = logging.getLogger(__name__)

SESSION_COOKIE = "clingate_console_session"
WRONG = "Wrong name or password."
"""What a refused sign-in says, whichever of the two was wrong."""
_ROLES = "console_roles"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Access:
    """The application's users, sessions, throttle, password checks and cookie policy."""

    users: UserStore
    sessions: Sessions
    throttle: SignInThrottle
    checks: PasswordChecks
    secure_cookies: bool
    trusted_proxies: int = 0
    """Reverse proxies in front of the console that append to ``X-Forwarded-For`` (:func:`client_address`)."""
    name_key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    """The key of :meth:`tag`: this process's own, never written anywhere."""

    def tag(self, name: str) -> str:
        """The keyed hash a typed name is logged and throttled under: ``#`` and 64 bits of its HMAC-SHA256
        (``#`` is no name's first character)."""
        return "#" + hmac.new(self.name_key, name.encode(), hashlib.sha256).hexdigest()[:16]


ACCESS = web.AppKey("access", Access)


def client_address(request: web.Request) -> str:
    """The address a sign-in is throttled and logged under: the peer's, or behind ``trusted_proxies``
    reverse proxies (``CLINGATE_CONSOLE_TRUSTED_PROXIES``) the one the outermost of them saw.

    Each proxy appends the address it received the request from to ``X-Forwarded-For``, so with N
    trusted proxies the entries a client can forge are all left of the N-th from the right, which the
    outermost trusted proxy wrote. That entry is the client's; with no trusted proxy (the default) the
    header is anyone's text and is ignored. A request that carries fewer entries than the proxies, or an
    entry that is not an IP address, did not come through all of them as configured: its peer's address
    counts.
    """
    peer = request.remote or "-"
    proxies = request.app[ACCESS].trusted_proxies
    if not proxies:
        return peer
    forwarded = request.headers.getall("X-Forwarded-For", ())
    hops = [hop.strip() for value in forwarded for hop in value.split(",")]
    if len(hops) < proxies:
        return peer
    try:
        return str(ipaddress.ip_address(hops[-proxies]))
    except ValueError:
        return peer


def requires(*roles: Role) -> Callable[[Handler], Handler]:
    """Declare the roles that may open a page (module docstring); every page but the public ones has it."""

    def declare(handler: Handler) -> Handler:
        setattr(handler, _ROLES, frozenset(roles))
        return handler

    return declare


def safe_next(target: object) -> str:
    """Where to go after signing in: ``target`` if it is a path of this site, else ``/`` (a sign-in link
    must not send anyone to another site)."""
    if (
        isinstance(target, str)
        and target.startswith("/")
        and not target.startswith("//")
        and "\\" not in target
        and target.isprintable()
    ):
        return target
    return "/"


async def _form(request: web.Request) -> MultiDictProxy[str | bytes | web.FileField] | None:
    """The request's form (read once: handlers get it again from aiohttp); None when its body cannot be
    read as one, or when a field of it is not text (a file, or a part of another content type: no page
    takes one, and a handler reads every field as text)."""
    try:
        form = await request.post()
    except (ValueError, LookupError, web.RequestPayloadError):
        # UnicodeDecodeError is a ValueError; an unknown charset a LookupError; a body its
        # Content-Encoding does not decode a RequestPayloadError.
        return None
    return form if all(isinstance(value, str) for value in form.values()) else None


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Session, CSRF and roles for every request (module docstring)."""
    access = request.app[ACCESS]
    session = access.sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is not None:
        request[SESSION] = session
    if request.method == "POST":
        form = await _form(request)
        if form is None:
            refused(request, Refusal.MALFORMED)
            message = "The form could not be read (its bytes, its charset or its boundary): send it again."
            response = render(request, "error.html", status=400, title="Bad request", message=message)
            response.force_close()  # what is left of the body is never read as the connection's next request
            return response
        token = form.get(CSRF_FIELD)
        if session is None or not session.csrf_matches(token if isinstance(token, str) else None):
            if session is not None and session.user is not None:
                await record_refusal(
                    request, Action.CSRF_REFUSED, token="missing" if token is None else "wrong"
                )
            else:
                refused(request, Refusal.CSRF)
            message = (
                "The form was not sent by a page of this session, or the session ended: open the page again."
            )
            return render(request, "error.html", status=403, title="Refused", message=message)
    roles: frozenset[Role] | None = getattr(request.match_info.handler, _ROLES, None)
    if roles is None:
        return await handler(request)
    if session is None or session.role is None:
        location = "/login?" + urlencode({"next": str(request.rel_url)})  # its ids still encoded
        raise web.HTTPFound(location) if request.method in ("GET", "HEAD") else web.HTTPSeeOther(location)
    if session.role not in roles:
        await record_refusal(request, Action.ACCESS_DENIED, required=sorted(roles))
        message = f"This page is not for the {session.role.value} role."
        return render(request, "error.html", status=403, title="Not your page", message=message)
    return await handler(request)


def _redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def _set_cookie(request: web.Request, response: web.StreamResponse, session: Session) -> None:
    access = request.app[ACCESS]
    response.set_cookie(
        SESSION_COOKIE, session.id, path="/", httponly=True, samesite="Strict",
        secure=access.secure_cookies, max_age=int(access.sessions.lifetime_s),
    )  # fmt: skip


def _sign_in_form(request: web.Request, target: str, *, status: int = 200, error: str = "") -> web.Response:
    return render(request, "login.html", status=status, title="Sign in", next=target, error=error)


async def sign_in_page(request: web.Request) -> web.StreamResponse:
    """``GET /login``: the sign-in form (with an anonymous session for its CSRF token), or the page asked
    for when already signed in."""
    target = safe_next(request.query.get("next"))
    session = request.get(SESSION)
    if session is not None and session.user is not None:
        raise web.HTTPFound(target)
    if session is not None:
        return _sign_in_form(request, target)
    request[SESSION] = session = request.app[ACCESS].sessions.start()
    response = _sign_in_form(request, target)
    _set_cookie(request, response, session)
    return response


def _too_many(request: web.Request, target: str, error: str, retry_after_s: int) -> web.Response:
    response = _sign_in_form(request, target, status=429, error=error)
    response.headers["Retry-After"] = str(retry_after_s)
    return response


async def sign_in(request: web.Request) -> web.StreamResponse:
    """``POST /login``: check the name and password; on success a new session and the page asked for."""
    access = request.app[ACCESS]
    form = await request.post()
    name, password = str(form.get("name", "")).strip(), str(form.get("password", ""))
    target = safe_next(form.get("next"))
    address = client_address(request)
    if NAME_PATTERN.fullmatch(name) is None:
        # Never a user's name (users.NAME_PATTERN), so no password is checked for it.
        log.warning("console: sign-in from %s refused: not a user name", address)
        refused(request, Refusal.NOT_A_NAME)
        return _sign_in_form(request, target, status=401, error=WRONG)
    tag = access.tag(name)
    wait_s = access.throttle.refused(tag, address)
    if wait_s:
        log.warning("console: sign-in of %s from %s refused: locked for %d s more", tag, address, wait_s)
        refused(request, Refusal.THROTTLED)
        error = "Too many failed sign-ins from here: wait a few minutes and try again."
        return _too_many(request, target, error, wait_s)
    user = access.users.get(name)
    try:
        # An unknown name costs a check too; a name known at this address goes before the others.
        matches = await access.checks.check(password, user, known=access.throttle.known(tag, address))
    except ChecksBusy as exc:
        log.warning("console: sign-in of %s from %s refused: %s", tag, address, exc)
        refused(request, Refusal.BUSY)
        return _too_many(request, target, "Too many sign-ins at once: try again in a few seconds.", 5)
    if user is None or not matches:
        lock_s = access.throttle.failed(tag, address)
        log.warning("console: sign-in of %s from %s refused: wrong name or password%s", tag, address,
                    f"; locked for {lock_s:.0f} s" if lock_s else "")  # fmt: skip
        refused(request, Refusal.WRONG_PASSWORD)
        return _sign_in_form(request, target, status=401, error=WRONG)
    await audit(request, Action.SIGN_IN, Outcome.OK, user=user.name, role=user.role)
    access.throttle.succeeded(tag, address)
    response = _redirect(target)
    _set_cookie(request, response, access.sessions.start(user.name, user.role))
    return response


@requires(*Role)
async def sign_out(request: web.Request) -> web.StreamResponse:
    """``POST /logout``: end the session, record it, and go to the sign-in page."""
    request.app[ACCESS].sessions.end(request[SESSION].id)
    await audit(request, Action.SIGN_OUT, Outcome.OK)
    response = _redirect("/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    return response
