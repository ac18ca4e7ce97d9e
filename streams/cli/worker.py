"""``clingate worker``: one stream worker, DBPM and clinical (Faust flags ``-l``, ``--web-port``).

The worker ensures the catalog topics exist (idempotent; off with ``CLINGATE_ENSURE_TOPICS=false``
where a provisioning job owns them and the worker's principal may not create topics) and starts, by
``--role``:

* ``all`` (default): the DBPM memory writer (:mod:`streams.worker.memory`) and the DBPM gate
  (:mod:`streams.worker.gate`), each a confluent-kafka consumer loop in a thread, and the Faust app of
  :mod:`streams.worker.app` (the clinical agent) run by :class:`faust.Worker` in the main thread. One
  command, one PID: a SIGKILL of the worker kills all three. SIGTERM/SIGINT stop Faust cleanly (flush,
  commit, close the stores), then the loops (each finishes its batch, commits, leaves its group). If
  a loop's thread dies, the process is stopped: a worker that looks alive and does not process would
  hold its partitions.
* ``memory``: the memory writer and the clinical agent. ``gate``: the gate loop only (its
  ``/metrics`` on the web port); run gates and memory workers as separate processes to give each its
  own core.

Run several workers with the same ``CLINGATE_APP_ID`` to share the partitions; each MUST have its
own ``--datadir``.

The classification arbiter is not part of this worker: it runs in its own consumer group with
``clingate arbiter worker`` (see :mod:`streams.groups.arbiter` for why it is not a Faust agent).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Protocol

import typer

from streams.cli.common import require_bootstrap
from streams.runtime.kafka_config import admin_client
from streams.runtime.logs import logging_config
from streams.runtime.settings import Settings, get_settings
from topics.admin import ensure_topics
from topics.catalog import build_catalog

if TYPE_CHECKING:
    from streams.runtime.metrics import DbpmMetrics

app = typer.Typer(help="Run a stream worker (DBPM and clinical agents).", no_args_is_help=False)
log = logging.getLogger(__name__)


class Role(StrEnum):
    """What one worker process runs."""

    ALL = "all"
    MEMORY = "memory"
    GATE = "gate"


@app.callback(invoke_without_command=True)
def worker(
    loglevel: Annotated[
        str | None, typer.Option("--loglevel", "-l", help="Log level (Faust's -l) [env CLINGATE_LOG_LEVEL].")
    ] = None,
    web_port: Annotated[
        int | None, typer.Option(help="Web endpoint port [env CLINGATE_WEB_PORT, default 6066].")
    ] = None,
    datadir: Annotated[
        Path | None, typer.Option(help="Worker state directory [env CLINGATE_WORKER_DATADIR].")
    ] = None,
    role: Annotated[
        Role, typer.Option(help="all: memory and clinical agents (Faust) plus the DBPM gate; or one of them.")
    ] = Role.ALL,
) -> None:
    """Start a worker: the DBPM memory agent, the DBPM gate and the clinical agent, until stopped."""
    # Heavy imports (faust, the engine) here: keep --help fast.
    from prometheus_client import CollectorRegistry

    from streams.runtime.metrics import DbpmMetrics

    settings = get_settings()
    overrides = {"web_port": web_port, "worker_datadir": datadir}
    settings = settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    bootstrap = require_bootstrap(settings)
    if settings.ensure_topics_on_start:
        catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
        ensure_topics(admin_client(bootstrap), catalog)
    metrics = DbpmMetrics(CollectorRegistry())
    if role is Role.GATE:
        _run_gate_alone(settings, bootstrap, metrics)
        return
    import faust

    from streams.worker.app import create_app, faust_lag
    from streams.worker.dbpm import MergedView, dbpm_engine
    from streams.worker.gate import build_gate
    from streams.worker.memory import build_memory

    faust_app = create_app(settings, bootstrap, metrics)
    level = (loglevel or settings.log_level).upper()
    # Faust replaces the root handlers when it starts: hand it the clingate format (streams.runtime.logs).
    faust_worker = faust.Worker(
        faust_app, loglevel=level, logging_config=logging_config(level, settings.log_format)
    )
    engine = dbpm_engine(settings)
    memory = build_memory(settings, bootstrap, metrics, engine)
    loops: list[tuple[str, Loop]] = [("memory", memory)]
    if role is Role.MEMORY:
        # The population gauges of the partitions this process writes.
        metrics.watch(lambda: faust_lag(faust_app), MergedView(memory.table.partitions), engine.config)
    else:
        gate = build_gate(settings, bootstrap, metrics)
        metrics.watch(lambda: faust_lag(faust_app), gate.view, gate.config)
        metrics.add_lag(gate.lag)
        loops.append(("gate", gate))
    metrics.add_lag(memory.lag)
    stop = threading.Event()
    threads = [_start_loop(name, loop, stop) for name, loop in loops]
    try:
        faust_worker.execute_from_commandline()
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


class Loop(Protocol):
    """A consumer loop of the worker (the memory writer, the gate): runs until its event is set."""

    def run(self, stop: threading.Event) -> None:
        """Process until ``stop`` is set, then leave the group and close."""
        ...


def _start_loop(name: str, loop: Loop, stop: threading.Event) -> threading.Thread:
    """Run ``loop`` in a thread of the worker (librdkafka releases the GIL while it waits); if it dies,
    the process is stopped: a worker that looks alive and does not process would hold its partitions."""

    def run() -> None:
        try:
            loop.run(stop)
        except BaseException:
            log.exception("the DBPM %s loop stopped on an error; stopping the worker", name)
            os.kill(os.getpid(), signal.SIGTERM)
            raise

    thread = threading.Thread(target=run, name=f"clingate-{name}", daemon=True)
    thread.start()
    return thread


def _run_gate_alone(settings: Settings, bootstrap: str, metrics: DbpmMetrics) -> None:
    """``--role gate``: the gate loop in the main thread, /metrics on the web port, until SIGTERM/SIGINT."""
    from streams.runtime.metrics import serve
    from streams.worker.gate import build_gate, gate_group

    gate = build_gate(settings, bootstrap, metrics)
    metrics.watch(gate.lag, gate.view, gate.config)
    endpoint = serve(metrics.registry, settings.web_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("DBPM gate ready (group %s)", gate_group(settings.app_id))
    try:
        gate.run(stop)
    finally:
        endpoint.close()
