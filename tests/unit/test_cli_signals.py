"""The `ssebench` command stops on SIGINT and SIGTERM as on Ctrl-C, however it was started.

A command started in the background of a non-interactive shell (`ssebench dataset verify ... &`, a CI's
step) inherits SIGINT ignored, so `kill -INT` did nothing; SIGTERM ended it at once, without the Ctrl-C
path that stops and reaps its runs. `ssebench ps --watch` stands for any long command: it loops until
interrupted and then exits 0.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

COMMAND = [sys.executable, "-m", "ssebench.cli", "ps", "--watch", "--interval", "0.2"]
BARE_MAIN = "import sys; from ssebench.cli import main; sys.exit(main(sys.argv[1:]))"


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _started(tmp_path: Path, ignore_sigint: bool) -> subprocess.Popen[str]:
    watch = subprocess.Popen(
        [*COMMAND, "--results", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint if ignore_sigint else None,
    )
    assert watch.stdout is not None and watch.stderr is not None
    first = watch.stdout.readline()  # it is looping: its first look is printed
    assert "ssebench ps --watch" in first, (first, watch.stderr.read() if watch.poll() is not None else "")
    return watch


@pytest.mark.parametrize(
    ("sig", "ignore_sigint"),
    [(signal.SIGINT, True), (signal.SIGINT, False), (signal.SIGTERM, False)],
    ids=["sigint-ignored-by-the-shell", "sigint", "sigterm"],
)
def test_the_command_stops_as_on_ctrl_c(tmp_path: Path, sig: signal.Signals, ignore_sigint: bool) -> None:
    watch = _started(tmp_path, ignore_sigint)
    try:
        sent = time.monotonic()
        watch.send_signal(sig)
        watch.wait(timeout=20)
        # The Ctrl-C path ran: ps --watch returns 0 from KeyboardInterrupt; killed by the signal, it is -sig.
        assert watch.returncode == 0 and time.monotonic() - sent < 20
    finally:
        watch.kill()
        watch.communicate()


def test_without_it_the_backgrounded_command_ignores_sigint(tmp_path: Path) -> None:
    """The positive control: main() alone, started as the shell starts a background job, does not stop on
    SIGINT; so the test above sees stoppable() at work, not a SIGINT that was never ignored."""
    bare = subprocess.Popen(
        [sys.executable, "-c", BARE_MAIN, *COMMAND[3:], "--results", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint,
    )
    try:
        assert bare.stdout is not None and "ssebench ps --watch" in bare.stdout.readline()
        bare.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            bare.wait(timeout=3)
    finally:
        bare.kill()
        bare.communicate()
