"""``clingate bench runtime``: every clingate runtime side by side with Kafka's and Python's limits.

One run on one broker (``KAFKA_BOOTSTRAP_SERVERS`` or ``clingate broker start``; use a scratch
broker: the parts write real records), in this order, each part alone on the machine, every worker in
the production configuration but the replay's (:data:`PRODUCTION`):

1. **Kafka's limit**: Apache Kafka's own ``ProducerPerformance`` and ``ConsumerPerformance`` (the
   broker's version, from its locked jars) on a fresh topic, records of :data:`RECORD_BYTES`. The
   limit is the slower of the two (a consume-transform-produce runtime needs both); their CPU is the
   JVMs'.
2. **Python's limit**: a minimal confluent-kafka consume-transform-produce loop (JSON records of the
   same size; decode, add a field, encode; batches of 1,000; offsets committed per batch), without and
   with one Kafka transaction per batch (the offsets sent to it). CPU is this process's.
3. **Memory writer** (:func:`streams.bench.memory.memory_bench`): one ``worker --role memory``
   draining a verdict backlog produced once it has restored, then restoring its whole changelog with
   its local store deleted; then two such workers of one app id (sharing the verdicts' partitions)
   draining a backlog of the same size produced once both have restored: their rate over the one
   worker's is ``memory_scale_2_workers``.
4. **quix-streams peer** (:mod:`streams.bench.quix`): a quix-streams application over as many JSON
   records as the memory writer drained (the Python loop's records: same size, keys ``i % 997``),
   reading and rewriting a per-key count and sum in its RocksDB state, one output per record, under
   exactly-once; timed from its first record processed to its last committed, its process's CPU per
   record; the memory writer's rate over it is ``memory_agent_vs_quix``. quix-streams runs in an
   environment of its own under ``<CLINGATE_HOME>/bench``, installed on first use: its releases pin
   confluent-kafka and pydantic-settings below the versions clingate runs on, so installing it beside
   clingate would change the runtime being measured. Where it cannot be installed, the part says so
   and its figures (:data:`PEER_KEYS`) are absent.
5. **Gate** (:func:`streams.bench.dbpm_kafka.measure_gate`): one ``worker --role gate`` (with a
   ``--role memory`` worker writing the memory it reads): the sustained maximum, the worker's CPU per
   candidate, and p50/p99 from produce to decision at 25%, 50% and 90% of that maximum; then a second
   gate worker of the same app id started beside the first (the two share the candidates' partitions,
   each follows the whole memory): their sustained maximum over the one worker's is
   ``gate_scale_2_workers``.
6. **Clinical worker** (:func:`streams.bench.clinical.through_kafka_rate`): FHIR updates through one
   ``worker --role memory`` (which runs the clinical loop) to their assessments.
7. **LLM groups** (:func:`streams.bench.llm.measure_group_point`): the verifier group with 64
   records in flight against a local server that answers at once: CPU per record outside the call.
8. **Replay**: a synthetic stream (:func:`streams.testing.worker.soak_stream`) through
   ``clingate replay``'s in-process engine and through ``replay --via-kafka`` with one worker.

Every rate is printed with its ratio to the Python loop and to Kafka's limit, and its CPU per record.
``--json PATH`` writes the figures (keys: :data:`KEYS`, :data:`PEER_KEYS` and more); ``--quick`` runs
every part at a size that takes a few minutes in all. The README's performance table is this command's
output.

Size: one command that runs eight parts in order on one broker. The two limits every rate is
compared with are measured here; each other part is a short function driving a benchmark of its own
module (named above), and the rest is their order and the table.
"""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import NewTopic

from schemas.wire import make_serde
from streams.bench import clinical, dbpm_kafka, llm, memory, quix
from streams.local.bootstrap import require_bootstrap
from streams.local.jars import DEPLOY_LOCAL, ensure_artifacts
from streams.local.paths import output_file, output_folder
from streams.replay.kafka import CommitWatcher, commit_worker_end_offsets, replay_via_kafka
from streams.runtime.kafka_clients import produce_waiting, producer_config
from streams.runtime.kafka_config import admin_client, client_config
from streams.runtime.settings import Settings, get_settings
from streams.testing.llm_server import ServerProcess
from streams.testing.worker import (
    COMPARISON_ENV,
    WorkerProcess,
    check_own_input,
    comparison_engine,
    in_process,
    soak_stream,
)
from streams.worker import READY
from streams.worker.clinical import INPUTS as CLINICAL_INPUTS
from streams.worker.keys import MEMORY_INPUTS, memory_changelog
from streams.worker.memory import memory_group
from topics.admin import ensure_topics
from topics.catalog import DBPM_CANDIDATES, DBPM_VERDICTS, build_catalog

