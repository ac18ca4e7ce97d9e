"""Reference tables of the documentation, generated from the code they describe.

A Markdown file under ``docs/`` holds a generated block as::

    <!-- generated: settings -->
    ...the table...
    <!-- end generated -->

The text between the markers is exactly what the named generator returns, so the documentation cannot
drift from the code: ``tests/unit/streams/test_reference_docs.py`` fails when a committed block differs,
and ``python -m streams.runtime.reference --write`` rewrites every block in place. Without ``--write`` the
command only checks and exits 1 when a block is stale.

The settings table is generated from :class:`streams.runtime.settings.Settings`, the one place the environment
is read, through the same rows ``clingate config`` prints. The metrics tables are not generated: their
meaning column is prose, so ``docs/metrics.md`` is written by hand and a test checks that it lists
exactly the metrics the workers register.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from streams.runtime.settings import settings_table

DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITE_COMMAND = "python -m streams.runtime.reference --write"

_BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


GENERATORS: dict[str, Callable[[], str]] = {"settings": settings_table}


def render(text: str) -> str:
    """``text`` with every generated block replaced by its generator's output.

    A block that names no known generator raises ``KeyError``: a typo must not leave a stale block
    that nothing checks.
    """
    return _BLOCK.sub(lambda m: m.group(1) + GENERATORS[m.group("name")]() + m.group(4), text)


def generated_blocks(text: str) -> list[str]:
    """Names of the generated blocks in ``text``, in order."""
    return [m.group("name") for m in _BLOCK.finditer(text)]


def stale_files(docs: Path = DOCS) -> list[Path]:
    """Markdown files under ``docs`` whose generated blocks differ from what the code generates."""
    return [
        path for path in sorted(docs.glob("*.md")) if render(text := path.read_text(encoding="utf-8")) != text
    ]


def main(argv: list[str]) -> int:
    """Check the generated blocks (exit 1 when stale) or, with ``--write``, rewrite them in place."""
    write = argv == ["--write"]
    if argv and not write:
        print(f"usage: python -m streams.runtime.reference [--write]; got {argv}", file=sys.stderr)
        return 2
    stale = stale_files()
    for path in stale:
        if write:
            path.write_text(render(path.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"{'rewrote' if write else 'stale'}: {path.relative_to(DOCS.parent)}")
    if stale and not write:
        print(f"run `{WRITE_COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
