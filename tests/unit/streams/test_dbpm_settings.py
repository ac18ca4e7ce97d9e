"""The CLINGATE_DBPM_* settings: every flag of the paper's Table 12 reaches the engine, everywhere."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from processors.dbpm import DBPMConfig
from streams.cli import app
from streams.runtime.settings import Settings, get_settings
from streams.worker.engine import dbpm_config, dbpm_engine
from tests.replay_example import EXAMPLE, needs_example


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    """The commands read the environment through ``get_settings`` (once per process): read it anew."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


#: setting (validation alias) -> (value, the flag it sets and to what)
FLAG_SETTINGS = {
    "CLINGATE_DBPM_CROSS_TASK": (False, "cross_task", False),
    "CLINGATE_DBPM_MAINTENANCE": (False, "maintenance", False),
    "CLINGATE_DBPM_THREE_TIER": (False, "three_tier", False),
    "CLINGATE_DBPM_UNCERTAINTY": (False, "uncertainty", False),
    "CLINGATE_DBPM_SOURCE_WEIGHTS": (False, "source_weights", False),
    "CLINGATE_DBPM_QA_HARD_BLOCK": (True, "qa_hard_block", True),
    "CLINGATE_DBPM_DOWNGRADE_FIRST": (True, "downgrade_first", True),
    "CLINGATE_DBPM_DISABLE": (True, "disabled", True),
    "CLINGATE_DBPM_ONTOLOGY_FILTER": ("off", "ontology_filter", False),
}


def test_the_default_settings_give_the_papers_deployed_configuration() -> None:
    assert dbpm_config(Settings()) == DBPMConfig()
    assert dbpm_config(Settings()).fingerprint() == DBPMConfig().fingerprint()


@pytest.mark.parametrize("alias", sorted(FLAG_SETTINGS))
def test_each_setting_sets_its_flag_alone_and_changes_the_fingerprint(alias: str) -> None:
    value, flag, expected = FLAG_SETTINGS[alias]
    config = dbpm_config(Settings(**{alias: value}))
    changed = {
        f.name
        for f in fields(config.flags)
        if getattr(config.flags, f.name) != getattr(DBPMConfig().flags, f.name)
    }
    assert changed == {flag} and getattr(config.flags, flag) is expected
    assert config.fingerprint() != DBPMConfig().fingerprint()


def test_ontology_tag_only_keeps_the_filter_and_tags() -> None:
    flags = dbpm_config(Settings(CLINGATE_DBPM_ONTOLOGY_FILTER="tag-only")).flags
    assert flags.ontology_filter and flags.ontology_tag_only


def test_ner_coverage_off_empties_the_bucket_table_and_changes_nothing_else() -> None:
    config = dbpm_config(Settings(CLINGATE_DBPM_NER_COVERAGE=False))
    assert not config.qa_ner_buckets and config.flags == DBPMConfig().flags
    assert replace(config, qa_ner_buckets=DBPMConfig().qa_ner_buckets) == DBPMConfig()
    assert config.fingerprint() != DBPMConfig().fingerprint()


def test_the_worker_engine_takes_the_threshold_the_grid_and_the_retentions_and_shares_the_caps_out() -> None:
    settings = Settings(
        CLINGATE_DBPM_QA_FAIL_THRESHOLD=0.6,
        CLINGATE_DBPM_MAINTENANCE_INTERVAL_S=30,
        CLINGATE_DBPM_WHITELIST_RETENTION_DAYS=30,
        CLINGATE_DBPM_PREEMPT_RETENTION_DAYS=60,
        CLINGATE_DBPM_PATIENT_RETENTION_DAYS=7,
        CLINGATE_TOPIC_PARTITIONS=8,
    )
    config = dbpm_engine(settings).config
    assert (config.qa_fail_rate_threshold, config.maintenance_interval_s) == (0.6, 30)
    retentions = (config.whitelist_retention_s, config.preempt_retention_s, config.patient_retention_s)
    assert retentions == (30 * 86400, 60 * 86400, 7 * 86400)
    assert (config.cap("ner"), config.cap("re"), config.cap("qa")) == (25, 37, 18)  # 200, 300, 150 over 8
    assert sum(config.cap("re") for _ in range(8)) <= DBPMConfig().cap("re")


def test_an_unknown_filter_mode_or_a_threshold_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="CLINGATE_DBPM_ONTOLOGY_FILTER"):
        Settings(CLINGATE_DBPM_ONTOLOGY_FILTER="sometimes")
    with pytest.raises(ValueError, match="CLINGATE_DBPM_QA_FAIL_THRESHOLD"):
        Settings(CLINGATE_DBPM_QA_FAIL_THRESHOLD=1.5)


def test_clingate_config_dbpm_expands_the_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLINGATE_DBPM_DOWNGRADE_FIRST", "true")
    shown = json.loads(CliRunner().invoke(app, ["config", "--dbpm"]).stdout)
    expected = replace(DBPMConfig(), cap_partitions=Settings().topic_partitions).with_flags(
        downgrade_first=True
    )
    assert shown.pop("fingerprint") == expected.fingerprint()
    assert shown == json.loads(json.dumps(expected.describe()))


@needs_example
def test_the_in_process_replay_honours_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DOWNGRADE-first: the example's BLOCKs become DOWNGRADEs, every other decision is the same."""
    runs = {}
    for name, env in (("default", None), ("downgrade_first", "true")):
        if env is None:
            monkeypatch.delenv("CLINGATE_DBPM_DOWNGRADE_FIRST", raising=False)
        else:
            monkeypatch.setenv("CLINGATE_DBPM_DOWNGRADE_FIRST", env)
        get_settings.cache_clear()
        out = tmp_path / f"{name}.jsonl"
        done = CliRunner().invoke(app, ["replay", "--in", str(EXAMPLE / "events.jsonl"), "--out", str(out)])
        assert done.exit_code == 0, done.output
        runs[name] = [json.loads(line) for line in out.read_text().splitlines()]
    blocked = [d["candidate_id"] for d in runs["default"] if d["decision"] == "BLOCK"]
    assert blocked
    tagged = {d["candidate_id"]: d["decision"] for d in runs["downgrade_first"]}
    assert all(tagged[c] == "DOWNGRADE" for c in blocked)
    assert [d for d in runs["default"] if d["decision"] != "BLOCK"] == [
        d for d in runs["downgrade_first"] if d["candidate_id"] not in blocked
    ]
