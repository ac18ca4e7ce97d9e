"""``clingate bench console``: what the console's reads of a full topic cost, each way it can read them;
with ``--hostile``, a scripted hostile client against a console instead (:mod:`streams.bench.hostile`).

On topics of their own (copies of the catalog's specs under bench names, created, filled and deleted):

1. **The memory explorer's lookups.** ``--decisions`` gate decisions of the real engine (``--signatures``
   NER signatures in turn, a candidate each), written in one transaction as the gate writes them. One
   candidate's decision and one signature's decisions are read with
   :func:`~streams.console.records.read_records` two ways: every record decoded, then filtered
   ("decode all"), and only the records whose bytes contain the id or signature decoded ("pre-filtered",
   what the explorer does).
2. **The review queue's packet reader.** ``--packets`` review packets (the rules-only arbiter's packets
   of the demo's examples, one document each), written in a transaction as the docs worker writes them,
   read by a new :class:`~streams.groups.arbiter.PacketFollower`'s catch-up with the broker's default
   500 ms fetch hold and with :data:`~streams.groups.arbiter.ONE_READ_FETCH_WAIT_MS` (a reader made for
   one read, as ``clingate arbiter reviews``).
3. **A page's read of a followed topic.** The decisions read whole (what a page did on every load) and
   by a :class:`~streams.console.records.TopicFollower` that has read them once and finds nothing new
   (what the pharmacist's, the SME's and the audit read-back pages do on a load when nothing was
   published since). Both then pass over every record they hold, as a page builds its rows from them.

Each read is made ``--repeat`` times each way; the median and the ratio are printed, and each pair of
ways must find the same records (else the bench fails). Nothing is timed against a target: the figures
go to docs/performance.md.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from processors.dbpm import DBPMConfig, DBPMEngine, load_ontology, parse_event
from schemas.base import AvroModel
from schemas.dbpm import Candidate, GateDecision
from schemas.serde import Serde
from schemas.wire import make_serde
from state import RamStore
from streams.bench.review_packets import packets
from streams.console.records import TopicFollower, read_records
from streams.groups.arbiter import ONE_READ_FETCH_WAIT_MS, PacketFollower
from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_file
from streams.runtime.kafka_clients import produce_in_transaction
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.worker.gate import decision_record
from topics.admin import ensure_topics
from topics.catalog import DBPM_DECISIONS, DOCS_REVIEW_PACKETS, build_catalog

START = datetime(2026, 5, 4, tzinfo=UTC)
"""The demo's examples the rules-only arbiter escalates to a review packet."""
DEFAULT_FETCH_WAIT_MS = 500
"""librdkafka's default ``fetch.wait.max.ms``: what a long-lived packet reader keeps."""


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One read made two ways: the median seconds of each, and what each found."""

    name: str
    ways: tuple[str, str]
    seconds: tuple[float, float]
    found: int

    @property
    def ratio(self) -> float:
        return self.seconds[0] / self.seconds[1]


def decisions(count: int, signatures: int) -> Iterator[GateDecision]:
    """``count`` decisions of the real engine in its deployed configuration: NER candidates of
    ``signatures`` entities in turn, one a second, each with a fresh candidate id."""
    engine = DBPMEngine(DBPMConfig(), load_ontology())
    fingerprint = engine.config.fingerprint()
    store = RamStore()
    for i in range(count):
        candidate = Candidate.model_validate({
            "ts": START + timedelta(seconds=i), "task": "ner", "patient_id": f"p-{i % 2000:06d}",
            "candidate_id": f"ner-{uuid.uuid4().hex[:24]}",
            "payload": {"entity": f"finding {i % signatures}", "category": "Symptoms"},
        })  # fmt: skip
        event = parse_event({"kind": "gate", **candidate.model_dump(mode="json", exclude_none=True)})
        with store.transaction() as txn:
            _, [ruling] = engine.process(txn, event, event.time)
        yield decision_record(candidate, ruling, False, fingerprint)


def _write(
    bootstrap: str, serde: Serde, topic: str, catalog_topic: str, records: Sequence[tuple[bytes, AvroModel]]
) -> None:
    """``records`` (key, value) on ``topic`` in one transaction, encoded as ``catalog_topic``'s values."""
    encoded = [(key, serde.encode(value, topic=catalog_topic)) for key, value in records]
    produce_in_transaction(bootstrap, topic, encoded, "bench")