#: Bytes of each record of the Kafka and Python limits (a DBPM verdict or candidate is 80-300).
RECORD_BYTES = 200
#: What the gate's view is given to apply the memory's last groups before the gate is measured.
VIEW_CATCH_UP_S = 2.0
#: Worker settings of the parts that measure a runtime: the production configuration (nothing set).
#: The replay part alone runs the comparison configuration, in which the in-process engine it is
#: compared with decides the same.
PRODUCTION: Mapping[str, str] = {}
#: Records per transaction and per commit of the Python loop.
LOOP_BATCH = 1000
#: The figures ``--json`` always holds.
KEYS = (
    "kafka_perf_records_per_s",
    "python_loop_records_per_s",
    "memory_agent_verdicts_per_s",
    "restore_records_per_s",
    "gate_candidates_per_s",
    "gate_p99_ms_at_half",
    "memory_scale_2_workers",
    "gate_scale_2_workers",
    "clinical_updates_per_s",
    "llm_group_cpu_ms_per_record",
    "replay_via_kafka_events_per_s",
    "replay_in_process_events_per_s",
)
#: The figures of the quix-streams peer: in ``--json`` wherever quix-streams could be installed (the
#: part needs a package index once), absent elsewhere.
PEER_KEYS = ("quix_records_per_s", "quix_cpu_us_per_record", "memory_agent_vs_quix")
#: Part sizes: (full, quick); the quix-streams peer takes the memory writer's verdict count.
SIZES: dict[str, tuple[int, int]] = {
    "kafka": (1_000_000, 200_000),
    "loop": (300_000, 50_000),
    "memory": (300_000, 40_000),
    "gate": (20_000, 4_000),
    "clinical": (200, 40),
    "llm": (4_000, 1_000),
    "replay": (40_000, 6_000),
}


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _fresh_topic(bootstrap: str, name: str, partitions: int) -> str:
    admin = admin_client(bootstrap)  # held until the futures resolve: a collected client cancels them
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result()
    return name


def kafka_limit(bootstrap: str, settings: Settings, records: int) -> dict[str, float]:
    """Kafka's own producer and consumer performance tools on a fresh topic (module docstring, 1)."""
    libs = ensure_artifacts(settings.home, repository=settings.maven_repository)
    topic = _fresh_topic(bootstrap, f"clingate-bench-kafka-{uuid.uuid4().hex[:8]}", settings.topic_partitions)
    java = ["java", "-Xmx512m", f"-Dlog4j.configuration=file:{DEPLOY_LOCAL / 'log4j-tools.properties'}",
            "-cp", f"{libs}/*"]  # fmt: skip

    def tool(*argv: str) -> tuple[str, float]:
        before = _child_cpu_s()
        done = subprocess.run([*java, *argv], capture_output=True, text=True, timeout=900, check=True)
        return done.stdout, _child_cpu_s() - before

    produced, producer_cpu = tool(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
        "--record-size", str(RECORD_BYTES), "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5",
    )  # fmt: skip
    # "<n> records sent, <rate> records/sec (...)": the summary is the last line.
    producer_rate = float(produced.strip().splitlines()[-1].split(" records sent, ")[1].split()[0])
    consumed, consumer_cpu = tool(
        "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
        "--messages", str(records), "--timeout", "60000",
    )  # fmt: skip
    # A CSV header, then one line; fetch.nMsg.sec (the last column) leaves the group join out.
    consumer_rate = float(consumed.strip().splitlines()[-1].split(",")[-1])
    return {
        "kafka_perf_producer_records_per_s": producer_rate,
        "kafka_perf_consumer_records_per_s": consumer_rate,
        "kafka_perf_records_per_s": min(producer_rate, consumer_rate),
        "kafka_perf_cpu_us_per_record": (producer_cpu + consumer_cpu) / records * 1e6,
    }


