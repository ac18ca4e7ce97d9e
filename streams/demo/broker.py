"""Step 1: the broker (``KAFKA_BOOTSTRAP_SERVERS``, else a KRaft broker of the demo's own) and the
catalog's topics."""

from __future__ import annotations

import tempfile
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.table import Table

from streams.demo.results import Results, TopicRow
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import Settings
from streams.testing.kafka import Broker, provide_broker
from topics.admin import ensure_topics
from topics.catalog import Catalog


def start_broker(stack: ExitStack, settings: Settings, console: Console) -> Broker:
    """The run's broker: the configured cluster, else one started in a temporary directory under
    ``CLINGATE_HOME`` and stopped when ``stack`` closes."""
    settings.home.mkdir(parents=True, exist_ok=True)
    directory = Path(
        stack.enter_context(tempfile.TemporaryDirectory(prefix="demo-broker-", dir=settings.home))
    )
    with console.status("starting the Kafka broker (first run: fetching the Kafka jars)"):
        broker = stack.enter_context(provide_broker(settings, directory, containers=False))
    console.print(f"  broker: {broker.bootstrap} ({broker.origin})")
    return broker


def step_topics(console: Console, bootstrap: str, catalog: Catalog, results: Results) -> None:
    """Ensure the catalog's topics and print what was created and found."""
    reports = ensure_topics(admin_client(bootstrap), catalog)
    results.topics = [TopicRow(r.spec.name, r.spec.partitions, r.outcome.value) for r in reports]
    outcomes = Counter(r.outcome.value for r in reports)
    table = Table("topic", "partitions", "outcome", title="topics", title_justify="left")
    for topic in results.topics:
        table.add_row(topic.name, str(topic.partitions), topic.outcome)
    console.print(table)
    console.print("  " + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())))
