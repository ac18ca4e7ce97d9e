"""``clingate bench ablation``: the paper's paired ablations (§5.2) on a stratified synthetic cohort.

One cohort, several arms, every arm over the same events, so each comparison is patient- and
candidate-aligned:

1. **Population and cohort.** The synthetic stream (:mod:`streams.testing.dbpm_stream`, the paper's
   proportions) gives ``--population`` patients with their attributes (age, gender, narrative
   length); :func:`processors.dbpm.cohort.stratified_cohort` draws ``--patients`` of them (§5.1:
   age x gender x length tertile, floor then proportional residual, ``--seed``).
2. **The cohort's stream.** The cohort's patients are replayed in the cohort's (shuffled) order, each
   moved to the arrival slot of its position (same spacing of event time as the generator,
   ``patients_per_day``), so the cohort runs as one batch of consecutive patients. Within a patient
   each stage (NER, RE, QA) is gated as one batch, then verified: the stage's gate events first, all
   at the stage's first event time, then its verdicts with their own times. This is how the paper's
   pipeline runs a stage (generate, gate, verify) and it lets ``--via-kafka`` publish one batch per
   round trip instead of one candidate. Measurement pairs each gate decision with its own verdict
   (the k-th gate of a stage with the k-th verdict), whatever the processing order.
3. **Arms** (:data:`ARMS`) are the ``CLINGATE_DBPM_*`` configuration with one setting changed, the
   paper's "toggling a single flag while holding the rest of the system fixed": ``full`` (the
   settings as they are: by default the paper's deployed configuration), ``memory_off`` (the
   BPM_DISABLE master switch, Table 6 row 3), ``no_ontology`` (the Ontology-Violation Filter off,
   row 1), ``no_coverage`` (the NER-coverage signal off, row 2: ``CLINGATE_DBPM_NER_COVERAGE=false``
   empties the Eq. 9 bucket table, so every QA candidate is decided by the fail-rate x difficulty
   fallback of Eq. 7-8 that the gate already runs for the two no-bucket categories; the patient's
   NER categories, given or remembered, are then never read) and ``no_cross_task`` (pattern-level
   propagation off, Appendix A.7).
4. **Runs.** In process by default: each arm's engine over an in-memory store. With
   ``--via-kafka`` each arm runs through the broker as ``clingate replay --via-kafka`` does
   (:func:`streams.replay.kafka.replay_via_kafka`) against one fresh ``clingate worker`` started with
   the arm's settings; the decisions and the final memory come back from the topics.
5. **Measurements** (:mod:`processors.dbpm.ablation`): Table 9 pair-count deltas against ``full``,
   Table 10 tag confusion, Table 8 per-category lift with 95% CI, coverage and regime, provenance
   shares, BLOCKs per arm (verifier calls saved) and the channel population of each arm's memory.
   Written as JSON (``--json``) and as a self-contained HTML page (``--html``).

``--qa-sources`` runs the five QA signal sources instead (§4.8, §6.3, Table 11): one arm per source
(:data:`QA_SOURCE_ARMS`, ``CLINGATE_DBPM_QA_SIGNAL``), the NER-coverage arm (the deployed design) the
reference, in process or through Kafka as above. Their stream carries what the first four sources read
and the default stream lacks (:data:`QA_SOURCES_DISPERSION`: a per-patient extraction difficulty whose
spread matches §6.3's; the parse-failure flag at the rate of a schema-constrained verifier, zero), and
the report adds ``qa_sources`` (:func:`processors.dbpm.ablation.qa_sources_table`): each source's lift
with its 95% CI beside the paper's figure.

Size: one command, kept whole: the cohort's stream, the arms, their runs (in process or through
Kafka) and the rendering of the tables. The measurements themselves are pure and live in
:mod:`processors.dbpm.ablation`.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from processors.dbpm import DBPMConfig, DBPMEngine, GateEvent, VerdictEvent, load_ontology, parse_event
from processors.dbpm.ablation import (
    ArmRecorder,
    ArmResult,
    QaSignalStats,
    ablation_report,
    qa_sources_table,
)
from processors.dbpm.cohort import Cohort, PatientAttributes, stratified_cohort
from processors.dbpm.config import QA_SIGNAL_NER_COVERAGE, QA_SIGNALS
from processors.dbpm.events import format_time, parse_time
from processors.dbpm.measurement import PopulationReport, channel_population
from state import RamStore
from streams.local.paths import output_file
from streams.runtime.settings import Settings, get_settings
from streams.testing.dbpm_stream import StreamEvent, StreamShape, generate_patients
from streams.worker.engine import dbpm_config


@dataclass(frozen=True, slots=True)
class Arm:
    """One ablation arm: a name, what it changes, and the ``CLINGATE_DBPM_*`` settings it sets."""

    name: str
    description: str
    settings: Mapping[str, bool | str]

    def config(self) -> DBPMConfig:
        """The engine configuration of this arm: the environment's settings with the arm's on top."""
        return dbpm_config(Settings(**self.settings))  # type: ignore[arg-type]

    def environment(self) -> dict[str, str]:
        """The arm's settings as environment variables (for a worker process)."""
        return {
            name: (str(value).lower() if isinstance(value, bool) else value)
            for name, value in self.settings.items()
        }


