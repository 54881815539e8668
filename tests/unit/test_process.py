"""ssebench.runtime.process.wait: Popen.wait with a time limit, woken by the exit instead of polling."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ssebench.runtime.process import wait


def _python(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_it_gives_the_exit_status_once_the_process_ends() -> None:
    process = _python("import sys, time; time.sleep(0.2); sys.exit(7)")
    assert wait(process, 30) == 7
    assert process.returncode == 7  # reaped by its Popen, as Popen.wait leaves it


def test_it_raises_when_the_limit_passes_and_leaves_the_process_running() -> None:
    process = _python("import time; time.sleep(30)")
    try:
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):
            wait(process, 0.3)
        assert time.monotonic() - started >= 0.29
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()


def test_a_process_already_reaped_gives_its_status_without_looking_up_its_pid() -> None:
    process = _python("import sys; sys.exit(3)")
    process.wait()
    assert wait(process, 0) == 3


def test_a_killed_process_gives_the_signal_as_popen_does() -> None:
    process = _python("import time; time.sleep(30)")
    process.kill()
    assert wait(process, 30) == -9


def test_a_pid_reaped_and_reused_before_its_pidfd_opens_is_not_waited_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's Popen.poll may reap the process between wait's look and its pidfd_open, and the pid
    may then be another process's: wait must see the reaping, not wait on the stranger."""
    import os

    process = _python("import sys; sys.exit(4)")
    real_open = os.pidfd_open

    def reaped_then_reused(pid: int, flags: int = 0) -> int:
        process.wait()  # the other thread's reaping
        return real_open(os.getpid())  # the pid now names a process that will not end: this one

    monkeypatch.setattr(os, "pidfd_open", reaped_then_reused)
    started = time.monotonic()
    assert wait(process, 30) == 4
    assert time.monotonic() - started < 10
