"""Every registered ``clingate_*`` metric is documented in the README's "Metrics and logs" section.

A process that registers metrics of its own MUST add its registry builder to :func:`every_metric`, so
that adding a metric without documenting it fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import faust
import yaml
from prometheus_client import CollectorRegistry

from processors.dbpm import DBPMConfig
from state import MemoryStore
from streams.metrics import ClinicalMetrics, DbpmMetrics, DocsMetrics, LlmGroupMetrics, faust_sensors

README = Path(__file__).resolve().parents[3] / "README.md"
_SUFFIX = {"counter": "_total"}


def every_metric() -> dict[str, str]:
    """Exposed name -> type of every clingate metric any worker registers."""
    faust_worker, docs_worker, llm_group = CollectorRegistry(), CollectorRegistry(), CollectorRegistry()
    faust_sensors(faust.App("clingate-readme-test"), faust_worker)
    DbpmMetrics(faust_worker).watch(list, MemoryStore(), DBPMConfig())
    ClinicalMetrics(faust_worker)
    DocsMetrics(docs_worker)
    LlmGroupMetrics(llm_group)
    return {
        family.name + _SUFFIX.get(family.type, ""): family.type
        for registry in (faust_worker, docs_worker, llm_group)
        for family in registry.collect()
        if family.name.startswith("clingate_")
    }


def _metrics_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Metrics and logs")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_every_registered_clingate_metric_is_documented_in_the_readme() -> None:
    documented = set(re.findall(r"^\| `(clingate_[a-z0-9_]+)` \| (\w+) \|", _metrics_section(), re.M))
    registered = every_metric().items()
    missing = sorted(f"{name} ({kind})" for name, kind in registered if (name, kind) not in documented)
    assert not missing, f"document these in README.md, section 'Metrics and logs' (name and type): {missing}"


def test_the_worker_metrics_cover_what_issues_4_and_8_ask_for() -> None:
    names = set(every_metric())
    asked = {
        "clingate_dbpm_decisions_total", "clingate_dbpm_gate_latency_seconds", "clingate_consumer_lag",
        "clingate_dbpm_dead_letters_total", "clingate_dbpm_memory_patterns",
        "clingate_dbpm_memory_block_patterns",
        "clingate_dbpm_lift", "clingate_dbpm_lift_ci_low", "clingate_dbpm_lift_ci_high",
        "clingate_messages_received_per_topic_total", "clingate_topic_messages_sent_total",
        "clingate_clinical_assessments_total", "clingate_clinical_red_sources_total",
        "clingate_docs_dispositions_total", "clingate_llm_calls_total", "clingate_llm_retries_total",
        "clingate_docs_in_flight",
    }  # fmt: skip
    assert asked <= names


DEPLOY = README.parent / "deploy"


def test_the_grafana_dashboard_queries_only_documented_metrics_through_its_datasource_variable() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "clingate.json").read_text(encoding="utf-8"))
    assert [v["type"] for v in dashboard["templating"]["list"]] == ["datasource"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    documented = set(re.findall(r"^\| `(clingate_[a-z0-9_]+)` \|", _metrics_section(), re.M))
    queried = {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for p in panels
        for target in p["targets"]
        for name in re.findall(r"clingate_[a-z0-9_]*[a-z0-9]", target["expr"])
    }
    assert queried, "the dashboard queries no clingate metric"
    assert queried <= documented, sorted(queried - documented)


def test_the_prometheus_example_scrapes_both_worker_endpoints() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    statics = [s for job in config["scrape_configs"] for s in job.get("static_configs", [])]
    targets = {target for s in statics for target in s["targets"]}
    assert targets == {"localhost:6066", "localhost:6067"}
