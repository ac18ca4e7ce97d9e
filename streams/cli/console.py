"""``clingate console``: the web console of the people in the loop, and its users.

* ``clingate console [--port P] [--host H]`` serves the console (:mod:`streams.console`) on
  ``http://H:P`` (``CLINGATE_CONSOLE_HOST``, 127.0.0.1, and ``CLINGATE_CONSOLE_PORT``, 6080, unless
  given; ``--port 0`` picks a free port) against the cluster of ``KAFKA_BOOTSTRAP_SERVERS``, and prints
  ``listening http://H:P`` once it is up;
* ``clingate console users add NAME --role ROLE`` adds a user, reading the password from standard input
  (a terminal does not echo it), and refuses a weak one (:data:`~streams.console.users.PASSWORD_RULE`,
  which its help states) with exit status 2 and the reason;
* ``clingate console users list`` prints each user's name and role, never a hash.

The users file is ``CLINGATE_CONSOLE_USERS`` (default ``<CLINGATE_HOME>/console/users.json``). The web
server's modules are imported only when the console is served.
"""

from __future__ import annotations

import asyncio
import getpass
import sys
from typing import Annotated

import typer

from schemas.console import Role
from streams.console.users import PASSWORD_RULE, UserError, UserStore
from streams.runtime.settings import env_help, get_settings

app = typer.Typer(help="The web console of the people in the loop: sign-in with roles, the pharmacist board.")
users_app = typer.Typer(
    help=f"The console's users: add one (password from standard input; {PASSWORD_RULE}), list them."
)
app.add_typer(users_app, name="users")


@app.callback(invoke_without_command=True)
def console(
    context: typer.Context,
    port: Annotated[
        int | None,
        typer.Option(help=f"Port to serve on; 0 picks a free one {env_help('console_port')}."),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option(
            help="Address to bind: loopback unless a TLS reverse proxy needs another "
            f"{env_help('console_host')}."
        ),
    ] = None,
) -> None:
    """Serve the console until SIGINT/SIGTERM (without a sub-command)."""
    if context.invoked_subcommand is not None:
        return
    from streams.console.server import serve
    from streams.local.bootstrap import require_bootstrap
    from streams.runtime.kafka_clients import ensure_catalog

    settings = get_settings()
    bootstrap = require_bootstrap(settings)
    ensure_catalog(settings, bootstrap)

    def announce(url: str) -> None:
        print(f"listening {url}", flush=True)

    host = settings.console_host if host is None else host
    asyncio.run(serve(settings, bootstrap, host, settings.console_port if port is None else port, announce))


def _store() -> UserStore:
    return UserStore(get_settings().console_users_file)


def _read_password() -> str:
    """The password: typed without echo at a terminal, else the first line of standard input."""
    if sys.stdin.isatty():
        return getpass.getpass("Password: ")
    return sys.stdin.readline().removesuffix("\n").removesuffix("\r")


@users_app.command("add", help=f"Add a user; the password is read from standard input: {PASSWORD_RULE}.")
def add(
    name: Annotated[str, typer.Argument(help="The user's name (letters, digits and . _ @ -).")],
    role: Annotated[Role, typer.Option(help="What the user does in the console.")],
) -> None:
    """Add a user; the password is read from standard input and must follow the rule the help states."""
    store = _store()
    try:
        store.add(name, role, _read_password())
    except UserError as exc:
        typer.echo(f"user {name!r} not added: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"user {name} added ({role.value}) to {store.path}", err=True)


@users_app.command("list")
def list_users() -> None:
    """Print each user's name and role, one a line."""
    try:
        users = _store().users()
    except UserError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    width = max((len(user.name) for user in users), default=0)
    for user in users:
        typer.echo(f"{user.name:<{width}}  {user.role.value}")
