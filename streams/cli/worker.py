"""``clingate worker``: one stream worker, DBPM and clinical.

The worker ensures the catalog topics exist (idempotent; off with ``CLINGATE_ENSURE_TOPICS=false``
where a provisioning job owns them and the worker's principal may not create topics) and runs, by
``--role``, consumer loops in threads of one process (librdkafka releases the GIL while it waits),
with ``/metrics`` on the web port:

* ``all`` (default): the DBPM memory writer (:mod:`streams.worker.memory`), the clinical patients
  (:mod:`streams.worker.clinical`), both transactional table loops, and the DBPM gate
  (:mod:`streams.worker.gateloop`). One command, one PID: a SIGKILL of the worker kills all three.
* ``memory``: the memory writer and the clinical patients. ``gate``: the gate only. Run gates and
  memory workers as separate processes to give each its own core.
* ``requests``: only the request runtime (:mod:`streams.requests.runtime`), which carries out the
  console's re-drives and pins after checking them. Never part of ``all``: it runs as a principal of its
  own (``clingate-requests``), the one that may write every re-drive target.

SIGTERM/SIGINT stop every loop cleanly (each finishes its batch, commits, leaves its group). If a
loop dies, the others are stopped and the worker exits with :data:`LOOP_FAILED_EXIT`: a worker that
looks alive and does not process would hold its partitions. A worker whose loops cannot be built (a
store that does not open, on a full disk say) exits with the same status. What an operator must fix
(a full disk, a refused grant) is logged as one line saying what and where, a bug with its traceback.

Run several workers with the same ``CLINGATE_APP_ID`` to share the partitions; each MUST have its
own ``--datadir``.

The classification arbiter is not part of this worker: it runs in its own consumer group with
``clingate arbiter worker``.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Protocol

import typer

from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_folder
from streams.runtime.kafka_clients import ensure_catalog
from streams.runtime.logs import configure
from streams.runtime.settings import Settings, env_help, get_settings
from streams.worker import READY

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

app = typer.Typer(help="Run a stream worker (DBPM memory and gate, clinical patients).")
log = logging.getLogger(__name__)

#: Exit status of a worker one of whose loops stopped on an error (``EX_SOFTWARE``).
LOOP_FAILED_EXIT = 70


class Role(StrEnum):
    """What one worker process runs."""

    ALL = "all"
    MEMORY = "memory"
    GATE = "gate"
    REQUESTS = "requests"


@app.callback(invoke_without_command=True)
def worker(
    loglevel: Annotated[
        str | None, typer.Option("--loglevel", "-l", help=f"Log level {env_help('log_level')}.")
    ] = None,
    web_port: Annotated[int | None, typer.Option(help=f"Web endpoint port {env_help('web_port')}.")] = None,
    datadir: Annotated[
        Path | None,
        typer.Option(callback=output_folder, help=f"Worker state directory {env_help('worker_datadir')}."),
    ] = None,
    role: Annotated[
        Role,
        typer.Option(
            help="all: the memory writer, the clinical patients and the DBPM gate; or a part; requests: "
            "the console's re-drives and pins (its own principal, never in all)."
        ),
    ] = Role.ALL,
) -> None:
    """Start a worker: the DBPM memory writer, the clinical patients and the DBPM gate, until stopped."""
    # Heavy imports (the engine, the clients) here: keep --help fast.
    from prometheus_client import CollectorRegistry

    from streams.runtime.metrics import serve

    settings = get_settings()
    overrides = {"web_port": web_port, "worker_datadir": datadir}
    settings = settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    if loglevel is not None:
        configure(loglevel, settings.log_format)
    bootstrap = require_bootstrap(settings)
    ensure_catalog(settings, bootstrap)
    registry = CollectorRegistry()
    try:
        loops = _loops(role, settings, bootstrap, registry)
    except Exception as exc:
        if not _must_fix(exc):
            raise
        log.error("the worker cannot start: %s", exc)
        raise typer.Exit(LOOP_FAILED_EXIT) from exc
    endpoint = serve(registry, settings.web_port, settings.metrics_host)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    failed: list[str] = []
    threads = [_start_loop(name, loop, stop, failed) for name, loop in loops.items()]
    log.info("%s: %s (app %s)", READY.decode(), ", ".join(loops), settings.app_id)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        endpoint.close()
    if failed:
        raise typer.Exit(LOOP_FAILED_EXIT)


def _loops(role: Role, settings: Settings, bootstrap: str, registry: CollectorRegistry) -> dict[str, Loop]:
    """The loops of ``role``, built (stores opened, producers initialised), their metrics on
    ``registry``: each loop's own, the loop metrics they share and one consumer lag over them all."""
    from streams.runtime.metrics import ConsumerLag, LoopMetrics
    from streams.worker.clinical import build_clinical
    from streams.worker.engine import dbpm_engine
    from streams.worker.gateloop import build_gate
    from streams.worker.gateview import MergedView
    from streams.worker.memory import build_memory
    from streams.worker.metrics import DbpmMetrics

    loops: dict[str, Loop] = {}
    shared = LoopMetrics(registry)
    if role is Role.REQUESTS:
        from streams.requests.runtime import build_requests

        loops["requests"] = build_requests(settings, bootstrap, shared)
    else:
        dbpm = DbpmMetrics(registry)
        if role is not Role.GATE:
            engine = dbpm_engine(settings)
            memory = loops["memory"] = build_memory(settings, bootstrap, dbpm, shared, engine)
            loops["clinical"] = build_clinical(settings, bootstrap, registry, shared)
            # The population gauges of the partitions this process writes, unless a gate sees them all.
            view, config = MergedView(memory.table.partitions), engine.config
        if role in (Role.ALL, Role.GATE):
            gate = loops["gate"] = build_gate(settings, bootstrap, dbpm, shared)
            view, config = gate.view, gate.config
        dbpm.watch(view, config)
    registry.register(ConsumerLag(*(loop.lag for loop in loops.values())))
    return loops


def _must_fix(exc: BaseException) -> bool:
    """Whether ``exc`` is what an operator must fix before a restart can help: a store that cannot be
    opened or written, a file of the data directory the system refuses (an error with its errno: a full
    disk among them), writes the cluster refuses for good. Each says what and where in its message, so
    it is logged as that one line, without a traceback."""
    from state.exceptions import StateError
    from streams.runtime.transactions import TransactionRefused

    return isinstance(exc, StateError | TransactionRefused) or (
        isinstance(exc, OSError) and exc.errno is not None
    )


class Loop(Protocol):
    """A consumer loop of the worker (the memory writer, the clinical patients, the gate)."""

    def run(self, stop: threading.Event) -> None:
        """Process until ``stop`` is set, then leave the group and close."""
        ...

    def lag(self) -> Iterator[tuple[str, int, int]]:
        """(topic, partition, messages behind the end) of the assigned input partitions."""
        ...


def _start_loop(name: str, loop: Loop, stop: threading.Event, failed: list[str]) -> threading.Thread:
    """Run ``loop`` in a thread; if it dies, its name goes to ``failed`` and every loop is stopped.

    What an operator must fix (:func:`_must_fix`) is logged as one line saying what and where; anything
    else is a bug, logged with its traceback.
    """

    def run() -> None:
        try:
            loop.run(stop)
        except BaseException as exc:
            if _must_fix(exc):
                log.error("the %s loop stopped on an error; stopping the worker: %s", name, exc)
            else:
                log.exception("the %s loop stopped on an error; stopping the worker", name)
            failed.append(name)
            stop.set()

    thread = threading.Thread(target=run, name=f"clingate-{name}", daemon=True)
    thread.start()
    return thread
