"""``deploy/llama-cpp/build-wheel.sh``, the build behind ``make smollm2``, with a stand-in for pip: the
flags it builds with, a progress line per tick naming the build's last step, and a failure that shows
the end of the log and exits with pip's status."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "deploy" / "llama-cpp" / "build-wheel.sh"

FAKE_PIP = """#!/usr/bin/env bash
# Stands in for "python -m pip wheel -v ...": records the flags, prints numbered ninja steps, exits $1.
echo "CMAKE_ARGS=$CMAKE_ARGS"
include=$(echo "$CMAKE_ARGS" | grep -o 'CMAKE_PROJECT_llama.cpp_INCLUDE=[^ ]*' | cut -d= -f2)
echo "include: $(cat "$include")"
for i in 1 2 3; do
  echo "  [$i/74] /usr/bin/g++ -O3 -o vendor/llama.cpp/src/CMakeFiles/llama.dir/models/m$i.cpp.o -c m$i.cpp"
  sleep 1.2
done
exit {status}
"""


def _build(tmp_path: Path, status: int) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PIP.format(status=status))
    fake.chmod(0o755)
    env = {**os.environ, "LLAMA_BUILD_TICK_S": "1"}
    return subprocess.run(
        [str(SCRIPT), str(fake), str(tmp_path / "wheels"), "llama-cpp-python"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_build_turns_off_what_a_text_model_does_not_load_and_says_where_it_stands(tmp_path: Path) -> None:
    done = _build(tmp_path, 0)
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "wheels" / "llama-cpp-python-build.log").read_text()
    flags = set(re.search(r"CMAKE_ARGS=(.*)", log).group(1).split())  # type: ignore[union-attr]
    assert {"-DGGML_NATIVE=OFF", "-DLLAVA_BUILD=OFF", "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"} <= flags  # fmt: skip
    assert "include: set(LLAMA_BUILD_COMMON OFF)" in log, "common is shadowed off in llama.cpp's scope"
    ticks = [line for line in done.stdout.splitlines() if line.startswith("smollm2: building")]
    assert ticks and all(re.fullmatch(r"smollm2: building llama-cpp-python, \d+ s: .+", t) for t in ticks)
    assert any(t.endswith("models/m2.cpp.o") or t.endswith("models/m3.cpp.o") for t in ticks), ticks
    assert done.stdout.splitlines()[-1].startswith("smollm2: llama-cpp-python built in ")


def test_a_failed_build_shows_the_end_of_its_log_and_exits_with_pips_status(tmp_path: Path) -> None:
    done = _build(tmp_path, 3)
    assert done.returncode == 3
    assert "[3/74] /usr/bin/g++" in done.stdout, "the log's last lines"
    assert done.stdout.splitlines()[-1].startswith("smollm2: llama-cpp-python build failed after ")