def _fed_topics(bootstrap: str, settings: Settings, prefix: str, records: int) -> tuple[str, str]:
    """Fresh ``<prefix>-in`` and ``<prefix>-out`` topics, ``records`` JSON records of about
    :data:`RECORD_BYTES` in the first, keyed ``i % 997``; (source, sink)."""
    source = _fresh_topic(bootstrap, f"{prefix}-in", settings.topic_partitions)
    sink = _fresh_topic(bootstrap, f"{prefix}-out", settings.topic_partitions)
    feeder = Producer(
        producer_config(bootstrap, **{"linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    )
    pad = "x" * (RECORD_BYTES - 40)
    for i in range(records):
        produce_waiting(
            feeder, source, key=str(i % 997).encode(), value=json.dumps({"i": i, "pad": pad}).encode()
        )
    if feeder.flush(120):
        raise RuntimeError(f"the records of {source} were not acknowledged within 120 s")
    return source, sink


def python_loop(bootstrap: str, settings: Settings, records: int, transactional: bool) -> tuple[float, float]:
    """The minimal consume-transform-produce loop (module docstring, 2): (records/s, CPU us/record)."""
    run = uuid.uuid4().hex[:8]
    source, sink = _fed_topics(bootstrap, settings, f"clingate-bench-loop-{run}", records)
    consumer = Consumer(client_config(bootstrap, **{
        "group.id": f"clingate-bench-loop-{run}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed",
    }))  # fmt: skip
    extra: dict[str, object] = {"transactional.id": f"clingate-bench-loop-{run}"} if transactional else {}
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 5, **extra}))
    if transactional:
        producer.init_transactions()
    consumer.subscribe([source])
    done, started, cpu = 0, 0.0, 0.0
    deadline = time.monotonic() + 900
    try:
        while done < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Python loop processed {done:,} of {records:,} records in 900 s")
            batch = consumer.consume(num_messages=LOOP_BATCH, timeout=0.5)
            if not batch:
                continue
            if not started:
                started, cpu = time.perf_counter(), time.process_time()
            if transactional:
                producer.begin_transaction()
            for message in batch:
                value = json.loads(message.value())
                value["seen"] = True
                produce_waiting(producer, sink, key=message.key(), value=json.dumps(value).encode())
            positions = consumer.position(consumer.assignment())
            if transactional:
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
                producer.commit_transaction()
            else:
                producer.poll(0)
                consumer.commit(offsets=positions, asynchronous=True)
            done += len(batch)
        producer.flush(60)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        consumer.close()
    return records / elapsed, cpu / records * 1e6


def quix_part(
    bootstrap: str, settings: Settings, workdir: Path, records: int, say: Callable[[str], None]
) -> dict[str, float]:
    """The quix-streams peer over ``records`` records (module docstring, 4); nothing, said so, where
    quix-streams cannot be installed."""
    try:
        python = quix.peer_python(settings.home)
    except quix.PeerUnavailable as error:
        say(f"  quix-streams peer: NOT MEASURED: {error}")
        return {}
    run = f"clingate-bench-quix-{uuid.uuid4().hex[:8]}"
    source, sink = _fed_topics(bootstrap, settings, run, records)
    rate, cpu = quix.run_peer(python, bootstrap, source, sink, run, workdir, records)
    return {"quix_records_per_s": rate, "quix_cpu_us_per_record": cpu}


def _worker(
    bootstrap: str, workdir: Path, app_id: str, role: str, ready: bytes, env: Mapping[str, str] = PRODUCTION
) -> WorkerProcess:
    worker = WorkerProcess(bootstrap, app_id, workdir / f"{app_id}-{role}", dict(env), role=role)
    worker.start(ready=ready)
    return worker


