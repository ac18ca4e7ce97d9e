"""``clingate demo``: the product end to end on a real Kafka broker, every part a process of its own.

The demo only produces inputs and consumes outputs, as an upstream and a downstream system would. Steps,
each printing what it did: 1. the broker and the catalog's topics; 2. one event of every schema
round-tripped; 3. the DBPM loop, FHIR updates and classifications through the workers at once; 4-6. the
DBPM, clinical (with the golden runs through the output gates) and arbiter outputs compared with the
in-process references; 7. the clinician's agent through its worker; 8. dead letters; 9. the console,
each page photographed; 10. a real model; 11. the summary, report.html and its screenshot, all in the
``--out`` folder (nothing else is written in the working directory). The DBPM loop runs a lockstep
slice, compared one for one with the in-process engine, then a bulk phase, whose differences are
reported, not checked (docs/demo.md). The exit code is 1 when a check fails, 130 on Ctrl-C; every
process the demo started is stopped in all cases (also on SIGTERM). With ``--serve`` the broker, the
workers and the console stay up after the report until Ctrl-C (or SIGTERM), which then ends the demo
normally.
"""

from __future__ import annotations

import json
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console

from schemas.console import Role
from schemas.serde import Serde
from schemas.wire import make_serde
from streams.demo.agent import step_agent
from streams.demo.broker import start_broker, step_topics
from streams.demo.checks import step_clinical, step_dbpm, step_docs
from streams.demo.console_pages import shoot_report, step_console
from streams.demo.dead_letters import step_dead_letters
from streams.demo.errors import DemoError
from streams.demo.gate_runs import step_output_gates
from streams.demo.kafka_io import dlq_counts
from streams.demo.model import step_model
from streams.demo.plan import DEFAULT_LOCKSTEP, DEFAULT_PATIENTS, Plan, build_plan, golden_time
from streams.demo.report import write_report
from streams.demo.results import Results
from streams.demo.samples import step_schemas
from streams.demo.streams import step_streams
from streams.demo.summary import print_summary, summary_json
from streams.local.paths import output_folder
from streams.runtime.settings import Settings, get_settings
from topics.catalog import Catalog, build_catalog

app = typer.Typer(help="Run clingate end to end on a Kafka broker and write report.html.")

REPORT = "report.html"
SUMMARY = "summary.json"

Patients = Annotated[int, typer.Option(min=1, help="Patients (narratives) of the DBPM loop.")]
Lockstep = Annotated[
    int,
    typer.Option(
        min=0,
        help="Of those, patients run one at a time and compared exactly with the in-process "
        "engine; the rest run in flight at once (the bulk phase).",
    ),
]
ClinicalPatients = Annotated[
    int, typer.Option(min=0, help="Generated patients in the FHIR stream (besides the four golden cases).")
]
Documents = Annotated[
    int, typer.Option(min=1, help="Classifications sent to the arbiter (copies of the examples).")
]
FhirRate = Annotated[
    float, typer.Option(min=0, help="FHIR updates produced per second (0: as fast as possible).")
]
DocsRate = Annotated[
    float, typer.Option(min=0, help="Classifications produced per second (0: as fast as possible).")
]
ModelNarratives = Annotated[
    int, typer.Option(min=0, help="Narratives of the real-model step (SmolLM2; 0: skip the step).")
]
OutDir = Annotated[
    Path,
    typer.Option(
        "--out",
        callback=output_folder,
        help="The folder the run writes in: report.html, the screenshots (the console's pages and the "
        "report's) and summary.json (checks by name, the DBPM loop's figures). The default is under "
        "out/, which git ignores, so a run leaves the checkout clean.",
    ),
]
Serve = Annotated[
    bool,
    typer.Option(
        "--serve",
        help="After the report, keep the broker, workers and console up until Ctrl-C (prints the "
        "console's users and passwords).",
    ),
]