ARMS: tuple[Arm, ...] = (
    Arm("full", "every DBPM mechanism as configured (default: the paper's deployed configuration)", {}),
    Arm("memory_off", "BPM_DISABLE master switch: every gate ALLOWs, nothing is recorded",
        {"CLINGATE_DBPM_DISABLE": True}),
    Arm("no_ontology", "Ontology-Violation Filter off (BPM_DISABLE_M3): rule-based RE verdicts unrecorded",
        {"CLINGATE_DBPM_ONTOLOGY_FILTER": "off"}),
    Arm("no_coverage", "NER-coverage signal off (M1V7_ENABLE=0): every QA category takes the "
        "fail-rate x difficulty fallback", {"CLINGATE_DBPM_NER_COVERAGE": False}),
    Arm("no_cross_task", "pattern-level cross-task propagation off (BPM_ENABLE_CROSS_TASK=0)",
        {"CLINGATE_DBPM_CROSS_TASK": False}),
)  # fmt: skip
"""The arms, the reference (``full``) first."""

QA_SOURCE_ARMS: tuple[Arm, ...] = tuple(
    Arm(signal, f"the QA gate reads signal source {signal!r} (§4.8)", {"CLINGATE_DBPM_QA_SIGNAL": signal})
    for signal in sorted(QA_SIGNALS, key=lambda signal: signal != QA_SIGNAL_NER_COVERAGE)
)
"""One arm per QA signal source (``--qa-sources``), the NER-coverage arm (the deployed design) first."""

QA_SOURCES_DISPERSION = 1.0
"""``re_fail_dispersion`` of the ``--qa-sources`` stream: with it the patient difficulty of QA pairs has
median 0.16, mean 0.19 and third quartile 0.28 on either side (seed 42), against §6.3's 0.179 / 0.174,
0.188 / 0.191 and 0.290 / 0.294; RE verifier rejections rise from 16% to 24% of relations."""


@dataclass(frozen=True, slots=True)
class Stage:
    """One patient's stage: its gate events (in order) and the verdict on each (same order)."""

    gates: tuple[StreamEvent, ...]
    verdicts: tuple[StreamEvent, ...]


@dataclass(frozen=True, slots=True)
class CohortStream:
    """The cohort and its events, stage by stage, in processing order (module docstring, step 2)."""

    cohort: Cohort
    stages: tuple[Stage, ...]

    def events(self) -> Iterator[StreamEvent]:
        """The events in processing order: each stage's gates, then its verdicts."""
        for stage in self.stages:
            yield from stage.gates
            yield from stage.verdicts

    @property
    def candidates(self) -> int:
        """Gate events in the stream."""
        return sum(len(stage.gates) for stage in self.stages)