def gate_part(bootstrap: str, workdir: Path, n: int) -> dict[str, float]:
    """The gate with its memory writer (module docstring, 5): one gate worker, every figure; then a
    second of the same app id beside it (the two share the candidates' partitions, each follows the
    whole memory): their sustained maximum, CPU per candidate and speed-up (:func:`_two_workers`)."""
    app_id = f"clingate-gatebench-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(bootstrap, app_id)
    events = soak_stream(max(4 * n, 20_000), 1_000, app_id)
    verdicts = [e for e in events if e["kind"] == "verdict"]
    candidates = [e for e in events if e["kind"] == "gate"]
    serde = make_serde(None)

    def applied() -> None:  # the memory writer, then the gates' views of it, caught up
        with CommitWatcher(bootstrap, memory_group(app_id)) as watcher:
            watcher.wait(DBPM_VERDICTS, 600.0)
        time.sleep(VIEW_CATCH_UP_S)

    writer = _worker(bootstrap, workdir, app_id, "memory", f"{memory_changelog(app_id)} restored".encode())
    first, second = (
        WorkerProcess(bootstrap, app_id, workdir / f"{app_id}-gate-{i}", dict(PRODUCTION), role="gate")
        for i in range(2)
    )
    try:
        first.start(ready=READY)
        assert first.pid is not None
        single = dbpm_kafka.measure_gate(
            bootstrap, serde, verdicts, candidates, n, True, [first.pid], applied
        )  # publishes the memory first
        second.start(ready=READY)
        assert second.pid is not None
        applied()  # the memory is there: the second's view catches up, the group rebalances
        double = dbpm_kafka.measure_gate(
            bootstrap, serde, verdicts, candidates, n, False, [first.pid, second.pid], fractions=()
        )
        check_own_input([writer], MEMORY_INPUTS)
        check_own_input([first, second], [DBPM_CANDIDATES])
    finally:
        second.stop()
        first.stop()
        writer.stop()
    figures = {
        **_gate_rate(single),
        "gate_in_process_pipeline_per_s": single.in_process_pipeline_per_s,
        **_two_workers("gate", _gate_rate(single), _gate_rate(double)),
    }
    for point in single.latency:
        figures[f"gate_p50_ms_at_{point.fraction:.0%}"] = point.p50_ms
        figures[f"gate_p99_ms_at_{point.fraction:.0%}"] = point.p99_ms
    figures["gate_p99_ms_at_half"] = figures["gate_p99_ms_at_50%"]
    return figures


def _gate_rate(result: dbpm_kafka.BenchResult) -> dict[str, float]:
    """The gate's rate and CPU figures of one measure (NaN CPU: no pid was given, never here)."""
    return {
        "gate_candidates_per_s": result.kafka_max_per_s,
        "gate_cpu_us_per_candidate": result.worker_cpu_us_per_candidate or float("nan"),
    }


def clinical_part(bootstrap: str, workdir: Path, patients: int) -> dict[str, float]:
    """FHIR updates through the clinical agent (module docstring, 6)."""
    from processors.clinical.knowledge import load_knowledge

    app_id = f"clingate-clinbench-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(bootstrap, app_id)
    worker = _worker(bootstrap, workdir, app_id, "memory", READY)
    try:
        assert worker.pid is not None
        before = dbpm_kafka.cpu_seconds([worker.pid])
        rate, _, updates, _ = clinical.through_kafka_rate(bootstrap, patients, 7, load_knowledge())
        cpu = dbpm_kafka.cpu_seconds([worker.pid]) - before
        check_own_input([worker], CLINICAL_INPUTS)
    finally:
        worker.stop()
    return {"clinical_updates_per_s": rate, "clinical_cpu_us_per_update": cpu / updates * 1e6}


def llm_part(bootstrap: str, records: int) -> dict[str, float]:
    """The verifier group against a server that answers at once (module docstring, 7)."""
    settings = get_settings()
    with ServerProcess.start("test", args=["--latency-ms", "0"]) as server:
        point = asyncio.run(llm.measure_group_point(bootstrap, settings, server.base_url, 64, 0.001, records))
    return {
        "llm_group_records_per_s": point.calls_per_s,
        "llm_group_cpu_ms_per_record": point.cpu_ms_per_call,
        "llm_group_cpu_us_per_record": point.cpu_ms_per_call * 1e3,
    }


def replay_part(bootstrap: str, workdir: Path, events: int) -> dict[str, float]:
    """The same stream in process and through Kafka with one worker (module docstring, 8)."""
    app_id = f"clingate-replaybench-{uuid.uuid4().hex[:8]}"
    stream = soak_stream(events, 1_000, app_id)
    engine = comparison_engine()
    started = time.perf_counter()
    in_process(engine, stream)
    in_process_s = time.perf_counter() - started
    commit_worker_end_offsets(bootstrap, app_id)
    worker = _worker(bootstrap, workdir, app_id, "all", READY, COMPARISON_ENV)
    try:
        started = time.perf_counter()
        replay_via_kafka(bootstrap, stream, engine, make_serde(None), app_id, timeout_s=600.0)
        kafka_s = time.perf_counter() - started
    finally:
        worker.stop()
    return {
        "replay_events": float(len(stream)),
        "replay_in_process_events_per_s": len(stream) / in_process_s,
        "replay_via_kafka_events_per_s": len(stream) / kafka_s,
    }


