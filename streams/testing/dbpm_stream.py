"""Synthetic DBPM replay streams with the paper's proportions, for the benchmarks, the demo and the tests.

The generator writes the replay-stream contract (one JSON object per line: ``gate`` events asking for
a decision, ``verdict`` events teaching the memory) for a synthetic cohort whose shape follows the
paper's production run, so that the memory sees the same kind of traffic it would in deployment:

* **Candidates per patient** (Table 5, corpus totals / 167,034 patients): NER 4,471,110 -> ~27,
  RE 4,915,334 -> ~29, QA 1,035,199 -> ~6. Drawn uniformly from 20-34, 22-36 and 4-8.
* **RE rejections** (§6.1, Table 5): 785,797 of 4,915,334 relations, ~16%, are verifier rejections,
  spread over an open vocabulary of relation labels (modal prefixes, trailing prepositions, numeric
  debris, case and spacing variants), so no verifier-fed RE signature recurs often: the diffuse
  stream that left the paper's RE channel empty. A further ~2% are soft downgrades.
* **Ontology violations** (§4.7, §6.2): ~3% of relations carry one of the six type-triples the paper
  saw recur (tests-associated_with-diagnosis first), judged ``hard_fail`` by source ``rule_based``:
  the concentrated stream that does populate the RE channel.
* **NER rejections** concentrate on a few strings (§6.1: the NER channel populates): ~1.5% of
  entities are rejected (``hard_fail``), all drawn from ten non-entity strings with Zipf weights.
  Real entities are never hard-failed: a hard fail preempts every later relation on that string
  (§4.4), and the paper's verifier rejected almost no real entities (Table 7: 33 NER verifier
  rejections in 167,034 patients). ~0.5% of real entities get a ``soft_downgrade``, scattered.
* **QA fails** (Table 10): 3,868 of 35,003 pairs, ~11%. As in §6.3 a patient lacking the NER bucket of
  the asked category fails more often (16% against 5% when covered), so the NER-coverage gate has a
  real signal to find (expected path lift ~1.5, Section 6.3 reports 1.52-1.84). The error class of a
  failing answer is what :func:`processors.dbpm.qa_classifier.classify_qa_error` says about it against
  the patient's synthetic narrative (never emitted), so stream and classifier agree by construction.
  QA gate events carry the patient's accepted NER categories and the difficulty of Eq. (8).
* **The other QA signals** (§4.8, §6.3: what the first four QA gate sources read), off by default so
  the default stream is unchanged, both drawn from a generator of the patient's own (seeded by the
  stream seed and the patient id), so they draw nothing from the stream's generator:
  - ``re_fail_dispersion`` gives each patient an extraction difficulty: its RE verifier rejection
    rate is ``re_fail_rate`` times a log-normal factor of median 1 and this log-scale spread (capped
    so the other outcomes keep their rates). Upstream rejections then vary from patient to patient as
    the paper's did (§6.3: difficulty medians 0.179 / 0.174, third quartiles 0.290 / 0.294 for PASS /
    FAIL pairs); without it every patient draws from one rate and difficulty barely varies (median
    0.16, third quartile 0.20, 1.5% of pairs above the 0.30 threshold). QA verdicts do not depend on
    it: the cross-task orthogonality the paper measured.
  - ``qa_parse_failure_rate`` is the share of QA pairs whose verifier output did not parse; such a
    pair's gate event carries ``parse_failed: true`` (the flag is otherwise absent, unset as §6.3
    found it), independently of the verdict (A.2: the ensemble then decides it). The verifier of
    this stream is schema-constrained like clingate's, so the default is 0, which is also what the
    paper observed (no flag on 1,283 pairs).
* **Time**: event time starts 2026-05-04T00:00:00Z (the paper run's first day); patients arrive one
  after another at ``patients_per_day`` (default 500, so a 1M-event stream spans ~16 days, beyond
  every half-life); within a patient the NER, RE and QA stages take the Table 5 stage means (24.6 s,
  14.7 s, 43.1 s), compressed when patients arrive faster than that. Each gate event is followed
  by its verdict; timestamps never decrease.

Everything else is drawn from one ``random.Random(seed)``, patient by patient, so a stream is a pure
function of (``n_events``, :class:`StreamShape`) and a shorter stream is a prefix of a longer one.
The vocabulary (:mod:`streams.testing.dbpm_vocabulary`) is our own; the six violating type-triples are
the paper's (§6.2).

**Patient attributes** (:func:`generate_patients`, for the stratified cohort of §5.1): the document
length is the length of the patient's synthetic narrative, so it grows with the entities the patient
has, as a case report's does. Age and gender are not in the events (adding them would change every
existing event's bytes) and are not drawn from the stream's generator (that would change every later
draw): they come from a generator of their own seeded by the stream seed and the patient id, so they
are a pure function of the two. Their distribution follows the skew the paper reports for
PMC-Patients (§5.1: most patients 40-64, the 18-39 female bucket next, a few without an age or a
recorded gender).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from processors.dbpm.cohort import PatientAttributes
from processors.dbpm.extraction import QA_TEMPLATES
from processors.dbpm.qa_classifier import classify_qa_error
from streams.testing.dbpm_vocabulary import (
    ABSTENTION,
    ADMISSIBLE,
    COVERAGE,
    HALLUCINATIONS,
    JUNK_ENTITIES,
    JUNK_WEIGHTS,
    LABEL_PREFIXES,
    LABEL_STEMS,
    LABEL_SUFFIXES,
    MODIFIERS,
    POOL_SIZE,
    TERMS,
    VIOLATION_WEIGHTS,
    VIOLATIONS,
)

StreamEvent = dict[str, Any]
"""One event of the replay-stream contract (a JSON object: ``kind``, ``ts``, ``task``, ``payload``, ...)."""

STREAM_START = datetime(2026, 5, 4, tzinfo=UTC)
PATIENTS_PER_DAY = 500.0

STAGE_SECONDS: dict[str, float] = {"ner": 24.6, "re": 14.7, "qa": 43.1}
"""Per-patient stage means of Table 5, in seconds."""


@dataclass(frozen=True, slots=True)
class StreamShape:
    """The knobs of the synthetic stream; the defaults are the paper's proportions (module docstring)."""

    seed: int = 0
    start: datetime = STREAM_START
    patients_per_day: float = PATIENTS_PER_DAY
    ner_per_patient: tuple[int, int] = (20, 34)
    re_per_patient: tuple[int, int] = (22, 36)
    qa_per_patient: tuple[int, int] = (4, 8)
    ner_fail_rate: float = 0.015
    ner_soft_rate: float = 0.005
    re_fail_rate: float = 0.16
    re_soft_rate: float = 0.02
    re_ontology_rate: float = 0.03
    qa_fail_rate_covered: float = 0.05
    qa_fail_rate_uncovered: float = 0.16
    re_fail_dispersion: float = 0.0
    qa_parse_failure_rate: float = 0.0


