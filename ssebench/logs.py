"""Log tails for messages, and text made safe for a terminal: never the whole of a log, never its controls."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

# What a terminal acts on instead of showing: the C0 controls but newline and tab (ESC starts every escape
# sequence: titles, clearing, cursor moves, colours; a lone carriage return overwrites the line), DEL, the C1
# controls (0x9b is an 8-bit CSI), the bidirectional marks, embeddings, overrides and isolates that reorder
# what follows them on the screen, and lone surrogates, which no terminal encoding can write. A CR LF is a
# line end, kept as one.
_CONTROLS = re.compile("\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _written_out(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r\n":
        return "\n"
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"


def for_terminal(text: str) -> str:
    """`text` as a terminal may show it: what the terminal would act on written out as visible escapes
    (`\\x1b`, `\\x0d`, `\\x9b`, `\\u202e`), everything else kept. Whatever an agent, a task's build, a
    container or a node wrote passes here before a terminal shows it, as the HTML report escapes it."""
    return _CONTROLS.sub(_written_out, text)


def last_lines(text: str, lines: int) -> str:
    """The last `lines` lines of `text` (stripped of blank ends)."""
    return "\n".join(text.strip().splitlines()[-lines:])


def file_tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a log file, or "(no log)" when it cannot be read."""
    try:
        return last_lines(path.read_text(encoding="utf-8", errors="replace"), lines)
    except OSError:
        return "(no log)"


def columns(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells (the header first) as lines of aligned columns, two spaces apart, no trailing blanks."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def shown_path(path: Path | None) -> str:
    """A file as a person finds it from here: relative to the working directory when under it."""
    if path is None:
        return "?"
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
