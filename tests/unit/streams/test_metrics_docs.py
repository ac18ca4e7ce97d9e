"""``docs/metrics.md`` lists exactly the ``clingate_*`` metrics the processes register, with their types.

A process that registers metrics of its own MUST add its registry builder to :func:`every_metric`, so
that adding a metric without documenting it (or removing one and leaving its row) fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from processors.dbpm import DBPMConfig
from state import RamStore
from streams.agent.metrics import AgentMetrics
from streams.console.metrics import ConsoleMetrics
from streams.groups.metrics import DocsMetrics, LlmGroupMetrics
from streams.runtime.metrics import ConsumerLag, LoopMetrics
from streams.worker.metrics import ClinicalMetrics, DbpmMetrics

ROOT = Path(__file__).resolve().parents[3]
METRICS_DOC = ROOT / "docs" / "metrics.md"
DEPLOY = ROOT / "deploy"
_SUFFIX = {"counter": "_total"}
_ROW = re.compile(r"^\| `(clingate_[a-z0-9_]+)` \| (\w+) \|", re.M)


def every_metric() -> dict[str, str]:
    """Exposed name -> type of every clingate metric any worker registers."""
    worker, docs_worker, llm_group = CollectorRegistry(), CollectorRegistry(), CollectorRegistry()
    console = ConsoleMetrics().registry
    DbpmMetrics(worker).watch(RamStore(), DBPMConfig())
    LoopMetrics(worker)
    worker.register(ConsumerLag(list))
    ClinicalMetrics(worker)
    DocsMetrics(docs_worker)
    LlmGroupMetrics(llm_group)
    AgentMetrics(llm_group)
    return {
        family.name + _SUFFIX.get(family.type, ""): family.type
        for registry in (worker, docs_worker, llm_group, console)
        for family in registry.collect()
        if family.name.startswith("clingate_")
    }


def documented_metrics() -> dict[str, str]:
    """Name -> type of every row of the metric tables in docs/metrics.md."""
    rows = _ROW.findall(METRICS_DOC.read_text(encoding="utf-8"))
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), (
        f"listed twice in docs/metrics.md: {sorted({n for n in names if names.count(n) > 1})}"
    )
    return dict(rows)


def test_docs_metrics_lists_exactly_the_registered_metrics_with_their_types() -> None:
    registered, documented = every_metric(), documented_metrics()
    missing = sorted(f"{name} ({kind})" for name, kind in registered.items() if documented.get(name) != kind)
    extra = sorted(f"{name} ({kind})" for name, kind in documented.items() if registered.get(name) != kind)
    assert not missing, f"document these in docs/metrics.md (name and type): {missing}"
    assert not extra, f"docs/metrics.md lists metrics no process registers (or with another type): {extra}"


def test_the_required_worker_metrics_are_registered() -> None:
    # What operators must be able to watch: decisions and their latency, lag, dead letters, the memory's
    # channel population and lift, traffic per topic, clinical lights, dispositions and LLM calls.
    names = set(every_metric())
    required = {
        "clingate_dbpm_decisions_total", "clingate_dbpm_gate_latency_seconds", "clingate_consumer_lag",
        "clingate_dbpm_dead_letters_total", "clingate_dbpm_memory_patterns",
        "clingate_dbpm_memory_block_patterns",
        "clingate_dbpm_lift", "clingate_dbpm_lift_ci_low", "clingate_dbpm_lift_ci_high",
        "clingate_loop_records_consumed_total", "clingate_loop_records_produced_total",
        "clingate_clinical_assessments_total", "clingate_clinical_red_sources_total",
        "clingate_docs_dispositions_total", "clingate_llm_calls_total", "clingate_llm_retries_total",
        "clingate_docs_in_flight",
    }  # fmt: skip
    assert required <= names


def test_the_grafana_dashboard_queries_only_documented_metrics_through_its_datasource_variable() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "clingate.json").read_text(encoding="utf-8"))
    assert [v["type"] for v in dashboard["templating"]["list"]] == ["datasource"]
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    queried = {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for p in panels
        for target in p["targets"]
        for name in re.findall(r"clingate_[a-z0-9_]*[a-z0-9]", target["expr"])
    }
    assert queried, "the dashboard queries no clingate metric"
    assert queried <= set(documented_metrics()), sorted(queried - set(documented_metrics()))


def test_the_prometheus_example_scrapes_both_worker_endpoints() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    statics = [s for job in config["scrape_configs"] for s in job.get("static_configs", [])]
    targets = {target for s in statics for target in s["targets"]}
    assert targets == {"localhost:6066", "localhost:6067"}
