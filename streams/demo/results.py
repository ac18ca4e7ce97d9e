"""What the demo's steps found, as the summary and report.html show it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import cast

from processors.dbpm.measurement import PopulationReport, SelectivityCounts
from streams.demo.model import ProbeCall
from streams.demo.tap import Flow

State = dict[str, object]
"""The DBPM memory in the replay contract's state format (:meth:`processors.dbpm.DBPMEngine.snapshot`)."""


@dataclass(frozen=True)
class MemoryPoint:
    """The memory at one event time, as the report charts it."""

    time: float
    blocklist: dict[str, dict[str, tuple[float, int]]]
    """Per task, the blocklist's patterns: signature -> (severity effective at ``time``, count)."""
    whitelist: dict[str, int]
    """Per task, the whitelist signatures held."""

    @classmethod
    def of(cls, time: float, state: State) -> MemoryPoint:
        """The point of a state document taken at event time ``time``."""
        blocklist = cast(dict[str, list[dict[str, object]]], state["blocklist"])
        whitelist = cast(dict[str, list[object]], state["whitelist"])
        return cls(
            time,
            {
                task: {str(p["signature"]): (cast(float, p["severity"]), cast(int, p["count"])) for p in ps}
                for task, ps in blocklist.items()
            },
            {task: len(entries) for task, entries in whitelist.items()},
        )


@dataclass(frozen=True)
class TopicRow:
    """A catalog topic and what step 1 did with it."""

    name: str
    partitions: int
    outcome: str
    """``CREATED``, ``EXISTS``, ... (:class:`topics.admin.TopicStatus`)."""


@dataclass(frozen=True)
class RoundTrip:
    """One event of a schema produced to its topic and read back."""

    schema: str
    topic: str
    size: int
    ok: bool


@dataclass(frozen=True)
class BulkFigures:
    """The bulk phase: its size, throughput and latency, and how it differs from the in-process engine.

    Latency per patient runs from its narrative's production to the last of its candidates' outputs
    consumed (decision, or verdict when let through); per candidate, from its production to its
    decision consumed. Throughput is per second of the phase.
    """

    patients: int
    candidates: int
    span: float
    blocks: int
    patients_per_s: float
    candidates_per_s: float
    patient_p50: float
    patient_p99: float
    candidate_p50: float
    candidate_p99: float
    differing: Counter[tuple[str | None, str]]
    """(in-process decision, the gate's) -> candidates, for the decisions that differ."""
    same_state: bool
    """Whether the final memory equals the in-process engine's."""


@dataclass(frozen=True)
class DbpmResults:
    """Step 4: the loop's decisions, memory and selectivity, and how they compare."""

    patients: int
    narratives: int
    gates: int
    """Candidates decided."""
    same: bool
    """The lockstep slice's decisions equal the in-process engine's (a check)."""
    per_task: Counter[tuple[str, str]]
    """(task, decision) -> candidates."""
    population: PopulationReport
    selectivity: SelectivityCounts
    snapshots: list[MemoryPoint]
    """The in-process memory along the stream, in event-time order (the report's charts;
    :func:`streams.demo.plan.memory_over_time`)."""
    differing: int
    """Lockstep decisions that differ from the in-process engine's."""
    lockstep: int
    lockstep_gates: int
    same_state: bool
    """The memory at the end of the lockstep slice equals the in-process engine's."""
    memory_differences: list[str]
    """How the lockstep slice's memory differs from the in-process engine's, one line per entry
    (measured, not checked: :data:`streams.demo.checks.MEMORY_DIFFERS`)."""
    verdicts: int
    lockstep_s: float
    blocks: int
    let_through: int
    failed_verifications: int
    failed_narratives: int
    bulk: BulkFigures | None
    """None: no bulk phase."""


@dataclass(frozen=True)
class PatientRow:
    """A patient's last assessment, as the clinical tables show it."""

    patient: str
    age: int | None
    severity: str
    drugs: list[str]
    light: str
    shadow: str
    sources: list[str]


@dataclass(frozen=True)
class GateRunRow:
    """A golden case's run through the output gates as the worker published it (step 5)."""

    case: str
    citations: list[dict[str, int]]
    """Per revision: citations checked and each outcome (verified, ellipsis_trimmed, ...)."""
    transforms: int
    """Header substitutions of revision 0's lint."""
    imperative_warnings: int
    routes: list[str]
    """Per revision: the route, with the overrides that fired."""
    final_light: str
    scda_passed: bool
    flagged: list[str]
    """The tracked items of the deliverable's audit that WARN or ESCALATE (``T-002 WARN``)."""

    def json(self) -> dict[str, object]:
        return {
            "revisions": len(self.citations),
            "citations": self.citations,
            "transforms": self.transforms,
            "imperative_warnings": self.imperative_warnings,
            "routes": self.routes,
            "final_light": self.final_light,
            "scda_passed": self.scda_passed,
            "tracked_flagged": self.flagged,
        }


