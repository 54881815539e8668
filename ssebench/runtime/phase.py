"""The phases of the container that grades: written for the host to read, and, in sidecar mode, the end of
the agent phase, told to the task container by the host.

The entrypoint writes each phase it enters (`contract.Phase`) into
`contract.PHASE_FILE` (`write_phase`): one JSON line, replaced whole, root's,
in a directory of root's that nobody else may enter. `ssebench ps` reads it
through the engine, never the log the agent's output may share.

The agent runs in a container of its own, which holds nothing that grades:
no admin socket, no results. The host sees that container exit (or stops it
at the agent's time limit) and runs, as root in the task container through
`docker exec`:

    python -I -m ssebench.runtime.phase '{"AGENT_EXIT_STATUS": "0", ...}'

which writes the agent phase's figures, one JSON line, into the task
entrypoint's fifo (`contract.AGENT_DONE`, root's alone in a directory root's
alone), on which the entrypoint waits before it grades
(`await_agent`). Nothing of the agent's container can write there, or reach
the task container's root.
"""

from __future__ import annotations

import errno
import json
import os
import select
import sys
import time
from pathlib import Path

from ssebench.runtime import contract
from ssebench.runtime.console import say
from ssebench.runtime.contract import TIMED_OUT, AgentEnd, Phase, RuntimeSettings
from ssebench.runtime.files import check_root_path, write_atomic

FIGURES = AgentEnd.FIGURES
# Sidecar mode: how long the task container waits for the host to say the agent phase is over, beyond the
# agent's time limit (the host stops the agent container at its limit, and says so, well before).
AGENT_DONE_SLACK = 900.0


def write_phase(
    phase: Phase, path: str = contract.PHASE_FILE, status: int | None = None, token: str | None = None
) -> bool:
    """Record the phase the container is in for the host (`ssebench ps`; a kept container's, with the status
    it would have exited with and its run's token, ends the host's wait); never fails the run: a phase that
    cannot be written is said on the log instead. Whether it was written."""
    directory = os.path.dirname(path)
    try:
        check_root_path(directory)
        if not os.path.isdir(directory):
            os.mkdir(directory, 0o700)
        # Its mode as the daemon's listeners left it (0755 when the agent socket lives there too): only its
        # owner may write it either way.
        held = os.lstat(directory)
        if held.st_uid != os.geteuid() or held.st_mode & 0o022:
            raise ValueError(f"{directory} must be a directory only its owner may write")
        write_atomic(
            Path(directory), os.path.basename(path), contract.phase_record(phase, time.time(), status, token), 0o600
        )
    except (OSError, ValueError) as exc:
        say(f"the phase ({phase.value}) could not be written: {exc}")
        return False
    return True


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


def await_agent(settings: RuntimeSettings, done: int) -> AgentEnd:
    """Sidecar mode's task container: wait for the agent phase's figures, which the host writes into the fifo
    `done` once the agent container has exited (`tell`).

    Without word from the host by the agent's time limit and some slack, the phase is over all the same:
    the run is graded as one whose agent timed out.
    """
    started = time.monotonic()
    deadline = started + settings.agent_timeout + AGENT_DONE_SLACK
    poller = select.poll()
    poller.register(done, select.POLLIN)
    line = b""
    while b"\n" not in line:
        left = deadline - time.monotonic()
        if left <= 0:
            say(f"no word from the host of the agent's end within {settings.agent_timeout + AGENT_DONE_SLACK:.0f} s")
            return AgentEnd(TIMED_OUT, time.monotonic() - started, True)
        if poller.poll(min(left, 5.0) * 1000):
            try:
                line += os.read(done, 4096)
            except BlockingIOError:
                continue
    try:
        figures = json.loads(line.split(b"\n", 1)[0])
        return AgentEnd.from_figures(figures, time.monotonic() - started)
    except (ValueError, TypeError, AttributeError) as exc:
        say(f"the host's figures of the agent's end are unreadable ({exc}): graded as timed out")
        return AgentEnd(TIMED_OUT, time.monotonic() - started, True)


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
