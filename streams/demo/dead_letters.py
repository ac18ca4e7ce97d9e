"""Dead letters: undecodable records to the worker's input and to the FHIR topic, and the DLQ counts.

On a shared broker the dead-letter topics may hold other records, so what is reported is the records
added during this run (the counts before step 1 are the base).
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from schemas.fhir import FhirUpdate
from schemas.serde import Serde
from streams.demo.errors import DemoError
from streams.demo.kafka_io import demo_producer, demo_reader, dlq_counts, ends, produce_one, read_at
from streams.demo.results import Results
from streams.runtime.dlq import DeadLetterRouter, SourceRecord
from topics.catalog import DBPM_CANDIDATES, FHIR_UPDATES, Catalog, dlq_name


def probe_worker_dead_letters(console: Console, bootstrap: str, results: Results) -> None:
    """Undecodable candidates, routed to the DLQ by the running worker (before it stops).

    Raises:
        DemoError: they were not dead-lettered within 30 s.
    """
    producer = demo_producer(bootstrap)
    for value in (b'{"not": "avro"}', b"\x00\x01garbage"):
        produce_one(producer, DBPM_CANDIDATES, b"p-demo-bad", value)
    console.print(f"  sent 2 undecodable records to {DBPM_CANDIDATES} (the worker dead-letters them)")
    consumer = demo_reader(bootstrap)
    dlq = dlq_name(DBPM_CANDIDATES)
    target = results.dead_letters.base.get(dlq, 0) + 2
    deadline = time.monotonic() + 30
    try:
        while ends(consumer, [dlq])[dlq] < target:
            if time.monotonic() > deadline:
                raise DemoError("the worker did not dead-letter the bad candidates within 30 s")
            time.sleep(0.2)
    finally:
        consumer.close()


def step_dead_letters(
    console: Console, bootstrap: str, serde: Serde, catalog: Catalog, results: Results
) -> None:
    """Step 7: an undecodable FHIR update through the DLQ step, then the records added per DLQ topic."""
    _probe_dlq_step(console, bootstrap, serde)
    after = dlq_counts(bootstrap, catalog)
    base = results.dead_letters.base
    results.dead_letters.added = {t: n - base.get(t, 0) for t, n in after.items() if n > base.get(t, 0)}
    table = Table("dead-letter topic", "records added", title="DLQ counts", title_justify="left")
    for topic, count in sorted(results.dead_letters.added.items()):
        table.add_row(topic, str(count))
    console.print(table)
    console.print(f"  ({dlq_name(FHIR_UPDATES)} also holds the DeadLetter sample of step 2)")


def _probe_dlq_step(console: Console, bootstrap: str, serde: Serde) -> None:
    """An undecodable FHIR update read back and routed with the DLQ step of :mod:`streams.runtime.dlq`.

    Raises:
        DemoError: the record decoded.
    """
    producer = demo_producer(bootstrap)
    partition, offset = produce_one(producer, FHIR_UPDATES, b"PT-DEMO", b'{"resourceType": "Observation"}')
    consumer = demo_reader(bootstrap)
    try:
        message = read_at(consumer, FHIR_UPDATES, partition, offset)
    finally:
        consumer.close()
    if DeadLetterRouter(producer, serde).route(SourceRecord.from_message(message), FhirUpdate) is not None:
        raise DemoError("a JSON record decoded as an Avro FhirUpdate")
    console.print(f"  sent 1 undecodable record to {FHIR_UPDATES}; the DLQ step routed it")