def run_parts(
    bootstrap: str, workdir: Path, size: dict[str, int], say: Callable[[str], None]
) -> dict[str, float]:
    """Every part in order, each at its ``size`` (keys of :data:`SIZES`); the figures by key."""
    settings = get_settings()
    ensure_topics(
        admin_client(bootstrap), build_catalog(settings.topic_partitions, settings.topic_replication)
    )
    figures: dict[str, float] = {}

    def part(name: str, measure: Callable[[], dict[str, float]]) -> None:
        started = time.monotonic()
        found = measure()
        figures.update(found)
        say(f"  {name}: done in {time.monotonic() - started:.0f} s")

    part("Kafka's perf tools", lambda: kafka_limit(bootstrap, settings, size["kafka"]))
    for transactional in (False, True):
        rate, cpu = python_loop(bootstrap, settings, size["loop"], transactional)
        suffix = "_tx" if transactional else ""
        figures[f"python_loop{suffix}_records_per_s"], figures[f"python_loop{suffix}_cpu_us_per_record"] = (
            rate,
            cpu,
        )
        say(f"  Python loop{' (transactions)' if transactional else ''}: done")
    part("memory writer", lambda: _memory_figures(bootstrap, workdir, size["memory"]))
    part("memory writer, 2 workers", lambda: _two_workers(
        "memory", figures, _memory_figures(bootstrap, workdir, size["memory"], workers=2)
    ))  # fmt: skip
    part("quix-streams peer", lambda: quix_part(bootstrap, settings, workdir, int(figures["verdicts"]), say))
    if "quix_records_per_s" in figures:
        figures["memory_agent_vs_quix"] = (
            figures["memory_agent_verdicts_per_s"] / figures["quix_records_per_s"]
        )
    part("gate, 1 then 2 workers", lambda: gate_part(bootstrap, workdir, size["gate"]))
    part("clinical worker", lambda: clinical_part(bootstrap, workdir, size["clinical"]))
    part("LLM groups", lambda: llm_part(bootstrap, size["llm"]))
    part("replay", lambda: replay_part(bootstrap, workdir, size["replay"]))
    return figures


def _memory_figures(bootstrap: str, workdir: Path, events: int, workers: int = 1) -> dict[str, float]:
    """The memory writer's figures with ``workers`` processes (module docstring, 3)."""
    found = memory.memory_bench(bootstrap, workdir, events, PRODUCTION, workers=workers)
    return {key: float(value) for key, value in found.items()}


#: Per role measured with one worker and with two: the keys of its rate and CPU per record.
SCALED: Mapping[str, tuple[str, str]] = {
    "memory": ("memory_agent_verdicts_per_s", "memory_agent_cpu_us_per_verdict"),
    "gate": ("gate_candidates_per_s", "gate_cpu_us_per_candidate"),
}


def _two_workers(role: str, one: Mapping[str, float], two: Mapping[str, float]) -> dict[str, float]:
    """Two workers' rate and CPU per record (``<role>_2_workers_...``) from their figures ``two``, and the
    speed-up over one worker's rate in ``one`` (``<role>_scale_2_workers``)."""
    rate, cpu = SCALED[role]
    return {
        f"{role}_2_workers_records_per_s": two[rate],
        f"{role}_2_workers_cpu_us_per_record": two[cpu],
        f"{role}_scale_2_workers": two[rate] / one[rate],
    }


