"""The one process handle: spawn, readiness, output since the latest start, stop with grace, kill."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from streams.local.process import ProcessError, ProcessHandle

_READY_THEN_SLEEP = "import time; print('ready', flush=True); time.sleep(60)"
_IGNORE_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
    "time.sleep(60)"
)


def _python(code: str, log: Path | None, name: str = "child") -> ProcessHandle:
    return ProcessHandle(name, [sys.executable, "-c", code], log=log)


def test_ready_once_the_log_says_so_and_stopped_with_sigterm(tmp_path: Path) -> None:
    child = _python(_READY_THEN_SLEEP, tmp_path / "child.log").start()
    assert child.wait_for_output(b"ready", timeout_s=30) < 30
    assert child.running and child.returncode is None
    child.stop(grace_s=10)
    assert not child.running and child.returncode == -signal.SIGTERM


def test_a_child_that_exits_before_it_is_ready_fails_at_once_naming_its_log(tmp_path: Path) -> None:
    child = _python("raise SystemExit(3)", tmp_path / "child.log", name="quitter").start()
    with pytest.raises(
        ProcessError, match=r"quitter exited \(code 3\) before it was ready: see .*child\.log"
    ) as e:
        child.wait_for_output(b"never", timeout_s=30)
    assert e.value.returncode == 3


def test_a_child_not_ready_by_its_deadline_fails_and_is_left_running(tmp_path: Path) -> None:
    child = _python(_READY_THEN_SLEEP, tmp_path / "child.log", name="slow").start()
    try:
        with pytest.raises(ProcessError, match=r"slow not ready within 0 s: see .*child\.log") as e:
            child.wait_until(lambda: False, timeout_s=0.2)
        assert e.value.returncode is None and child.running
    finally:
        child.kill()
    assert child.returncode == -signal.SIGKILL


def test_sigkill_after_the_grace_period_when_sigterm_is_ignored(tmp_path: Path) -> None:
    child = _python(_IGNORE_SIGTERM, tmp_path / "child.log").start()
    child.wait_for_output(b"ready", timeout_s=30)
    started = time.monotonic()
    child.stop(grace_s=0.5)
    assert child.returncode == -signal.SIGKILL and time.monotonic() - started < 10


def test_a_restart_appends_to_the_log_and_reads_only_its_own_output(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    first = _python("print('first run', flush=True)", log).start()
    first.wait(30)
    again = _python("print('second run', flush=True)", log).start(append=True)
    again.wait(30)
    assert again.output() == b"second run\n"
    assert log.read_bytes() == b"first run\nsecond run\n"
    assert again.tail(1) == "second run"


def test_without_a_log_the_childs_stdout_is_read_line_by_line() -> None:
    child = _python("print('listening http://x'); print('more')", None).start()
    assert child.readline() == "listening http://x\n"
    assert child.readline() == "more\n"
    child.wait(30)
    assert child.readline() == "" and child.returncode == 0