def _stages(events: Sequence[StreamEvent], shift_s: float) -> Iterator[Stage]:
    """A patient's events as stages, moved ``shift_s`` seconds in event time, gates at the stage's start.

    Raises:
        ValueError: the events do not alternate gate, verdict on the same task (the generator's shape).
    """
    by_task: dict[str, list[tuple[StreamEvent, StreamEvent]]] = {}
    for start in range(0, len(events), 2):
        pair = events[start : start + 2]
        if (
            len(pair) != 2
            or (pair[0]["kind"], pair[1]["kind"]) != ("gate", "verdict")
            or (pair[0]["task"] != pair[1]["task"])
        ):
            raise ValueError(f"expected a gate event followed by its verdict at event {start}")
        by_task.setdefault(pair[0]["task"], []).append((pair[0], pair[1]))
    shift = (lambda ts: format_time(parse_time(ts) + shift_s)) if shift_s else (lambda ts: ts)
    for pairs in by_task.values():
        stage_ts = shift(pairs[0][0]["ts"])
        yield Stage(
            tuple({**gate, "ts": stage_ts} for gate, _ in pairs),
            tuple({**verdict, "ts": shift(verdict["ts"])} for _, verdict in pairs),
        )


def cohort_stream(
    patients: int, population: int, seed: int, shape: StreamShape | None = None
) -> CohortStream:
    """Draw the cohort from a synthetic population and build its stream (module docstring, steps 1-2).

    The population's events are spooled to a temporary file while their attributes are collected
    (the cohort is known only once every patient's attributes are), then the cohort's are read back.

    Args:
        patients: the cohort size.
        population: patients generated to draw from (``patients <= population``).
        seed: seeds the synthetic stream and the cohort draw.
        shape: the stream's proportions (default: the paper's, with ``seed``).
    """
    shape = shape or StreamShape(seed=seed)
    attributes: list[PatientAttributes] = []
    where: dict[str, tuple[int, int, int]] = {}  # patient id -> (index, offset, length)
    with tempfile.TemporaryFile() as spool:
        for index, (patient, events) in enumerate(generate_patients(population, shape)):
            data = json.dumps(events, separators=(",", ":")).encode()
            where[patient.patient_id] = (index, spool.tell(), len(data))
            spool.write(data)
            attributes.append(patient)
        cohort = stratified_cohort(attributes, patients, seed)
        slot_s = 86_400.0 / shape.patients_per_day
        stages: list[Stage] = []
        for position, patient_id in enumerate(cohort.ids):
            index, offset, length = where[patient_id]
            spool.seek(offset)
            events = json.loads(spool.read(length))
            stages += _stages(events, round((position - index) * slot_s))
    return CohortStream(cohort, tuple(stages))


def _pairs(stream: CohortStream) -> Iterator[tuple[GateEvent, VerdictEvent]]:
    """Each gate event of the stream with its own verdict, parsed, stage by stage."""
    for stage in stream.stages:
        for gate, verdict in zip(stage.gates, stage.verdicts, strict=True):
            gate_event, verdict_event = parse_event(gate), parse_event(verdict)
            assert isinstance(gate_event, GateEvent) and isinstance(verdict_event, VerdictEvent)
            yield gate_event, verdict_event


def _record(recorder: ArmRecorder, stream: CohortStream, rulings: Iterator[tuple[str, str]]) -> None:
    """Feed ``recorder`` each gate with its (decision, rule), then its own verdict, pair by pair."""
    for gate_event, verdict_event in _pairs(stream):
        recorder.gate(gate_event, *next(rulings))
        recorder.verdict(verdict_event)


def qa_signal_stats(stream: CohortStream) -> QaSignalStats:
    """What the stream's QA pairs give the signal sources to read (:class:`QaSignalStats`)."""
    stats = QaSignalStats()
    for gate_event, verdict_event in _pairs(stream):
        stats.pair(gate_event, verdict_event)
    return stats


