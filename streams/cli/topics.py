"""``clingate topics create|describe|acls``: the topic catalog and its ACLs against a cluster.

Bootstrap address: ``--bootstrap``, else ``KAFKA_BOOTSTRAP_SERVERS``, else the broker of
``clingate broker start``. Scale: ``--partitions`` / ``--replication``, else
``CLINGATE_TOPIC_PARTITIONS`` / ``CLINGATE_TOPIC_REPLICATION`` (6 and 1).

``create`` exits 1 when a topic exists with a different configuration: clingate never alters
an existing topic (see :mod:`topics.admin`), and running on mismatched partitions would silently
break co-partitioning, so the operator has to decide.

``acls`` applies the principals' ACL plan (``deploy/security/acls.yaml``, see :mod:`topics.acls`)
as the process's principal (``CLINGATE_KAFKA_USERNAME``: the super user); ``--dry-run`` only
compares. It exits 1 when the cluster grants a plan principal something the plan does not.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka import KafkaError, KafkaException
from rich.console import Console
from rich.table import Table

from streams.local.bootstrap import configured_bootstrap
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings, env_help, get_settings
from topics.acls import (
    DEFAULT_PLAN,
    AclOutcome,
    AclPlanError,
    AclReport,
    ensure_acls,
    inspect_acls,
    load_plan,
)
from topics.admin import TopicReport, TopicStatus, ensure_topics, inspect_topics
from topics.catalog import DAY_MS, Catalog, build_catalog

app = typer.Typer(help="Create the catalog's topics on a cluster, or describe them.", no_args_is_help=True)
_out = Console()
_err = Console(stderr=True)

Bootstrap = Annotated[
    str | None,
    typer.Option(help="Bootstrap address. Default: KAFKA_BOOTSTRAP_SERVERS, else the `clingate broker`."),
]
Partitions = Annotated[
    int | None,
    typer.Option(min=1, help=f"Partitions per data topic {env_help('topic_partitions')}."),
]
Replication = Annotated[
    int | None, typer.Option(min=1, help=f"Replication factor {env_help('topic_replication')}.")
]
Timeout = Annotated[float, typer.Option(help="Seconds per broker request.")]

_STYLE = {
    TopicStatus.CREATED: "green",
    TopicStatus.EXISTS: "cyan",
    TopicStatus.EXISTS_DIFFERENT_CONFIG: "bold red",
    TopicStatus.MISSING: "yellow",
}


_AUTHORIZATION_FAILURES = (
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
)

_ACL_STYLE = {
    AclOutcome.CREATED: "green",
    AclOutcome.EXISTS: "cyan",
    AclOutcome.MISSING: "yellow",
    AclOutcome.NOT_IN_PLAN: "bold red",
}


def _address(settings: Settings, bootstrap: str | None) -> str:
    address = bootstrap or configured_bootstrap(settings)
    if address is None:
        _err.print(
            "No Kafka cluster: pass --bootstrap, set KAFKA_BOOTSTRAP_SERVERS or run `clingate broker start`."
        )
        raise typer.Exit(2)
    return address


def _catalog(settings: Settings, partitions: int | None, replication: int | None) -> Catalog:
    return build_catalog(
        partitions=partitions or settings.topic_partitions,
        replication=replication or settings.topic_replication,
    )


def _retention(ms: int) -> str:
    if ms < 0:
        return "forever"
    return f"{ms / DAY_MS:g} d" if ms % DAY_MS == 0 else f"{ms} ms"


def _reports_table(reports: list[TopicReport], title: str) -> Table:
    table = Table(title=title)
    for column in ("topic", "outcome", "partitions", "replication", "differences"):
        table.add_column(column)
    for report in reports:
        style = _STYLE[report.outcome]
        table.add_row(
            report.spec.name, f"[{style}]{report.outcome}[/{style}]", str(report.spec.partitions),
            str(report.spec.replication), "\n".join(report.differences),
        )  # fmt: skip
    return table


@contextlib.contextmanager
def _cluster_errors_reported(address: str) -> Iterator[None]:
    try:
        yield
    except KafkaException as error:
        denied = error.args[0].code() in _AUTHORIZATION_FAILURES
        hint = ("The principal (CLINGATE_KAFKA_USERNAME) lacks the grant: provision as the super user."
                if denied else "Is it running and reachable?")  # fmt: skip
        _err.print(f"Kafka at {address} failed: {error.args[0]}. {hint}")
        raise typer.Exit(2) from error


@app.command()
def create(
    bootstrap: Bootstrap = None,
    partitions: Partitions = None,
    replication: Replication = None,
    timeout: Timeout = 30.0,
) -> None:
    """Create every catalog topic that is missing; report CREATED / EXISTS / EXISTS_DIFFERENT_CONFIG."""
    settings = get_settings()
    address = _address(settings, bootstrap)
    with _cluster_errors_reported(address):
        reports = ensure_topics(admin_client(address), _catalog(settings, partitions, replication), timeout)
    _out.print(_reports_table(reports, f"topics on {address}"))
    counts = {outcome: sum(r.outcome is outcome for r in reports) for outcome in TopicStatus}
    _err.print(", ".join(f"{count} {outcome}" for outcome, count in counts.items() if count))
    if counts[TopicStatus.EXISTS_DIFFERENT_CONFIG]:
        _err.print("Some topics differ from the catalog; clingate does not alter them: fix or recreate them.")
        raise typer.Exit(1)


@app.command()
def describe(
    bootstrap: Bootstrap = None,
    partitions: Partitions = None,
    replication: Replication = None,
    timeout: Timeout = 30.0,
) -> None:
    """Print the catalog; with a reachable cluster, also each topic's state there."""
    settings = get_settings()
    catalog = _catalog(settings, partitions, replication)
    table = Table(title="clingate topic catalog")
    columns = ("topic", "key", "value schema", "partitions", "replication", "cleanup", "retention", "dlq")
    for column in columns:
        table.add_column(column)
    for spec in catalog:
        dlq = spec.dlq
        table.add_row(
            spec.name, spec.key, spec.value_schema, str(spec.partitions), str(spec.replication),
            spec.cleanup_policy, _retention(spec.retention_ms), dlq.name if dlq else "",
        )  # fmt: skip
    _out.print(table)
    address = bootstrap or configured_bootstrap(settings)
    if address is not None:
        with _cluster_errors_reported(address):
            reports = inspect_topics(admin_client(address), catalog, timeout)
        _out.print(_reports_table(reports, f"state on {address}"))