_QA_TEMPLATES = QA_TEMPLATES
"""The eleven QAR categories (§4.8), shared with the generator (:mod:`processors.dbpm.extraction`)."""


# --- generation -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entity:
    text: str
    category: str


class _Timeline:
    """Event times of one patient: stages back to back inside the patient's arrival slot."""

    def __init__(self, shape: StreamShape, patient: int) -> None:
        slot = 86_400.0 / shape.patients_per_day
        self._offset = patient * slot
        self._scale = min(1.0, 0.9 * slot / sum(STAGE_SECONDS.values()))
        self._start = shape.start

    def stage(self, task: str, candidates: int) -> Iterator[tuple[str, str]]:
        """Yield (gate ts, verdict ts) for each candidate of a stage, then advance past the stage."""
        duration = STAGE_SECONDS[task] * self._scale
        step = duration / max(candidates, 1)
        for k in range(candidates):
            gate = self._offset + k * step
            yield self._ts(gate), self._ts(gate + step / 2.0)
        self._offset += duration

    def _ts(self, seconds: float) -> str:
        return (self._start + timedelta(seconds=int(seconds))).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entity_text(rng: random.Random, category: str) -> str:
    """An entity string: a term, often qualified as clinical text is (modifier, duration, dose, value).

    Qualifiers make most strings unique, as in the paper's run (96,708 whitelisted NER signatures on
    the 5,000-patient cohort, §6.5): the memory must hold an open, growing set of signatures. Day
    numbers stay below 61 so the QA over-specification (61-99 months, :meth:`_Patient._answer`)
    never meets an equal unitless number in the narrative.
    """
    term = rng.choice(TERMS[category])
    roll = rng.random()
    if category in MODIFIERS and roll < 0.3:
        term = f"{rng.choice(MODIFIERS[category])} {term}"
    if category == "Diagnosis" and roll > 0.5:
        return f"{term} on day {rng.randint(1, 60)}"
    if category == "Symptoms" and roll > 0.3:
        return f"{term} for {rng.randint(2, 60)} {rng.choice(('hours', 'days', 'weeks'))}"
    if category == "Treatment" and roll < 0.6:
        dose = rng.choice((2.5, 5, 10, 20, 25, 40, 50, 80, 100, 250, 400, 500, 750, 1000))
        return f"{term} {dose:g} mg {rng.choice(('daily', 'twice daily', 'every 8 hours', 'weekly'))}"
    if category == "Tests" and roll < 0.6:
        unit = rng.choice(("mg/l", "ng/ml", "mmol/l", "u/l"))
        return f"{term} {rng.randint(1, 999)}.{rng.randint(0, 9)} {unit}"
    return term


