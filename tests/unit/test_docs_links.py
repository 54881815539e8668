"""Every relative link in the README and the docs leads somewhere.

The README is the door to docs/: when a section moves there, a link left
pointing at the old place sends a newcomer nowhere. Links are checked the
way GitHub renders them: a path relative to the file that holds the link,
and an `#anchor` made from a heading of the target file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The documents a reader moves between: the README, docs/, and the READMEs beside the code.
DOCUMENTS = sorted([ROOT / "README.md", ROOT / "SECURITY.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("*/README.md")])
# [text](target) with no space in the target; images ![..](..) are links too.
_LINK = re.compile(r"\]\(([^()\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1: a link in a code sample is not a link."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a file's headings make, the second of a name with `-1` as GitHub numbers them."""
    seen: dict[str, int] = {}
    made: set[str] = set()
    for _, line in _prose_lines(path):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        made.add(base if count == 0 else f"{base}-{count}")
    return made


def broken_links(path: Path) -> list[str]:
    """One line per link of `path` that leads nowhere: its line, the target, and what is missing."""
    problems: list[str] = []
    where = path.relative_to(ROOT)
    for number, line in _prose_lines(path):
        for target in _LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: — not ours to check offline
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{where}:{number}: {target}: {file_part} does not exist")
                continue
            if not anchor:
                continue
            if linked.is_dir() or linked.suffix != ".md":
                problems.append(f"{where}:{number}: {target}: an anchor into a file that is not Markdown")
            elif anchor not in anchors(linked):
                problems.append(f"{where}:{number}: {target}: no heading of {linked.relative_to(ROOT)} makes #{anchor}")
    return problems


def test_the_documents_are_found() -> None:
    names = {str(path.relative_to(ROOT)) for path in DOCUMENTS}
    assert {"README.md", "docs/architecture.md", "docs/integrity.md", "models/README.md"} <= names


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_slugs_follow_githubs_rules() -> None:
    assert slug("Sandbox or sidecar") == "sandbox-or-sidecar"
    assert (
        slug("Images: built on each node, or through a registry") == "images-built-on-each-node-or-through-a-registry"
    )
    assert slug("The sixteenth cut: a name lookup (2026-12-04)") == "the-sixteenth-cut-a-name-lookup-2026-12-04"
    assert slug("`sse.ai`: the OpenCode wrapper") == "sseai-the-opencode-wrapper"
    assert slug("A broken model is not the agent's failure") == "a-broken-model-is-not-the-agents-failure"


def test_a_broken_link_and_a_missing_anchor_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "other.md").write_text("# Title\n\n## A part\n\n## A part\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md#a-part) [second](other.md#a-part-1) [self](#here)\n"
        "# Here\n"
        "[gone](missing.md) [no anchor](other.md#nowhere)\n"
        "```\n[in code](missing-too.md)\n```\n"
        "[web](https://example.org/x)\n"
    )
    assert broken_links(doc) == [
        "doc.md:3: missing.md: missing.md does not exist",
        "doc.md:3: other.md#nowhere: no heading of other.md makes #nowhere",
    ]
