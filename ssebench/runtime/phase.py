"""Sidecar mode: the end of the agent phase, told to the task container by the host.

The agent runs in a container of its own, which holds nothing that grades:
no admin socket, no results. The host sees that container exit (or stops it
at the agent's time limit) and runs, as root in the task container through
`docker exec`:

    python -I -m ssebench.runtime.phase '{"AGENT_EXIT_STATUS": "0", ...}'

which writes the agent phase's figures, one JSON line, into the task
entrypoint's fifo (`contract.AGENT_DONE`, root's alone in a directory root's
alone), on which the entrypoint waits before it grades
(`ssebench.runtime.entrypoint.await_agent`). Nothing of the agent's
container can write there, or reach the task container's root.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time

from ssebench.runtime import contract

FIGURES = ("AGENT_DURATION", "AGENT_EXIT_STATUS", "SSE_METRIC_AGENT_TIMEOUT")


def make_fifo(path: str = contract.AGENT_DONE) -> int:
    """The fifo the figures come through (made afresh, root's alone), open for reading: a descriptor that
    also writes, so the fifo never reads as closed before the figures come."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    if os.path.lexists(path):
        os.unlink(path)
    os.mkfifo(path, 0o600)
    return os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)


def figures_line(figures: dict[str, str]) -> bytes:
    """One line of the figures, checked: only the known keys, each a short string."""
    unknown = set(figures) - set(FIGURES)
    if unknown:
        raise ValueError(f"unknown figures: {', '.join(sorted(unknown))}")
    line = json.dumps({k: str(v)[:64] for k, v in figures.items()}).encode() + b"\n"
    if len(line) > 512:  # well under PIPE_BUF: one write, never interleaved
        raise ValueError("the figures are too long")
    return line


def tell(figures: dict[str, str], path: str = contract.AGENT_DONE, timeout: float = 30.0) -> None:
    """Write the figures into the fifo, waiting up to `timeout` seconds for the entrypoint to have made it.
    Raises OSError (ENXIO: nobody reads it) or ValueError."""
    line = figures_line(figures)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            break
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENXIO) or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -I -m ssebench.runtime.phase FIGURES_JSON", file=sys.stderr)
        return 2
    try:
        figures = json.loads(argv[0])
        if not isinstance(figures, dict):
            raise ValueError("the figures must be a JSON object")
        tell({str(k): str(v) for k, v in figures.items()})
    except (ValueError, OSError) as exc:
        print(f"ssebench-phase: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
