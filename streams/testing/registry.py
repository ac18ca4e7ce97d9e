"""A real Confluent-compatible Schema Registry for tests: Apicurio Registry, built here from Maven Central.

clingate's registry wire format (:class:`schemas.registry_serde.ConfluentRegistrySerde`, used when
``CLINGATE_SCHEMA_REGISTRY_URL`` is set) is confluent-kafka's client against the Confluent Schema
Registry API. Unit tests run it against the client's own ``mock://`` registry; :class:`LocalRegistry`
gives the integration tests a server nobody here wrote: Apicurio Registry (Apache-2.0), whose
Confluent-compatible API answers at :data:`CCOMPAT_PATH`.

No container image or registry download is needed: ``deploy/registry`` is a Maven project whose only
dependency is Apicurio's application module (published on Maven Central as a library), packaged into a
runnable Quarkus application (a runner jar and its ``lib/``). Why that version and the two dependency
substitutions are in its ``pom.xml``.

Choices:

* **Built once per digest** of ``deploy/registry`` under ``<home>/registry/<digest>/`` (``mvn package``
  on a copy, so the repository stays clean): about a minute and 210 MB of Maven downloads the first
  time, nothing after. Every artifact comes through one mirror, :attr:`Settings.maven_repository`
  (Maven Central by default), because the parent POM lists repositories this machine cannot reach.
* **Loopback, a free port, in-memory storage** (H2): a registry lives for a test session, and a
  fresh one holds no schema of an earlier run.
* Readiness is an answer of the Confluent API (``GET subjects``), not a log line.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path
from types import TracebackType

from streams.local.broker import free_port
from streams.local.process import ProcessError, ProcessHandle, http_answers

#: The Maven project that builds the registry.
PROJECT = Path(__file__).resolve().parents[2] / "deploy" / "registry"
#: Path of the Confluent-compatible API (version 7 of Confluent's REST API) on the server.
CCOMPAT_PATH = "/apis/ccompat/v7"
_RUNNER = "target/schema-registry-1-runner.jar"
#: The registry's JVM: it lives for a test session, in which the optimising compiler's threads cost more CPU
#: than they save, so it runs the client compiler only, as the local broker does
#: (:data:`streams.local.broker.JVM_OPTIONS`); the real-registry tests then cost it about half the CPU
#: (docs/performance.md).
JVM_OPTIONS = ("-Xmx384m", "-XX:TieredStopAtLevel=1")
_SETTINGS = """<settings>
  <mirrors>
    <mirror><id>clingate</id><mirrorOf>*</mirrorOf><url>{url}</url></mirror>
  </mirrors>
</settings>
"""


class RegistryError(RuntimeError):
    """The registry could not be built or did not answer; the message holds the tail of its output."""


def project_digest(project: Path = PROJECT) -> str:
    """A digest of every file of the Maven project: a change rebuilds the registry."""
    digest = hashlib.sha256()
    for path in sorted(p for p in project.rglob("*") if p.is_file() and "target" not in p.parts):
        digest.update(str(path.relative_to(project)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


class LocalRegistry:
    """One Apicurio Registry on 127.0.0.1, its build cached under ``home``; a context manager.

    Args:
        home: clingate's cache directory (``CLINGATE_HOME``).
        repository: the Maven repository every artifact is fetched from (a mirror of Maven Central).
    """

    def __init__(self, home: Path, repository: str) -> None:
        self._build = home / "registry" / project_digest()
        self._repository = repository
        self._process: ProcessHandle | None = None
        self.url: str | None = None

    def build(self) -> Path:
        """The runner jar, built first when this digest has none.

        Safe from concurrent processes (parallel test workers): one builds at a time under a file
        lock, in a staging directory renamed into place when the build succeeded.

        Raises:
            RegistryError: Maven is missing or the build failed.
        """
        runner = self._build / _RUNNER
        if runner.exists():
            return runner
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RegistryError("Maven (mvn) is not on the PATH: it builds the schema registry")
        self._build.parent.mkdir(parents=True, exist_ok=True)
        with (self._build.parent / f"{self._build.name}.lock").open("w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            if runner.exists():
                return runner
            staging = self._build.with_name(f"{self._build.name}.building")
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(PROJECT, staging, ignore=shutil.ignore_patterns("target"))
            settings = staging / "settings.xml"
            settings.write_text(_SETTINGS.format(url=self._repository.rstrip("/")), encoding="utf-8")
            done = subprocess.run(
                [mvn, "-q", "-B", "-Dstyle.color=never", "-s", str(settings), "package", "-DskipTests"],
                cwd=staging, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0 or not (staging / _RUNNER).exists():
                raise RegistryError(
                    f"the schema registry's build failed:\n{(done.stdout + done.stderr)[-3000:]}"
                )
            shutil.rmtree(self._build, ignore_errors=True)
            staging.rename(self._build)
        return runner

    def start(self, timeout_s: float = 120.0) -> str:
        """Build if needed, start the server and return its Confluent-compatible URL once it answers.

        Raises:
            RegistryError: it exited or did not answer within ``timeout_s``.
        """
        runner = self.build()
        port = free_port()
        java = shutil.which("java") or "java"
        argv = [java, *JVM_OPTIONS, "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}", "-jar",
                str(runner)]  # fmt: skip
        self._process = ProcessHandle(
            "schema registry", argv, cwd=self._build, log=self._build / "registry.log"
        )
        self._process.start()
        url = f"http://127.0.0.1:{port}{CCOMPAT_PATH}"
        try:
            self._process.wait_until(
                lambda: http_answers(f"{url}/subjects", 2.0), timeout_s=timeout_s, poll_s=0.25
            )
        except ProcessError as error:
            tail = self._process.tail(30)
            self.stop()
            raise RegistryError(f"the schema registry did not answer at {url}:\n{tail}") from error
        self.url = url
        return url

    def stop(self) -> None:
        """Stop the server (its in-memory schemas go with it)."""
        if self._process is not None:
            self._process.stop(grace_s=15.0)
            self._process = None
        self.url = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
