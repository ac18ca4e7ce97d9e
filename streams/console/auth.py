"""Who may do what in the console: sign-in and sign-out, the session cookie, CSRF on every POST, and the
role each page declares.

What holds, for every request (:func:`guard`, the application's middleware):

* its session is the one its cookie names, if that session is still valid (:class:`Sessions`); the cookie
  is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's page sends it),
  ``Path=/``, and ``Secure`` with ``CLINGATE_CONSOLE_SECURE_COOKIES`` (behind a TLS proxy);
* a POST is refused (403) unless its form carries the session's CSRF token, whatever its path (the
  sign-in form's token is its anonymous session's);
* a page that declares roles (:func:`requires`) is answered only for a signed-in session of one of them:
  without one the browser is sent to ``/login?next=<the page>``, with another role it gets a 403 page,
  never the content; pages that declare none (the sign-in page, the stylesheet) are public.

Sign-in (:func:`sign_in`) checks the password in a worker thread (scrypt takes a quarter of a second),
refuses a name with too many recent failures without checking it (:class:`SignInThrottle`), logs each
refusal with the name and the client's address, never the password, and records every attempt on the audit
trail (:mod:`streams.console.audit`) before a session is made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlencode

from aiohttp import web

from streams.console.audit import Action, Outcome, audit, record_refusal
from streams.console.pages import CSRF_FIELD, render
from streams.console.sessions import SESSION, Session, Sessions, SignInThrottle
from streams.console.users import NAME_PATTERN, Role, User, UserStore, decoy_hash, verify_password

log = logging.getLogger(__name__)

SESSION_COOKIE = "clingate_console_session"
WRONG = "Wrong name or password."
"""What a refused sign-in says, whichever of the two was wrong."""
_ROLES = "console_roles"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Access:
    """The application's users, sessions, throttle and cookie policy."""

    users: UserStore
    sessions: Sessions
    throttle: SignInThrottle
    secure_cookies: bool


ACCESS = web.AppKey("access", Access)


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


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Session, CSRF and roles for every request (module docstring)."""
    access = request.app[ACCESS]
    session = access.sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is not None:
        request[SESSION] = session
    if request.method == "POST":
        token = (await request.post()).get(CSRF_FIELD)
        if session is None or not session.csrf_matches(token if isinstance(token, str) else None):
            await record_refusal(request, Action.CSRF_REFUSED, token="missing" if token is None else "wrong")
            message = (
                "The form was not sent by a page of this session, or the session ended: open the page again."
            )
            return render(request, "error.html", status=403, title="Refused", message=message)
    roles: frozenset[Role] | None = getattr(request.match_info.handler, _ROLES, None)
    if roles is None:
        return await handler(request)
    if session is None or session.role is None:
        location = "/login?" + urlencode({"next": request.path_qs})
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


async def _check(users: UserStore, name: str, password: str) -> User | None:
    """The user ``name`` if ``password`` is theirs; an unknown name costs a check too (no timing oracle)."""
    user = users.get(name)
    matches = await asyncio.to_thread(verify_password, password, user.password if user else decoy_hash())
    return user if matches else None


async def sign_in(request: web.Request) -> web.StreamResponse:
    """``POST /login``: check the name and password; on success a new session and the page asked for."""
    access = request.app[ACCESS]
    form = await request.post()
    name, password = str(form.get("name", "")).strip(), str(form.get("password", ""))
    target = safe_next(form.get("next"))
    if NAME_PATTERN.fullmatch(name) is None:
        # Never a user's name (users.NAME_PATTERN): not logged or recorded, it may be a password typed
        # in the wrong field; and no password is checked for it.
        log.warning("console: sign-in from %s refused: not a user name", request.remote)
        await record_refusal(request, Action.SIGN_IN, reason="not a user name")
        return _sign_in_form(request, target, status=401, error=WRONG)
    if access.throttle.refused(name):
        log.warning("console: sign-in of %r from %s refused: too many failures", name, request.remote)
        await record_refusal(request, Action.SIGN_IN, user=name, reason="too many failures")
        error = "Too many failed sign-ins for this name: wait a minute and try again."
        return _sign_in_form(request, target, status=429, error=error)
    user = await _check(access.users, name, password)
    if user is None:
        failures = access.throttle.failed(name)
        log.warning("console: sign-in of %r from %s refused: wrong name or password (%d recent failures)",
                    name, request.remote, failures)  # fmt: skip
        await record_refusal(request, Action.SIGN_IN, user=name, reason="wrong name or password")
        return _sign_in_form(request, target, status=401, error=WRONG)
    await audit(request, Action.SIGN_IN, Outcome.OK, user=user.name, role=user.role)
    access.throttle.succeeded(name)
    access.sessions.end(request[SESSION].id)
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