def _acl_table(reports: list[AclReport], title: str) -> Table:
    table = Table(title=title)
    for column in ("principal", "resource", "pattern", "name", "operation", "outcome"):
        table.add_column(column)
    for report in reports:
        b, style = report.binding, _ACL_STYLE[report.outcome]
        table.add_row(
            b.principal, b.restype.name, b.resource_pattern_type.name, b.name, b.operation.name,
            f"[{style}]{report.outcome}[/{style}]",
        )  # fmt: skip
    return table


@app.command()
def acls(
    bootstrap: Bootstrap = None,
    plan: Annotated[
        Path, typer.Option(exists=True, dir_okay=False, help="The ACL plan (YAML).")
    ] = DEFAULT_PLAN,
    dry_run: Annotated[bool, typer.Option(help="Only compare the cluster with the plan.")] = False,
    timeout: Timeout = 30.0,
) -> None:
    """Create the plan's missing ACLs (run as the super user); report CREATED / EXISTS / NOT_IN_PLAN."""
    settings = get_settings()
    try:
        acl_plan = load_plan(plan, app_id=settings.app_id, docs_group_id=settings.docs_group_id)
    except AclPlanError as error:
        _err.print(str(error))
        raise typer.Exit(2) from error
    address = _address(settings, bootstrap)
    with _cluster_errors_reported(address):
        admin = admin_client(address)
        reports = (inspect_acls if dry_run else ensure_acls)(admin, acl_plan, timeout)
    _out.print(_acl_table(reports, f"ACLs on {address}"))
    counts = {outcome: sum(r.outcome is outcome for r in reports) for outcome in AclOutcome}
    _err.print(", ".join(f"{count} {outcome}" for outcome, count in counts.items() if count))
    if counts[AclOutcome.NOT_IN_PLAN]:
        _err.print("The cluster grants plan principals more than the plan; clingate deletes no ACL: review.")
        raise typer.Exit(1)
