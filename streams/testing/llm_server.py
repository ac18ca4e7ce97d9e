"""``clingate llm serve`` in a child process, for the demo, the benchmarks and the tests.

The child prints ``listening <base-url>`` on stdout once it listens
(:func:`streams.llm.serve.http.serve_forever`); :meth:`ServerProcess.start` reads that line back and asks
the server which model it serves.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from streams.local.process import SOURCE_ROOT, ProcessHandle, python_module


class ServerProcessError(RuntimeError):
    """A server child process exited or said something else before ``listening <base-url>``."""


class ServerProcess:
    """A local OpenAI-compatible server in a child process (``clingate llm serve``).

    ``with ServerProcess.start("smollm2") as server: server.base_url, server.model``. The child
    prints ``listening <base-url>`` once ready; its stderr passes through to this process's stderr.
    """

    def __init__(self, process: ProcessHandle, base_url: str, model: str) -> None:
        """Wrap a started child (use :meth:`start`).

        Args:
            process: the child.
            base_url: the OpenAI base URL it printed.
            model: the served model name.
        """
        self._process = process
        self.base_url = base_url
        self.model = model

    @classmethod
    def start(cls, backend: str, *, model: str | None = None, args: Sequence[str] = ()) -> ServerProcess:
        """Start ``clingate llm serve --backend BACKEND --port 0`` and wait until it listens.

        Args:
            backend: ``test`` or ``smollm2`` (see ``clingate llm serve --help``).
            model: served model name; None: the backend's default (read back from ``/v1/models``).
            args: further ``clingate llm serve`` options, e.g. ``["--latency-ms", "50"]``.

        Returns:
            The running server; stop it with :meth:`stop` (or use it as a context manager).

        Raises:
            ServerProcessError: the child exited, or printed something else, before listening.
        """
        argv = python_module("streams.cli", "llm", "serve", "--backend", backend, "--port", "0")
        if model is not None:
            argv += ["--model", model]
        name = f"clingate llm serve --backend {backend}"
        process = ProcessHandle(name, [*argv, *args], cwd=SOURCE_ROOT).start()
        line = process.readline()
        if not line.startswith("listening "):
            process.stop(grace_s=10)
            raise ServerProcessError(
                f"`clingate llm serve --backend {backend}` did not start (exit {process.returncode}, "
                f"said {line.strip()!r}); its stderr above says why"
            )
        base_url = line.split()[1]
        served = httpx.get(f"{base_url}/models", timeout=10.0, trust_env=False).json()["data"][0]["id"]
        return cls(process, base_url, served)

    def stop(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL after 10 s)."""
        self._process.stop(grace_s=10)

    def __enter__(self) -> ServerProcess:
        """Context manager: the child stops on exit."""
        return self

    def __exit__(self, *_exc: object) -> None:
        """Stop the child."""
        self.stop()
