"""One handle on a child process, shared by the demo, the benchmarks and the tests.

A :class:`ProcessHandle` spawns an argv (environment, working directory, own session or not), sends its
output to a log file (new, or appended to so that a restart keeps the earlier runs' lines) or to a pipe,
waits until a readiness predicate holds, the child exits or a deadline passes (a :class:`ProcessError`
naming the log), and stops it: SIGTERM with a grace period, then SIGKILL; or SIGKILL at once, as a crash.
What differs between the children (the markers that say ready, the messages their callers report, a
broker JVM that outlives its parent) stays with the classes that use a handle.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The directory holding these sources' ``streams`` package: ``python -m streams.cli`` run there imports
them, whatever version of clingate is installed."""


def python_module(module: str, *args: str) -> list[str]:
    """The argv of ``python -W ignore -m MODULE ARGS`` on this interpreter (warnings off: a child's log
    holds what it says, not its libraries' deprecation notices)."""
    return [sys.executable, "-W", "ignore", "-m", module, *args]


class ProcessError(RuntimeError):
    """A child was not ready: it exited first (``returncode`` set) or its deadline passed (None)."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


class ProcessHandle:
    """A child process: spawned by :meth:`start`, stopped by :meth:`stop` or :meth:`kill`.

    Args:
        name: what it is, for messages.
        argv: the command line.
        env: its whole environment (None: this process's).
        cwd: its working directory (None: this process's).
        log: file of its stdout and stderr, its stdin closed: a service, not a dialogue (None: stdout
            is a text pipe for :meth:`readline`, stdin and stderr are this process's).
        new_session: run it in a session of its own, so a signal to this process's group (Ctrl-C in a
            terminal) does not reach it; its owner stops it.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        log: Path | None = None,
        new_session: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._new_session = new_session
        self._process: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None
        self.log_offset = 0
        """Where the log of the latest start begins."""

    def start(self, *, append: bool = False) -> ProcessHandle:
        """Spawn the child (again, after it stopped); ``append`` keeps the log's earlier lines."""
        with ExitStack() as stack:
            if self.log is None:  # a pipe to read lines from; stdin and stderr are this process's
                stdio: dict[str, Any] = {"stdout": subprocess.PIPE, "text": True}
            else:
                self.log_offset = self.log.stat().st_size if append and self.log.exists() else 0
                out = stack.enter_context(self.log.open("ab" if append else "wb"))
                stdio = {"stdin": subprocess.DEVNULL, "stdout": out, "stderr": subprocess.STDOUT}
            self._process = subprocess.Popen(
                self.argv, env=self._env, cwd=self._cwd, start_new_session=self._new_session, **stdio
            )
        return self

    @property
    def pid(self) -> int | None:
        """The child's pid (None: never started)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the child was started and has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The child's exit code (None: still running, or never started)."""
        return self._process.poll() if self._process is not None else None

    def output(self) -> bytes:
        """What the latest start wrote to the log so far."""
        if self.log is None or not self.log.exists():
            return b""
        with self.log.open("rb") as log:
            log.seek(self.log_offset)
            return log.read()

    def tail(self, lines: int = 20) -> str:
        """The last lines of the log."""
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def first_error(self, lines: int = 30) -> str:
        """The log from its first ``ERROR`` line or traceback on, ``lines`` long ("" if it has none):
        why a process died is logged where it happened, not where its shutdown ends."""
        if self.log is None or not self.log.exists():
            return ""
        text = self.log.read_text(errors="replace").splitlines()
        errors = (i for i, line in enumerate(text) if " ERROR " in line or line.startswith("Traceback"))
        first = next(errors, None)
        return "" if first is None else "\n".join(text[first : first + lines])

    def readline(self) -> str:
        """The next line of the child's stdout pipe ("" once it closed)."""
        stdout = self._process.stdout if self._process is not None else None
        return str(stdout.readline()) if stdout is not None else ""

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> float:
        """Wait until ``ready()`` holds; returns the seconds waited.

        Raises:
            ProcessError: the child exited first, or ``timeout_s`` passed (it is left running).
        """
        started = time.monotonic()
        while not ready():
            if self._process is None or self._process.poll() is not None:
                code = self.returncode
                message = f"{self.name} exited (code {code}) before it was ready: {self._see()}"
                raise ProcessError(message, code)
            if time.monotonic() - started > timeout_s:
                raise ProcessError(f"{self.name} not ready within {timeout_s:.0f} s: {self._see()}", None)
            time.sleep(poll_s)
        return time.monotonic() - started

    def wait_for_output(self, *markers: bytes, timeout_s: float, poll_s: float = 0.1) -> float:
        """:meth:`wait_until` the latest start's log holds one of ``markers`` (none: ready at once)."""
        return self.wait_until(
            lambda: not markers or any(m in self.output() for m in markers), timeout_s, poll_s
        )

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the child to exit (and reap it); whether it did within ``timeout_s``."""
        if self._process is None:
            return True
        try:
            self._process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def terminate(self) -> None:
        """Ask the child to stop (SIGTERM) without waiting for it."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()

    def stop(self, grace_s: float = 30.0, first: signal.Signals = signal.SIGTERM) -> None:
        """Send ``first`` (a clean stop), wait up to ``grace_s``, then SIGKILL; returns once it is reaped."""
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(first)
        if not self.wait(grace_s):
            self.kill()

    def kill(self) -> None:
        """SIGKILL (no clean stop: no flush, no commit, as a crash) and reap."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def _see(self) -> str:
        return f"see {self.log}" if self.log is not None else "its stderr says why"


def eventually(what: str, probe: Callable[[], T], timeout_s: float = 90.0, poll_s: float = 0.3) -> T:
    """``probe()``'s first truthy answer, asked every ``poll_s`` seconds (what a test awaits from a child).

    Raises:
        AssertionError: none within ``timeout_s``; the message says ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(poll_s)
    raise AssertionError(f"{what} within {timeout_s:.0f} s")


def http_answers(url: str, timeout_s: float) -> bool:
    """Whether a GET of ``url`` answers 200 within ``timeout_s`` (a service's readiness or liveness)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except OSError:
        return False
