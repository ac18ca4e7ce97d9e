"""``clingate config`` and the table in ``docs/configuration.md`` stay true to :class:`Settings`."""

from __future__ import annotations

from pathlib import Path

from pytest import MonkeyPatch
from typer.testing import CliRunner

from streams.cli.config import app
from streams.runtime.settings import AREAS, Settings, settings_rows, settings_table


def test_every_setting_has_an_env_var_and_a_description() -> None:
    for env, _, doc in settings_rows():
        assert env.isupper() and env.replace("_", "").isalnum(), env
        assert doc, f"{env} has no description"


def test_every_setting_belongs_to_one_area_in_the_order_the_table_shows() -> None:
    assert [name for area in AREAS for name in area.model_fields] == list(Settings.model_fields)


def test_the_commands_markdown_output_is_the_documented_table() -> None:
    # docs/configuration.md carries settings_table() (tests/unit/streams/test_reference_docs.py).
    assert CliRunner().invoke(app, ["--markdown"]).output == settings_table()


def test_defaults_never_show_this_machines_home_directory() -> None:
    assert all(str(Path.home()) not in default for _, default, _ in settings_rows())


def test_config_lists_every_setting_with_its_current_value() -> None:
    output = CliRunner().invoke(app, [], env={"COLUMNS": "400"}).output
    for field in Settings.model_fields.values():
        assert str(field.validation_alias) in output


def test_a_setting_is_read_from_its_own_variable_only(monkeypatch: MonkeyPatch, tmp_path: Path) -> None:
    """``HOME`` (a variable named like the field ``home``) does not set the cache directory; only
    ``CLINGATE_HOME`` does. Keyword arguments by field name still work."""
    default = Settings.model_fields["home"].default
    monkeypatch.delenv("CLINGATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings().home == default
    monkeypatch.setenv("CLINGATE_HOME", str(tmp_path / "cache"))
    assert Settings().home == tmp_path / "cache"
    assert Settings(home=tmp_path / "given").home == tmp_path / "given"
