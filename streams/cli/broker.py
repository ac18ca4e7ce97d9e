"""``clingate broker start|stop|status|reset``: the native local Kafka broker.

The broker lives in ``CLINGATE_BROKER_DIR`` (default ``<CLINGATE_HOME>/broker``) and runs
detached, so it outlives the command that started it; ``stop`` waits until its JVM is gone.
``start`` prints only the bootstrap address on stdout, so
``export KAFKA_BOOTSTRAP_SERVERS=$(clingate broker start)`` works.

``start --sasl-users DIR`` starts it secured as :func:`streams.local.broker.sasl_local_kafka` does (SCRAM
users from DIR, ACLs enforced, ``--tls-dir`` for SASL_SSL); the SCRAM users are written when the
storage is formatted, so on an existing broker directory they take effect only after ``reset``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streams.local.broker import BrokerError, local_broker, read_password_dir, sasl_local_kafka
from streams.runtime.settings import get_settings

app = typer.Typer(help="Run a native single-node Kafka broker (KRaft) on 127.0.0.1.", no_args_is_help=True)
_err = Console(stderr=True)

# LSB init-script convention: status exits 3 when the service is not running.
_NOT_RUNNING = 3


@app.command()
def start(
    port: Annotated[
        int | None, typer.Option(help="Listener port. Default: the previous one if free, else any.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the broker to answer.")] = 90.0,
    sasl_users: Annotated[
        Path | None,
        typer.Option(
            help="Secure it: SCRAM users from this directory (one file per user holding its "
            "password), ACLs enforced.",
            file_okay=False,
            exists=True,
        ),
    ] = None,
    super_user: Annotated[str, typer.Option(help="With --sasl-users: the administrator.")] = "clingate-admin",
    tls_dir: Annotated[
        Path | None,
        typer.Option(
            help="With --sasl-users: serve SASL_SSL, certificates from "
            "`deploy/security/make-certs.sh DIR 127.0.0.1`.",
            file_okay=False,
            exists=True,
        ),
    ] = None,
) -> None:
    """Start the broker (first run: fetch its locked jars) and print its bootstrap address."""
    settings = get_settings()
    broker = local_broker(settings)
    try:
        if sasl_users is not None:
            passwords = read_password_dir(sasl_users)
            if super_user not in passwords:
                raise BrokerError(f"{sasl_users} has no password file for the super user {super_user}")
            broker = sasl_local_kafka(broker.directory, home=settings.home, super_user=super_user,
                                      passwords=passwords, tls_dir=tls_dir,
                                      repository=settings.maven_repository)  # fmt: skip
        bootstrap = broker.start(port=port, timeout=timeout)
    except BrokerError as error:
        _err.print(f"[red]{error}[/red]", markup=True, highlight=False)
        raise typer.Exit(1) from error
    _err.print(f"Kafka broker running (log: {broker.log_file})", highlight=False)
    print(bootstrap)


@app.command()
def stop(
    timeout: Annotated[float, typer.Option(help="Seconds for a clean shutdown before SIGKILL.")] = 30.0,
) -> None:
    """Stop the broker and wait until its JVM has exited."""
    if local_broker(get_settings()).stop(timeout=timeout):
        _err.print("Kafka broker stopped")
    else:
        _err.print("Kafka broker was not running")


@app.command()
def status() -> None:
    """Report whether the broker runs (exit 0) or not (exit 3), with its pid, address and log."""
    state = local_broker(get_settings()).status()
    if not state.running:
        print(f"stopped (directory {state.directory})")
        raise typer.Exit(_NOT_RUNNING)
    print(f"running pid={state.pid} bootstrap={state.bootstrap} log={state.log_file}")


@app.command()
def reset() -> None:
    """Delete the stopped broker's data (every topic and record); refuses while it runs."""
    broker = local_broker(get_settings())
    if broker.status().running:
        _err.print("The broker is running: `clingate broker stop` first.")
        raise typer.Exit(1)
    shutil.rmtree(broker.directory, ignore_errors=True)
    _err.print(f"Removed {broker.directory}")
