"""Shared fixtures for the clinical gate tests: the knowledge base (loaded once) and a case runner."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from clinical_builders import AS_OF, load_bundle, state_from

from processors.clinical.assess import assess
from processors.clinical.knowledge import ClinicalKnowledge, GateFlags, default_knowledge
from processors.clinical.traffic_light import ReviewInputs
from schemas.clinical import ClinicalAssessment


@pytest.fixture(scope="session")
def knowledge() -> ClinicalKnowledge:
    return default_knowledge()


@pytest.fixture
def assess_case(knowledge: ClinicalKnowledge) -> Callable[..., ClinicalAssessment]:
    def run(
        case: str, review: ReviewInputs | None = None, flags: GateFlags | None = None
    ) -> ClinicalAssessment:
        return assess(state_from(load_bundle(case)), AS_OF, review, knowledge, flags)

    return run