ROWS: tuple[tuple[str, str, str | None], ...] = (
    ("Kafka perf tools (limit: slower of producer, consumer)", "kafka_perf_records_per_s",
     "kafka_perf_cpu_us_per_record"),
    ("Python consume-transform-produce loop", "python_loop_records_per_s", "python_loop_cpu_us_per_record"),
    ("  the same, one transaction per batch", "python_loop_tx_records_per_s",
     "python_loop_tx_cpu_us_per_record"),
    ("memory writer (verdicts)", "memory_agent_verdicts_per_s", "memory_agent_cpu_us_per_verdict"),
    (f"quix-streams {quix.VERSION}: exactly-once, RocksDB per key", "quix_records_per_s",
     "quix_cpu_us_per_record"),
    ("changelog restore (records)", "restore_records_per_s", None),
    ("gate (candidates, sustained)", "gate_candidates_per_s", "gate_cpu_us_per_candidate"),
    ("clinical worker (FHIR updates)", "clinical_updates_per_s", "clinical_cpu_us_per_update"),
    ("verifier group, zero-latency LLM (records)", "llm_group_records_per_s", "llm_group_cpu_us_per_record"),
    ("replay in process (events)", "replay_in_process_events_per_s", None),
    ("replay --via-kafka, one worker (events)", "replay_via_kafka_events_per_s", None),
)  # fmt: skip


def table(figures: dict[str, float]) -> list[str]:
    """The side-by-side table: rate, ratios to the Python loop and to Kafka's limit, CPU per record; a
    row whose rate is absent (the quix-streams peer where it cannot be installed) says so."""
    loop, limit = figures["python_loop_records_per_s"], figures["kafka_perf_records_per_s"]
    lines = [f"{'runtime':<56} {'records/s':>11} {'x loop':>8} {'x Kafka':>8} {'CPU/record':>12}"]
    for label, rate_key, cpu_key in ROWS:
        if rate_key not in figures:
            lines.append(f"{label:<56} {'-':>11}   not measured")
            continue
        rate = figures[rate_key]
        cpu = "" if cpu_key is None else f"{figures[cpu_key]:,.0f} us"
        lines.append(f"{label:<56} {rate:>11,.0f} {rate / loop:>8.3f} {rate / limit:>8.3f} {cpu:>12}")
    lines.append(
        "gate latency p50/p99 at 25%, 50%, 90% of its maximum: "
        + ", ".join(f"{figures[f'gate_p50_ms_at_{f}']:.0f}/{figures[f'gate_p99_ms_at_{f}']:.0f} ms"
                    for f in ("25%", "50%", "90%"))
    )  # fmt: skip
    if "memory_agent_vs_quix" in figures:
        lines.append(f"memory writer / quix-streams peer: {figures['memory_agent_vs_quix']:.3f}x")
    lines.append(
        "2 worker processes / 1, same partitions: "
        + ", ".join(f"{name} {figures[f'{role}_scale_2_workers']:.2f}x "
                    f"({figures[f'{role}_2_workers_records_per_s']:,.0f}/s, "
                    f"{figures[f'{role}_2_workers_cpu_us_per_record']:,.0f} us CPU/record)"
                    for role, name in (("memory", "memory writer"), ("gate", "gate")))
    )  # fmt: skip
    lines.append(
        f"LLM groups: {figures['llm_group_cpu_ms_per_record']:.2f} ms of CPU per record outside the call"
    )
    lines.append(
        f"replay --via-kafka / in process: "
        f"{figures['replay_in_process_events_per_s'] / figures['replay_via_kafka_events_per_s']:.1f}x slower"
    )
    return lines


def runtime(
    quick: Annotated[bool, typer.Option("--quick", help="Every part small: a few minutes in all.")] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", callback=output_file, help="Also write the figures as JSON.")
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(callback=output_folder, help="Workers' data and logs (default: temporary).")
    ] = None,
) -> None:
    """Every runtime side by side with Kafka's own perf tools and a minimal Python loop, one broker.

    Needs a scratch broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); starts its own workers.
    """
    bootstrap = require_bootstrap(get_settings())
    with tempfile.TemporaryDirectory(prefix="clingate-runtimebench-") as scratch:
        try:
            size = {part: small if quick else full for part, (full, small) in SIZES.items()}
            figures = run_parts(bootstrap, workdir or Path(scratch), size, typer.echo)
        except (KafkaException, subprocess.CalledProcessError, TimeoutError, RuntimeError) as error:
            typer.echo(f"clingate bench runtime: {error}", err=True)
            raise typer.Exit(1) from error
    for line in table(figures):
        typer.echo(line)
    if json_out is not None:
        json_out.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n", encoding="utf-8")
