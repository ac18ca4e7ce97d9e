"""Container images built here, from packages: a Docker engine and no container registry.

``make images`` (``python -m streams.local.images build``) provisions a Docker engine where it can and
builds three images, each named by clingate (:attr:`Settings.image_prefix`, never another vendor's
name: on a machine with registry access a local build tagged ``apache/kafka`` would silently stand in
for theirs) and tagged with a digest of its inputs, so it is rebuilt only when they change (each is also
tagged ``latest``, the name deploy/compose runs by default):

* ``<prefix>/base:<digest>``: Debian bookworm from Debian's mirror (``debootstrap --variant=minbase``)
  with the OpenJDK 17 runtime, Python 3 and the CA certificates, imported with ``docker import``.
* ``<prefix>/kafka:<kafka version>-<digest>``: the base plus the broker jars the native broker runs
  (``deploy/local/kafka-jars.lock``, fetched and checked by :mod:`streams.local.jars`) at
  ``/opt/kafka/libs``, the native broker's log4j configuration at ``/opt/kafka/log4j.properties`` (the
  tests' brokers), and the two start scripts of a Kafka installation in ``/opt/kafka/bin``, logging to
  stdout, which deploy/kafka/kafka-node.sh runs (the compose and Kubernetes brokers).
* ``<prefix>/clingate:<digest>``: the repository's ``Dockerfile`` built on the base, from the project's
  wheels and its dependencies' built on the host into ``build/image-wheels``: nothing is fetched from
  inside a build (whose containers would not trust a TLS-inspecting proxy the host trusts).
* ``<prefix>/prometheus:<digest>``: the base plus Debian's ``prometheus`` package (deploy/compose's
  metrics), installed from the plain-HTTP Debian mirror during the build, on the host's network.

The engine. Where none answers, ``dockerd`` (Debian's ``docker.io``, installed as root when missing,
with ``debootstrap``) is started in the background on the default socket with its data under
``<home>/docker``; ``stop`` ends it and every container it runs. Where Docker cannot run (not root and
no engine, no ``dockerd``), :func:`provision` says why once and returns None: callers fall back to the
native broker.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from streams.local.broker import (
    IMAGE_KAFKA_HOME,
    LOG4J_CONFIG,
    LOG4J_CONSOLE,
    docker_engine_available,
    end_detached,
    start_scripts,
    write_start_scripts,
)
from streams.local.jars import KAFKA_LOCK, KAFKA_POM, ensure_artifacts, kafka_version
from streams.local.process import SOURCE_ROOT, ProcessHandle
from streams.runtime.settings import Settings, get_settings

#: Debian release and mirror of the base image.
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
#: Packages of the base image besides Debian's minimal base.
BASE_PACKAGES = ("openjdk-17-jre-headless", "python3", "python3-venv", "ca-certificates")
_ENGINE_READY_S = 60.0
#: The Kafka image's start scripts run its own jars and log to stdout.
_SCRIPT_PATHS = (f"{IMAGE_KAFKA_HOME}/libs", f"file:{IMAGE_KAFKA_HOME}/log4j-console.properties")


class ImageError(RuntimeError):
    """An image could not be built; the message holds the tail of the builder's output."""


@dataclass(frozen=True)
class Images:
    """The names of the built images."""

    base: str
    kafka: str
    clingate: str
    prometheus: str


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()[:12]


def _run(argv: list[str], what: str, **kwargs: object) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise ImageError(f"{what} failed ({' '.join(argv[:3])} ...):\n{(done.stdout + done.stderr)[-3000:]}")
    return str(done.stdout)


def image_exists(image: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False).returncode
        == 0
    )


def kafka_image(settings: Settings) -> str | None:
    """clingate's Kafka image of this checkout where a Docker engine answers and the image is built
    (``make images``), else None (the broker runs natively)."""
    if not docker_engine_available():
        return None
    name = image_names(settings).kafka
    return name if image_exists(name) else None


def provision(settings: Settings) -> bool:
    """Whether an engine answers, one already running or a ``dockerd`` started here (in its own
    session, its pid in ``<home>/docker/dockerd.pid`` for :func:`stop_engine`); False, said once on
    stderr, where Docker cannot run."""
    if docker_engine_available():
        return True
    if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            print("images: no Docker engine and none can be installed here; the native broker is used",
                  file=sys.stderr)  # fmt: skip
            return False
        _run(["apt-get", "install", "-y", "-q", "docker.io", "debootstrap"], "installing Docker")
    if os.geteuid() != 0:
        print("images: dockerd needs root here; the native broker is used", file=sys.stderr)
        return False
    directory = settings.home / "docker"
    directory.mkdir(parents=True, exist_ok=True)
    argv = ["dockerd", "--data-root", str(directory / "data"), "--exec-root", str(directory / "exec"),
            "--pidfile", str(directory / "dockerd.pid")]  # fmt: skip
    engine = ProcessHandle("Docker engine", argv, log=directory / "dockerd.log", new_session=True).start()
    engine.wait_until(docker_engine_available, timeout_s=_ENGINE_READY_S, poll_s=0.25)
    return True


def stop_engine(settings: Settings) -> bool:
    """Stop every container and the ``dockerd`` :func:`provision` started (by its pid file); False if
    none was started here."""
    pidfile = settings.home / "docker" / "dockerd.pid"
    if not pidfile.exists():
        return False
    containers = subprocess.run(["docker", "ps", "-q"], capture_output=True, text=True, check=False).stdout
    if containers.split():
        subprocess.run(["docker", "kill", *containers.split()], capture_output=True, check=False)
    pid = int(pidfile.read_text().strip())
    try:
        end_detached(pid, signal.SIGTERM, 30.0)
    except ProcessLookupError:
        pidfile.unlink(missing_ok=True)
        return False
    return True


