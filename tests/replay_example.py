"""Where the tests find the replay contract's public example (``shared/specs/replay-example``).

CI clones the repository with ``shared/`` beside it; a clone elsewhere has no example, and the tests
that need it skip with a reason rather than fail at collection.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = REPO_ROOT.parent / "shared" / "specs" / "replay-example"

needs_example = pytest.mark.skipif(
    not (EXAMPLE / "events.jsonl").exists(),
    reason=f"the replay contract's example is not beside the clone ({EXAMPLE}); CI provides ../shared",
)


def assert_state_close(got: object, want: object, path: str = "$") -> None:
    """``got`` is the state document ``want`` with every float within 1e-9 (the example's tolerance).

    Keys must come in the same order and lists have the same length; ``path`` names the first
    difference in the assertion message.
    """
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), path
        for key in want:
            assert_state_close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_state_close(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-9, rel=0), path
    else:
        assert got == want, path


def example_events(limit: int | None = None) -> list[dict[str, Any]]:
    """The example's first ``limit`` events as JSON objects (all of them when ``limit`` is None);
    an empty list when the example is absent (the test using them carries ``needs_example``)."""
    path = EXAMPLE / "events.jsonl"
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for _, line in zip(range(limit or 10**9), lines, strict=False)]
