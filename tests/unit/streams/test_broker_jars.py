"""The broker's jars: the lock pins the pom's dependencies, and a fetch takes exactly the locked bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from streams.local.jars import (
    KAFKA_LOCK,
    KAFKA_POM,
    ArtifactError,
    LockedJar,
    ensure_artifacts,
    kafka_version,
    read_lock,
    repository_path,
)


def test_the_checked_in_lock_was_written_for_the_pom_and_pins_its_kafka_and_logging() -> None:
    jars = read_lock()
    version = kafka_version()
    names = {jar.name for jar in jars}
    assert {f"kafka_2.13-{version}.jar", f"kafka-clients-{version}.jar", f"kafka-raft-{version}.jar"} <= names
    assert any(name.startswith("reload4j-") for name in names)
    assert len(names) == len(jars), "two locked jars would share a file name on the class path"
    assert all(len(jar.sha256) == 64 for jar in jars)


def test_a_lock_written_for_another_pom_says_how_to_lock_again(tmp_path: Path) -> None:
    pom = tmp_path / "pom.xml"
    pom.write_bytes(KAFKA_POM.read_bytes().replace(b"<version>1</version>", b"<version>2</version>", 1))
    with pytest.raises(ArtifactError, match=r"python -m streams\.local\.jars"):
        read_lock(pom, KAFKA_LOCK)


def _repository(tmp_path: Path, jars: dict[str, bytes], pins: dict[str, bytes]) -> tuple[str, Path, Path]:
    """A file:// repository holding ``jars`` and a pom and lock pinning ``pins`` (repository path → bytes)."""
    repository = tmp_path / "repository"
    for path, data in jars.items():
        (repository / path).parent.mkdir(parents=True, exist_ok=True)
        (repository / path).write_bytes(data)
    pom = tmp_path / "pom.xml"
    pom.write_bytes(KAFKA_POM.read_bytes())
    lock = tmp_path / "kafka-jars.lock"
    lock.write_text("\n".join([
        f"# pom sha256 {hashlib.sha256(pom.read_bytes()).hexdigest()}",
        *(f"{path} {hashlib.sha256(data).hexdigest()}" for path, data in pins.items()),
    ]) + "\n")  # fmt: skip
    return repository.as_uri(), pom, lock


def test_the_locked_jars_are_fetched_once_into_the_cache(tmp_path: Path) -> None:
    jars = {"org/a/a/1/a-1.jar": b"a", "org/b/b-x/2/b-x-2-tests.jar": b"bb"}
    repository, pom, lock = _repository(tmp_path, jars, jars)

    libs = ensure_artifacts(tmp_path / "home", pom, lock, repository)

    assert sorted(p.name for p in libs.iterdir()) == ["a-1.jar", "b-x-2-tests.jar"]
    assert (libs / "b-x-2-tests.jar").read_bytes() == b"bb"
    assert ensure_artifacts(tmp_path / "home", pom, lock, "file:///nowhere") == libs  # cached: no fetch


def test_a_jar_that_is_not_the_locked_one_is_refused_and_nothing_is_cached(tmp_path: Path) -> None:
    repository, pom, lock = _repository(
        tmp_path, {"org/a/a/1/a-1.jar": b"tampered"}, {"org/a/a/1/a-1.jar": b"original"}
    )
    home = tmp_path / "home"
    with pytest.raises(ArtifactError, match="not the jar the lock pins"):
        ensure_artifacts(home, pom, lock, repository)
    [cache] = (home / "kafka").iterdir()
    assert [p.name for p in cache.iterdir()] == ["resolve.lock"]


def test_maven_dependency_list_lines_become_repository_paths() -> None:
    listed = "   org.apache.kafka:kafka_2.13:jar:3.9.2:compile:/m2/kafka_2.13-3.9.2.jar -- module kafka.core"
    assert repository_path(listed) == (
        "org/apache/kafka/kafka_2.13/3.9.2/kafka_2.13-3.9.2.jar",
        Path("/m2/kafka_2.13-3.9.2.jar"),
    )
    assert repository_path("io.netty:netty-tcnative:jar:linux-x86_64:2.0.1:runtime:/m2/n.jar")[0] == (
        "io/netty/netty-tcnative/2.0.1/netty-tcnative-2.0.1-linux-x86_64.jar"
    )
    assert LockedJar("a/b/1/b-1.jar", "0" * 64).name == "b-1.jar"