@app.callback(invoke_without_command=True)
def demo(
    patients: Patients = DEFAULT_PATIENTS,
    lockstep: Lockstep = DEFAULT_LOCKSTEP,
    clinical_patients: ClinicalPatients = 300,
    documents: Documents = 70,
    fhir_rate: FhirRate = 20.0,
    docs_rate: DocsRate = 20.0,
    model_narratives: ModelNarratives = 3,
    out: OutDir = Path("out/demo"),
    serve: Serve = False,
) -> None:
    """Run clingate end to end on Kafka (KAFKA_BOOTSTRAP_SERVERS, else a broker of its own) and report."""
    console = Console()
    settings = get_settings()
    serde = make_serde(settings.schema_registry_url)
    catalog = build_catalog(settings.topic_partitions, settings.topic_replication)
    results = Results()
    started = time.perf_counter()
    plan = build_plan(patients, lockstep, clinical_patients, documents, console)

    def finish() -> None:
        results.timings["total"] = time.perf_counter() - started
        console.rule("[bold]11. summary")
        print_summary(console, results)
        report = out / REPORT
        write_report(report, results)
        (out / SUMMARY).write_text(json.dumps(summary_json(results), indent=2) + "\n", encoding="utf-8")
        shot = shoot_report(report)
        console.print(f"the summary: {out / SUMMARY}; the report's screenshot: {shot}", soft_wrap=True)
        browse = "the console stays up below" if serve else "to browse the console, run clingate demo --serve"
        console.print(f"report: {report} (open it in a browser); {browse}", soft_wrap=True)

    steps = (console, settings, serde, catalog, results, plan, (fhir_rate, docs_rate), model_narratives)
    try:
        _run_steps(*steps, out, finish, serve)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted:[/] the workers and broker this demo started are stopped")
        raise typer.Exit(130) from None
    if results.failed:
        console.print("[red]checks failed:[/] " + "; ".join(results.failed))
        raise typer.Exit(1)


def _run_steps(
    console: Console,
    settings: Settings,
    serde: Serde,
    catalog: Catalog,
    results: Results,
    plan: Plan,
    rates: tuple[float, float],
    model_narratives: int,
    out: Path,
    finish: Callable[[], None],
    serve: bool,
) -> None:
    """Steps 1-10, then ``finish`` (the summary and the report); everything started here (broker, workers,
    console, temporary directories) is stopped on exit, after Ctrl-C with ``serve``."""
    with _terminate_as_exit(), ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="clingate-demo-")))
        try:
            with _step(console, results, 1, "broker and topics"):
                bootstrap = start_broker(stack, settings, console).bootstrap
                step_topics(console, bootstrap, catalog, results)
                results.dead_letters.base = dlq_counts(bootstrap, catalog)
            with _step(console, results, 2, "one event of every schema"):
                step_schemas(console, bootstrap, serde, catalog, results)
            with _step(console, results, 3, "the streams through the workers"):
                engine, app_id = step_streams(console, bootstrap, serde, plan, workdir, rates, results)
            with _step(console, results, 4, "DBPM: narratives -> generator -> gate -> verifier -> memory"):
                step_dbpm(console, bootstrap, plan, engine, app_id, results)
            with _step(console, results, 5, "clinical gates and output gates"):
                step_clinical(console, plan, results)
                step_output_gates(console, plan, results)
            with _step(console, results, 6, "classification arbiter"):
                step_docs(console, plan, results)
            with _step(console, results, 7, "the clinician's agent through its worker"):
                step_agent(
                    console, bootstrap, serde, app_id, workdir, plan.clinical_updates, golden_time(), results
                )
            with _step(console, results, 8, "dead letters"):
                step_dead_letters(console, bootstrap, serde, catalog, results)
            with _step(console, results, 9, "the console"):
                users = step_console(console, bootstrap, app_id, workdir, out, stack, results)
            with _step(console, results, 10, "a real model (SmolLM2) through the production client"):
                results.model_calls = step_model(console, plan.loop, plan.llm_url, model_narratives)
        except DemoError as error:
            console.print(f"[red]demo failed:[/] {error}")
            raise typer.Exit(1) from error
        finish()
        if serve:
            _serve(console, results.console_url, users)


def _serve(console: Console, url: str, users: dict[Role, tuple[str, str]]) -> None:
    """Keep everything up until Ctrl-C (or SIGTERM), which ends the demo normally."""
    console.rule("[bold]serving")
    console.print(f"the console: {url}; sign in as")
    for role, (name, password) in users.items():
        console.print(f"  {role.value:<11} {name}  {password}")
    console.print("the broker, the workers and the console stay up until Ctrl-C")
    try:
        threading.Event().wait()
    except (KeyboardInterrupt, SystemExit):
        console.print("stopping the console, the workers and the broker")


@contextmanager
def _step(console: Console, results: Results, number: int, title: str) -> Iterator[None]:
    """A numbered step: its rule printed, its time kept (by title) for the summary."""
    console.rule(f"[bold]{number}. {title}")
    started = time.perf_counter()
    yield
    results.timings[title] = time.perf_counter() - started


@contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so every ``finally`` (worker, broker) runs."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
