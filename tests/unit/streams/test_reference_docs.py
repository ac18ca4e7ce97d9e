"""The documentation stays true to the code and to itself.

- Generated blocks in ``docs/*.md`` equal what :mod:`streams.runtime.reference` generates now.
- Every relative link in ``README.md``, ``CHANGELOG.md`` and ``docs/*.md`` names an existing file, and an
  anchor into a Markdown file names one of its headings.
- The README stays a front page (at most 200 lines, the two commands CI and users run), and no document
  tells the project's history by work session or issue number (history belongs to CHANGELOG.md and
  commit messages, where it is told by what changed).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streams.runtime import reference
from streams.runtime.settings import settings_table

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _ids(documents: list[Path]) -> list[str]:
    return [str(path.relative_to(ROOT)) for path in documents]


def test_generated_blocks_are_current() -> None:
    stale = [str(path.relative_to(ROOT)) for path in reference.stale_files()]
    assert not stale, f"generated tables are stale in {stale}: run `{reference.WRITE_COMMAND}`"


def test_the_configuration_doc_carries_the_settings_table() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert reference.generated_blocks(text) == ["settings"]
    assert settings_table() in text


def test_render_replaces_only_the_block_body_and_refuses_unknown_generators() -> None:
    text = "before\n<!-- generated: settings -->\nold\n<!-- end generated -->\nafter\n"
    rendered = reference.render(text)
    assert rendered.startswith("before\n<!-- generated: settings -->\n## Kafka\n\n| variable |")
    assert rendered.endswith("|\n<!-- end generated -->\nafter\n")
    assert reference.render(rendered) == rendered
    with pytest.raises(KeyError):
        reference.render("<!-- generated: nothing -->\n<!-- end generated -->\n")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("document", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_every_relative_link_resolves(document: Path) -> None:
    text = _FENCE.sub("", document.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file_part, _, anchor = target.partition("#")
        path = (document.parent / file_part).resolve() if file_part else document
        missing_anchor = anchor and path.suffix == ".md" and path.exists() and anchor not in _anchors(path)
        if not path.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{document.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_readme_is_a_front_page_with_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200, "README.md is at most 200 lines: move detail to docs/"
    assert re.search(r"^make demo\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)
    assert "exec make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


@pytest.mark.parametrize("document", DOCUMENTS, ids=_ids(DOCUMENTS))
def test_no_history_by_session_or_issue_number(document: Path) -> None:
    found = re.findall(r"\b(?:sessions?|issues?) \d+\b", document.read_text(encoding="utf-8"), re.I)
    assert not found, f"{document.relative_to(ROOT)}: say what changed, not when: {found}"
