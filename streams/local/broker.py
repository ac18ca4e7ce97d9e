"""The local Kafka broker that ``clingate broker`` manages and tests, benchmarks and the demo start.

:class:`LocalKafka` runs one KRaft broker natively from Maven Central jars, or in a container of
clingate's Kafka image (:mod:`streams.local.images`) started through testcontainers.
:func:`local_broker` is the one ``clingate broker start|stop|status`` manages.

The native broker is the one developers and CI run here. Its jars are the ones
``deploy/local/kafka-jars.lock`` pins, fetched once and checked by :mod:`streams.local.jars`.

A :class:`LocalKafka` owns one directory::

    broker.json        ports and cluster id, kept so a restart reuses them (same bootstrap address)
    server.properties  written at every start from BROKER_DEFAULTS + listeners + extra properties
    kafka.pid          pid of the running JVM (seen from the host, also when it runs in a container)
    jvm.out            the JVM's own stdout/stderr (crashes before logging starts)
    logs/server.log    the broker log (deploy/local/log4j.properties)
    data/              log.dirs: topic data and the KRaft metadata log

Stopping and starting again on the same directory keeps every topic and record, which is what
the chaos tests need. ``extra_properties`` override any generated property (a SASL/ACL variant
replaces listeners and adds JAAS settings) and ``security`` is what the readiness probe
connects with.

Choices:
- The JVM runs in its own session (a :class:`~streams.local.process.ProcessHandle` with
  ``new_session``) so ``clingate broker start`` can exit and leave it running; tests stop it
  explicitly in fixture teardown. The process that started it stops it through its handle; any
  other (``clingate broker stop``) knows it only by the pid file and stops it by pid.
- ``offsets.topic.num.partitions`` and ``transaction.state.log.num.partitions`` are 1: creating
  the default 50 partitions on the first group join or transaction costs seconds on a 2-core
  machine and buys nothing on one broker.
- Readiness is a metadata request that lists this broker; only then does :meth:`LocalKafka.start`
  return.
- In a container the broker is the same: the container shares the host's network (it listens on
  127.0.0.1) and sees the broker's directory at the same path, so properties, data and logs are where
  the native broker keeps them. Its init process is the JVM, whose host pid goes to the pid file: stop,
  kill and status work by pid as for a native broker, from any process; the engine removes the
  container when the JVM ends. Ryuk (testcontainers' reaper) is off, its image comes from a registry;
  ``make test`` stops the engine and every container at the end.

Size: one broker's life, kept whole. Ports, generated properties, the JVM or its container,
readiness and stopping by handle or by pid keep the directory layout above together; the SASL variant
(:func:`sasl_local_kafka`) is the same :class:`LocalKafka` given properties and credentials, and
:mod:`streams.local.cluster` runs several of them as one cluster.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from confluent_kafka.admin import AdminClient

from streams.local.jars import DEPLOY_LOCAL, ArtifactError, ensure_artifacts
from streams.local.process import ProcessHandle
from streams.runtime.kafka_config import client_config as kafka_client_config
from streams.runtime.settings import MAVEN_CENTRAL, Settings

LOG4J_CONFIG = DEPLOY_LOCAL / "log4j.properties"
#: The deployed broker's logging: to stdout (clingate's Kafka image, :func:`start_scripts`).
LOG4J_CONSOLE = DEPLOY_LOCAL.parent / "kafka" / "log4j-console.properties"


JVM_OPTIONS: tuple[str, ...] = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    # The client compiler only: the local broker lives for a test run or a demo, and the optimising
    # compiler's threads took 22 of its 72 CPU-seconds in a 1,000-patient demo (per-thread CPU from
    # /proc); without them the broker spent 16 s less, its request threads a little more.
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)

# Broker settings shared by the native broker (server.properties) and the container (KAFKA_* env):
# single-node durability, fast group start-up, and topics only from the catalog.
BROKER_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "auto.create.topics.enable": "false",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
)

_NODE_ID = 1
#: Where clingate's Kafka image keeps the broker jars (``libs/``) and log4j configuration.
IMAGE_KAFKA_HOME = "/opt/kafka"
#: SASL mechanism of :func:`sasl_local_kafka` (the default of CLINGATE_KAFKA_SASL_MECHANISM).
SASL_MECHANISM = "SCRAM-SHA-512"
#: Seconds a container's init may take to become the broker's start script.
_CONTAINER_EXEC_WAIT_S = 10.0
#: Seconds a restart keeps trying its previous ports before it moves (clients know the old address).
_PORT_REUSE_WAIT_S = 10.0


class BrokerError(RuntimeError):
    """The local broker could not be provisioned, started or stopped; the message says what to do."""


def _bindable(port: int) -> int | None:
    """``port`` (or, for 0, the port the kernel picked) if a listener could bind it now, else None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the JVM's listener does: a just-stopped broker's connections in TIME_WAIT don't make a
        # port taken; only a socket that listens (or one bound without SO_REUSEADDR) does.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return None
        return int(sock.getsockname()[1])