@dataclass(frozen=True)
class AgentRow:
    """One question to the clinician's agent as its worker answered it (step 7)."""

    question: str
    path: str
    llm_calls: int
    budget: int
    tools: list[str]
    """Each execution: ``tool: outcome``."""
    answer: str
    proposals: list[str]
    lights: list[str]
    """The traffic light the clinical gates give each proposed prescription's patient with the drug."""
    scripted: bool
    """The turn took its scripted path and gave its scripted answer."""
    replayed: bool
    """The turn replays exactly from the trace topic."""


@dataclass(frozen=True)
class ConsolePage:
    """One console page as the demo's browser saw it (step 9)."""

    name: str
    path: str
    """Where the browser ended (after any redirect)."""
    status: int
    """The HTTP status of the page's last navigation."""
    shows: bool
    """It shows what it must."""
    screenshot: str
    """Its screenshot's file name, next to report.html."""


@dataclass(frozen=True)
class WeekLights:
    """The traffic lights at the end of a simulated week, and how many patients' light changed in it."""

    week: int
    lights: Counter[str]
    changed: int


@dataclass(frozen=True)
class DispositionRow:
    """The arbiter's dispositions of one example's copies (decision, rule and issues of the first)."""

    case: str
    documents: int
    decision: str
    rule: str
    issues: int


@dataclass
class DeadLetterCounts:
    """Records on every dead-letter topic: before the run, and added during it."""

    base: dict[str, int] = field(default_factory=dict)
    added: dict[str, int] = field(default_factory=dict)


@dataclass
class LoopRun:
    """What the DBPM feeder observed: the lockstep slice's memory, the bulk phase's timing."""

    lockstep_state: State | None = None
    """The memory read from its changelog once the lockstep slice was applied (None: no slice)."""
    lockstep_s: float = 0.0
    """Seconds the lockstep slice took (first narrative produced to last candidate done)."""
    bulk_started: float | None = None
    """Wall clock (``time.time``) when the bulk phase's narratives were produced (None: no bulk phase)."""
    bulk_finished: float | None = None
    """Wall clock when every bulk candidate was done (decided and verified, or dead-lettered)."""


@dataclass
class DeadLettered:
    """The loop's dead letters as the tap sees them: verifications and narratives whose LLM work failed."""

    verifications: Flow = field(default_factory=lambda: Flow("to-verify dead letters"))
    """Ids: candidate ids of ``clingate.dbpm.to-verify.dlq`` records."""
    narratives: Flow = field(default_factory=lambda: Flow("narrative dead letters"))
    """Ids: patient ids of ``clingate.dbpm.narratives.dlq`` records."""


@dataclass
class Results:
    """Everything the summary and the report show."""

    topics: list[TopicRow] = field(default_factory=list)
    round_trips: list[RoundTrip] = field(default_factory=list)
    dbpm: DbpmResults | None = None
    golden: list[PatientRow] = field(default_factory=list)
    lights: Counter[str] = field(default_factory=Counter)
    dispositions: list[DispositionRow] = field(default_factory=list)
    dead_letters: DeadLetterCounts = field(default_factory=DeadLetterCounts)
    timings: dict[str, float] = field(default_factory=dict)
    flows: dict[str, Flow] = field(default_factory=dict)
    lights_by_week: list[WeekLights] = field(default_factory=list)
    red_patients: list[PatientRow] = field(default_factory=list)
    clinical_same: bool = False
    gate_runs: list[GateRunRow] = field(default_factory=list)
    agent: list[AgentRow] = field(default_factory=list)
    console_url: str = ""
    console_pages: list[ConsolePage] = field(default_factory=list)
    loop: LoopRun | None = None
    dead: DeadLettered | None = None
    model_calls: list[ProbeCall] = field(default_factory=list)
    not_run: dict[str, str] = field(default_factory=dict)
    """What a step left out because the run's options removed its inputs, and why; the step checks the
    rest (a check of nothing passes, and this says so)."""
    checks: dict[str, bool] = field(default_factory=dict)
    """Every check by name, passed or not (``--json``)."""
    failed: list[str] = field(default_factory=list)
    """Why the checks that failed failed (the command then exits non-zero)."""

    def check(self, name: str, passed: bool, failure: str) -> None:
        """Record the check ``name``; ``failure`` says what is wrong when it did not pass."""
        self.checks[name] = self.checks.get(name, True) and passed
        if not passed:
            self.failed.append(failure)

    @property
    def loop_results(self) -> DbpmResults:
        """The DBPM results (step 4 ran: the summary and report are written only after every step)."""
        if self.dbpm is None:
            raise RuntimeError("the DBPM step has not run")
        return self.dbpm
