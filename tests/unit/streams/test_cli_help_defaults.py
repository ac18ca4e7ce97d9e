"""Command-line help shows a setting's default from :class:`Settings`, never a copy typed by hand.

An option that overrides a setting says so with :func:`streams.runtime.settings.env_help`, which renders
the variable and the default the setting declares; a default typed into the help text goes stale the
day the setting's default changes. Help is Rich markup, so a bracketed note would not be shown at all.
Checked on the source of every ``help=`` text under ``streams/`` (the literal parts of f-strings and
concatenations), so that a help text no command shows today is checked too.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from streams.runtime.settings import Settings, env_help, settings_rows

STREAMS = Path(__file__).resolve().parents[3] / "streams"
SOURCES = sorted(STREAMS.rglob("*.py"))


def _literal_text(node: ast.expr) -> Iterator[str]:
    """The literal text of a help expression: strings, f-strings (placeholders as ``{}``) and ``+``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        yield "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    elif isinstance(node, ast.BinOp):
        yield from _literal_text(node.left)
        yield from _literal_text(node.right)


def _help_texts(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "help":
            for text in _literal_text(node.value):
                yield node.value.lineno, text


def _spellings(default: str) -> set[str]:
    """How a default may be typed: as rendered, and a whole float also without its ``.0``."""
    spellings = {default}
    if re.fullmatch(r"\d+\.0", default):
        spellings.add(default.removesuffix(".0"))
    return spellings


#: ``(variable, spellings of its default)`` of every setting that has a default.
DEFAULTS = [(env, _spellings(default)) for env, default, _ in settings_rows() if default != "unset"]


def test_no_help_text_types_the_default_of_the_setting_it_names() -> None:
    typed = [
        f"{path.relative_to(STREAMS)}:{line}: {env} {spelling}"
        for path in SOURCES
        for line, text in _help_texts(path)
        for env, spellings in DEFAULTS
        if re.search(rf"\b{env}\b", text)
        for spelling in spellings
        if re.search(rf"(?<![\w.]){re.escape(spelling)}(?![\w.])", text)
    ]
    assert not typed, f"help types a setting's default, use env_help(): {typed}"


def test_no_command_help_types_a_number_default() -> None:
    """The commands' own help (``streams/cli``) types no ``default <number>`` at all: a setting's comes
    from :func:`env_help`, an option's own from click's ``show_default``."""
    typed = [
        f"{path.name}:{line}: {match.group(0)}"
        for path in sorted((STREAMS / "cli").glob("*.py"))
        for line, text in _help_texts(path)
        for match in re.finditer(r"\bdefault\b\W{0,3}\d", text, re.I)
    ]
    assert not typed, typed


def test_no_help_text_opens_a_bracket_rich_reads_as_markup() -> None:
    """Help is Rich markup: ``[default: ...]`` or ``[env ...]`` is a style tag, and the text vanishes."""
    hidden = [
        f"{path.relative_to(STREAMS)}:{line}: {match.group(0)}"
        for path in SOURCES
        for line, text in _help_texts(path)
        for match in re.finditer(r"\[[a-zA-Z#/@][^\]]*\]", text)
    ]
    assert not hidden, hidden


def test_env_help_renders_the_settings_variable_and_default() -> None:
    port = Settings.model_fields["web_port"]
    assert env_help("web_port") == f"(env {port.validation_alias}, default {port.default})"
    assert env_help("worker_datadir") == "(env CLINGATE_WORKER_DATADIR)"  # no default: the variable only
