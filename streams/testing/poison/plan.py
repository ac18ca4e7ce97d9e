"""The run's plan: every record the suite feeds, good and bad interleaved per topic in production order,
and the outputs the good ones must produce (:func:`build_plan`: the same seed and tag, the same bytes).
"""

from __future__ import annotations

import random
import uuid
from collections import defaultdict
from dataclasses import dataclass

from schemas.dbpm import GateDecision, Narrative
from schemas.serde import Serde
from streams.testing.poison.records import MIB, NEAR_LIMIT, RUNTIMES, Expected, Kind, Record, Scale
from streams.testing.poison.references.clinical import clinical_family
from streams.testing.poison.references.dbpm import dbpm_family
from streams.testing.poison.references.docs import docs_family
from streams.testing.poison.references.llm import llm_family
from streams.testing.poison.references.requests import requests_family
from streams.testing.poison.strategies import (
    OversizeShape,
    bad_record,
    draw,
    draw_balanced,
    interleave,
    samples_for,
    schema_pool,
    topic_seed,
)
from topics.catalog import (
    CLINICAL_DELIVERABLES,
    CLINICAL_REVIEWS,
    DBPM_CANDIDATES,
    DBPM_NARRATIVES,
    DBPM_PROPAGATIONS,
    DBPM_TO_VERIFY,
    DBPM_VERDICTS,
    DOCS_CLASSIFICATIONS,
    DOCS_REVIEWS,
    FHIR_UPDATES,
)

OVERSIZE_TOPICS = (
    FHIR_UPDATES,
    DBPM_CANDIDATES,
    DBPM_NARRATIVES,
    DBPM_TO_VERIFY,
    DOCS_CLASSIFICATIONS,
    DBPM_VERDICTS,
    CLINICAL_REVIEWS,
    DBPM_PROPAGATIONS,
    DOCS_REVIEWS,
    CLINICAL_DELIVERABLES,
)
"""The order in which oversized records are spread over the topics: the clinical loop's input first, then the
gate's, then the ordered loops'."""


def oversize_plan(count: int) -> dict[str, list[OversizeShape]]:
    """Per topic, the shapes of its oversized records: the first near the topic limit, the second with a
    2 MiB key (its dead letter, which holds the key twice, must be cut to fit), the others 2 MiB values,
    every third of those with a 64 KiB header."""
    shapes = [OversizeShape(NEAR_LIMIT), OversizeShape(NEAR_LIMIT - 2 * MIB, key=2 * MIB)]
    shapes += [
        OversizeShape(2 * MIB, header=64 * 1024 if i % 3 == 2 else 0) for i in range(max(0, count - 2))
    ]
    plan: dict[str, list[OversizeShape]] = defaultdict(list)
    for i, shape in enumerate(shapes[:count]):
        plan[OVERSIZE_TOPICS[i % len(OVERSIZE_TOPICS)]].append(shape)
    return plan


@dataclass
class Plan:
    """Everything the suite feeds and expects.

    Attributes:
        tag: prefix of every id of the run (keeps runs on one broker apart).
        feeds: per topic, the records in production order (good and bad interleaved).
        expected: the outputs of the good records (the LLM groups' are added by
            :func:`~streams.testing.poison.references.llm.llm_reference`).
        memory: the in-process memory's state after the good verdicts and propagations.
        narratives: the good narratives.
        decisions: the good to-verify records.
    """

    tag: str
    feeds: dict[str, list[Record]]
    expected: list[Expected]
    memory: dict[str, object]
    narratives: list[Narrative]
    decisions: list[GateDecision]

    def prefix(self, family: str) -> str:
        """The id prefix of one family of records (``g-``: DBPM candidates and verdicts, ``n``: narratives,
        ``tv-``: to-verify candidates, ``pt-``: clinical patients, ``doc-``: documents, ``req-``: what the
        console's requests are about)."""
        return f"{self.tag}-{family}"


def build_plan(seed: int, scale: Scale, serde: Serde, partitions: int, tag: str | None = None) -> Plan:
    """The run's records and the outputs of its good records (the LLM groups' outputs excepted).

    Args:
        seed: seeds every choice: the good records (``random.Random``) and the bad ones (Hypothesis).
        scale: how many records.
        serde: the runtimes' serde.
        partitions: the verdict topic's partitions (one tick each).
        tag: the id prefix (default: from the seed and a random suffix, so runs never collide: the
            workers' application id, hence their changelogs, are named after it).

    The same seed and tag give the same records, byte for byte; another tag changes the ids, and with
    them the bytes the bad records are cut or flipped from, not their kinds, counts or places.
    """
    tag = tag or f"poison{seed}-{uuid.uuid4().hex[:6]}"
    rng = random.Random(seed)
    dbpm, memory = dbpm_family(tag, scale, rng, serde, partitions)
    clinical = clinical_family(tag, scale, rng, serde)
    docs = docs_family(tag, scale, rng, serde)
    llm, narratives, decisions = llm_family(tag, scale.llm_good, rng, serde)
    requests = requests_family(tag, scale, rng, serde)
    good = {**dbpm.feeds, **clinical.feeds, **docs.feeds, **llm.feeds, **requests.feeds}
    pool = schema_pool(good, serde)
    oversized = oversize_plan(scale.oversized)
    feeds: dict[str, list[Record]] = {}
    for topic in RUNTIMES:
        samples = samples_for(topic, good[topic], pool, serde)
        bad = draw_balanced(samples, scale.bad, topic_seed(seed, topic))
        for i, shape in enumerate(oversized.get(topic, [])):
            bad += draw(bad_record(samples, (Kind.OVERSIZE,), (shape,)), 1, topic_seed(seed + i + 1, topic))
        controls = [r for r in good[topic] if r.control]  # the ticks stay after every verdict
        feeds[topic] = (
            interleave([r for r in good[topic] if not r.control], bad, random.Random(topic_seed(seed, topic)))
            + controls
        )
    expected = dbpm.expected + clinical.expected + docs.expected + requests.expected
    return Plan(tag, feeds, expected, memory, narratives, decisions)
