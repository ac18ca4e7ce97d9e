"""``clingate config`` and the README's configuration table stay true to :class:`Settings`."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from streams.commands.config import app, settings_rows
from streams.settings import Settings

README = Path(__file__).resolve().parents[3] / "README.md"


def test_every_setting_has_an_env_var_and_a_description() -> None:
    for env, _, doc in settings_rows():
        assert env.isupper() and env.replace("_", "").isalnum(), env
        assert doc, f"{env} has no description"


def test_readme_configuration_table_is_the_commands_markdown_output() -> None:
    printed = CliRunner().invoke(app, ["--markdown"]).output
    assert printed.strip() in README.read_text(encoding="utf-8"), (
        "README's configuration table is stale: paste `clingate config --markdown` into it"
    )


def test_defaults_never_show_this_machines_home_directory() -> None:
    assert all(str(Path.home()) not in default for _, default, _ in settings_rows())


def test_config_lists_every_setting_with_its_current_value() -> None:
    output = CliRunner().invoke(app, [], env={"COLUMNS": "400"}).output
    for field in Settings.model_fields.values():
        assert str(field.validation_alias) in output
