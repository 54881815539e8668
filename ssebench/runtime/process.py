"""Processes of the container's users: starting them confined, and stopping them all.

Root never runs anything in a place another user prepared: every command of
the runtime gets an explicit working directory, root's own commands find
their programs on a fixed PATH of root-owned directories, and Python is
always started isolated (`-I`: no working directory, no PYTHON* variables,
no user site). Commands of `model` and `sse-runner` start through
`confined()`, which lowers their file-size limit and raises their OOM score,
so that a memory hog or a file filling the disk ends the agent's process
first, not the runtime's.
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
import time
from dataclasses import dataclass
from typing import TypedDict

# Root's commands (git, tar) are looked up here only: an image's PATH may
# name a directory the agent can write.
ROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# Where a process starts when its working directory must not be anyone's.
NEUTRAL_CWD = "/"
PYTHON = sys.executable
# The least an OOM killer should spare: model's and sse-runner's processes go first.
OOM_SCORE = 1000


def python_command(module: str) -> list[str]:
    """`python -I -m module`: imports only from the runtime's root-owned paths."""
    return [PYTHON, "-I", "-m", module]


def confined(argv: list[str], file_size: int | None) -> list[str]:
    """`argv` under a file-size limit (bytes; None: unchanged) and first in line for the OOM killer.

    prlimit and choom (util-linux, essential in Debian) set the limits on
    themselves and exec the command, so nothing runs between the switch of
    user and the command but these two small programs of root's.
    """
    wrapped = ["/usr/bin/choom", "-n", str(OOM_SCORE), "--", *argv]
    if file_size is not None:
        wrapped = ["/usr/bin/prlimit", f"--fsize={file_size}", "--core=0", "--", *wrapped]
    return wrapped


class AsUser(TypedDict, total=False):
    """subprocess keywords that switch to a user."""

    user: int
    group: int
    extra_groups: list[int]


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> User:
        entry = pwd.getpwnam(name)
        return cls(name=name, uid=entry.pw_uid, gid=entry.pw_gid, home=entry.pw_dir)

    def popen_kwargs(self) -> AsUser:
        """What subprocess needs to run as this user with no supplementary groups."""
        if os.geteuid() != 0:  # tests on a developer machine: no switching
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def _status(pid: str) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            return dict(line.split(":", 1) for line in status if ":" in line)
    except OSError:
        return None


def _processes(uid: int) -> dict[int, str]:
    """Live processes (not zombies) whose real or effective uid is `uid`, with their state letter."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _status(entry)
        if fields is None:
            continue
        state = fields.get("State", "").strip()[:1]
        if state in ("Z", "X", ""):
            continue
        real, effective = fields.get("Uid", "-1 -1").split()[:2]
        if uid in (int(real), int(effective)):
            found[int(entry)] = state
    return found


def pids_of(uid: int) -> list[int]:
    """Live processes (not zombies) whose real or effective uid is `uid`."""
    return sorted(_processes(uid))


def _signal(pids: object, sig: signal.Signals) -> int:
    sent = 0
    for pid in pids:  # type: ignore[attr-defined]
        try:
            os.kill(pid, sig)
            sent += 1
        except (ProcessLookupError, PermissionError):
            pass
    return sent


def kill_user(user: User, *, deadline: float = 30.0) -> int:
    """SIGKILL every process of `user`, including ones that left their group; return how many.

    Every process is stopped first and killed only once none is left running,
    so a fork bomb cannot refill the slots that killing frees. Nothing is
    forked to do it: under a pids limit that the agent exhausted, a fork
    would fail. A process that will not stop (stuck in the kernel) is killed
    all the same after a few rounds.
    """
    if user.uid == 0:
        raise ValueError("refusing to kill root's processes")
    killed = 0
    stop_rounds = 0
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        found = _processes(user.uid)
        if not found:
            break
        running = [pid for pid, state in found.items() if state not in ("T", "t")]
        if running and stop_rounds < 100:
            _signal(running, signal.SIGSTOP)
            stop_rounds += 1
            time.sleep(0.001)
            continue  # look again: a process may have forked before it stopped
        killed += _signal(found, signal.SIGKILL)
        stop_rounds = 0
        time.sleep(0.005)
    return killed