def run_in_process(arm: Arm, stream: CohortStream, commit_every: int = 1000) -> ArmResult:
    """Run one arm's engine over the cohort's stream on an in-memory store and measure it."""
    config = arm.config()
    engine = DBPMEngine(config, load_ontology())
    started = time.perf_counter()
    store = RamStore()
    txn = store.transaction()
    rulings: list[tuple[str, str]] = []
    for index, obj in enumerate(stream.events(), start=1):
        event = parse_event(obj, tuple(config.tasks))
        txn, outputs = engine.process(txn, event, event.time)
        rulings += [(ruling.decision, ruling.rule) for ruling in outputs]
        if index % commit_every == 0:
            txn.commit()
            txn = store.transaction()
    txn.commit()
    snapshot_txn = store.transaction()
    try:
        snapshot = engine.snapshot(snapshot_txn)
    finally:
        snapshot_txn.abort()
    seconds = time.perf_counter() - started
    recorder = ArmRecorder(arm.name, config, arm.description)
    _record(recorder, stream, iter(rulings))
    return recorder.result(_population(snapshot, config, recorder), seconds)


def _population(snapshot: Mapping[str, Any], config: DBPMConfig, recorder: ArmRecorder) -> PopulationReport:
    """The arm's channel population; under the master switch the memory consumed no fail event."""
    consumed = {} if config.flags.disabled else recorder.fail_events
    return channel_population(snapshot, config, consumed)


#: Worker settings every --via-kafka arm adds to its own: a gate waits for the memory instead of
#: deciding on a partial view.
KAFKA_WORKER_ENV: Mapping[str, str] = {
    "CLINGATE_DBPM_BARRIER_TIMEOUT_S": "300",
}


def run_via_kafka(
    arm: Arm, stream: CohortStream, bootstrap: str, workdir: Path, timeout_s: float = 300.0
) -> ArmResult:
    """Run one arm through the broker and one fresh worker configured as the arm (module docstring)."""
    from schemas.wire import make_serde
    from streams.replay.kafka import commit_worker_end_offsets, replay_via_kafka
    from streams.runtime.kafka_config import admin_client
    from streams.testing.worker import WorkerProcess
    from topics.admin import ensure_topics
    from topics.catalog import build_catalog

    config = arm.config()
    ensure_topics(admin_client(bootstrap), build_catalog(get_settings().topic_partitions))
    app_id = f"clingate-ablation-{arm.name.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    commit_worker_end_offsets(bootstrap, app_id)
    workdir.mkdir(parents=True, exist_ok=True)
    worker = WorkerProcess(bootstrap, app_id, workdir / app_id, {**KAFKA_WORKER_ENV, **arm.environment()})
    worker.start()
    try:
        started = time.perf_counter()
        result = replay_via_kafka(
            bootstrap, list(stream.events()), DBPMEngine(config, load_ontology()),
            make_serde(get_settings().schema_registry_url), app_id, timeout_s=timeout_s,
        )  # fmt: skip
        seconds = time.perf_counter() - started
    finally:
        worker.stop()
    recorder = ArmRecorder(arm.name, config, arm.description)
    _record(recorder, stream, ((d["decision"], d["rule"]) for d in result.decisions))
    return recorder.result(_population(result.state, config, recorder), seconds)


Runner = Callable[[Arm, CohortStream], ArmResult]


def run_ablation(
    stream: CohortStream,
    runner: Runner = run_in_process,
    arms: Sequence[Arm] = ARMS,
    qa_sources: bool = False,
) -> dict[str, Any]:
    """Run every arm over ``stream`` and return the report (:func:`processors.dbpm.ablation.ablation_report`)
    with the cohort's allocation table (without its id list, which ``--json`` writes) and the arms'
    settings; with ``qa_sources``, also the side-by-side of the arms' QA signal sources
    (:func:`processors.dbpm.ablation.qa_sources_table`) under ``qa_sources``."""
    results = [runner(arm, stream) for arm in arms]
    report = ablation_report(results, reference=arms[0].name)
    if qa_sources:
        stats = qa_signal_stats(stream)
        report["qa_sources"] = {"stream": stats.to_json(), "sources": qa_sources_table(results, stats)}
    cohort = stream.cohort.to_json()
    report["cohort"] = {**{k: v for k, v in cohort.items() if k != "ids"}, "patients": len(cohort["ids"])}
    report["candidates"] = stream.candidates
    report["arm_settings"] = {arm.name: dict(arm.settings) for arm in arms}
    return report


# --- command ----------------------------------------------------------------------------------