def _relation_label(rng: random.Random) -> str:
    suffix = rng.choice(LABEL_SUFFIXES)
    if suffix == "#":
        suffix = f"_{rng.randint(1, 99_999)}"
    label = f"{rng.choice(LABEL_PREFIXES)}{rng.choice(LABEL_STEMS)}{suffix}"
    spelling = rng.random()
    if spelling < 0.1:
        return label.lower()
    if spelling < 0.15:
        return label.replace("_", " ")
    if spelling < 0.2:
        return f" {label} "
    return label


def _verdict(
    ts: str, task: str, verdict: str, source: str, pid: str, payload: dict[str, Any]
) -> dict[str, Any]:
    return {
        "kind": "verdict",
        "ts": ts,
        "task": task,
        "verdict": verdict,
        "source": source,
        "patient_id": pid,
        "payload": payload,
    }


def _gate(ts: str, task: str, pid: str, candidate_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "gate",
        "ts": ts,
        "task": task,
        "patient_id": pid,
        "candidate_id": candidate_id,
        "payload": payload,
    }


class _Patient:
    """One synthetic patient: entity pool, narrative, and the three stages' events in order."""

    def __init__(self, rng: random.Random, shape: StreamShape, index: int) -> None:
        self.rng = rng
        self.shape = shape
        self.pid = f"p-{index:06d}"
        self.index = index
        self.timeline = _Timeline(shape, index)
        self.pool: dict[str, list[_Entity]] = {}
        for category, probability in COVERAGE.items():
            if rng.random() < probability:
                low, high = POOL_SIZE[category]
                texts = {_entity_text(rng, category) for _ in range(rng.randint(low, high))}
                self.pool[category] = [_Entity(text, category) for text in sorted(texts)]
        negated = rng.sample([t for t in TERMS["Symptoms"] if not self._mentions(t)], 2)
        sentences = [f"{e.text.capitalize()}." for entities in self.pool.values() for e in entities]
        sentences += [f"No {symptom}." for symptom in negated]
        self.narrative = " ".join(sentences)
        self.negated_symptoms = negated
        self.accepted: set[str] = set()
        self.verifier_rejections = 0
        self.ner_yield = 0
        self.signals = random.Random(f"signals:{shape.seed}:{self.pid}")
        spread = shape.re_fail_dispersion
        factor = self.signals.lognormvariate(0.0, spread) if spread > 0 else 1.0
        ceiling = 1.0 - shape.re_ontology_rate - shape.re_soft_rate
        self.re_fail_rate = min(shape.re_fail_rate * factor, ceiling)

    def _mentions(self, term: str) -> bool:
        return any(term in e.text for entities in self.pool.values() for e in entities)

    def _entities(self) -> list[_Entity]:
        return [e for entities in self.pool.values() for e in entities]

    def _of(self, category: str) -> _Entity:
        entities = self.pool.get(category)
        return self.rng.choice(entities) if entities else _Entity(self.rng.choice(TERMS[category]), category)

    def events(self) -> Iterator[dict[str, Any]]:
        yield from self._ner()
        yield from self._re()
        yield from self._qa()

    def _candidate(self, task: str, k: int) -> str:
        return f"c-{self.index:06d}-{task}-{k:04d}"

    def _ner(self) -> Iterator[dict[str, Any]]:
        rng, shape = self.rng, self.shape
        entities = self._entities()
        n = rng.randint(*shape.ner_per_patient)
        for k, (gate_ts, verdict_ts) in enumerate(self.timeline.stage("ner", n)):
            roll = rng.random()
            if roll < shape.ner_fail_rate or not entities:
                category = rng.choice(("Diagnosis", "Symptoms", "History", "Tests"))
                entity = _Entity(rng.choices(JUNK_ENTITIES, JUNK_WEIGHTS)[0], category)
                verdict = "hard_fail"
            else:
                entity = rng.choice(entities)
                verdict = "soft_downgrade" if roll < shape.ner_fail_rate + shape.ner_soft_rate else "success"
            payload = {"entity": entity.text, "category": entity.category}
            yield _gate(gate_ts, "ner", self.pid, self._candidate("ner", k), payload)
            yield _verdict(verdict_ts, "ner", verdict, "verifier_mmed", self.pid, dict(payload))
            if verdict == "success":
                self.accepted.add(entity.category)
                self.ner_yield += 1
            elif verdict == "hard_fail":
                self.verifier_rejections += 1

    def _re(self) -> Iterator[dict[str, Any]]:
        rng, shape = self.rng, self.shape
        pairs = sorted(ADMISSIBLE)
        entities = self._entities() or [self._of("Diagnosis")]
        n = rng.randint(*shape.re_per_patient)
        for k, (gate_ts, verdict_ts) in enumerate(self.timeline.stage("re", n)):
            roll = rng.random()
            source = "verifier_mmed"
            if roll < shape.re_ontology_rate:
                head_type, relation, tail_type = rng.choices(VIOLATIONS, VIOLATION_WEIGHTS)[0]
                head, tail = self._of(head_type), self._of(tail_type)
                verdict, source = "hard_fail", "rule_based"
            elif roll < shape.re_ontology_rate + self.re_fail_rate:
                head, tail = rng.choice(entities), rng.choice(entities)
                relation, verdict = _relation_label(rng), "hard_fail"
            else:
                head_type, tail_type = rng.choice(pairs)
                head, tail = self._of(head_type), self._of(tail_type)
                relation = rng.choice(ADMISSIBLE[(head_type, tail_type)])
                soft = roll < shape.re_ontology_rate + self.re_fail_rate + shape.re_soft_rate
                verdict = "soft_downgrade" if soft else "success"
            payload = {
                "head": head.text,
                "head_type": head.category,
                "relation": relation,
                "tail": tail.text,
                "tail_type": tail.category,
            }
            yield _gate(gate_ts, "re", self.pid, self._candidate("re", k), payload)
            yield _verdict(verdict_ts, "re", verdict, source, self.pid, dict(payload))
            if verdict == "hard_fail" and source == "verifier_mmed":
                self.verifier_rejections += 1

    def _answer(self, bucket: str | None, fails: bool) -> str:
        rng = self.rng
        grounded = self.pool.get(bucket, []) if bucket else []
        if not grounded:
            return rng.choice(HALLUCINATIONS) if fails and rng.random() < 0.5 else ABSTENTION
        texts = [e.text for e in grounded[:3]]
        if not fails:
            return ", ".join(texts)
        mode = rng.random()
        if mode < 0.3:
            return f"no {texts[0]}" if rng.random() < 0.5 else rng.choice(self.negated_symptoms)
        if mode < 0.7:
            return f"{', '.join(texts)} for {rng.randint(61, 99)} months"
        return rng.choice(HALLUCINATIONS)

    def _qa(self) -> Iterator[dict[str, Any]]:
        rng, shape = self.rng, self.shape
        n = rng.randint(*shape.qa_per_patient)
        categories = rng.sample(sorted(_QA_TEMPLATES), n)
        difficulty = round(self.verifier_rejections / max(self.verifier_rejections + self.ner_yield, 1), 4)
        ner_categories = sorted(self.accepted)
        for k, ((gate_ts, verdict_ts), category) in enumerate(
            zip(self.timeline.stage("qa", n), categories, strict=True)
        ):
            question, bucket = _QA_TEMPLATES[category]
            covered = bucket is not None and bucket in self.accepted
            fail_rate = shape.qa_fail_rate_covered if covered else shape.qa_fail_rate_uncovered
            fails = rng.random() < fail_rate
            answer = self._answer(bucket, fails)
            payload: dict[str, Any] = {"question": question, "answer": answer, "category": category}
            gate_payload = {**payload, "ner_categories": ner_categories, "difficulty": difficulty}
            if shape.qa_parse_failure_rate > 0 and self.signals.random() < shape.qa_parse_failure_rate:
                gate_payload["parse_failed"] = True
            yield _gate(gate_ts, "qa", self.pid, self._candidate("qa", k), gate_payload)
            verdict_payload = dict(payload)
            if fails:
                error_class = classify_qa_error(answer, self.narrative)
                if error_class is not None:
                    verdict_payload["error_class"] = error_class.value
            verdict = "hard_fail" if fails else "success"
            yield _verdict(verdict_ts, "qa", verdict, "verifier_mmed", self.pid, verdict_payload)


