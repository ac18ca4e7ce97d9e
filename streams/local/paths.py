"""Path options, checked while the command line is parsed: before a command does any work.

A command given a folder to write in creates it (with its parents), or stops at once with a usage error
(exit 2) whose one line names the option, the path and the reason; never a traceback, and never after
minutes of work (a benchmark that measured for minutes and then could not write its results). An input
file uses Typer's own check instead (``exists=True, dir_okay=False``), which fails the same way.

Every path option of every command uses one of these callbacks or that check
(``tests/unit/streams/test_cli_paths.py`` walks them all with a missing and an unwritable folder).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer


def _writable_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) and prove a file can be written in it.

    Raises:
        typer.BadParameter: it cannot be created or written in (the reason from the operating system).
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise typer.BadParameter(f"cannot write in the folder {folder}: {error.strerror or error}") from None


def output_folder(value: Path | None) -> Path | None:
    """Callback of an option naming a folder the command writes in: created and proven writable."""
    if value is not None:
        _writable_folder(value)
    return value


def output_file(value: Path | None) -> Path | None:
    """Callback of an option naming a file the command writes: the folder it goes in is created and
    proven writable; the path must not be a folder."""
    if value is not None:
        if value.is_dir():
            raise typer.BadParameter(f"{value} is a folder, not a file")
        _writable_folder(value.parent)
    return value


def new_folder(value: Path | None) -> Path | None:
    """Callback of an option naming a folder the command creates itself and that must not exist yet
    (so a run starts empty): the folder it goes in is created and proven writable."""
    if value is not None:
        if value.exists():
            raise typer.BadParameter(f"{value} already exists (it must not: the run starts empty)")
        _writable_folder(value.parent)
    return value
