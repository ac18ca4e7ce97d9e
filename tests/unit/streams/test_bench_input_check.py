"""A benchmark refuses figures whose workers consumed records it did not write."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from streams.testing.worker import check_own_input
from streams.worker.keys import MEMORY_INPUTS
from topics.catalog import DBPM_VERDICTS, FHIR_UPDATES


@dataclass
class Reading:
    """What check_own_input reads of a worker: its name, role and consumed records by topic."""

    counts: dict[str, float] = field(default_factory=dict)
    app_id: str = "clingate-membench-test"
    role: str = "memory"

    def consumed(self) -> dict[str, float]:
        return self.counts


def test_a_worker_that_read_its_inputs_alone_passes() -> None:
    check_own_input([Reading({DBPM_VERDICTS: 4000.0, FHIR_UPDATES: 0.0})], MEMORY_INPUTS)  # type: ignore[list-item]


def test_a_worker_that_drained_another_topic_names_it_and_its_count() -> None:
    polluted = Reading({DBPM_VERDICTS: 4000.0, FHIR_UPDATES: 52262.0})
    with pytest.raises(RuntimeError, match=rf"clingate-membench-test \(memory\).*52,262 of {FHIR_UPDATES}"):
        check_own_input([Reading({DBPM_VERDICTS: 10.0}), polluted], MEMORY_INPUTS)  # type: ignore[list-item]
