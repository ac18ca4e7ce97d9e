"""Where the tests find the DocGemma agent-graph spec (``shared/seeds``), which some tests read to check
clingate against the spec's own words (its graph's edges, its schemas' fields).

CI clones the repository with ``shared/`` beside it; a clone elsewhere has no seeds, and the tests that
need them skip with a reason rather than fail at collection.
"""

from __future__ import annotations

from pathlib import Path

import pytest

AGENT_SPEC = (
    Path(__file__).resolve().parents[1].parent / "shared" / "seeds" / "docgemma-agent-graph-v3-spec.md"
)

needs_agent_spec = pytest.mark.skipif(
    not AGENT_SPEC.exists(),
    reason=f"the seed spec is not beside the clone ({AGENT_SPEC}); CI provides ../shared",
)
