"""Fixtures of the arbiter's unit tests (helpers and example inputs live in docs_examples.py)."""

from __future__ import annotations

import pytest

from processors.docs.arbiter import ArbiterConfig
from processors.docs.v3 import TrapRules, load_trap_rules


@pytest.fixture(scope="session")
def trap_rules() -> TrapRules:
    return load_trap_rules()


@pytest.fixture(scope="session")
def rules_only(trap_rules: TrapRules) -> ArbiterConfig:
    return ArbiterConfig(trap_rules=trap_rules, llm_enabled=False)


@pytest.fixture(scope="session")
def with_llm(trap_rules: TrapRules) -> ArbiterConfig:
    return ArbiterConfig(trap_rules=trap_rules, llm_enabled=True)
