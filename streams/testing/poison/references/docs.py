"""The docs family: classification requests (the arbiter examples) and reviews of the escalated documents,
and the dispositions, review packets and ground truth the rules-only arbiter gives them
(:func:`processors.docs.arbiter.run`, :func:`processors.docs.packet.ground_truth`).
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime

from processors.docs.arbiter import ArbiterConfig, run
from processors.docs.packet import ground_truth
from processors.docs.v3 import load_trap_rules
from schemas.base import AvroModel
from schemas.docs import (
    ClassificationOutput,
    ClassificationRequest,
    DocumentBundle,
    DocumentType,
    Review,
    ReviewDecision,
)
from schemas.serde import Serde
from streams.data import DOCS, DOCS_EXAMPLES
from streams.runtime.dlq import fits
from streams.runtime.settings import get_settings
from streams.testing.poison.records import LARGE, Expected, Record, Scale
from streams.testing.poison.references.common import Family, filler, noise, too_large
from topics.catalog import (
    DOCS_CLASSIFICATIONS,
    DOCS_DISPOSITIONS,
    DOCS_GROUND_TRUTH,
    DOCS_REVIEW_PACKETS,
    DOCS_REVIEWS,
)


def docs_family(tag: str, scale: Scale, rng: random.Random, serde: Serde) -> Family:
    """The good classification requests (the arbiter examples, in turn) and one review per escalated
    document, and the dispositions, packets and ground truth they produce (rules-only). With
    ``scale.large``, that many requests carry a :data:`LARGE` page text and that many reviews large notes;
    a record whose outputs would not fit their topics is bad (the loop must dead-letter it)."""
    config = ArbiterConfig(trap_rules=load_trap_rules(get_settings().docs_trap_rules), llm_enabled=False)
    examples = {
        case: (
            ClassificationOutput.model_validate_json((DOCS / f"{out}.json").read_bytes()),
            DocumentBundle.model_validate_json((DOCS / f"{bundle}.json").read_bytes()),
        )
        for case, (out, bundle) in DOCS_EXAMPLES.items()
    }
    cases = list(examples)
    family = Family({DOCS_CLASSIFICATIONS: [], DOCS_REVIEWS: []})

    def add(topic: str, record: Record, outputs: list[tuple[str, AvroModel]]) -> bool:
        encoded = [(name, serde.encode(value, topic=name)) for name, value in outputs]
        if not all(fits(name, record.key or b"", value) for name, value in encoded):
            family.feeds[topic].append(too_large(record, "OutputTooLarge"))
            return False
        family.feeds[topic].append(record)
        family.expected += [Expected(n, record.key or b"", v, (), topic, record.ident) for n, v in encoded]
        return True

    packets = []
    for i in range(scale.good + scale.large):
        case = cases[i % len(cases)]
        output, bundle = examples[case]
        doc_id = f"{tag}-doc-{case}-{i:05d}"
        when = datetime.fromisoformat(bundle.processing_timestamp.replace("Z", "+00:00"))
        if i >= scale.good:  # a large document: its first page's text grows
            first = bundle.pages[0].model_copy(
                update={"text": bundle.pages[0].text + " " + filler(LARGE, rng)}
            )
            bundle = bundle.model_copy(update={"pages": [first, *bundle.pages[1:]]})
        request = ClassificationRequest(
            doc_id=doc_id, ts=when, classification=output, bundle=bundle.model_copy(update={"doc_id": doc_id})
        )
        value = serde.encode(request, topic=DOCS_CLASSIFICATIONS)
        record = Record(
            DOCS_CLASSIFICATIONS, doc_id.encode(), value, noise(rng, DOCS_CLASSIFICATIONS), ident=doc_id
        )
        finished = run(request, config)
        outputs: list[tuple[str, AvroModel]] = [(DOCS_DISPOSITIONS, finished.disposition)]
        outputs += [(DOCS_REVIEW_PACKETS, finished.packet)] if finished.packet is not None else []
        if add(DOCS_CLASSIFICATIONS, record, outputs) and finished.packet is not None:
            packets.append(finished.packet)
    for i, packet in enumerate(packets):
        corrects = i % 2 == 1
        review = Review(
            doc_id=packet.doc_id,
            ts=packet.ts,
            reviewer=f"sme-{i % 3}",
            decision=ReviewDecision.CORRECTS if corrects else ReviewDecision.AGREES,
            corrected_dominant_type=DocumentType.OTHER if corrects else None,
            notes=filler(LARGE, rng) if i >= len(packets) - scale.large else "poison suite",
        )
        key = packet.doc_id.encode()
        record = Record(DOCS_REVIEWS, key, serde.encode(review, topic=DOCS_REVIEWS), noise(rng, DOCS_REVIEWS))
        reviewed, truth = ground_truth(packet, review)
        add(
            DOCS_REVIEWS,
            replace(record, ident=packet.doc_id),
            [(DOCS_GROUND_TRUTH, truth), (DOCS_REVIEW_PACKETS, reviewed)],
        )
    return family
