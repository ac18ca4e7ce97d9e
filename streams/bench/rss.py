"""``clingate bench rss``: a worker's resident memory after 200,000 candidates and after 600,000.

One ``clingate worker`` of a fresh app id (``--role all``: the memory writer, the clinical patients and
the gate in one process, in the production configuration: nothing set) on a broker
(``KAFKA_BOOTSTRAP_SERVERS`` or ``clingate broker start``; a scratch one: the run writes a few GB) is fed
live DBPM traffic as the generator and the verifier publish it (:func:`live_traffic`): the synthetic
stream's candidates (:mod:`streams.testing.dbpm_stream`, the paper's proportions), each with an id of
the run and its narrative's date (so every QA candidate waits in the NER-coverage join for its
narrative's NER verdicts), and, for each candidate the gate lets through (ALLOW or DOWNGRADE: what goes
to the verifier), the stream's verdict on it, naming it. At most :data:`WINDOW` candidates are
undecided at a time, so the worker drains a steady backlog, not one that grows with the run.

After every ``--first`` candidates, and after ``--last``, the feed stops until every candidate is
decided, as a ``read_committed`` reader of ``clingate.dbpm.decisions`` sees it, and the memory writers'
group has committed the end of ``clingate.dbpm.verdicts`` (every verdict applied); then the worker's
resident set (``VmRSS``), the bytes its stores hold in memory (``clingate_store_cache_bytes``) and its
CPU time are read. Each sample is taken in the same quiet state, so what differs between them is what
the work done in between left in memory: the ratio of the last sample to the first is the figure,
:data:`BOUND` at most. Waits are on those conditions, never on time; only a stall (:data:`STALL_S`)
ends a run early.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka import Consumer, Producer

from processors.dbpm import BLOCK
from schemas.dbpm import Candidate, GateDecision, Verdict
from schemas.wire import make_serde
from streams.bench.dbpm_kafka import cpu_seconds
from streams.local.bootstrap import require_bootstrap
from streams.local.paths import output_file, output_folder
from streams.replay.kafka import CommitWatcher, commit_worker_end_offsets
from streams.runtime.kafka_clients import assign_at_ends, produce_waiting, producer_config, reader
from streams.runtime.kafka_config import admin_client
from streams.runtime.settings import get_settings
from streams.testing.dbpm_stream import generate_events
from streams.testing.metrics import scraped_sum
from streams.testing.stats import mib, resident_bytes
from streams.testing.worker import WorkerProcess
from streams.worker.engine import dbpm_engine
from streams.worker.keys import verdict_key
from streams.worker.memory import memory_group
from streams.worker.wire import contract_event
from topics.admin import ensure_topics
from topics.catalog import DBPM_CANDIDATES, DBPM_DECISIONS, DBPM_VERDICTS, build_catalog

#: The largest resident set after the last size over the first that the worker may have.
BOUND = 1.10
#: Candidates produced and not yet decided, at most: a steady backlog of a few of the gate's batches.
WINDOW = 20_000
#: Longest time without a new decision, and for the memory to apply a size's verdicts, before a run
#: stops: beyond the coverage join's wait (300 s by default), after which every held QA candidate is
#: released.
STALL_S = 900.0
#: (first, last) sizes of a full run and of ``--quick``.
SIZES = {"full": (200_000, 600_000), "quick": (20_000, 60_000)}


def live_traffic(tag: str) -> Iterator[tuple[Candidate, Verdict]]:
    """The synthetic stream as live traffic: each candidate (id ``<tag>-<stream id>``, its patient's
    narrative dated at the patient's first event) with the verdict the stream gives it, naming it.

    The stream alternates a gate event and its verdict (:mod:`streams.testing.dbpm_stream`), and it is
    read lazily: a run of any length holds only the candidates in flight.
    """
    events = generate_events(1 << 62)
    patient, dated = "", ""
    for gate in events:
        verdict = next(events)
        if gate["patient_id"] != patient:  # a patient's events are contiguous, its first one dates them
            patient, dated = gate["patient_id"], gate["ts"]
        candidate_id = f"{tag}-{gate['candidate_id']}"
        candidate = Candidate.model_validate({
            **{k: v for k, v in gate.items() if k != "kind"},
            "candidate_id": candidate_id, "document_ts": dated,
        })  # fmt: skip
        judged = Verdict.model_validate({
            **{k: v for k, v in verdict.items() if k != "kind"}, "candidate_id": candidate_id,
        })  # fmt: skip
        yield candidate, judged


@dataclass(frozen=True)
class Sample:
    """The worker after a number of candidates, every one of them decided and every verdict applied."""

    candidates: int
    verdicts: int
    """Verdicts published so far (one per candidate the gate let through)."""
    rss_bytes: int
    store_cache_bytes: float
    """What ``clingate_store_cache_bytes`` said then."""
    cpu_s: float
    """The worker's CPU seconds (user + system) since it started."""


class Feed:
    """The generator and the verifier of the run: candidates out, decisions in, verdicts out.

    Args:
        bootstrap: the broker.
        tag: the run's tag (prefix of its candidate ids).
    """

    def __init__(self, bootstrap: str, tag: str) -> None:
        self._serde = make_serde(None)
        self._engine = dbpm_engine(get_settings())
        self._traffic = live_traffic(tag)
        self._producer = Producer(producer_config(bootstrap, **{
            "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 1_000_000,
        }))  # fmt: skip
        self._decisions: Consumer = reader(bootstrap, "rss")
        assign_at_ends(self._decisions, [DBPM_DECISIONS])
        self._undecided: dict[str, Verdict] = {}
        self.produced = 0
        self.decided = 0
        self.verdicts = 0

    def until(self, candidates: int) -> None:
        """Feed until ``candidates`` candidates are produced and decided (at most :data:`WINDOW` of them
        undecided at a time), the verdict of each one let through published once it is decided; then wait
        until the broker acknowledged every record.

        Raises:
            TimeoutError: no candidate was decided for :data:`STALL_S`.
        """
        progress = time.monotonic()
        while self.decided < candidates:
            while self.produced < candidates and len(self._undecided) < WINDOW:
                candidate, verdict = next(self._traffic)
                produce_waiting(
                    self._producer, DBPM_CANDIDATES, key=candidate.patient_id.encode(),
                    value=self._serde.encode(candidate, topic=DBPM_CANDIDATES),
                )  # fmt: skip
                self._undecided[candidate.candidate_id] = verdict
                self.produced += 1
            self._producer.poll(0)
            messages = self._decisions.consume(num_messages=5_000, timeout=0.5)
            decided = self.decided
            for message in messages:
                if message.error() is None:
                    self._decided(self._serde.decode(message.value(), GateDecision, topic=DBPM_DECISIONS))
            if self.decided > decided:
                progress = time.monotonic()
            elif time.monotonic() - progress > STALL_S:
                raise TimeoutError(
                    f"no decision for {STALL_S:.0f} s: {self.decided:,} of {self.produced:,} candidates "
                    "decided"
                )
        if self._producer.flush(STALL_S):
            raise TimeoutError(f"the broker did not acknowledge every record in {STALL_S:.0f} s")

    def _decided(self, decision: GateDecision) -> None:
        verdict = self._undecided.pop(decision.candidate_id, None)
        if verdict is None:  # another run's, or a candidate seen decided before
            return
        self.decided += 1
        if decision.decision == BLOCK:
            return
        key = verdict_key(self._engine, contract_event(verdict))  # type: ignore[arg-type]
        produce_waiting(
            self._producer, DBPM_VERDICTS, key=key, value=self._serde.encode(verdict, topic=DBPM_VERDICTS)
        )
        self.verdicts += 1

    def close(self) -> None:
        """Close the decisions reader."""
        self._decisions.close()


def rss_run(bootstrap: str, workdir: Path, first: int, last: int, say: Callable[[str], None]) -> list[Sample]:
    """One worker fed ``last`` candidates, sampled after every ``first`` of them and after the last
    (module docstring)."""
    ensure_topics(admin_client(bootstrap), build_catalog(get_settings().topic_partitions))
    tag = uuid.uuid4().hex[:8]
    app_id = f"clingate-rssbench-{tag}"
    commit_worker_end_offsets(bootstrap, app_id)
    workdir.mkdir(parents=True, exist_ok=True)
    worker = WorkerProcess(bootstrap, app_id, workdir / app_id, {})
    feed = Feed(bootstrap, tag)
    samples: list[Sample] = []
    try:
        worker.start()
        assert worker.pid is not None
        with CommitWatcher(bootstrap, memory_group(app_id)) as memory:
            for size in [*range(first, last, first), last]:
                feed.until(size)
                memory.wait(DBPM_VERDICTS, STALL_S)
                sample = Sample(
                    size, feed.verdicts, resident_bytes(worker.pid),
                    scraped_sum(worker.web_port, "clingate_store_cache_bytes"), cpu_seconds([worker.pid]),
                )  # fmt: skip
                say(_line(sample, samples[-1] if samples else None))
                samples.append(sample)
    finally:
        feed.close()
        worker.stop()
    return samples


def _line(sample: Sample, previous: Sample | None) -> str:
    """A sample, and the worker's CPU per candidate since the previous one (since its start: the first)."""
    cpu_s, candidates = sample.cpu_s, sample.candidates
    if previous is not None:
        cpu_s, candidates = cpu_s - previous.cpu_s, candidates - previous.candidates
    return (
        f"after {sample.candidates:,} candidates ({sample.verdicts:,} verdicts): "
        f"RSS {mib(sample.rss_bytes)}, store caches {mib(sample.store_cache_bytes)}, "
        f"worker CPU {cpu_s / candidates * 1e6:,.0f} us per candidate"
    )


def rss(
    quick: Annotated[
        bool, typer.Option("--quick", help="20,000 and 60,000 candidates: a minute or two.")
    ] = False,
    first: Annotated[
        int | None, typer.Option(min=1, help="Candidates at the first sample, and between samples.")
    ] = None,
    last: Annotated[int | None, typer.Option(min=1, help="Candidates at the last sample.")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", callback=output_file, help="Also write the samples as JSON.")
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(callback=output_folder, help="Worker data and log (default: temporary).")
    ] = None,
) -> None:
    """A worker's resident memory after --first and after --last candidates (200,000 and 600,000).

    Needs a scratch broker (KAFKA_BOOTSTRAP_SERVERS or `clingate broker start`); starts its own worker.
    Exit status 1 if the last sample's RSS exceeds the first's by more than 10%.
    """
    default_first, default_last = SIZES["quick" if quick else "full"]
    first, last = first or default_first, last or default_last
    if last < first:
        raise typer.BadParameter(f"--last {last:,} is below --first {first:,}", param_hint="'--last'")
    bootstrap = require_bootstrap(get_settings())
    with tempfile.TemporaryDirectory(prefix="clingate-rssbench-") as scratch:
        try:
            samples = rss_run(bootstrap, workdir or Path(scratch), first, last, typer.echo)
        except (TimeoutError, RuntimeError) as error:
            typer.echo(f"clingate bench rss: {error}", err=True)
            raise typer.Exit(1) from error
    ratio = samples[-1].rss_bytes / samples[0].rss_bytes
    verdict = "within" if ratio <= BOUND else "ABOVE"
    typer.echo(
        f"RSS after {samples[-1].candidates:,} / after {samples[0].candidates:,} candidates: {ratio:.3f} "
        f"({verdict} the bound of {BOUND:.2f})"
    )
    if json_out is not None:
        figures = {"samples": [asdict(s) for s in samples], "ratio": ratio}
        json_out.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    if ratio > BOUND:
        raise typer.Exit(1)
