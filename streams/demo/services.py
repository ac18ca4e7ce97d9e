"""The processes the demo starts, each as the product runs it: workers, groups, the LLM test server.

The DBPM memory writers (with the clinical agent) and the DBPM gate run as two ``clingate worker``
processes, a core each; ``clingate arbiter worker``, ``clingate generator`` and :data:`VERIFIERS`
``clingate verifier`` members join groups of the run's own; unless the user names an LLM server, the
demo's test server (:mod:`streams.demo.llm`) answers as the synthetic ground truth.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from streams.demo.errors import DemoError
from streams.demo.plan import Plan
from streams.local.broker import free_port
from streams.local.process import ProcessError, ProcessHandle, python_module
from streams.replay.kafka import commit_end_offsets, commit_worker_end_offsets
from streams.worker import READY
from topics.catalog import DBPM_DECISIONS, DBPM_NARRATIVES, DBPM_TO_VERIFY, DOCS_CLASSIFICATIONS, DOCS_REVIEWS

VERIFIERS = 1
"""Members of the demo's verifier group: a second cost CPU on two cores and gained nothing; a
deployment scales the group across machines."""


class ServiceProcess:
    """A clingate subprocess (a worker of some group), stopped (SIGTERM, then SIGKILL) on exit.

    Args:
        name: what it is, for messages.
        args: the ``clingate`` command line after ``python -m streams.cli``.
        env: settings of this process on top of the demo's environment.
        bootstrap: the broker (``KAFKA_BOOTSTRAP_SERVERS``).
        log: file of its stdout and stderr.
        ready: log lines of which any says it is ready (none: ready once started).
        module: the Python module it runs.
        metrics_port: the port of its ``/metrics`` endpoint, if it serves one the demo reads.
    """

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        bootstrap: str,
        log: Path,
        ready: tuple[bytes, ...],
        module: str = "streams.cli",
        metrics_port: int | None = None,
    ) -> None:
        self.name = name
        self.log = log
        self.metrics_port = metrics_port
        self._ready = ready
        self._process = ProcessHandle(
            name,
            python_module(module, *args),
            env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, **env},
            log=log,
            new_session=True,
        )

    def __enter__(self) -> ServiceProcess:
        self._process.start()
        return self

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the log says the process is ready.

        Raises:
            DemoError: it exited or was not ready within ``timeout_s``.
        """
        try:
            self._process.wait_for_output(*self._ready, timeout_s=timeout_s, poll_s=0.2)
        except ProcessError as error:
            self.check_running()  # it exited
            message = f"the {self.name} was not ready within {timeout_s:.0f} s:\n{self.tail()}"
            raise DemoError(message) from error

    def check_running(self) -> None:
        """Raise :class:`DemoError` (with its log's tail) if the process has exited: the streams would
        otherwise wait out their timeout for outputs it will never produce."""
        code = self._process.returncode
        if code is not None:
            first = self._process.first_error()
            cause = f"its first error:\n{first}\n... its last lines:\n" if first else ""
            raise DemoError(f"the {self.name} exited (code {code}):\n{cause}{self.tail()}")

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self._process.running

    def tail(self, lines: int = 20) -> str:
        """The last lines of the process's log."""
        return self._process.tail(lines)

    def terminate(self) -> None:
        """Ask the process to stop (SIGTERM) without waiting; :meth:`__exit__` waits for it."""
        self._process.terminate()

    def __exit__(self, *_exc: object) -> None:
        self._process.stop(grace_s=30)


@dataclass(frozen=True)
class Groups:
    """The run's application id (the workers' group, changelogs) and its consumer groups."""

    app_id: str
    docs: str
    generator: str
    verifier: str

    @property
    def names(self) -> tuple[str, str, str]:
        """The consumer groups (docs, generator, verifier)."""
        return self.docs, self.generator, self.verifier

    @classmethod
    def fresh(cls) -> Groups:
        """Groups no earlier run used."""
        app_id = f"clingate-demo-{uuid.uuid4().hex[:8]}"
        return cls(app_id, f"{app_id}-docs", f"{app_id}-generator", f"{app_id}-verifier")

    def start_at_ends(self, bootstrap: str) -> None:
        """Start every group at the current end of its inputs: on a shared broker, records already there
        are not this run's."""
        commit_worker_end_offsets(bootstrap, self.app_id)
        commit_end_offsets(bootstrap, self.docs, [DOCS_CLASSIFICATIONS, DOCS_REVIEWS])
        commit_end_offsets(bootstrap, self.generator, [DBPM_NARRATIVES])
        commit_end_offsets(bootstrap, self.verifier, [DBPM_TO_VERIFY, DBPM_DECISIONS])


