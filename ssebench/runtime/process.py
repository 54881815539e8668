"""Processes of the container's users: running commands as them, and killing them all."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from dataclasses import dataclass


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

    def popen_kwargs(self) -> dict[str, object]:
        """What subprocess needs to run as this user with no supplementary groups."""
        if os.geteuid() != 0:  # tests on a developer machine: no switching
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def pids_of(uid: int) -> list[int]:
    """Live processes (not zombies) whose real or effective uid is `uid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if fields.get("State", "").strip().startswith("Z"):
            continue
        real, effective = fields.get("Uid", "-1 -1").split()[:2]
        if uid in (int(real), int(effective)):
            found.append(int(entry))
    return found


def kill_user(user: User, *, attempts: int = 20) -> int:
    """SIGKILL every process of `user`, including ones that left their group; return how many."""
    if user.uid == 0:
        raise ValueError("refusing to kill root's processes")
    killed = 0
    for _ in range(attempts):
        pids = pids_of(user.uid)
        if not pids:
            return killed
        # kill(-1) from a process of the user reaches all of them at once,
        # which also catches children forked while we iterate.
        if os.geteuid() == 0:
            subprocess.run([sys.executable, "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"],
                           check=False, **user.popen_kwargs())  # type: ignore[call-overload]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    return killed
