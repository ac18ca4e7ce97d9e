"""The poison suite's report: what was read back, compared with the plan (checks 1, 2 and 4 of
:mod:`streams.testing.poison`) and counted per fed topic (:class:`TopicReport`, :class:`PoisonReport`);
each dead letter checked against its bad record (:func:`check_letter`).
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from schemas.base import AvroModel
from schemas.common import DeadLetter
from schemas.console import ConsoleRequestOutcome
from schemas.dbpm import Candidate, Verdict
from schemas.serde import SchemaDecodeError, Serde
from schemas.wire import make_serde
from streams.runtime.settings import get_settings
from streams.testing.poison.plan import Plan
from streams.testing.poison.records import (
    RUNTIMES,
    SEMANTIC_HEADERS,
    UNFED,
    OutputIdentity,
    Record,
    expected_error,
)
from streams.testing.poison.stages import Read, Stages
from topics.catalog import (
    AGENT_REQUESTS,
    CLINICAL_ASSESSMENTS,
    CLINICAL_AUDIT_REPORTS,
    CLINICAL_DELIVERABLES,
    CLINICAL_DRAFTS,
    CLINICAL_EVIDENCE,
    CLINICAL_EVIDENCE_REQUESTS,
    CLINICAL_EVIDENCE_REVIEWS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_QUERY_DECISIONS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_SAFETY_AUDITS,
    CONSOLE_REQUEST_OUTCOMES,
    CONSOLE_REQUESTS,
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_NARRATIVES,
    DBPM_PROPAGATIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
    FHIR_UPDATES,
    dlq_name,
)

CLOCKED: dict[str, tuple[type[AvroModel], str]] = {
    DBPM_CANDIDATES: (Candidate, "ts"),
    DBPM_VERDICTS: (Verdict, "ts"),
    CONSOLE_REQUEST_OUTCOMES: (ConsoleRequestOutcome, "event_time"),
}
"""Outputs stamped with their producer's clock, and the field that holds it: the generator's candidates
(when it extracted them), the verifier's verdicts (when it judged them) and the request runtime's outcomes
(when it checked the request). Two runs never agree on those times."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def unclocked(identity: OutputIdentity, serde: Serde) -> OutputIdentity:
    """``identity`` with the producer's clock set aside (:data:`CLOCKED`): what a record is compared by.
    A value that does not decode is compared as it is."""
    topic, key, value, headers = identity
    if topic not in CLOCKED:
        return identity
    model, clock = CLOCKED[topic]
    try:
        decoded = serde.decode(value, model, topic=topic)
    except Exception:  # not one of the runtimes' records: compared byte for byte
        return identity
    return topic, key, serde.encode(decoded.model_copy(update={clock: _EPOCH}), topic=topic), headers


