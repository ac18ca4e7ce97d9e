"""What the per-family references share: a family's records and outputs (:class:`Family`), the garbage
some good records carry in the clingate headers their topic ignores, the valid records too large for
their outputs, and clinical-looking words and filler text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from streams.testing.poison.records import CLINGATE_HEADERS, SEMANTIC_HEADERS, Expected, Headers, Kind, Record

CONDITIONS = (
    "community-acquired pneumonia",
    "atrial fibrillation",
    "heart failure",
    "acute kidney injury",
    "septic shock",
    "pulmonary embolism",
    "type 2 diabetes",
)
DRUGS = ("warfarin", "digoxin", "furosemide", "amiodarone", "metformin", "ceftriaxone", "heparin")
FINDINGS = ("fever", "dyspnea", "bilateral crackles", "elevated troponin", "hypotension", "confusion")
"""Clinical-looking words: of the filler text, the narratives and the console's queries."""


def filler(size: int, rng: random.Random) -> str:
    """``size`` characters of clinical-looking text (seeded words)."""
    words = " ".join(rng.choice(FINDINGS + CONDITIONS + DRUGS) for _ in range(64)) + " "
    return (words * (size // len(words) + 1))[:size]


def json_ts(when: datetime) -> str:
    """``when`` in UTC to the second (``YYYY-MM-DDTHH:MM:SSZ``): a watermark tick, a FHIR update's id."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def noise(rng: random.Random, topic: str) -> Headers:
    """Garbage in the clingate headers ``topic`` ignores, on about one good record in four."""
    if rng.random() >= 0.25:
        return ()
    names = [n for n in CLINGATE_HEADERS if n != SEMANTIC_HEADERS.get(topic)]
    picked = rng.sample(names, rng.randint(1, 3))
    return tuple((name, None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 24))) for name in picked)


def too_large(record: Record, error: str) -> Record:
    """``record`` (valid) as a bad record of :attr:`Kind.TOO_LARGE` whose dead letter says ``error``."""
    return replace(record, kind=Kind.TOO_LARGE, ident="", error=error)


@dataclass
class Family:
    """The good records of some topics and their outputs."""

    feeds: dict[str, list[Record]]
    """Per topic, the good records in their order, with the valid records too large for their outputs or
    state among them (:attr:`Kind.TOO_LARGE`, bad: whether one fits may depend on the records before)."""
    expected: list[Expected] = field(default_factory=list)
