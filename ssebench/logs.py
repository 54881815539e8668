"""Log tails for messages: the last lines of a text or of a log file, never the whole of it."""

from __future__ import annotations

from pathlib import Path


def last_lines(text: str, lines: int) -> str:
    """The last `lines` lines of `text` (stripped of blank ends)."""
    return "\n".join(text.strip().splitlines()[-lines:])


def file_tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a log file, or "(no log)" when it cannot be read."""
    try:
        return last_lines(path.read_text(encoding="utf-8", errors="replace"), lines)
    except OSError:
        return "(no log)"