def free_port(preferred: object = None, taken: tuple[int, ...] = (), wait: float = 0.0) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    Args:
        preferred: A port to return if it is an int, bindable and not in ``taken`` (a restart keeps
            its address this way, so clients that bootstrapped with it find the broker again).
        taken: Ports to avoid.
        wait: Seconds to keep retrying ``preferred`` while it is busy (e.g. a socket of the
            stopped broker still closing) before giving up on it for any free port.
    """
    if isinstance(preferred, int) and preferred not in taken:
        deadline = time.monotonic() + wait
        while True:
            if _bindable(preferred) == preferred:
                return preferred
            if time.monotonic() >= deadline:
                break
            time.sleep(0.2)
    low, high = LISTENER_PORTS
    rng = random.Random()
    while True:
        port = _bindable(rng.randrange(low, high))
        if port is not None and port not in taken:
            return port


def _listener_ports() -> tuple[int, int]:
    """Where :func:`free_port` draws from: below the kernel's ephemeral range, where a port found free
    stays free until a listener binds it. A port the kernel picks for ``bind(0)`` is in the same range
    as every outgoing connection's local port, and with several brokers and their clients starting at
    once one of those connections took a broker's port between the check and the bind."""
    try:
        first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first_ephemeral = 32768  # Linux's default
    return (10000, first_ephemeral) if first_ephemeral > 12000 else (first_ephemeral // 2, first_ephemeral)


#: The ports :func:`free_port` draws from, ``[low, high)``.
LISTENER_PORTS = _listener_ports()


def new_cluster_id() -> str:
    """A new cluster id in Kafka's Uuid text form: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def wait_for_kafka(
    bootstrap: str,
    timeout: float,
    security: Settings | None = None,
    alive: Callable[[], bool] = lambda: True,
    brokers: int = 1,
) -> None:
    """Block until a metadata request to ``bootstrap`` lists at least ``brokers`` brokers.

    Args:
        bootstrap: The bootstrap address.
        timeout: Seconds to wait in total.
        security: The listener's client security (its ``CLINGATE_KAFKA_*`` fields); None: PLAINTEXT.
            Never the process's own: a broker started here has the security it was started with.
        alive: Checked between attempts; when it turns false, waiting stops at once.
        brokers: How many brokers must be registered (a cluster's nodes register one by one).

    Raises:
        BrokerError: The broker did not answer in time, or ``alive`` turned false.
    """
    deadline = time.monotonic() + timeout
    plaintext = Settings(kafka_security_protocol="PLAINTEXT")
    admin = AdminClient(kafka_client_config(bootstrap, settings=security or plaintext, log_level=0))
    last_error = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise BrokerError(f"the broker process exited before {bootstrap} answered")
        try:
            metadata = admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
        except Exception as error:  # KafkaException: not reachable yet
            last_error = str(error)
            time.sleep(0.2)
            continue
        if len(metadata.brokers) >= brokers:
            return
        last_error = f"{len(metadata.brokers)} of {brokers} brokers registered"
        time.sleep(0.2)
    raise BrokerError(
        f"no Kafka broker answered a metadata request at {bootstrap} within {timeout:.0f}s "
        f"(last error: {last_error})"
    )


@dataclass(frozen=True)
class BrokerStatus:
    """What :meth:`LocalKafka.status` reports."""

    running: bool
    pid: int | None
    bootstrap: str | None
    directory: Path
    log_file: Path


class LocalKafka:
    """A native single-node KRaft broker living in one directory.

    The broker MUST be stopped with :meth:`stop` (it runs in its own session and outlives the
    Python process otherwise). Starting again on the same directory reuses its data, cluster id
    and, when still free, its port.
    """

    def __init__(
        self,
        directory: Path,
        *,
        home: Path,
        extra_properties: Mapping[str, str] | None = None,
        security: Settings | None = None,
        scram_credentials: Mapping[str, str] | None = None,
        repository: str = MAVEN_CENTRAL,
        image: str | None = None,
    ) -> None:
        """Describe a broker; nothing is started until :meth:`start`.

        Args:
            directory: The broker's own directory (created on start).
            home: The clingate cache directory holding the jar cache.
            extra_properties: server.properties entries that override the generated ones; the
                placeholders ``{port}`` and ``{controller_port}`` in a value are replaced by the
                ports of this start (e.g. ``SASL_PLAINTEXT://127.0.0.1:{port}``).
            security: The client security of its listener, for the readiness probe (e.g. SASL
                credentials of its super user); None: PLAINTEXT.
            scram_credentials: user name -> password, written as SCRAM-SHA-512 credentials into the
                metadata log when the storage is formatted (first start only; KIP-900), so that a
                SASL listener can authenticate them from the first second.
            repository: The Maven repository its jars are fetched from (``Settings.maven_repository``).
            image: Run the JVM in a container of this image (clingate's Kafka image,
                :func:`~streams.local.images.kafka_image`) through testcontainers; None: natively.
        """
        # Absolute, because the pid check matches this path in the JVM's command line.
        self.directory = directory.absolute()
        self.home = home
        self.extra_properties = dict(extra_properties or {})
        self.security = security
        self.scram_credentials = dict(scram_credentials or {})
        self.repository = repository
        self.image = image
        self._process: ProcessHandle | None = None
        """The JVM when this object started it (else only the pid file knows it)."""

    @property
    def pid_file(self) -> Path:
        """Holds the pid of the running JVM."""
        return self.directory / "kafka.pid"

    @property
    def log_file(self) -> Path:
        """The broker's server.log."""
        return self.directory / "logs" / "server.log"

    @property
    def properties_file(self) -> Path:
        """The server.properties of the last start."""
        return self.directory / "server.properties"

    @property
    def _state_file(self) -> Path:
        return self.directory / "broker.json"

    @property
    def _jvm_output(self) -> Path:
        return self.directory / "jvm.out"

    def state(self) -> dict[str, object]:
        """The ports and cluster id of the last start or :meth:`reserve` (empty before either)."""
        try:
            return dict(json.loads(self._state_file.read_text()))
        except FileNotFoundError:
            return {}

    def reserve(self, port: int, controller_port: int, cluster_id: str) -> None:
        """Fix the ports and the cluster id of the next starts (the nodes of a cluster must know each
        other's controller ports before the first of them starts)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._state_file.write_text(
            json.dumps({"port": port, "controller_port": controller_port, "cluster_id": cluster_id})
        )

    def _pid(self) -> int | None:
        """The pid in the pid file if that process is alive and is this broker's JVM."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if self._process is not None and self._process.pid == pid and not self._process.running:
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        cmdline = Path(f"/proc/{pid}/cmdline")
        # Where /proc exists, guard against a recycled pid (e.g. after a reboot).
        if cmdline.exists() and str(self.properties_file).encode() not in cmdline.read_bytes():
            return None
        return pid

    @property
    def bootstrap(self) -> str | None:
        """The bootstrap address while running, else None."""
        if self._pid() is None:
            return None
        return f"127.0.0.1:{self.state()['port']}"

    def status(self) -> BrokerStatus:
        """Whether the broker runs, with its pid and address."""
        pid = self._pid()
        return BrokerStatus(
            running=pid is not None,
            pid=pid,
            bootstrap=self.bootstrap if pid is not None else None,
            directory=self.directory,
            log_file=self.log_file,
        )

    def log_tail(self, lines: int = 30) -> str:
        """The broker's ERROR/FATAL lines and the last lines of its logs, for error messages.

        The errors come first because a failed start ends in pages of orderly shutdown messages
        that bury the cause (e.g. ``Address already in use``).
        """
        parts = []
        for path in (self.log_file, self._jvm_output):
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            if not text:
                continue
            # An ERROR line, plus the exception line under it (where the cause is usually spelled out).
            errors = [
                line + ("" if following.startswith("[") else f"\n    {following}")
                for line, following in zip(text, [*text[1:], "["], strict=True)
                if " ERROR " in line or " FATAL " in line
            ][-10:]
            if errors:
                parts.append(f"--- errors in {path} ---\n" + "\n".join(errors))
            parts.append(f"--- end of {path} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(parts) or "(no broker output yet)"

    def _server_properties(self, port: int, controller_port: int) -> dict[str, str]:
        properties = {
            "process.roles": "broker,controller",
            "node.id": str(_NODE_ID),
            "controller.quorum.voters": f"{_NODE_ID}@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.directory / "data"),
            **BROKER_DEFAULTS,
        }
        properties.update(
            (key, value.replace("{port}", str(port)).replace("{controller_port}", str(controller_port)))
            for key, value in self.extra_properties.items()
        )
        return properties

    def _java(self, libs: Path | None, main_class: str, *arguments: str) -> list[str]:
        """The JVM's command line: natively from ``libs``, in the image from its own jars (``libs``
        None)."""
        if libs is None:
            java, classpath = "java", f"{IMAGE_KAFKA_HOME}/libs/*"
            log4j = f"file:{IMAGE_KAFKA_HOME}/log4j.properties"
        else:
            java = shutil.which("java") or ""
            if not java:
                raise BrokerError("java is not on the PATH: install Java 17 to run the local Kafka broker.")
            classpath, log4j = f"{libs}{os.sep}*", LOG4J_CONFIG.as_uri()
        return [
            java,
            *JVM_OPTIONS,
            f"-Dkafka.logs.dir={self.log_file.parent}",
            f"-Dlog4j.configuration={log4j}",
            "-cp",
            classpath,
            main_class,
            *arguments,
        ]

    def start(self, port: int | None = None, timeout: float = 90.0) -> str:
        """Start the broker (if not running) and wait until it answers.

        Args:
            port: Listener port; default: the port of the previous start (retried for
                :data:`_PORT_REUSE_WAIT_S` while busy), else any free port.
            timeout: Seconds to wait for readiness.

        Returns:
            The bootstrap address, ``127.0.0.1:<port>``.

        Raises:
            BrokerError: Java is missing, the jars could not be fetched, or the broker did not become
                ready (the message carries the tail of its log).
        """
        running = self.bootstrap
        if running is not None:
            if port is not None and running != f"127.0.0.1:{port}":
                raise BrokerError(f"the broker in {self.directory} already runs at {running}")
            return running
        try:
            libs = None if self.image is not None else ensure_artifacts(self.home, repository=self.repository)
        except ArtifactError as exc:
            raise BrokerError(str(exc)) from exc
        state = self.state()
        port = port or free_port(state.get("port"), wait=_PORT_REUSE_WAIT_S)
        controller_port = free_port(state.get("controller_port"), taken=(port,), wait=_PORT_REUSE_WAIT_S)
        cluster_id = str(state.get("cluster_id") or new_cluster_id())
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.reserve(port, controller_port, cluster_id)
        properties = self._server_properties(port, controller_port)
        # Owner-only (0600), as a file left by an earlier start too: a secured broker's holds its
        # administrator's password.
        descriptor = os.open(self.properties_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write("".join(f"{key}={value}\n" for key, value in properties.items()))
        formatted = (self.directory / "data" / "meta.properties").exists()
        if libs is None:
            alive = self._start_container(None if formatted else self._format_command(None, cluster_id))
        else:
            if not formatted:
                self._format(libs, cluster_id)
            alive = self._start_native(libs)
        bootstrap = f"127.0.0.1:{port}"
        try:
            wait_for_kafka(bootstrap, timeout, self.security, alive=alive)
        except BrokerError as error:
            self.stop()
            raise BrokerError(f"Local Kafka broker failed to start: {error}.\n{self.log_tail()}") from error
        return bootstrap

    def _start_native(self, libs: Path) -> Callable[[], bool]:
        """Start the JVM as a child in its own session (``clingate broker start`` exits and leaves it
        running); return its liveness check."""
        java = self._java(libs, "kafka.Kafka", str(self.properties_file))
        process = ProcessHandle("Kafka broker", java, log=self._jvm_output, new_session=True)
        self._process = process.start(append=True)
        self.pid_file.write_text(f"{process.pid}\n")
        return lambda: process.running

    def _start_container(self, format_command: list[str] | None) -> Callable[[], bool]:
        """Start the JVM as the init process of a container of :attr:`image` (after formatting the
        storage there when ``format_command`` is given); return its liveness check."""
        import docker.errors
        from testcontainers.core.config import testcontainers_config
        from testcontainers.core.container import DockerContainer

        testcontainers_config.ryuk_disabled = True
        output = shlex.quote(str(self._jvm_output))
        java = shlex.join(self._java(None, "kafka.Kafka", str(self.properties_file)))
        script = f"exec {java} >>{output} 2>&1"
        if format_command is not None:
            script = f"{shlex.join(format_command)} >>{output} 2>&1 || exit 1; {script}"
        container = (
            DockerContainer(str(self.image))
            .with_command(["/bin/sh", "-c", script])
            .with_volume_mapping(str(self.directory), str(self.directory), "rw")
            .with_kwargs(network_mode="host", auto_remove=True, user=f"{os.getuid()}:{os.getgid()}")
        )
        container.start()
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        self.pid_file.write_text(f"{wrapped.attrs['State']['Pid']}\n")
        # The engine may answer before the container's init has become the script (its command line
        # is the runtime's until then, and :meth:`_pid` would not recognise it): wait for the script.
        deadline = time.monotonic() + _CONTAINER_EXEC_WAIT_S
        while self._pid() is None and time.monotonic() < deadline:
            time.sleep(0.05)

        def alive() -> bool:
            """Whether the container runs, as the engine says (a command line read while the script
            execs the JVM may be empty for an instant)."""
            try:
                wrapped.reload()
            except docker.errors.NotFound:  # removed when its init ended
                return False
            return str(wrapped.status) in ("created", "running")

        return alive

    def _format_command(self, libs: Path | None, cluster_id: str) -> list[str]:
        # "--cluster-id=ID", not "-t ID": a random id may start with "-", which argparse then takes for
        # an option ("expected one argument").
        return self._java(
            libs, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
            "-c", str(self.properties_file),
            *(f"--add-scram={SASL_MECHANISM}=[name={user},password={password}]"
              for user, password in self.scram_credentials.items()),
        )  # fmt: skip

    def _format(self, libs: Path, cluster_id: str) -> None:
        result = subprocess.run(self._format_command(libs, cluster_id), capture_output=True, text=True,
                                check=False)  # fmt: skip
        if result.returncode != 0:
            raise BrokerError(f"Formatting the broker storage failed:\n{result.stdout}{result.stderr}")

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker and wait until its JVM is gone (SIGKILL after ``timeout`` seconds).

        Args:
            timeout: Seconds to allow a clean (controlled) shutdown.

        Returns:
            True if a running broker was stopped, False if none was running.
        """
        return self._end(signal.SIGTERM, timeout)

    def kill(self) -> bool:
        """Kill the broker abruptly (SIGKILL, no controlled shutdown), as a crash would.

        Returns:
            True if a running broker was killed.
        """
        return self._end(signal.SIGKILL, 0.0)

    def pause(self) -> None:
        """Freeze the broker's JVM (SIGSTOP), as a host that stops scheduling it would: connections stay
        open and nothing answers until :meth:`resume`."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused broker go on (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def _signal(self, signum: signal.Signals) -> None:
        pid = self._pid()
        if pid is None:
            raise BrokerError(f"no broker runs in {self.directory}")
        os.kill(pid, signum)

    def _end(self, first_signal: signal.Signals, grace: float) -> bool:
        pid = self._pid()
        if pid is not None:
            if self._process is not None and self._process.pid == pid:
                self._process.stop(grace, first=first_signal)  # our own child: stopped and reaped
            else:
                with contextlib.suppress(ProcessLookupError):  # it ended on its own since the check
                    end_detached(pid, first_signal, grace)
        self.pid_file.unlink(missing_ok=True)
        self._process = None
        return pid is not None


def start_scripts(libs: str, log4j: str) -> dict[str, str]:
    """``bin/kafka-storage.sh`` and ``bin/kafka-server-start.sh`` of a Kafka installation, by name: what
    deploy/kafka/kafka-node.sh runs, here on the jars in ``libs`` with this module's JVM options.

    Args:
        libs: The directory holding the broker jars.
        log4j: The server's log4j configuration (a URL); ``KAFKA_LOG4J_OPTS`` replaces it, as in
            Apache's scripts.
    """
    java = shlex.join(["java", *JVM_OPTIONS, "-cp", f"{libs}/*"])
    return {
        "kafka-storage.sh": f'#!/bin/sh\nexec {java} kafka.tools.StorageTool "$@"\n',
        "kafka-server-start.sh": (
            f'#!/bin/sh\nexec {java} ${{KAFKA_LOG4J_OPTS:--Dlog4j.configuration={log4j}}} kafka.Kafka "$@"\n'
        ),
    }


def write_start_scripts(directory: Path, libs: str, log4j: str) -> None:
    """Write :func:`start_scripts` into ``directory`` (created), executable."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in start_scripts(libs, log4j).items():
        (directory / name).write_text(text)
        (directory / name).chmod(0o755)


def end_detached(pid: int, first_signal: signal.Signals, grace: float) -> None:
    """Stop a process another process started and left running (a ``clingate broker start`` JVM, the
    tests' ``dockerd``): only its pid is known, so it is signalled and watched by pid, SIGKILL after
    ``grace``.

    Raises:
        BrokerError: it survived SIGKILL for 10 s.
    """
    os.kill(pid, first_signal)
    if _gone(pid, grace):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return  # it ended (and was reaped: a container's init is, at once) after the check
    if not _gone(pid, 10.0):
        raise BrokerError(f"the broker JVM (pid {pid}) survived SIGKILL")


def _gone(pid: int, timeout: float) -> bool:
    """Whether ``pid`` exits within ``timeout``: no such process, or a zombie (dead, its parent not having
    reaped it yet, as when the test process that started a broker is not the one stopping it)."""
    deadline = time.monotonic() + timeout
    stat = Path(f"/proc/{pid}/stat")
    while True:  # checked at least once, also with no time to wait
        try:
            os.kill(pid, 0)
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _jaas(login_module: str, **options: str) -> str:
    # JAAS quoting: values are double-quoted; a quote or backslash inside one would end it early.
    if any(ch in value for value in options.values() for ch in '"\\;'):
        raise BrokerError('SASL user names and passwords of the local broker may not contain ", \\ or ;')
    return f"{login_module} required " + " ".join(f'{key}="{value}"' for key, value in options.items()) + ";"


def sasl_local_kafka(
    directory: Path,
    *,
    home: Path,
    super_user: str,
    passwords: Mapping[str, str],
    tls_dir: Path | None = None,
    repository: str = MAVEN_CENTRAL,
) -> LocalKafka:
    """A :class:`LocalKafka` that authenticates every client and authorises it by KRaft ACLs.

    Clients connect to a ``SASL_PLAINTEXT`` listener with :data:`SASL_MECHANISM`, or, given
    ``tls_dir``, to a ``SASL_SSL`` one (as deploy/kafka/kafka-node.sh configures a production node;
    the controller listener then uses TLS too). Each user of ``passwords`` gets SCRAM credentials when the
    storage is formatted. The ``StandardAuthorizer`` denies whatever no ACL allows
    (``allow.everyone.if.no.acl.found=false``), except to ``super_user``, who creates topics and ACLs
    (:mod:`topics.acls`) and whom the broker itself uses between its listeners.

    The controller listener authenticates with SASL/PLAIN (static JAAS users): KRaft controllers
    cannot check SCRAM credentials, which live in the metadata log they serve, and a PLAINTEXT
    controller listener would make ``User:ANONYMOUS`` a required super user.

    Args:
        directory: The broker's own directory.
        home: The clingate cache directory holding the jar cache.
        super_user: The administrator's user name (must be a key of ``passwords``).
        passwords: user name -> password of every principal that will connect.
        tls_dir: Where ``deploy/security/make-certs.sh DIR 127.0.0.1`` wrote ``ca.pem`` and
            ``127.0.0.1.pem``; None: no TLS.

    Returns:
        The broker, not started; its ``security`` authenticates as ``super_user``.
    """
    admin_password = passwords[super_user]
    scram = _jaas("org.apache.kafka.common.security.scram.ScramLoginModule",
                  username=super_user, password=admin_password)  # fmt: skip
    plain = _jaas("org.apache.kafka.common.security.plain.PlainLoginModule", username=super_user,
                  password=admin_password, **{f"user_{super_user}": admin_password})  # fmt: skip
    protocol = "SASL_SSL" if tls_dir is not None else "SASL_PLAINTEXT"
    properties = {
        "listeners": f"{protocol}://127.0.0.1:{{port}},CONTROLLER://127.0.0.1:{{controller_port}}",
        "advertised.listeners": f"{protocol}://127.0.0.1:{{port}}",
        "listener.security.protocol.map": f"{protocol}:{protocol},CONTROLLER:{protocol}",
        "inter.broker.listener.name": protocol,
        "sasl.enabled.mechanisms": SASL_MECHANISM,
        "sasl.mechanism.inter.broker.protocol": SASL_MECHANISM,
        f"listener.name.{protocol.lower()}.{SASL_MECHANISM.lower()}.sasl.jaas.config": scram,
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{super_user}",
        "allow.everyone.if.no.acl.found": "false",
    }
    if tls_dir is not None:
        properties |= {
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_dir / "127.0.0.1.pem"),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_dir / "ca.pem"),
        }  # fmt: skip
    probe = Settings(
        kafka_security_protocol=protocol, kafka_sasl_mechanism=SASL_MECHANISM,
        kafka_username=super_user, kafka_password=admin_password,
        kafka_ssl_ca_file=tls_dir / "ca.pem" if tls_dir is not None else None,
    )  # fmt: skip
    return LocalKafka(directory, home=home, extra_properties=properties, security=probe,
                      scram_credentials=passwords, repository=repository)  # fmt: skip


def read_password_dir(directory: Path) -> dict[str, str]:
    """user name -> password from a directory holding one file per user (its name) with the password.

    The layout of ``SCRAM_USERS_DIR`` in deploy/kafka/kafka-node.sh and of a mounted Kubernetes
    Secret; dot files (a Secret's ``..data`` links) are skipped.

    Raises:
        BrokerError: The directory holds no password file.
    """
    passwords = {
        path.name: path.read_text(encoding="utf-8").strip()
        for path in sorted(directory.iterdir())
        if path.is_file() and not path.name.startswith(".")
    }
    if not passwords:
        raise BrokerError(f"{directory} holds no password files (one file per user, named by the user)")
    return passwords


def docker_engine_available(timeout: float = 2.0) -> bool:
    """True if a Docker engine answers a ping (a ``docker`` client binary alone is not enough).

    Args:
        timeout: Seconds to wait for the engine's answer.
    """
    try:
        import docker
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=max(1, round(timeout)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # DockerException, connection and permission errors: no usable engine
        return False


def local_broker(settings: Settings) -> LocalKafka:
    """The broker that ``clingate broker start|stop|status`` manages (default ``<home>/broker``)."""
    directory = settings.broker_dir or settings.home / "broker"
    return LocalKafka(directory, home=settings.home, repository=settings.maven_repository)
