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

import contextlib
import os
import pwd
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
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


def _status(path: str) -> dict[str, str] | None:
    try:
        with open(path, encoding="ascii", errors="replace") as status:
            return dict(line.split(":", 1) for line in status if ":" in line)
    except OSError:
        return None


def _state_of(pid: str, fields: dict[str, str]) -> str:
    """The state letter of a process, looking past a leader that exited while its other threads run.

    Such a process reads as a zombie in /proc/<pid>/status, yet lives: its
    state is that of its live threads (running unless all are stopped).
    """
    state = fields.get("State", "").strip()[:1]
    if state != "Z" or fields.get("Threads", "1").strip() in ("0", "1"):
        return state
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return state
    live = []
    for task in tasks:
        found = _status(f"/proc/{pid}/task/{task}/status")
        letter = found.get("State", "").strip()[:1] if found else ""
        if letter not in ("Z", "X", ""):
            live.append(letter)
    if not live:
        return "Z"
    return "T" if all(letter in ("T", "t") for letter in live) else "R"


def _processes(uid: int) -> dict[int, str]:
    """Live processes whose real or effective uid is `uid`, with their state letter.

    Zombies are left out, but not a process whose leader thread exited while
    others run on: killing its pid ends all of them.
    """
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _status(f"/proc/{entry}/status")
        if fields is None:
            continue
        real, effective = fields.get("Uid", "-1 -1").split()[:2]
        if uid not in (int(real), int(effective)):
            continue
        state = _state_of(entry, fields)
        if state not in ("Z", "X", ""):
            found[int(entry)] = state
    return found


def pids_of(uid: int) -> list[int]:
    """Live processes (not zombies, but ghosts with a dead leader included) whose real or effective uid is `uid`."""
    return sorted(_processes(uid))


def wait(process: subprocess.Popen[bytes], timeout: float) -> int:
    """`process.wait(timeout)`, woken by the process's exit instead of looking for it.

    Python's wait with a time limit sleeps between looks, up to 50 ms each,
    so every check, the agent and the evaluator ended up to 50 ms after their
    process did. A pidfd becomes readable the moment its process exits.
    Raises subprocess.TimeoutExpired as `Popen.wait` does.
    """
    if process.returncode is not None:
        return process.returncode
    try:
        fd = os.pidfd_open(process.pid)
    except OSError:  # a kernel or seccomp profile without pidfds (or the process is gone and reaped)
        return process.wait(timeout=timeout)
    try:
        # Reaped by another thread (Popen.poll) before the pidfd was opened, its pid may be another's now;
        # not reaped, it is a zombie at worst, and the pid is still its own.
        code = process.poll()
        if code is not None:
            return code
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while not poller.poll(min(max(0, int((deadline - time.monotonic()) * 1000)), 1 << 30)):
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(process.args, timeout)
    finally:
        os.close(fd)
    return process.wait()


def kill_group(pid: int) -> None:
    """SIGKILL the process group that `pid` leads (started with start_new_session); gone already is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


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


_IPC = {"shm": "-m", "msg": "-q", "sem": "-s"}


def remove_ipc(user: User) -> int:
    """Remove the System V IPC objects and POSIX message queues `user` owns or made; return how many.

    They outlive every process, so they would carry data from one check, or
    from the agent, to the next; root removes them (as their creator) when it
    clears a user, once none of the user's processes runs.
    """
    removed = 0
    for kind, flag in _IPC.items():
        try:
            rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        except OSError:
            continue
        if not rows:
            continue
        header = rows[0].split()
        for row in rows[1:]:
            values = dict(zip(header, row.split(), strict=False))
            if str(user.uid) in (values.get("uid"), values.get("cuid")):
                ident = values.get("shmid") or values.get("msqid") or values.get("semid")
                # As the user: root would need CAP_IPC_OWNER, which run containers do not get.
                done = subprocess.run(
                    ["/usr/bin/ipcrm", flag, str(ident)],
                    cwd=NEUTRAL_CWD,
                    check=False,
                    capture_output=True,
                    env={"PATH": ROOT_PATH},
                    **user.popen_kwargs(),
                )
                removed += done.returncode == 0
    queues = Path("/dev/mqueue")
    if queues.is_dir():
        for queue in queues.iterdir():
            try:
                if queue.lstat().st_uid == user.uid:
                    queue.unlink()
                    removed += 1
            except OSError:
                pass
    return removed


def clear_user(user: User) -> int:
    """Kill every process of `user` and remove what outlives processes (IPC objects); return how many."""
    return kill_user(user) + remove_ipc(user)