def _median(read: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, found = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        found = read()
        times.append(time.perf_counter() - started)
    return statistics.median(times), found


def _compare(name: str, ways: dict[str, Callable[[], Any]], repeat: int) -> Comparison:
    (first, read_a), (second, read_b) = ways.items()
    seconds_a, found_a = _median(read_a, repeat)
    seconds_b, found_b = _median(read_b, repeat)
    if found_a != found_b:
        raise RuntimeError(f"{name}: {first} and {second} found different records")
    return Comparison(name, (first, second), (seconds_a, seconds_b), len(found_a))


def bench_console(
    bootstrap: str, *, decision_count: int, signatures: int, packet_count: int, repeat: int
) -> list[Comparison]:
    """Fill the bench topics, compare each read's two ways, delete the topics (module docstring)."""
    serde = make_serde(get_settings().schema_registry_url)
    specs = {spec.name: spec for spec in build_catalog(get_settings().topic_partitions)}
    run = uuid.uuid4().hex[:8]
    bench = {
        DBPM_DECISIONS: dataclasses.replace(specs[DBPM_DECISIONS], name=f"clingate-bench-decisions-{run}"),
        DOCS_REVIEW_PACKETS: dataclasses.replace(
            specs[DOCS_REVIEW_PACKETS], name=f"clingate-bench-packets-{run}"
        ),
    }
    admin = admin_client(bootstrap)
    ensure_topics(admin, list(bench.values()))
    decided_topic, packet_topic = bench[DBPM_DECISIONS].name, bench[DOCS_REVIEW_PACKETS].name
    try:
        decided = list(decisions(decision_count, signatures))
        _write(bootstrap, serde, decided_topic, DBPM_DECISIONS, [(d.patient_id.encode(), d) for d in decided])
        _write(bootstrap, serde, packet_topic, DOCS_REVIEW_PACKETS,
               [(p.doc_id.encode(), p) for p in packets(packet_count)])  # fmt: skip
        candidate_id, sig = decided[len(decided) // 2].candidate_id, decided[-1].signature

        def lookup(field: str, value: str, prefiltered: bool) -> list[str]:
            """The candidate ids of the decisions whose ``field`` is ``value``, sorted: a read interleaves
            the partitions in the order their records arrive."""
            found = read_records(bootstrap, serde, decided_topic, GateDecision,
                                 containing=value.encode() if prefiltered else None)  # fmt: skip
            return sorted(d.candidate_id for d in found.values() if getattr(d, field) == value)

        def both(field: str, value: str) -> dict[str, Callable[[], Any]]:
            return {
                "decode all": lambda: lookup(field, value, prefiltered=False),
                "pre-filtered": lambda: lookup(field, value, prefiltered=True),
            }

        def catch_up(fetch_wait_ms: int) -> list[str]:
            follower = PacketFollower(bootstrap, serde, topic=packet_topic, fetch_wait_ms=fetch_wait_ms)
            try:
                follower.catch_up()
                return sorted(follower.packets)
            finally:
                follower.close()

        followed = TopicFollower(bootstrap, serde, decided_topic, GateDecision)

        def follow() -> list[str]:
            return sorted(d.candidate_id for d in followed.read().values())

        def whole() -> list[str]:
            return sorted(
                d.candidate_id for d in read_records(bootstrap, serde, decided_topic, GateDecision).values()
            )

        follow()  # its first read: the whole topic
        return [
            _compare("decision of one candidate", both("candidate_id", candidate_id), repeat),
            _compare("decisions of one signature", both("signature", sig), repeat),
            _compare("review queue catch-up", {
                f"{DEFAULT_FETCH_WAIT_MS} ms hold": lambda: catch_up(DEFAULT_FETCH_WAIT_MS),
                f"{ONE_READ_FETCH_WAIT_MS} ms hold": lambda: catch_up(ONE_READ_FETCH_WAIT_MS),
            }, repeat),
            _compare("page read of a followed topic", {"whole": whole, "followed": follow}, repeat),
        ]  # fmt: skip
    finally:
        for future in admin.delete_topics([decided_topic, packet_topic]).values():
            future.result()


def console(
    decision_count: Annotated[
        int, typer.Option("--decisions", min=1, help="Gate decisions on the bench's decisions topic.")
    ] = 100_000,
    signatures: Annotated[int, typer.Option(min=1, help="NER signatures the decisions share.")] = 1_000,
    packet_count: Annotated[int, typer.Option("--packets", min=1, help="Review packets.")] = 200,
    repeat: Annotated[int, typer.Option(min=1, help="Reads each way.")] = 5,
    hostile: Annotated[
        bool,
        typer.Option(
            "--hostile",
            help="Instead: replay the attacks on a console (a console of its own on this broker; it writes "
            "a hostile review packet there) and report each as held or not; exit 1 if one did not hold.",
        ),
    ] = False,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json", callback=output_file, help="With --hostile: also write the reports as JSON here."
        ),
    ] = None,
) -> None:
    """The console's reads of full topics, each way it can read them; with --hostile, a scripted hostile
    client against a console instead (module docstring).

    Needs a broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); its topics are its own.
    """
    bootstrap = require_bootstrap(get_settings())
    if hostile:
        _hostile(bootstrap, json_path)
        return
    compared = bench_console(
        bootstrap,
        decision_count=decision_count,
        signatures=signatures,
        packet_count=packet_count,
        repeat=repeat,
    )
    typer.echo(
        f"clingate bench console: {decision_count:,} decisions ({signatures:,} signatures), {packet_count:,} "
        f"review packets, {get_settings().topic_partitions} partitions; median of {repeat} reads each way"
    )
    for c in compared:
        (a, b), (seconds_a, seconds_b) = c.ways, c.seconds
        typer.echo(
            f"  {c.name:<28} {a} {seconds_a * 1000:,.0f} ms, {b} {seconds_b * 1000:,.0f} ms, "
            f"ratio {c.ratio:.1f} ({c.found:,} found)"
        )


def _hostile(bootstrap: str, json_path: Path | None) -> None:
    """``--hostile``: every attack on a console of its own, as a table (and JSON); exit 1 if one did not
    hold."""
    from streams.bench.hostile import run_hostile

    attacks = run_hostile(bootstrap)
    width = max(len(a.name) for a in attacks)
    typer.echo(f"clingate bench console --hostile: {len(attacks)} attacks on a console on {bootstrap}")
    for attack in attacks:
        typer.echo(f"  {attack.name:<{width}}  {attack.verdict:<8}  {attack.detail}")
    if json_path is not None:
        report = [{"attack": a.name, "held": a.held, "detail": a.detail} for a in attacks]
        json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if any(attack.held is False for attack in attacks):
        raise typer.Exit(1)