_AGE_RANGES: tuple[tuple[int, int] | None, ...] = ((0, 17), (18, 39), (40, 64), (65, 95), None)
_AGE_WEIGHTS = (0.10, 0.26, 0.40, 0.21, 0.03)
"""Age buckets (None: no age recorded) and their shares (module docstring, "Patient attributes")."""


def _attributes(seed: int, patient: _Patient) -> PatientAttributes:
    """Age and gender from a generator of their own (module docstring); the narrative's length."""
    rng = random.Random(f"attributes:{seed}:{patient.pid}")
    ages = rng.choices(_AGE_RANGES, _AGE_WEIGHTS)[0]
    age = None if ages is None else rng.randint(*ages)
    female = 0.60 if ages == (18, 39) else 0.47
    roll = rng.random()
    gender = "F" if roll < female else "M" if roll < 0.99 else None
    return PatientAttributes(patient.pid, age, gender, len(patient.narrative))


def generate_patients(
    n_patients: int, shape: StreamShape | None = None
) -> Iterator[tuple[PatientAttributes, list[StreamEvent]]]:
    """Yield the first ``n_patients`` patients of the stream: attributes, then the patient's events.

    The events are exactly those :func:`generate_events` yields for the patient (the same draws in
    the same order); the attributes are described in the module docstring.

    Args:
        n_patients: how many patients to yield.
        shape: the stream's proportions and seed.
    """
    shape = shape or StreamShape()
    for _, patient in zip(range(n_patients), _patients(shape), strict=False):
        yield _attributes(shape.seed, patient), list(patient.events())