def llm_server(plan: Plan, workdir: Path, bootstrap: str) -> ServiceProcess | None:
    """The demo's LLM test server, answering as the plan's ground truth (None: the user's server,
    ``CLINGATE_LLM_URL``, answers)."""
    if plan.llm_url is not None:
        return None
    script = workdir / "llm-script.json"
    plan.loop.write(script)
    return ServiceProcess(
        "LLM test server (synthetic ground truth)",
        ["--script", str(script)],
        {},
        bootstrap,
        workdir / "llm-server.log",
        (b"listening ",),
        module="streams.demo.llm",
    )


def listening_url(server: ServiceProcess) -> str:
    """The base URL a started test server printed."""
    return server.log.read_text().split("listening ", 1)[1].split()[0]


def workers(groups: Groups, workdir: Path, bootstrap: str, llm_env: dict[str, str]) -> list[ServiceProcess]:
    """The workers and group members of the run (not started).

    Args:
        llm_env: the LLM server's settings for the generator and verifier (empty: they inherit the user's).
    """

    def service(name: str, args: list[str], env: dict[str, str], log: str, *ready: bytes) -> ServiceProcess:
        return ServiceProcess(name, args, env, bootstrap, workdir / log, ready)

    def llm_group(name: str, command: str, env: dict[str, str], log: str) -> ServiceProcess:
        port = free_port()  # its calls in flight and their latency, which the demo's waits follow
        return ServiceProcess(name, [command, "--metrics-port", str(port)], env, bootstrap, workdir / log, (),
                              metrics_port=port)  # fmt: skip

    app_id = groups.app_id
    dbpm_env = {"CLINGATE_APP_ID": app_id}
    memory_dir, gate_dir = str(workdir / app_id), str(workdir / f"{app_id}-gate")
    memory = ["--role", "memory", "-l", "info", "--web-port", str(free_port()), "--datadir", memory_dir]
    # Its own data directory: the gate keeps its view of the memory there and resumes it (the default
    # one may hold another app's view: wrong decisions from the start).
    gate = ["--role", "gate", "--web-port", str(free_port()), "--datadir", gate_dir]
    # Metrics on free ports (the defaults may be taken: another demo, a deployed docs worker): the
    # demo's waits follow the LLM calls of the generator, the verifier and the docs worker.
    docs_port = free_port()
    arbiter = ServiceProcess(
        "arbiter (clingate arbiter worker)",
        ["arbiter", "worker", "--metrics-port", str(docs_port)],
        {"CLINGATE_DOCS_GROUP_ID": groups.docs},
        bootstrap,
        workdir / "docs.log",
        (b"rules-only", b"LLM phases on"),
        metrics_port=docs_port,
    )
    generator_env = {"CLINGATE_GENERATOR_GROUP_ID": groups.generator, **llm_env}
    verifier_env = {"CLINGATE_VERIFIER_GROUP_ID": groups.verifier, **llm_env}
    return [
        service(
            "DBPM memory + clinical worker (clingate worker --role memory)",
            ["worker", *memory],
            dbpm_env,
            f"{app_id}.log",
            READY,
        ),
        service(
            "DBPM gate (clingate worker --role gate)",
            ["worker", *gate],
            dbpm_env,
            f"{app_id}-gate.log",
            READY,
        ),
        arbiter,
        llm_group("generator group (clingate generator)", "generator", generator_env, "generator.log"),
        *(
            llm_group(
                f"verifier group member {m} (clingate verifier)",
                "verifier",
                verifier_env,
                f"verifier-{m}.log",
            )
            for m in range(1, VERIFIERS + 1)
        ),
    ]
