"""``clingate bench poison``: bad records on every consumed topic, through every runtime as it runs.

The suite feeds every topic clingate consumes with good records and, interleaved with them, bad
records drawn by Hypothesis strategies, runs the product's own processes against a real broker and
checks four things:

1. **Every bad record is dead-lettered exactly once, with a reason.** The dead-letter topic of its
   source holds exactly one ``clingate.common.DeadLetter`` at the record's coordinates (topic,
   partition, offset), with its key, value and headers byte for byte (or, for a dead letter too large
   for its topic, the prefixes and a ``truncations`` entry whose size and SHA-256 are the original's)
   and the error type the runtime's first failing check gives: ``SchemaDecodeError`` for bytes that
   are not the topic's model, ``TombstoneError`` for a null value, ``KeyMismatch`` where the key
   decides state ownership (verdicts, propagations, the clinical inputs), ``BadWatermark`` for a
   verdict-topic record with a ``clingate-watermark`` header that is not an ISO time,
   ``OutputTooLarge`` / ``StateTooLarge`` for a valid record whose output or state would not fit.
2. **Every good record's outputs are present exactly as a run without the bad records produces
   them.** The reference is computed in process by the same pure code on the good records alone and
   compared record by record (key, value bytes, headers), keyed by the outputs' ids: the gate's
   decisions and to-verify copies (:class:`streams.worker.gate.Gate` on an in-process memory holding the good
   verdicts), the memory itself (the state rebuilt from the workers' changelog against the in-process
   engine's), the clinical assessments, safety audits, gated drafts, revision routes and evidence
   requests (:func:`processors.clinical.assess.process_event` per patient), the arbiter's dispositions,
   packets and ground truth (:func:`processors.docs.arbiter.run`,
   :func:`processors.docs.packet.ground_truth`), and the generator's candidates and the verifier's
   verdicts and verified candidates (their record handlers, :class:`streams.groups.generator.Generator` and
   :class:`streams.groups.verifier.Verifier`, calling the same deterministic test server). A missing, changed
   or repeated output fails, as does a good record on a dead-letter topic.
3. **No worker exit.** Every process is alive at the end (a loop that stops on an error stops its
   worker).
4. **No partition stalled.** Every consumer group committed the end of every partition of its inputs
   (committed offsets follow acknowledged outputs and dead letters in every runtime, so "committed"
   also means "done"). The lag is reported per topic.

The runtimes, each as the product runs it: ``clingate worker`` (the DBPM memory writer for verdicts and
propagations, the gate for candidates, the clinical agent for FHIR updates, reviews, deliverables and the
output gates' run records),
the request runtime ``clingate worker --role requests`` (the console's requests), ``clingate arbiter
worker`` (classifications and reviews, rules-only), ``clingate generator`` (narratives) and ``clingate
verifier`` (to-verify), the last two against ``clingate llm serve --backend test --hashed``, whose answers
are a function of the prompt. ``clingate.docs.ground-truth`` is declared
consumed (it has a dead-letter topic) but no runtime consumes it, so it is not fed.

Determinism by construction, so that the reference is exact and not a matter of timing:

* **DBPM**, propagation and maintenance off (as ``clingate bench chaos``): the good verdicts and
  propagations first, the verdicts followed by a ``clingate-watermark`` tick at the last candidate's
  event time on every verdict partition; once the workers committed both topics, the candidates,
  every good one with the ``clingate-barrier`` header (a garbage value: only its presence counts), so
  each is decided only when this gate's view of the memory has applied every partition up to its
  tick, i.e. the whole memory. The reference decides the candidates on the in-process memory holding
  the same verdicts.
* **Clinical**: the FHIR updates, then (after the workers committed them) the reviews, then some
  patients' runs through the output gates (their evidence, then their first drafts, then the audits of
  those), then the deliverables; the reference processes each patient's records in that order. A
  patient's records are one key, one partition, one writer: the order within a topic is the
  production order.
* **Docs**: the classifications, then (once committed, so every packet exists) the reviews of the
  escalated documents.
* **Requests**: requests whose check needs nothing read from Kafka (a re-drive reads its dead letter and
  the source record), so :func:`streams.requests.check.check` decides them here as the runtime does: a
  clinician's question and a pharmacist's query decision and evidence review, carried out to topics no
  runtime of the suite consumes, and requests the runtime refuses (a role that may not ask, a re-drive
  that names no dead letter); each gets its outcome, whose time is the runtime's clock.
* **LLM groups** last, after the gate's checks: the verifier is started only then, at the end of its
  input topics, so the verdicts it publishes for the gate's to-verify records cannot change a memory the
  gate's checks depend on. Narratives come before the to-verify records that name them.

Bad records (:func:`bad_record`, drawn reproducibly per topic by :func:`draw`): random bytes (with and
without the single-object marker), truncations and bit flips of valid records (bit flips the serde
would still accept are filtered out: they are other valid records, not bad ones), valid records of
other schemas and JSON renderings of valid records, oversized values up to the topic's limit (padded
valid records or random bytes; one shape with a 2 MiB key, whose dead letter needs cutting), every
clingate header with garbage values (on the verdict topic on a valid verdict, where the watermark
header alone makes it bad; elsewhere on a broken value, since those headers are ignored there), wrong
keys (on a valid value where the key is checked, else with a broken value) and tombstones. Any of them
may carry further garbage headers. Some good records carry garbage in the clingate headers their
topic ignores, which must change nothing.

Large valid records (:class:`Scale`, ``large``): good records of 2 MiB texts, over every client's and
broker's ~1 MB default, whose outputs and state must come like any other's; and valid records whose
output or state cannot fit (a candidate near the topic limit, whose decision holds it twice; a patient
whose third 3 MiB update would take the state past the table's changelog limit): bad, dead-lettered
with stage ``produce``, the reference deciding which by the same size rule as the runtimes
(:func:`streams.runtime.dlq.fits`).

Wait for conditions, never for time: every phase ends when the consumer groups committed the end
offsets of what was fed; outputs are read up to the topics' ends after that.

The package, one module per concern: :mod:`.records` (the fed topics, the kinds of bad record, the records
and expected outputs, the scale), :mod:`.strategies` (the Hypothesis strategies and their seeded draws),
:mod:`.references` (per family of topics, the good records and their in-process outputs), :mod:`.plan`
(the run's records, good and bad interleaved), :mod:`.stages` (the runtimes as subprocesses, producing
and reading back, the feeding phases), :mod:`.report` (the comparison and the counts), :mod:`.run` (one
run end to end) and :mod:`.command` (``clingate bench poison``).
"""

from streams.testing.poison.command import poison_command
from streams.testing.poison.records import (
    CLINGATE_HEADERS,
    DEFAULT_KINDS,
    KEY_CHECKED,
    RUNTIMES,
    UNFED,
    Kind,
    Record,
    Scale,
    expected_error,
)
from streams.testing.poison.report import PoisonReport, check_letter
from streams.testing.poison.run import run_poison
from streams.testing.poison.strategies import (
    OversizeShape,
    TopicSamples,
    bad_record,
    draw,
    draw_balanced,
    interleave,
    samples_for,
    schema_pool,
)

__all__ = [
    "CLINGATE_HEADERS",
    "DEFAULT_KINDS",
    "KEY_CHECKED",
    "RUNTIMES",
    "UNFED",
    "Kind",
    "OversizeShape",
    "PoisonReport",
    "Record",
    "Scale",
    "TopicSamples",
    "bad_record",
    "check_letter",
    "draw",
    "draw_balanced",
    "expected_error",
    "interleave",
    "poison_command",
    "run_poison",
    "samples_for",
    "schema_pool",
]
