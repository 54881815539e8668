"""The entrypoint's own lines on the container's log, and the tails of the logs it quotes.

`ssebench.inflight.entrypoint_lines` reads these lines back (the time stamps a benchmark measures, the limits
a run hit); the phase a run is in is written apart, for the host to read (`ssebench.runtime.phase`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def say(message: str) -> None:
    """One line of the entrypoint's own on the container's log, stamped to the millisecond (UTC)."""
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}"
    print(f"[ssebench-entrypoint {stamp}] {message}", file=sys.stderr, flush=True)


def tail(path: Path, lines: int = 20) -> str:
    """The last `lines` lines of a log; empty when it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
