"""quix-streams as the peer of ``clingate bench runtime``: its environment and one measured run.

quix-streams lives in a virtual environment of its own, never beside clingate: every quixstreams 3.x
release pins confluent-kafka below 2.13 (3.28.1 also pydantic below 2.14 and pydantic-settings below
2.16), older than what ``make venv`` installs for clingate (confluent-kafka 2.16 when this was
written), so a ``bench`` extra would downgrade the very client library clingate's runtime is measured
on (uv's resolver, asked for both, downgrades confluent-kafka, pydantic and pydantic-settings; held to
the installed versions, it finds no quixstreams 3.x at all). The first run
creates ``<CLINGATE_HOME>/bench/quixstreams`` (``python -m venv``, then the ``uv`` of clingate's
environment, or the new environment's pip where uv is not installed) with :data:`REQUIREMENT`; a stamp
holding the requirement, written last, marks it complete, so later runs reuse it and a changed
requirement (or an interrupted install) installs again.

The application is :mod:`streams.bench.quix_peer`, run as a script by that environment's interpreter;
its wall time and CPU are read from here, as the workers' are: ``/proc/<pid>/stat``
(:func:`streams.bench.dbpm_kafka.cpu_seconds`) when it says it processed its first record and when it
says its last is committed.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from streams.bench.dbpm_kafka import cpu_seconds

#: The quix-streams release measured (a fixed one: the peer row compares like with like across runs).
VERSION = "3.28.1"
#: What the peer's environment installs.
REQUIREMENT = f"quixstreams=={VERSION}"
#: The script the peer's interpreter runs.
PEER_SCRIPT = Path(__file__).with_name("quix_peer.py")
#: Seconds to wait for each line of the peer: start-up to its first record, or first record to done.
LINE_TIMEOUT_S = 900.0


class PeerUnavailable(RuntimeError):
    """quix-streams could not be installed here (no package index, no matching wheel): why."""


def peer_python(home: Path) -> Path:
    """The interpreter of the peer's environment under ``home``, created and installed on first use.

    Raises:
        PeerUnavailable: the environment could not be created or quix-streams not installed in it.
    """
    root = home / "bench" / "quixstreams"
    python, stamp = root / "bin" / "python", root / "clingate-requirement.txt"
    if python.exists() and stamp.exists() and stamp.read_text(encoding="utf-8") == REQUIREMENT:
        return python
    try:
        from uv import find_uv_bin
    except ImportError:  # clingate installed without the development set-up: the venv's own pip
        install = [str(python), "-m", "pip", "install", "-q", REQUIREMENT]
    else:
        install = [find_uv_bin(), "pip", "install", "-q", "--python", str(python), REQUIREMENT]
    try:
        for argv in ([sys.executable, "-m", "venv", "--clear", str(root)], install):
            subprocess.run(argv, capture_output=True, text=True, timeout=900, check=True)
    except subprocess.CalledProcessError as error:
        raise PeerUnavailable(
            f"could not install {REQUIREMENT} into {root}: {' '.join(error.stderr.split())[-500:]}"
        ) from error
    except (subprocess.TimeoutExpired, OSError) as error:
        raise PeerUnavailable(f"could not install {REQUIREMENT} into {root}: {error}") from error
    stamp.write_text(REQUIREMENT, encoding="utf-8")
    return python


def run_peer(
    python: Path, bootstrap: str, source: str, sink: str, group: str, workdir: Path, records: int
) -> tuple[float, float]:
    """Run the peer over the ``records`` records already in ``source``; (records/s, CPU us/record).

    Timed from its first record processed to its last one committed (both lines read by a thread as
    they arrive, with the process's CPU at that moment); its log is ``<workdir>/<group>.log``.

    Raises:
        RuntimeError: the peer exited early, failed, or said nothing for :data:`LINE_TIMEOUT_S`.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{group}.log"
    argv = [
        str(python), "-W", "ignore", str(PEER_SCRIPT), "--bootstrap", bootstrap, "--source", source,
        "--sink", sink, "--group", group, "--state-dir", str(workdir / group), "--records", str(records),
    ]  # fmt: skip
    with log.open("wb") as err:
        peer = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)
    marks: queue.Queue[tuple[str, float, float]] = queue.Queue()
    assert peer.stdout is not None and peer.stdin is not None
    threading.Thread(target=_read_marks, args=(peer.stdout, peer.pid, marks), daemon=True).start()
    try:
        started, cpu_start = _expect(marks, "first", log)
        ended, cpu_end = _expect(marks, "done", log)
    finally:
        peer.stdin.close()  # it exits once its stdin closes; at once after "done"
        try:
            peer.wait(60)
        except subprocess.TimeoutExpired:
            peer.kill()
            peer.wait()
    if peer.returncode:
        raise RuntimeError(f"the quix-streams peer failed (exit {peer.returncode}): see {log}")
    return records / (ended - started), (cpu_end - cpu_start) / records * 1e6


def _read_marks(stdout: IO[str], pid: int, marks: queue.Queue[tuple[str, float, float]]) -> None:
    """Each line of the peer with the time and the peer's CPU when it arrived; ("", ...) at its end."""
    for line in stdout:
        marks.put((line.strip(), time.perf_counter(), cpu_seconds([pid])))
    marks.put(("", time.perf_counter(), 0.0))


def _expect(marks: queue.Queue[tuple[str, float, float]], line: str, log: Path) -> tuple[float, float]:
    """The time and the peer's CPU seconds of the next mark, which must be ``line``."""
    try:
        mark = marks.get(timeout=LINE_TIMEOUT_S)
    except queue.Empty:
        said = f"the quix-streams peer said no {line!r} in {LINE_TIMEOUT_S:.0f} s"
        raise RuntimeError(f"{said}: see {log}") from None
    said, at, cpu_s = mark
    if said != line:
        what = f"said {said!r}" if said else "ended"
        raise RuntimeError(f"the quix-streams peer {what} before {line!r}: see {log}")
    return at, cpu_s