def _patients(shape: StreamShape) -> Iterator[_Patient]:
    """The stream's patients in order, all drawing from one generator: a patient's events MUST be
    consumed before the next patient is taken, or the draws interleave differently."""
    rng = random.Random(shape.seed)
    index = 0
    while True:
        yield _Patient(rng, shape, index)
        index += 1


def generate_events(n_events: int, shape: StreamShape | None = None) -> Iterator[StreamEvent]:
    """Yield the first ``n_events`` events of the synthetic stream described by ``shape``.

    Args:
        n_events: how many events to yield (the last patient is cut wherever the count falls).
        shape: the stream's proportions and seed; the module docstring gives the defaults' sources.

    Returns:
        An iterator of replay-contract event objects, in processing order.
    """
    if n_events < 1:
        return
    emitted = 0
    for patient in _patients(shape or StreamShape()):
        for event in patient.events():
            yield event
            emitted += 1
            if emitted == n_events:
                return


def stream_lines(n_events: int, shape: StreamShape | None = None) -> Iterator[str]:
    """Yield the stream of :func:`generate_events` as compact JSON Lines (without newlines)."""
    for event in generate_events(n_events, shape):
        yield json.dumps(event, separators=(",", ":"), ensure_ascii=False)


def write_stream(path: Path, n_events: int, shape: StreamShape | None = None) -> int:
    """Write ``n_events`` events to ``path`` as JSON Lines and return how many were written."""
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for line in stream_lines(n_events, shape):
            out.write(line + "\n")
            written += 1
    return written