@dataclass
class TopicReport:
    """The counts of one fed topic."""

    topic: str
    runtime: str
    good: int = 0
    control: int = 0
    """Good records without outputs of their own (watermark ticks)."""
    noisy: int = 0
    """Good records carrying garbage in the clingate headers their topic ignores."""
    outputs_expected: int = 0
    outputs_matched: int = 0
    outputs_missing: int = 0
    outputs_unexpected: int = 0
    """Output records that are neither expected nor a copy of an expected one."""
    duplicates: int = 0
    """Output records and dead letters beyond the first of each."""
    misordered: int = 0
    """Keys whose outputs came in another order than the reference's (entity-keyed outputs)."""
    bad: int = 0
    bad_kinds: Counter[str] = field(default_factory=Counter)
    dead_lettered: int = 0
    """Bad records with exactly one dead letter, and a right one (content and error type)."""
    dead_letters_missing: int = 0
    dead_letters_wrong: int = 0
    truncated: int = 0
    """Bad records whose dead letter was cut to fit (and describes the cut fields correctly)."""
    good_dead_lettered: int = 0
    lag: int = 0
    """Records of the topic its consumer group had not committed at the end."""
    state_equal: bool | None = None
    """The memory rebuilt from the workers' changelog equals the in-process engine's (DBPM memory inputs)."""
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every check of this topic holds."""
        return (
            self.outputs_matched == self.outputs_expected
            and not self.outputs_missing
            and not self.outputs_unexpected
            and not self.duplicates
            and not self.misordered
            and self.dead_lettered == self.bad
            and not self.dead_letters_missing
            and not self.dead_letters_wrong
            and not self.good_dead_lettered
            and not self.lag
            and self.state_equal is not False
        )


@dataclass
class PoisonReport:
    """The outcome of one run."""

    seed: int
    tag: str
    topics: dict[str, TopicReport]
    processes: dict[str, int | None]
    """Exit code of every process at the end of the run (None: still running, as it must be)."""
    pipeline_dead_letters: list[str]
    """Dead letters of records the runtimes produced in this run (a runtime refusing another's output)."""
    records: int
    megabytes: float
    feed_s: float
    wall_s: float
    stalled: list[str]

    @property
    def passed(self) -> bool:
        """Every check holds."""
        return (
            all(t.passed for t in self.topics.values())
            and all(c is None for c in self.processes.values())
            and not self.pipeline_dead_letters
            and not self.stalled
        )

    def render(self) -> str:
        """The counts per topic, the process checks and the verdict, as text."""
        header = (
            f"{'topic':<31} {'runtime':<17} {'good':>6} {'out exp':>7} {'matched':>7} {'miss':>4} "
            f"{'extra':>5} {'bad':>6} {'dlq ok':>6} {'wrong':>5} {'cut':>3} {'dup':>3} {'lag':>4}  memory"
        )
        lines = [
            f"poison run {self.tag} (seed {self.seed}): {self.records:,} records, {self.megabytes:,.1f} MB, "
            f"fed and settled in {self.feed_s:.1f} s; wall {self.wall_s:.1f} s",
            header,
            "-" * len(header),
        ]
        for t in self.topics.values():
            state = {None: "-", True: "equal", False: "DIFFERS"}[t.state_equal]
            wrong = t.dead_letters_wrong + t.dead_letters_missing + t.good_dead_lettered
            lines.append(
                f"{t.topic:<31} {t.runtime:<17} {t.good:>6} {t.outputs_expected:>7} {t.outputs_matched:>7} "
                f"{t.outputs_missing:>4} {t.outputs_unexpected + t.misordered:>5} {t.bad:>6} "
                f"{t.dead_lettered:>6} {wrong:>5} {t.truncated:>3} {t.duplicates:>3} {t.lag:>4}  {state}"
            )
        total: Counter[str] = Counter()
        for t in self.topics.values():
            total.update(t.bad_kinds)
        lines.append("bad records by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(total.items())))
        noisy = sum(t.noisy for t in self.topics.values())
        control = sum(t.control for t in self.topics.values())
        lines.append(
            f"good records with garbage in ignored clingate headers: {noisy}; watermark ticks: {control}"
        )
        lines += [f"not fed: {name} ({reason})" for name, reason in UNFED.items()]
        lines.append(
            "processes at the end: "
            + ", ".join(
                f"{n} {'running' if c is None else f'EXITED ({c})'}" for n, c in self.processes.items()
            )
        )
        lines.append(
            f"dead letters of the runtimes' own outputs: "
            f"{len(self.pipeline_dead_letters)}; stalled waits: {len(self.stalled)}"
        )
        lines += [f"  ! {problem}" for problem in [*self.stalled, *self.pipeline_dead_letters[:5]]]
        lines += [f"  ! {t.topic}: {problem}" for t in self.topics.values() for problem in t.problems[:5]]
        lines.append(f"RESULT: {'PASS' if self.passed else 'FAIL'}")
        return "\n".join(lines)


def check_letter(record: Record, letter: DeadLetter) -> str | None:
    """Why ``letter`` is not the right dead letter of bad ``record`` (None: it is).

    Right: the expected error type (:func:`expected_error`) with a reason; the key, value and headers
    byte for byte, or, for each field the ``truncations`` name, its prefix, with the original's size and
    SHA-256.
    """
    if not letter.error or not letter.error_type:
        return "no reason"
    if letter.error_type != (wanted := expected_error(record)):
        return f"error type {letter.error_type}, expected {wanted} ({letter.error[:160]!r})"
    original: dict[str, bytes | None] = {"key": record.key, "value": record.value}
    original |= {f"headers[{i}].value": v for i, (_, v) in enumerate(record.headers)}
    for cut in letter.truncations:
        data = original.get(cut.field) or b""
        if (cut.size, cut.sha256) != (len(data), hashlib.sha256(data).hexdigest()):
            return f"the truncation of {cut.field} does not describe the original"
    cuts = {cut.field for cut in letter.truncations}

    def same(name: str, got: bytes | None) -> bool:
        want = original[name]
        return got == want or (name in cuts and want is not None and got == want[: len(got or b"")])

    if not same("key", letter.key) or not same("value", letter.value):
        return "key or value differ from the original"
    if "headers" in cuts:
        return None
    if [h.key for h in letter.headers] != [name for name, _ in record.headers]:
        return "header names differ from the original"
    for i, header in enumerate(letter.headers):
        if not same(f"headers[{i}].value", header.value):
            return f"header {header.key!r}: {header.value!r:.60} instead of {record.headers[i][1]!r:.60}"
    return None


OUTPUTS = (
    DBPM_CANDIDATES,
    DBPM_DECISIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DBPM_VERIFIED,
    CLINICAL_ASSESSMENTS,
    CLINICAL_SAFETY_AUDITS,
    CLINICAL_GATED_DRAFTS,
    CLINICAL_REVISION_ROUTES,
    CLINICAL_EVIDENCE_REQUESTS,
    DOCS_DISPOSITIONS,
    DOCS_REVIEW_PACKETS,
    DOCS_GROUND_TRUTH,
    CONSOLE_REQUEST_OUTCOMES,
    AGENT_REQUESTS,
    CLINICAL_QUERY_DECISIONS,
    CLINICAL_EVIDENCE_REVIEWS,
)
"""The topics the runtimes write the good records' outputs to."""

ORDERED_OUTPUTS = frozenset(
    {
        DBPM_DECISIONS,
        CLINICAL_ASSESSMENTS,
        CLINICAL_SAFETY_AUDITS,
        CLINICAL_GATED_DRAFTS,
        CLINICAL_REVISION_ROUTES,
        CLINICAL_EVIDENCE_REQUESTS,
        DOCS_DISPOSITIONS,
        DOCS_REVIEW_PACKETS,
    }
)
"""Outputs keyed by the entity whose inputs are one key: their order per key is the reference's too."""

_OUTPUT_SOURCE = {
    DBPM_DECISIONS: DBPM_CANDIDATES,
    DBPM_TO_VERIFY: DBPM_CANDIDATES,
    DBPM_CANDIDATES: DBPM_NARRATIVES,
    DBPM_VERDICTS: DBPM_TO_VERIFY,
    DBPM_VERIFIED: DBPM_TO_VERIFY,
    CLINICAL_ASSESSMENTS: FHIR_UPDATES,
    CLINICAL_SAFETY_AUDITS: CLINICAL_DELIVERABLES,
    CLINICAL_GATED_DRAFTS: CLINICAL_DRAFTS,
    CLINICAL_REVISION_ROUTES: CLINICAL_AUDIT_REPORTS,
    CLINICAL_EVIDENCE_REQUESTS: CLINICAL_EVIDENCE,
    DOCS_DISPOSITIONS: DOCS_CLASSIFICATIONS,
    DOCS_REVIEW_PACKETS: DOCS_CLASSIFICATIONS,
    DOCS_GROUND_TRUTH: DOCS_REVIEWS,
    **dict.fromkeys(
        (CONSOLE_REQUEST_OUTCOMES, AGENT_REQUESTS, CLINICAL_QUERY_DECISIONS, CLINICAL_EVIDENCE_REVIEWS),
        CONSOLE_REQUESTS,
    ),
}
"""The input topic an unexpected output record is counted against."""


def _ours(plan: Plan, read: Read, serde: Serde) -> bool:
    """Whether an output record read back is one of the outputs the good records must produce."""
    key = (read.key or b"").decode("utf-8", "replace")
    if read.topic in (DBPM_DECISIONS, DBPM_TO_VERIFY):
        return key.startswith(plan.prefix("g-"))  # the gate's, for the fed candidates
    if read.topic == DBPM_CANDIDATES:
        return key.startswith(plan.prefix("n"))  # the generator's, for the fed narratives
    if read.topic in (DBPM_VERDICTS, DBPM_VERIFIED):  # the verifier's, for the fed to-verify records
        try:
            model = serde.decode(
                read.value or b"", Verdict if read.topic == DBPM_VERDICTS else Candidate, topic=read.topic
            )
        except SchemaDecodeError:
            return False
        return (model.candidate_id or "").startswith(plan.prefix("tv-"))
    if read.topic in (
        CLINICAL_ASSESSMENTS,
        CLINICAL_SAFETY_AUDITS,
        CLINICAL_GATED_DRAFTS,
        CLINICAL_REVISION_ROUTES,
        CLINICAL_EVIDENCE_REQUESTS,
    ):
        return key.startswith(plan.prefix("pt-"))
    if read.topic in (
        CONSOLE_REQUEST_OUTCOMES,
        AGENT_REQUESTS,
        CLINICAL_QUERY_DECISIONS,
        CLINICAL_EVIDENCE_REVIEWS,
    ):
        return key.startswith(plan.prefix("req-"))
    return key.startswith(plan.prefix("doc-"))


def build_report(
    plan: Plan,
    stages: Stages,
    reads: list[Read],
    memory: dict[str, object],
    lags: dict[str, int],
    processes: dict[str, int | None],
    seed: int,
    feed_s: float,
    wall_s: float,
) -> PoisonReport:
    """Compare what was read back with the plan (:mod:`streams.testing.poison`, checks 1, 2 and 4)."""
    serde = make_serde(get_settings().schema_registry_url)
    topics = {topic: TopicReport(topic, runtime) for topic, runtime in RUNTIMES.items()}
    fed: dict[tuple[str, int, int], Record] = {}
    for topic, records in plan.feeds.items():
        t = topics[topic]
        for record, (partition, offset) in zip(records, stages.coordinates.get(topic, ()), strict=False):
            fed[(topic, partition, offset)] = record
            if record.kind is None:
                t.good += 1
                t.control += record.control
                t.noisy += any(name != SEMANTIC_HEADERS.get(topic) for name, _ in record.headers)
            else:
                t.bad += 1
                t.bad_kinds[record.kind.value] += 1
        t.lag = lags.get(topic, 0)
    expected = Counter(unclocked(e.identity, serde) for e in plan.expected)
    by_identity = {unclocked(e.identity, serde): e for e in plan.expected}
    for e in plan.expected:
        topics[e.source].outputs_expected += 1
    got: Counter[OutputIdentity] = Counter()
    sequences: dict[tuple[str, bytes], list[bytes]] = defaultdict(list)
    dlq_topics = {dlq_name(t) for t in RUNTIMES}
    letters: dict[tuple[str, int, int], list[DeadLetter]] = defaultdict(list)
    pipeline: list[str] = []
    tag = plan.tag.encode()
    for read in sorted(reads, key=lambda r: (r.topic, r.partition, r.offset)):
        if read.topic in dlq_topics:
            letter = serde.decode(read.value or b"", DeadLetter, topic=read.topic)
            coordinates = (letter.topic, letter.partition, letter.offset)
            if coordinates in fed:
                letters[coordinates].append(letter)
            elif tag in (letter.key or b"") or tag in (letter.value or b""):
                pipeline.append(
                    f"{letter.topic}[{letter.partition}]@{letter.offset}: {letter.error_type}: "
                    f"{letter.error[:160]}"
                )
        elif _ours(plan, read, serde):
            got[unclocked((read.topic, read.key or b"", read.value or b"", read.headers), serde)] += 1
            sequences[(read.topic, read.key or b"")].append(read.value or b"")
    for identity, count in got.items():
        wanted = expected.get(identity, 0)
        t = topics[by_identity[identity].source if wanted else _OUTPUT_SOURCE[identity[0]]]
        t.outputs_matched += min(count, wanted)
        if wanted and count > wanted:
            t.duplicates += count - wanted
            t.problems.append(f"{identity[0]} record of {by_identity[identity].ident} {count} times")
        elif not wanted:
            t.outputs_unexpected += count
            t.problems.append(f"unexpected {identity[0]} record, key {identity[1][:60]!r}")
    for identity, wanted in expected.items():
        if got.get(identity, 0) < wanted:
            e = by_identity[identity]
            topics[e.source].outputs_missing += wanted - got.get(identity, 0)
            topics[e.source].problems.append(f"missing {e.topic} record of {e.ident}")
    reference: dict[tuple[str, bytes], list[bytes]] = defaultdict(list)
    for e in plan.expected:
        if e.topic in ORDERED_OUTPUTS:
            reference[(e.topic, e.key)].append(e.value)
    for (topic, key), values in reference.items():
        if sequences.get((topic, key), []) != values and Counter(sequences.get((topic, key), [])) == Counter(
            values
        ):
            source = by_identity[(topic, key, values[0], ())].source
            topics[source].misordered += 1
            topics[source].problems.append(f"{topic} records of {key[:60]!r} in another order")
    for coordinates, record in fed.items():
        t = topics[record.topic]
        found = letters.get(coordinates, [])
        if record.kind is None:
            if found:
                t.good_dead_lettered += 1
                t.problems.append(
                    f"good record {record.ident} dead-lettered: {found[0].error_type}: {found[0].error[:160]}"
                )
            continue
        if not found:
            t.dead_letters_missing += 1
            t.problems.append(f"{record.kind} record at {coordinates[1:]} not dead-lettered")
            continue
        if len(found) > 1:
            t.duplicates += len(found) - 1
            t.problems.append(f"{record.kind} record at {coordinates[1:]} dead-lettered {len(found)} times")
        wrong = check_letter(record, found[0])
        if wrong is None:
            t.dead_lettered += 1
            t.truncated += bool(found[0].truncations)
        else:
            t.dead_letters_wrong += 1
            t.problems.append(f"{record.kind} record at {coordinates[1:]}: {wrong}")
    equal = memory == plan.memory
    for topic in (DBPM_VERDICTS, DBPM_PROPAGATIONS):
        topics[topic].state_equal = equal
    if not equal:
        topics[DBPM_VERDICTS].problems.append("the memory differs from the in-process engine's")
    return PoisonReport(
        seed=seed,
        tag=plan.tag,
        topics=topics,
        processes=processes,
        pipeline_dead_letters=pipeline,
        records=len(fed),
        megabytes=sum(r.size for r in fed.values()) / 1e6,
        feed_s=feed_s,
        wall_s=wall_s,
        stalled=stages.stalled,
    )
