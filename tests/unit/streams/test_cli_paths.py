"""Every path option of every ``clingate`` command, given a folder that is missing and one that cannot be
written: the command creates the folder, or stops while it parses (exit 2) with one line that names the
option, never a traceback (:mod:`streams.local.paths`).

"While it parses" is shown without a clock (tests here are not timed): the refusal is click's usage
error for the parameter (the ``Usage:`` line and "Invalid value for '<option>'"), which only the
parameter's own check raises, before the command's function is called and so before any of its work.

The commands are found by walking the command tree, so a path option added later is walked too, and one
that is neither an input checked by Typer (``exists=True``) nor one of :mod:`streams.local.paths`'
callbacks fails here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from streams.cli import COMMANDS, app, load
from streams.local.paths import new_folder, output_file, output_folder


@dataclass(frozen=True)
class PathOption:
    """A path parameter of a command: the words that reach the command, and the parameter."""

    command: tuple[str, ...]
    param: Any

    @property
    def id(self) -> str:
        return " ".join([*self.command, self.param.opts[0]])

    def args(self, value: Path) -> list[str]:
        """The command line giving this parameter ``value`` (and nothing else)."""
        flag = [] if self.param.param_type_name == "argument" else [self.param.opts[0]]
        return [*self.command, *flag, str(value)]


def _walk(command: Any, words: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield words, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _walk(sub, (*words, name))


def _path_options() -> list[PathOption]:
    found = []
    for name, entry in COMMANDS.items():
        if entry.hidden:  # another name of a listed group
            continue
        for words, command in _walk(typer.main.get_command(load(name)), (name,)):
            for param in command.params:
                annotation = param.type_descriptor.annotation
                if {Path, list[Path]} & {annotation, *getattr(annotation, "__args__", ())}:
                    found.append(PathOption(words, param))
    return found


def _callback(option: PathOption) -> Any:
    """The callback the option was declared with (Typer wraps the one it hands click)."""
    return option.param.type_descriptor.parameter_info.callback


PATH_OPTIONS = _path_options()
OUTPUTS = [o for o in PATH_OPTIONS if _callback(o) in (output_file, output_folder, new_folder)]
INPUTS = [o for o in PATH_OPTIONS if o.param.type_descriptor.parameter_info.exists]


def _folder_of(option: PathOption, value: Path) -> Path:
    """The folder the command must create for ``value``."""
    return value if _callback(option) is output_folder else value.parent


def _refused_while_parsing(option: PathOption, value: Path) -> str:
    """Run the command with ``value``: it must stop with click's usage error for the option (exit 2, no
    traceback). Returns the one line that says why."""
    result = CliRunner().invoke(app, option.args(value), env={"COLUMNS": "1000"})
    assert result.exit_code == 2, (option.id, result.output, result.exception)
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit | None), option.id
    assert result.output.startswith("Usage: "), result.output
    said = [line for line in result.output.splitlines() if "Invalid value" in line]
    assert len(said) == 1 and f"'{option.param.opts[0]}'".lower() in said[0].lower(), result.output
    return said[0]


def test_every_path_option_is_an_input_checked_by_typer_or_an_output_checked_while_parsing() -> None:
    assert len(PATH_OPTIONS) > 30, "the walk found the commands"
    unchecked = [o.id for o in PATH_OPTIONS if o not in OUTPUTS and o not in INPUTS]
    assert not unchecked, f"path options with no check: {unchecked}"


@pytest.mark.parametrize("option", OUTPUTS, ids=lambda o: o.id)
def test_a_missing_folder_is_created_while_the_command_line_parses(
    option: PathOption, tmp_path: Path
) -> None:
    value = tmp_path / "missing" / "below" / ("out.json" if _callback(option) is output_file else "data")
    command = typer.main.get_command(load(option.command[0]))
    option.param.process_value(typer.Context(command), str(value))
    assert _folder_of(option, value).is_dir()


@pytest.mark.parametrize("option", OUTPUTS, ids=lambda o: o.id)
def test_a_folder_that_cannot_be_written_stops_the_command_at_once_with_one_line(
    option: PathOption, tmp_path: Path
) -> None:
    # Below a file: no folder can be made there, for root too (which file modes do not stop).
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = [blocker / "below"]
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        unwritable.append(locked / "below" if _callback(option) is output_folder else locked)
    for folder in unwritable:
        value = folder / "out.json" if _callback(option) is not output_folder else folder
        assert str(folder) in _refused_while_parsing(option, value)


@pytest.mark.parametrize("option", INPUTS, ids=lambda o: o.id)
def test_an_input_in_a_missing_folder_stops_the_command_at_once_with_one_line(
    option: PathOption, tmp_path: Path
) -> None:
    value = tmp_path / "missing" / "input.json"
    assert "does not exist" in _refused_while_parsing(option, value)