def _lift_text(lift: Mapping[str, Any]) -> str:
    if lift["status"] == "finite":
        return f"{lift['value']:.2f} [{lift['ci_low']:.2f}, {lift['ci_high']:.2f}]"
    return f"{lift['status']} ({lift['reason']})"


def render_text(report: Mapping[str, Any]) -> str:
    """The report's headline figures as plain text (the console summary)."""
    cohort = report["cohort"]
    lines = [
        f"cohort: {cohort['patients']:,} of {cohort['population']:,} patients, {cohort['n_strata']} strata, "
        f"tertile cut points {cohort['tertile_cut_points']}, seed {cohort['seed']}; "
        f"{report['candidates']:,} candidates per arm",
        f"{'arm':<14} {'BLOCK':>7} {'touched':>8} {'QA lift (all) [95% CI]':>28} {'QA path lift':>24} "
        f"{'s':>7}",
    ]
    for arm in report["arms"]:
        qa = arm["tag_confusion"].get("qa")
        lines.append(
            f"{arm['name']:<14} {arm['verifier_calls_saved']['total']:>7,} "
            f"{(arm['provenance']['touched_share'] or 0) * 100:>7.2f}% "
            f"{_lift_text(qa['lift']) if qa else '-':>28} {_lift_text(arm['qa_path_lift']['lift']):>24} "
            f"{arm['seconds'] or 0:>7.1f}"
        )
    reference = report["arms"][0]
    lines.append(f"QA categories ({reference['name']}):")
    for row in reference["qa_categories"]:
        coverage = "-" if row["coverage"] is None else f"{row['coverage'] * 100:.1f}%"
        lines.append(
            f"  {row['category']:<24} PASS {row['n_pass']:>6,} FAIL {row['n_fail']:>5,} cov {coverage:>6}  "
            f"lift {_lift_text(row['lift']):<34} {row['regime']}"
        )
    lines.append(f"paired pair-count deltas against {report['reference']} (pairs = candidates not BLOCKed):")
    for paired in report["paired"]:
        cells = ", ".join(
            f"{task} {t['delta']:+,} ({t['delta_pct'] or 0:+.2f}%, {t['changed']:,} changed)"
            for task, t in paired["tasks"].items()
        )
        lines.append(f"  {paired['arm']:<14} {cells}")
    return "\n".join(lines)


def _sides(by_side: Mapping[str, float | None]) -> str:
    """``PASS / FAIL`` values to three decimals (``-`` when a side has none)."""
    pass_value, fail_value = by_side["PASS"], by_side["FAIL"]
    if pass_value is None or fail_value is None:
        return "-"
    return f"{pass_value:.3f} / {fail_value:.3f}"


def render_qa_sources(report: Mapping[str, Any]) -> str:
    """The five QA signal sources side by side, the paper's figure beside each (plain text)."""
    part = report["qa_sources"]
    stream = part["stream"]
    lines = [
        f"QA signal sources (paper §4.8, §6.3, Figure 4, Table 11), {stream['qa_pairs']:,} QA pairs, "
        "one stream:",
        f"  {'source':<14} {'lift, all categories [95% CI]':<34} {'path lift [95% CI]':<34} "
        f"{'FAIL tagged':>13} {'PASS tagged':>15}  {'outcome':<15} paper",
    ]
    for row in part["sources"]:
        tagged = row["tagged"]
        lines.append(
            f"  {row['signal']:<14} {_lift_text(row['lift']):<34} {_lift_text(row['path_lift']):<34} "
            f"{tagged['fail']:>5,} / {tagged['fail_total']:>5,} {tagged['pass']:>6,} / "
            f"{tagged['pass_total']:>6,}  {row['outcome']:<15} {row['paper']['figure']}"
        )
    difficulty = {
        stat: _sides({side: values[stat] for side, values in stream["difficulty"].items()})
        for stat in ("median", "mean", "q3")
    }
    spread = stream["category_fail_rate_spread"]
    lines += [
        f"  parse_failure: flag set on {stream['parse_flagged']:,} of {stream['qa_pairs']:,} pairs "
        "(paper: on none of 1,283 development pairs)",
        f"  difficulty PASS / FAIL: median {difficulty['median']}, mean {difficulty['mean']}, "
        f"Q3 {difficulty['q3']} (paper: 0.179 / 0.174, 0.188 / 0.191, 0.290 / 0.294); share above "
        f"the threshold {_sides(stream['difficulty_above_threshold'])}",
        f"  category fail rates: spread {'-' if spread is None else f'{spread:.2f}'} (paper: 0.52 held out)",
    ]
    return "\n".join(lines)