def image_names(settings: Settings) -> Images:
    """The images' names for this checkout (their tags are the digests of their inputs)."""
    prefix = settings.image_prefix
    base_inputs = _digest(DEBIAN_SUITE.encode(), DEBIAN_MIRROR.encode(), *map(str.encode, BASE_PACKAGES))
    base = f"{prefix}/base:{base_inputs}"
    scripts = sorted(start_scripts(*_SCRIPT_PATHS).items())
    kafka_inputs = _digest(
        base.encode(),
        KAFKA_POM.read_bytes(),
        KAFKA_LOCK.read_bytes(),
        LOG4J_CONFIG.read_bytes(),
        LOG4J_CONSOLE.read_bytes(),
        *(f"{name}\n{text}".encode() for name, text in scripts),
    )
    kafka = f"{prefix}/kafka:{kafka_version()}-{kafka_inputs}"
    clingate = f"{prefix}/clingate:{_digest(base.encode(), *_project_files())}"
    prometheus = f"{prefix}/prometheus:{_digest(base.encode(), _prometheus_dockerfile(base).encode())}"
    return Images(base, kafka, clingate, prometheus)


def _prometheus_dockerfile(base: str) -> str:
    return (
        f"FROM {base}\n"
        "RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
        "--no-install-recommends prometheus && rm -rf /var/lib/apt/lists/*\n"
        'ENTRYPOINT ["prometheus"]\n'
    )


def _project_files() -> list[bytes]:
    """What the clingate image is built from: the Dockerfile and every file it copies, by path."""
    roots = ["Dockerfile", "pyproject.toml", "README.md", "deploy/security/acls.yaml",
             "streams", "topics", "processors", "state", "schemas"]  # fmt: skip
    parts: list[bytes] = []
    for root in roots:
        path = SOURCE_ROOT / root
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if "__pycache__" not in file.parts:
                parts += [str(file.relative_to(SOURCE_ROOT)).encode(), file.read_bytes()]
    return parts


def build(settings: Settings) -> Images:
    """Build whichever of the images is missing (an engine must answer) and tag each ``latest``."""
    images = image_names(settings)
    builders = [
        (images.base, lambda: _build_base(images.base)),
        (images.kafka, lambda: _build_kafka(settings, images)),
        (images.clingate, lambda: _build_clingate(images)),
        (images.prometheus, lambda: _build_prometheus(images)),
    ]
    for name, builder in builders:
        if not image_exists(name):
            builder()
        _run(["docker", "tag", name, name.rsplit(":", 1)[0] + ":latest"], f"docker tag of {name}")
    return images


def _build_base(name: str) -> None:
    with tempfile.TemporaryDirectory(prefix="clingate-base-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", DEBIAN_SUITE,
              str(rootfs), DEBIAN_MIRROR], "debootstrap of the base image")  # fmt: skip
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        _run(
            ["docker", "import", "--change", "ENV LANG=C.UTF-8", "-", name], "docker import", stdin=tar.stdout
        )
        tar.wait()


def _build_kafka(settings: Settings, images: Images) -> None:
    libs = ensure_artifacts(settings.home, repository=settings.maven_repository)
    with tempfile.TemporaryDirectory(prefix="clingate-kafka-image-") as scratch:
        context = Path(scratch)
        shutil.copytree(libs, context / "libs")
        shutil.copy(LOG4J_CONFIG, context / "log4j.properties")
        shutil.copy(LOG4J_CONSOLE, context / "log4j-console.properties")
        write_start_scripts(context / "bin", *_SCRIPT_PATHS)
        (context / "Dockerfile").write_text(
            f"FROM {images.base}\n"
            f"COPY libs {IMAGE_KAFKA_HOME}/libs\n"
            f"COPY bin {IMAGE_KAFKA_HOME}/bin\n"
            f"COPY log4j.properties log4j-console.properties {IMAGE_KAFKA_HOME}/\n"
        )
        _run(["docker", "build", "-q", "-t", images.kafka, str(context)], "docker build of the Kafka image")


def _build_clingate(images: Images) -> None:
    wheels = SOURCE_ROOT / "build" / "image-wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(wheels), str(SOURCE_ROOT)],
         "building the project's wheels")  # fmt: skip
    argv = ["docker", "build", "-q", "--build-arg", f"BASE={images.base}", "-t", images.clingate]
    _run([*argv, str(SOURCE_ROOT)], "docker build of the clingate image")


def _build_prometheus(images: Images) -> None:
    with tempfile.TemporaryDirectory(prefix="clingate-prometheus-image-") as scratch:
        (Path(scratch) / "Dockerfile").write_text(_prometheus_dockerfile(images.base))
        _run(["docker", "build", "-q", "--network", "host", "-t", images.prometheus, scratch],
             "docker build of the Prometheus image")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``python -m streams.local.images build|stop``."""
    command = (argv if argv is not None else sys.argv[1:]) or ["build"]
    settings = get_settings()
    if command[0] == "stop":
        stop_engine(settings)
        return 0
    if not provision(settings):
        return 0
    try:
        images = build(settings)
    except ImageError as error:
        print(f"images: not built, the native broker is used: {error}", file=sys.stderr)
        stop_engine(settings)
        return 0
    print(f"images: {', '.join(vars(images).values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
