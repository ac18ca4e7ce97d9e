"""The local broker's jars: pinned in a lock file, fetched from Maven Central, checked by SHA-256.

``deploy/local/pom.xml`` chooses the broker (the Kafka version and its logging binding; see the comment
there). Maven resolves it once, on a maintainer's machine, into ``deploy/local/kafka-jars.lock``
(``python -m streams.local.jars``): the pom's SHA-256, then one line per runtime jar with its path
in a Maven repository and its SHA-256. Every other machine fetches exactly those jars from Maven
Central (or the mirror ``CLINGATE_MAVEN_REPOSITORY`` names), several at a time, checks each digest
and caches them under ``<home>/kafka/<version>-<pom digest>/libs`` (an edited pom never reuses a
stale cache). A fresh machine therefore needs no Maven, and the broker runs the bytes that were
locked: a repository that serves anything else is refused.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
import urllib.request
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from streams.runtime.settings import MAVEN_CENTRAL

DEPLOY_LOCAL = Path(__file__).resolve().parents[2] / "deploy" / "local"
KAFKA_POM = DEPLOY_LOCAL / "pom.xml"
KAFKA_LOCK = DEPLOY_LOCAL / "kafka-jars.lock"
#: Jars fetched at once (the broker has about sixty; most of the time is round trips, not bytes).
_FETCHERS = 8
_HEADER = "# pom sha256 "


class ArtifactError(RuntimeError):
    """The broker's jars could not be locked or fetched; the message says what to do."""


@dataclass(frozen=True)
class LockedJar:
    """One runtime jar of the broker: where it lives in a Maven repository and what it must hash to."""

    path: str
    """Repository path, e.g. ``org/apache/kafka/kafka_2.13/3.9.2/kafka_2.13-3.9.2.jar``."""
    sha256: str

    @property
    def name(self) -> str:
        """The file name on the class path (as ``mvn dependency:copy-dependencies`` names it)."""
        return self.path.rsplit("/", 1)[1]


def kafka_version(pom: Path = KAFKA_POM) -> str:
    """The Kafka version the pom chooses (its ``<kafka.version>`` property), e.g. ``"3.9.2"``."""
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    element = ET.parse(pom).getroot().find("m:properties/m:kafka.version", namespace)
    if element is None or not (element.text or "").strip():
        raise ArtifactError(f"{pom} declares no <kafka.version> property")
    return (element.text or "").strip()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_lock(pom: Path = KAFKA_POM, lock: Path = KAFKA_LOCK) -> list[LockedJar]:
    """The jars ``lock`` pins for ``pom``.

    Raises:
        ArtifactError: the lock is missing or was written for another version of the pom.
    """
    regenerate = f"run `python -m streams.local.jars` (needs Maven) to lock {pom.name} again"
    if not lock.is_file():
        raise ArtifactError(f"{lock} is missing: {regenerate}")
    lines = lock.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != _HEADER + _digest(pom.read_bytes()):
        raise ArtifactError(f"{lock} was written for another {pom.name}: {regenerate}")
    return [LockedJar(*line.split()) for line in lines if line and not line.startswith("#")]


def ensure_artifacts(
    home: Path, pom: Path = KAFKA_POM, lock: Path = KAFKA_LOCK, repository: str = MAVEN_CENTRAL
) -> Path:
    """The directory of the broker's jars, fetched only if not cached yet.

    Safe to call from concurrent processes (parallel test workers): one fetches at a time under a file
    lock, into a temporary directory published by an atomic rename, so a crash never leaves a partial
    ``libs``.

    Returns:
        The ``libs`` directory, for a ``-cp libs/*`` class path.

    Raises:
        ArtifactError: the lock is stale, or a jar could not be fetched or did not match its digest.
    """
    libs = home / "kafka" / f"{kafka_version(pom)}-{_digest(pom.read_bytes())[:12]}" / "libs"
    if libs.is_dir():
        return libs
    jars = read_lock(pom, lock)
    libs.parent.mkdir(parents=True, exist_ok=True)
    with (libs.parent / "resolve.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not libs.is_dir():
            _fetch(jars, repository, libs)
    return libs


def _fetch(jars: list[LockedJar], repository: str, libs: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix="libs.", dir=libs.parent))

    def fetch(jar: LockedJar) -> None:
        url = f"{repository}/{jar.path}"
        try:
            with urllib.request.urlopen(url, timeout=120) as response:
                data = response.read()
        except OSError as exc:
            raise ArtifactError(f"could not fetch {url} ({exc}): it must be reachable once") from exc
        if (found := _digest(data)) != jar.sha256:
            raise ArtifactError(f"{url} is not the jar the lock pins (SHA-256 {found}, not {jar.sha256})")
        (staging / jar.name).write_bytes(data)

    try:
        with ThreadPoolExecutor(_FETCHERS) as pool:
            list(pool.map(fetch, jars))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    staging.rename(libs)


def repository_path(coordinates: str) -> tuple[str, Path]:
    """A ``mvn dependency:list`` line (``group:artifact:type[:classifier]:version:scope:/abs/file``) as
    (repository path, local file)."""
    parts = coordinates.split(" -- ", 1)[0].strip().split(":")
    group, artifact, kind, *rest = parts
    version, file = rest[-3], Path(rest[-1])
    classifier = f"-{rest[0]}" if len(rest) == 4 else ""
    return f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}{classifier}.{kind}", file


def write_lock(pom: Path = KAFKA_POM, lock: Path = KAFKA_LOCK) -> list[LockedJar]:
    """Resolve the pom's runtime dependencies with Maven and pin them in ``lock``.

    Raises:
        ArtifactError: Maven is not on the PATH or failed.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ArtifactError("Maven (mvn) is not on the PATH: it is needed to lock the broker's jars")
    with tempfile.TemporaryDirectory() as scratch:
        listing = Path(scratch) / "dependencies.txt"
        done = subprocess.run(
            [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:list",
             "-DincludeScope=runtime", "-DoutputAbsoluteArtifactFilename=true", f"-DoutputFile={listing}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise ArtifactError(f"mvn dependency:list failed:\n{(done.stdout + done.stderr)[-3000:]}")
        entries = [line for line in listing.read_text(encoding="utf-8").splitlines() if line.count(":") >= 5]
    jars = sorted(
        (LockedJar(path, _digest(file.read_bytes())) for path, file in map(repository_path, entries)),
        key=lambda jar: jar.path,
    )
    lock.write_text(
        "\n".join([
            _HEADER + _digest(pom.read_bytes()),
            f"# The runtime jars of {pom.name} as Maven resolved them (`python -m streams.local.jars`).",
            *(f"{jar.path} {jar.sha256}" for jar in jars),
        ]) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    return jars


if __name__ == "__main__":
    print(f"{KAFKA_LOCK}: {len(write_lock())} jars locked")
