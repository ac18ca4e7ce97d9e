"""``clingate`` imports a command's module only when that command runs, and no command pulls in another's.

Checked in a fresh interpreter, as a user's shell starts it, by the modules loaded once the command has
run (``sys.modules``: ``python -X importtime`` does not list a module loaded by ``importlib.import_module``,
which is how a command group is loaded). Which modules load is deterministic, how long they take is not:
start times are measured (``python -X importtime -m streams.cli replay --help``) and recorded in
docs/performance.md, not asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streams.cli import COMMANDS, load

#: Runtimes that a command group's help must not import unless it is that group's own.
HEAVY = (
    "streams.bench",
    "confluent_kafka.schema_registry",
    "authlib",
    "streams.worker.tableloop",
    "matplotlib",
)

#: What neither ``clingate --help`` nor ``clingate replay --help`` loads: any command's runtime (replay's
#: own engine and stores included) and Pydantic, which Typer imports only to convert an option's value.
NOT_FOR_HELP = (
    *HEAVY,
    "pydantic",
    "pydantic_core",
    "pydantic_settings",
    "confluent_kafka",
    "rocksdict",
    "fastavro",
    "httpx",
    "yaml",
    "processors",
    "schemas",
    "topics",
    "state.rocksdb",
    "streams.demo",
    "streams.groups",
    "streams.llm",
    "streams.replay",
    "streams.runtime",
    "streams.testing",
    "streams.worker",
)

_CHECKOUT = Path(__file__).resolve().parents[3]

_RUN = r"""
import sys
from streams.cli import main
sys.argv[0] = "clingate"
try:
    main()
except SystemExit as stop:
    assert not stop.code, stop.code
sys.stderr.write("\n".join(["modules:", *sorted(sys.modules)]))
"""


def _imported(*argv: str) -> set[str]:
    """Every module loaded by a fresh ``clingate *argv`` (this checkout's) once it is done."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], cwd=_CHECKOUT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stderr.rsplit("modules:\n", 1)[1].splitlines())


def _among(modules: set[str], packages: tuple[str, ...]) -> set[str]:
    return {m for m in modules for package in packages if m == package or m.startswith(package + ".")}


#: Command groups that need no worker: their help pulls in no worker, benchmark or registry runtime.
NO_RUNTIME = frozenset({"replay", "topics", "schemas", "config", "broker", "cluster", "clinical"})


def test_the_top_level_help_imports_no_command_module_no_runtime_and_no_pydantic():
    modules = _imported("--help")
    assert not {entry.module for entry in COMMANDS.values()} & modules
    assert not _among(modules, NOT_FOR_HELP)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_commands_help_imports_its_own_module_and_no_other_commands(name: str):
    """One fresh interpreter per group; the groups that need no worker also load none of :data:`HEAVY`,
    and ``replay --help`` nothing of :data:`NOT_FOR_HELP`."""
    modules = _imported(name, "--help")
    assert {entry.module for entry in COMMANDS.values()} & modules == {COMMANDS[name].module}
    if name in NO_RUNTIME:
        assert not _among(modules, HEAVY)
    if name == "replay":
        assert not _among(modules, NOT_FOR_HELP)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listed_help_of_a_group_is_its_modules_own(name: str):
    assert COMMANDS[name].help == load(name).info.help