@contextlib.contextmanager
def _broker(bootstrap: str | None, workdir: Path) -> Iterator[str]:
    """``bootstrap`` if given, else the configured cluster, else a broker started for the run."""
    from streams.local.bootstrap import configured_bootstrap
    from streams.testing.kafka import provide_broker

    settings = get_settings()
    address = bootstrap or configured_bootstrap(settings)
    if address is not None:
        yield address
        return
    with provide_broker(settings, workdir / "broker") as broker:
        yield broker.bootstrap


def ablation(
    patients: Annotated[
        int, typer.Option("--patients", min=1, help="Cohort size (the paper's: 5,000).")
    ] = 2000,
    population: Annotated[
        int, typer.Option("--population", min=1, help="Synthetic patients the cohort is drawn from.")
    ] = 10_000,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the synthetic stream and the cohort draw.")] = 42,
    json_out: Annotated[
        Path | None, typer.Option("--json", callback=output_file, help="Write the full report as JSON here.")
    ] = None,
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html", callback=output_file, help="Write the report as a self-contained HTML page here."
        ),
    ] = None,
    via_kafka: Annotated[
        bool, typer.Option("--via-kafka", help="Run each arm through the broker and a worker of its own.")
    ] = False,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap",
            help="Broker for --via-kafka (default: KAFKA_BOOTSTRAP_SERVERS, a running `clingate broker`, "
            "else one started for the run).",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="--via-kafka: longest wait for one batch's decisions (s).")
    ] = 300.0,
    qa_sources: Annotated[
        bool,
        typer.Option(
            "--qa-sources",
            help="Measure the five QA signal sources (paper §6.3, Table 11) side by side instead, one arm "
            "each, on a stream that carries what each reads.",
        ),
    ] = False,
) -> None:
    """Run the paper's paired ablations (full, memory off, no ontology filter, no NER coverage, no
    cross-task) on one stratified synthetic cohort; print the headline figures, write JSON and HTML.

    Arms are the CLINGATE_DBPM_* settings with one setting changed (`clingate config --dbpm`).
    """
    if patients > population:
        raise typer.BadParameter(f"--patients {patients} exceeds --population {population}")
    started = time.perf_counter()
    shape = StreamShape(seed=seed, re_fail_dispersion=QA_SOURCES_DISPERSION) if qa_sources else None
    stream = cohort_stream(patients, population, seed, shape)
    typer.echo(
        f"cohort drawn in {time.perf_counter() - started:.1f} s: {patients:,} patients, "
        f"{stream.candidates:,} candidates",
        err=True,
    )
    with contextlib.ExitStack() as stack:
        runner: Runner = run_in_process
        if via_kafka:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clingate-ablation-")))
            address = stack.enter_context(_broker(bootstrap, scratch))

            def runner(arm: Arm, stream: CohortStream) -> ArmResult:
                return run_via_kafka(arm, stream, address, scratch / "workers", timeout)

        report = run_ablation(stream, runner, QA_SOURCE_ARMS if qa_sources else ARMS, qa_sources)
    report["runtime"] = "kafka" if via_kafka else "in-process"
    report["seconds"] = time.perf_counter() - started
    typer.echo(render_text(report))
    if qa_sources:
        typer.echo(render_qa_sources(report))
    if json_out is not None:
        full = {**report, "cohort": stream.cohort.to_json()}
        json_out.write_text(json.dumps(full, indent=1) + "\n", encoding="utf-8")
    if html_out is not None:
        from streams.bench.ablation_html import render_html

        html_out.write_text(render_html(report), encoding="utf-8")
